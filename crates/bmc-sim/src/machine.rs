//! The simulated machine behind one BMC: power, POST, boot override, BIOS, secure boot, media
//! slots and the installed OS. Plain data plus synchronous state changes; the timed parts
//! (boot sequence, installer) live in `driver` and take the lock only between sleeps.

use std::collections::BTreeMap;
use std::time::Instant;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use crate::install::CachedCopy;
use crate::profile::Profile;
use crate::secure_boot::SecureBoot;
use crate::seed::Install;

mod os_state;

pub use os_state::{AppState, IncusOperation, MemberAction, MemberState, OsPhase, OsState, Planned};

/// Redfish `PowerState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Power {
    Off,
    PoweringOn,
    On,
    PoweringOff,
}

impl Power {
    pub fn as_str(self) -> &'static str {
        match self {
            Power::Off => "Off",
            Power::PoweringOn => "PoweringOn",
            Power::On => "On",
            Power::PoweringOff => "PoweringOff",
        }
    }
}

/// The POST `BootProgress.LastState` values a boot walks through, in order.
pub const POST_STATES: [&str; 6] = [
    "PrimaryProcessorInitializationStarted",
    "BusInitializationStarted",
    "MemoryInitializationStarted",
    "SecondaryProcessorInitializationStarted",
    "PCIResourceConfigStarted",
    "SystemHardwareInitializationComplete",
];

/// The boot source override.
#[derive(Clone, Debug, Serialize)]
pub struct BootOverride {
    pub enabled: String,
    pub target: String,
    pub mode: String,
}

/// One virtual-media slot's state.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MediaSlot {
    pub image: Option<String>,
    pub inserted: bool,
    pub write_protected: bool,
    pub transfer_method: Option<String>,
    pub protocol: Option<String>,
    pub user_name: Option<String>,
    /// Bytes copied at insert (`TransferMethod: Upload`).
    pub cached_bytes: u64,
    /// What an Upload BMC kept of its copy for the installer.
    #[serde(skip)]
    pub cached: Option<CachedCopy>,
    /// After an eject on a stale-reporting BMC: what it keeps showing, and until when.
    #[serde(skip)]
    pub stale: Option<(String, Instant)>,
    /// An eject was answered but has not landed yet (the `late_eject` fault).
    pub eject_pending: bool,
}

impl MediaSlot {
    /// What the BMC reports as `(Image, Inserted)`, including the stale window after an eject.
    pub fn reported(&self, now: Instant) -> (Option<&str>, bool) {
        if let Some((image, until)) = &self.stale
            && now < *until
        {
            return (Some(image.as_str()), true);
        }
        (self.image.as_deref(), self.inserted)
    }

    /// Media the host can actually read.
    pub fn has_media(&self) -> bool {
        self.inserted && self.image.is_some()
    }
}

/// Counters exposed in the truth view.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counters {
    pub boot_count: u64,
    pub power_on_requests: u64,
    pub power_off_requests: u64,
    pub media_inserts: u64,
    pub media_ejects: u64,
    pub media_bytes_read: u64,
    pub media_range_requests: u64,
    /// Media reads that failed and were tried again (see `install`'s retry rule).
    pub media_read_retries: u64,
    pub installer_runs: u64,
    pub registration_attempts: u64,
    /// Runs of the installed OS's daemon (`incus-osd` starts again after every failed start-up).
    pub daemon_starts: u64,
    /// Start-up update checks that listed the provider's updates.
    pub startup_update_checks: u64,
    /// `PUT /1.0/provisioning/servers/:self` sent, every attempt counted.
    pub self_update_attempts: u64,
    /// `PUT :self` the provider accepted, by cause.
    pub self_updates: BTreeMap<String, u64>,
    pub bios_applies: u64,
    /// Writes whose `If-Match` named the resource's current tag.
    pub conditional_writes: u64,
    /// Writes refused with 412 because their `If-Match` tag was not the current one.
    pub precondition_failures: u64,
}

/// BIOS attributes: current, pending (SettingsObject) and the last apply's messages.
#[derive(Clone, Debug)]
pub struct Bios {
    pub current: BTreeMap<String, Value>,
    pub pending: BTreeMap<String, Value>,
    pub messages: Vec<Value>,
    pub settings_time: Option<DateTime<Utc>>,
    /// Task waiting for the pending values to be applied.
    pub apply_task: Option<u64>,
}

/// `(attribute, prerequisite attribute, prerequisite value)`: the attribute is only accepted
/// and published once the prerequisite is in effect (a "deferred" attribute).
pub const DEFERRED: &[(&str, &str, &str)] = &[("SriovGlobalEnable", "IommuSupport", "Enabled")];

impl Bios {
    /// The factory values of the profile's attribute registry.
    fn new(profile: &Profile) -> Bios {
        Bios {
            current: profile.bios_registry.defaults(),
            pending: BTreeMap::new(),
            messages: Vec::new(),
            settings_time: None,
            apply_task: None,
        }
    }

    /// Whether `name` is published (deferred attributes hide until their prerequisite holds).
    pub fn visible(&self, name: &str) -> bool {
        DEFERRED
            .iter()
            .find(|(attr, _, _)| *attr == name)
            .is_none_or(|(_, pre, val)| self.current.get(*pre).and_then(Value::as_str) == Some(*val))
    }

    /// Apply the pending values at a reset. A deferred attribute whose prerequisite is not in
    /// effect *before* this reset is rejected with `SettingsFailed`.
    fn apply(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let mut messages = Vec::new();
        let mut accepted = Vec::new();
        for (name, value) in pending {
            if self.visible(&name) {
                accepted.push((name, value));
            } else {
                messages.push(json!({
                    "MessageId": "Base.1.8.SettingsFailed",
                    "Message": format!("The attribute {name} could not be applied: its prerequisite is not in effect."),
                    "Severity": "Warning",
                    "RelatedProperties": [format!("/Attributes/{name}")],
                }));
            }
        }
        self.current.extend(accepted);
        self.messages = messages;
    }
}

/// Everything about one machine. Held in a `std::sync::Mutex`, never across an await.
#[derive(Debug)]
pub struct Machine {
    pub power: Power,
    /// Incremented by every power change / reset; timed tasks of an older boot stop.
    pub boot_gen: u64,
    pub last_reset_time: Option<DateTime<Utc>>,
    /// When the last reset happened on the wall clock: what the OS's uptime counts from. The time scale
    /// compresses what the machine does, not how time passes for a client reading its uptime (a real kernel's
    /// `/proc/uptime` advances with every other real clock).
    pub reset_instant: Option<std::time::Instant>,
    pub boot_state: &'static str,
    pub boot_state_time: Option<DateTime<Utc>>,
    pub last_boot_seconds: Option<f64>,
    pub boot_started: Option<DateTime<Utc>>,
    pub powered_off_at: Option<Instant>,
    pub boot_override: BootOverride,
    pub bios: Bios,
    pub secure_boot: SecureBoot,
    pub media: Vec<MediaSlot>,
    pub phase: OsPhase,
    pub os: OsState,
    /// Set by an Incus `:reboot` under the `reboot_never_returns` fault: the firmware halts before booting while
    /// that fault is set.
    pub firmware_halt: bool,
    /// The install seed the installer last read from the media.
    pub install_seed: Option<Install>,
    pub counters: Counters,
}

/// How a virtual media device presents its image to the host: a CD/DVD drive (2048-byte logical blocks) or a USB
/// stick (512-byte blocks). The firmware finds a GPT only at LBA 1 of the device's own block size (UEFI 2.10,
/// 5.3.1), so an image boots only from the class it was made for: IncusOS's `.iso` from a CD drive, its `.img`
/// from a USB stick ("the ISO isn't a hybrid image", `doc/getting-started/download_incusos.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DeviceClass {
    Cd,
    Usb,
}

impl DeviceClass {
    /// The logical block size the device presents.
    pub fn block_size(self) -> u64 {
        match self {
            DeviceClass::Cd => 2048,
            DeviceClass::Usb => 512,
        }
    }

    /// The class a slot presents its image as, from the slot's `MediaTypes`: a slot taking only CDs/DVDs is a CD
    /// drive, one taking only USB sticks or floppies a USB disk; a slot listing both (iDRAC's `1` and `2`, every
    /// XCC slot) presents an `.iso` as a CD and anything else as a removable disk, by the image's file name.
    pub fn of_slot(media_types: &[&str], image: &str) -> Option<DeviceClass> {
        let cd = media_types.iter().any(|t| matches!(*t, "CD" | "DVD"));
        let usb = media_types.iter().any(|t| matches!(*t, "USBStick" | "Floppy"));
        match (cd, usb) {
            (true, false) => Some(DeviceClass::Cd),
            (false, true) => Some(DeviceClass::Usb),
            (true, true) => {
                let path = image.split(['?', '#']).next().unwrap_or(image);
                Some(if path.to_ascii_lowercase().ends_with(".iso") {
                    DeviceClass::Cd
                } else {
                    DeviceClass::Usb
                })
            }
            (false, false) => None,
        }
    }
}

/// What the end of POST boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootDevice {
    Media(usize),
    Disk,
    Nothing,
}

impl Machine {
    pub fn new(profile: &Profile) -> Machine {
        Machine {
            power: Power::Off,
            boot_gen: 0,
            last_reset_time: None,
            reset_instant: None,
            boot_state: "None",
            boot_state_time: None,
            last_boot_seconds: None,
            boot_started: None,
            powered_off_at: None,
            boot_override: BootOverride {
                enabled: "Disabled".to_owned(),
                target: "None".to_owned(),
                mode: "UEFI".to_owned(),
            },
            bios: Bios::new(profile),
            secure_boot: SecureBoot::new(profile.secure_boot_initial_mode, profile.platform_key),
            media: vec![MediaSlot::default(); profile.media_states()],
            phase: OsPhase::Down,
            os: OsState {
                installed: false,
                registered: false,
                seed: None,
                seed_files: Vec::new(),
                hostname: None,
                machine_id: None,
                system_is_ready: false,
                startup_error: None,
                secure_boot_updates: Vec::new(),
                identity: None,
                client_certificate: None,
                trusted_certificates: Vec::new(),
                registration_error: None,
                running_version: "202611010000".to_owned(),
                staged_version: None,
                channel: "stable".to_owned(),
                update_status: "Up to date".to_owned(),
                last_check: None,
                member: MemberState::Online,
                operations: BTreeMap::new(),
                applications: Vec::new(),
            },
            firmware_halt: false,
            install_seed: None,
            counters: Counters::default(),
        }
    }

    /// In POST (between the reset and `OSBootStarted`)?
    pub fn in_post(&self) -> bool {
        self.power == Power::On && POST_STATES.contains(&self.boot_state)
    }

    /// Set a `BootProgress` state at `now`.
    pub fn set_boot_state(&mut self, state: &'static str, now: DateTime<Utc>) {
        self.boot_state = state;
        self.boot_state_time = Some(now);
    }

    /// A reset is happening: record it and apply what firmware applies at reset.
    /// Returns the BIOS apply task to complete, if any.
    pub fn on_reset(&mut self, now: DateTime<Utc>, drop_bios_apply: bool) -> Option<u64> {
        self.last_reset_time = Some(now);
        self.reset_instant = Some(std::time::Instant::now());
        self.boot_started = Some(now);
        self.counters.boot_count += 1;
        self.phase = OsPhase::Down;
        if let Some(staged) = self.os.staged_version.take() {
            self.os.running_version = staged;
        }
        self.os.interrupted(now);
        self.set_boot_state(POST_STATES[0], now);
        if drop_bios_apply {
            self.bios.pending.clear();
            return self.bios.apply_task.take();
        }
        if !self.bios.pending.is_empty() {
            self.counters.bios_applies += 1;
            self.bios.apply();
        }
        self.bios.apply_task.take()
    }

    /// Takes the media out of slot `i`; a stale-reporting BMC keeps showing it until `stale`.
    pub fn eject(&mut self, i: usize, stale: Option<Instant>) {
        let slot = &mut self.media[i];
        let previous = slot.image.take();
        slot.inserted = false;
        slot.cached_bytes = 0;
        slot.cached = None;
        slot.transfer_method = None;
        slot.protocol = None;
        slot.eject_pending = false;
        slot.stale = previous.clone().zip(stale);
        if previous.is_some() {
            self.counters.media_ejects += 1;
        }
    }

    /// Ejects that were answered earlier land now.
    pub fn land_pending_ejects(&mut self) {
        for i in 0..self.media.len() {
            if self.media[i].eject_pending {
                self.eject(i, None);
            }
        }
    }

    /// End of POST: pick the boot device and spend a `Once` override. `bootable[i]` is the class slot `i`
    /// presents its media as when the firmware found a bootable GPT on it (the image's sector size is the
    /// device's block size), `None` when it holds nothing the firmware can boot. An override to `Cd` or `Usb`
    /// boots the first bootable media of that class; without one (or `Disabled`) inserted bootable media is in
    /// the boot order ahead of the disk, which is why only ejecting keeps a server out of the installer. Media
    /// that cannot boot is passed over exactly as if the slot were empty: the disk, or nothing.
    pub fn select_boot_device(&mut self, bootable: &[Option<DeviceClass>]) -> BootDevice {
        let target = self.boot_override.target.clone();
        let active = self.boot_override.enabled != "Disabled";
        if self.boot_override.enabled == "Once" {
            self.boot_override.enabled = "Disabled".to_owned();
            self.boot_override.target = "None".to_owned();
        }
        let disk = if self.os.installed {
            BootDevice::Disk
        } else {
            BootDevice::Nothing
        };
        if active && target == "Hdd" {
            return disk;
        }
        let wanted = match (active, target.as_str()) {
            (true, "Cd") => Some(DeviceClass::Cd),
            (true, "Usb") => Some(DeviceClass::Usb),
            _ => None,
        };
        let media = self.media.iter().enumerate().position(|(i, slot)| {
            let class = bootable.get(i).copied().flatten();
            slot.has_media() && class.is_some() && (wanted.is_none() || class == wanted)
        });
        media.map_or(disk, BootDevice::Media)
    }

    /// The truth view for tests and the control endpoint.
    pub fn truth(&self, now: Instant) -> Value {
        let media: Vec<Value> = self
            .media
            .iter()
            .map(|m| {
                let (image, inserted) = m.reported(now);
                json!({"image": m.image, "inserted": m.inserted, "reported_image": image,
                       "reported_inserted": inserted, "transfer_method": m.transfer_method,
                       "cached_bytes": m.cached_bytes})
            })
            .collect();
        json!({
            "power": self.power.as_str(),
            "boot_progress": self.boot_state,
            "last_reset_time": self.last_reset_time,
            "boot_override": self.boot_override,
            "installed": self.os.installed,
            "registered": self.os.registered,
            "os": self.os,
            "phase": self.phase,
            "media": media,
            "media_bytes_read": self.counters.media_bytes_read,
            "boot_count": self.counters.boot_count,
            "counters": self.counters,
            "bios_current": self.bios.current,
            "bios_pending": self.bios.pending,
            "secure_boot_mode": self.secure_boot.mode,
            "install_seed": self.install_seed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Personality;
    use crate::profile::Profile;
    use crate::seed::SeedFiles;

    #[test]
    fn a_slot_presents_its_image_as_its_media_types_allow() {
        let cases: [(&[&str], &str, Option<DeviceClass>); 7] = [
            (&["CD", "DVD"], "http://m/x.img", Some(DeviceClass::Cd)),
            (&["USBStick"], "http://m/x.iso", Some(DeviceClass::Usb)),
            (&["Floppy", "USBStick"], "http://m/x.iso", Some(DeviceClass::Usb)),
            (
                &["CD", "DVD", "USBStick"],
                "http://m/x.iso",
                Some(DeviceClass::Cd),
            ),
            (
                &["CD", "DVD", "USBStick"],
                "http://m/x.ISO?t=1",
                Some(DeviceClass::Cd),
            ),
            (
                &["CD", "DVD", "USBStick"],
                "http://m/x.img",
                Some(DeviceClass::Usb),
            ),
            (&[], "http://m/x.iso", None),
        ];
        for (types, image, want) in cases {
            assert_eq!(DeviceClass::of_slot(types, image), want, "{types:?} {image}");
        }
    }

    /// The end of POST boots only media the firmware could find a GPT on through the device's block size, and
    /// with an override only media of the override's class; anything else is passed over as if the slot were
    /// empty.
    #[test]
    fn the_boot_device_follows_the_override_and_what_each_slot_can_boot() {
        use DeviceClass::{Cd, Usb};
        // (override enabled, target, installed, slot 0 inserted and bootable as, slot 1 …, want)
        type Slot = Option<Option<DeviceClass>>;
        let cases: [(&str, &str, bool, Slot, Slot, BootDevice); 12] = [
            ("Once", "Cd", false, Some(Some(Cd)), None, BootDevice::Media(0)),
            ("Once", "Usb", false, None, Some(Some(Usb)), BootDevice::Media(1)),
            // An .img in a CD drive has no GPT at 2048: not bootable, nothing else to boot.
            ("Once", "Cd", false, Some(None), None, BootDevice::Nothing),
            ("Once", "Cd", true, Some(None), None, BootDevice::Disk),
            // Cd with the image in a USB slot: the override finds no CD to boot.
            ("Once", "Cd", true, None, Some(Some(Usb)), BootDevice::Disk),
            (
                "Continuous",
                "Usb",
                false,
                Some(Some(Cd)),
                None,
                BootDevice::Nothing,
            ),
            (
                "Once",
                "Usb",
                false,
                Some(Some(Cd)),
                Some(Some(Usb)),
                BootDevice::Media(1),
            ),
            ("Once", "Hdd", true, Some(Some(Cd)), None, BootDevice::Disk),
            // No override: bootable media comes before the disk, unbootable media is passed over.
            (
                "Disabled",
                "None",
                true,
                Some(Some(Cd)),
                None,
                BootDevice::Media(0),
            ),
            (
                "Disabled",
                "None",
                true,
                Some(None),
                Some(Some(Usb)),
                BootDevice::Media(1),
            ),
            ("Disabled", "None", true, Some(None), None, BootDevice::Disk),
            ("Disabled", "None", false, None, None, BootDevice::Nothing),
        ];
        for (i, (enabled, target, installed, slot0, slot1, want)) in cases.into_iter().enumerate() {
            let mut m = Machine::new(&Profile::new(Personality::Generic));
            m.boot_override.enabled = enabled.to_owned();
            m.boot_override.target = target.to_owned();
            m.os.installed = installed;
            let mut bootable = vec![None; m.media.len()];
            for (n, slot) in [slot0, slot1].into_iter().enumerate() {
                if let Some(class) = slot {
                    m.media[n].image = Some(format!("http://m/{n}"));
                    m.media[n].inserted = true;
                    bootable[n] = class;
                }
            }
            assert_eq!(m.select_boot_device(&bootable), want, "case {i}");
            if enabled == "Once" {
                assert_eq!(
                    m.boot_override.enabled, "Disabled",
                    "case {i}: a Once override is spent"
                );
            }
        }
    }

    #[test]
    fn a_wipe_leaves_nothing_installed_and_a_fresh_install_takes_the_media_version() {
        let mut os = Machine::new(&Profile::new(Personality::Generic)).os;
        os.install_fresh(SeedFiles::default(), Some("202612010000".into()));
        os.machine_id = Some("0123456789abcdef0123456789abcdef".into());
        assert!(os.installed);
        assert_eq!(os.running_version, "202612010000");
        os.wipe();
        assert!(!os.installed);
        assert_eq!(os.machine_id, None);
        assert!(os.seed.is_none());
        os.install_fresh(SeedFiles::default(), None);
        assert_eq!(
            os.running_version, "202612010000",
            "a media without a version keeps it"
        );
    }
}

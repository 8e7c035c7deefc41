//! Vendor profiles: URI layout and capabilities of each [`Personality`], built once and shared
//! by every BMC of that personality. Routes and resource bodies read these flags instead of
//! matching on the personality, so each quirk is written down in exactly one place.

use crate::bios_registry::AttributeRegistry;
use crate::config::Personality;

/// Where a virtual-media slot lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotLocation {
    /// Under `Systems/{id}/VirtualMedia`.
    System,
    /// Under `Managers/{id}/VirtualMedia`.
    Manager,
}

/// How the BMC gets the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaRead {
    /// Range reads: boot reads, then the bulk early in the install, then idle.
    StreamFront,
    /// Range reads spread over the whole install (Lenovo-like).
    StreamSpread,
    /// The whole image is copied when InsertMedia is called (`TransferMethod: Upload`).
    Upload,
}

/// One virtual-media slot of a profile: one URI. Two specs with the same `state` are one device published twice
/// (XCC lists each slot under the System and the Manager).
#[derive(Clone, Debug)]
pub struct SlotSpec {
    pub id: &'static str,
    pub location: SlotLocation,
    /// Index of the device's state in `Machine::media`.
    pub state: usize,
    pub media_types: &'static [&'static str],
    /// Resource path (without the per-BMC prefix).
    pub path: String,
    /// Standard `#VirtualMedia.InsertMedia`/`EjectMedia` actions.
    pub actions: bool,
    /// InsertMedia advertises an `@Redfish.ActionInfo`.
    pub insert_action_info: bool,
    /// HPE-style OEM insert/eject actions.
    pub oem_actions: bool,
    /// PATCH `{"Image","Inserted"}` on the slot is accepted.
    pub patchable: bool,
}

/// Capabilities and URI layout of a personality.
#[derive(Debug)]
pub struct Profile {
    pub personality: Personality,
    pub system_id: &'static str,
    pub manager_id: &'static str,
    pub system_path: String,
    pub manager_path: String,
    pub chassis_path: String,
    pub bios_path: String,
    pub bios_settings_path: String,
    pub bios_apply_times: &'static [&'static str],
    /// The attribute registry the Bios resource names, and what a settings PATCH is checked against.
    pub bios_registry: AttributeRegistry,
    /// MessageId of the refusal of an unknown attribute (iLO: its own `PropertyNotWritableOrUnknown`).
    pub bios_unknown_message: &'static str,
    /// MessageId of the refusal of a read-only attribute.
    pub bios_read_only_message: &'static str,
    /// BIOS PATCH answers 202 + task monitor (completed when the values are applied).
    pub bios_task: bool,
    pub reset_types: &'static [&'static str],
    /// `ResetType@Redfish.AllowableValues` inline on the action.
    pub reset_inline: bool,
    /// `@Redfish.ActionInfo` on the Reset action.
    pub reset_action_info: bool,
    pub override_enabled: &'static [&'static str],
    pub override_targets: &'static [&'static str],
    /// `BootSourceOverrideTarget@Redfish.AllowableValues` is published (iLO 5 checks the targets but lists none).
    pub override_targets_listed: bool,
    pub override_refused_during_post: bool,
    pub boot_progress: bool,
    pub last_reset_time: bool,
    pub secure_boot_databases: bool,
    pub secure_boot_initial_mode: &'static str,
    pub reset_keys_types: &'static [&'static str],
    /// `ResetKeysType@Redfish.AllowableValues` listed on the action.
    pub reset_keys_listed: bool,
    /// SecureBoot ResetKeys answers 202 + task monitor.
    pub secure_boot_task: bool,
    /// The firmware reboots once on its own during the POST after a key change.
    pub secure_boot_self_reboot: bool,
    /// The vendor's factory PK (PEM); a real server ships with its maker's platform key.
    pub platform_key: &'static str,
    pub slots: Vec<SlotSpec>,
    /// Where the System's `VirtualMedia` link points, if it has one.
    pub system_media_link: Option<String>,
    /// Manager `VirtualMedia` collection, if the manager has slots.
    pub manager_media_link: Option<String>,
    pub media_read: MediaRead,
    /// `TransferMethod` is reported (iDRAC 9 reports null whatever it does).
    pub transfer_method_reported: bool,
    /// An empty slot reports `Image: ""` rather than null (iLO 5).
    pub empty_image_is_blank: bool,
    /// After an eject the slot keeps reporting `Inserted` for a while (iDRAC).
    pub stale_inserted_after_eject: bool,
    /// No EjectMedia action while the slot is empty (Supermicro).
    pub eject_hidden_when_empty: bool,
    pub manufacturer: &'static str,
    pub model: &'static str,
}

const DMTF_RESET: &[&str] = &[
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "Nmi",
    "ForceOn",
    "PushPowerButton",
];
const DELL_RESET: &[&str] = &[
    "On",
    "ForceOff",
    "ForceRestart",
    "GracefulRestart",
    "GracefulShutdown",
    "PushPowerButton",
    "Nmi",
    "PowerCycle",
];
const ALL_ENABLED: &[&str] = &["Disabled", "Once", "Continuous"];
const TARGETS: &[&str] = &[
    "None",
    "Pxe",
    "Cd",
    "Usb",
    "Hdd",
    "BiosSetup",
    "UefiShell",
    "UefiHttp",
];
/// X12/X13 Redfish: a power cycle, no power-button press.
const SUPERMICRO_RESET: &[&str] = &[
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "Nmi",
    "ForceOn",
    "PowerCycle",
];
const DMTF_RESET_KEYS: &[&str] = &["ResetAllKeysToDefault", "DeleteAllKeys", "DeletePK"];
const DELL_RESET_KEYS: &[&str] = &[
    "ResetAllKeysToDefault",
    "DeleteAllKeys",
    "DeletePK",
    "ResetPK",
    "ResetKEK",
    "ResetDB",
    "ResetDBX",
];
const CD_DVD: &[&str] = &["CD", "DVD"];
const USB: &[&str] = &["USBStick"];
const CD_DVD_USB: &[&str] = &["CD", "DVD", "USBStick"];
const XCC_MEDIA: &[&str] = &["CD", "DVD", "Floppy", "USBStick"];

/// A slot with a state of its own; `Profile::new` numbers the states in order.
fn slot(
    location: SlotLocation,
    base: &str,
    id: &'static str,
    media_types: &'static [&'static str],
) -> SlotSpec {
    SlotSpec {
        id,
        location,
        state: usize::MAX,
        media_types,
        path: format!("{base}/VirtualMedia/{id}"),
        actions: true,
        insert_action_info: false,
        oem_actions: false,
        patchable: false,
    }
}

impl Profile {
    /// The profile of `personality`.
    pub fn new(personality: Personality) -> Profile {
        let (system_id, manager_id) = match personality {
            Personality::Generic => ("437XR1138R2", "BMC"),
            Personality::Dell => ("System.Embedded.1", "iDRAC.Embedded.1"),
            _ => ("1", "1"),
        };
        let system_path = format!("/redfish/v1/Systems/{system_id}");
        let manager_path = format!("/redfish/v1/Managers/{manager_id}");
        let chassis_path = "/redfish/v1/Chassis/1".to_owned();
        let mut p = Profile {
            personality,
            system_id,
            manager_id,
            bios_path: format!("{system_path}/Bios"),
            bios_settings_path: format!("{system_path}/Bios/Settings"),
            bios_apply_times: &[],
            bios_registry: AttributeRegistry::new(personality),
            bios_unknown_message: "Base.1.8.PropertyUnknown",
            bios_read_only_message: "Base.1.8.PropertyNotWritable",
            bios_task: false,
            reset_types: DMTF_RESET,
            reset_inline: true,
            reset_action_info: false,
            override_enabled: ALL_ENABLED,
            override_targets: TARGETS,
            override_targets_listed: true,
            override_refused_during_post: false,
            boot_progress: true,
            last_reset_time: true,
            secure_boot_databases: true,
            secure_boot_initial_mode: "UserMode",
            reset_keys_types: DMTF_RESET_KEYS,
            reset_keys_listed: true,
            secure_boot_task: false,
            secure_boot_self_reboot: true,
            platform_key: include_str!("../certs/vendor-pk-generic.pem"),
            slots: Vec::new(),
            system_media_link: None,
            manager_media_link: None,
            media_read: MediaRead::StreamFront,
            transfer_method_reported: true,
            empty_image_is_blank: false,
            stale_inserted_after_eject: false,
            eject_hidden_when_empty: false,
            manufacturer: "Contoso",
            model: "3500RX",
            system_path,
            manager_path,
            chassis_path,
        };
        let sys = p.system_path.clone();
        let mgr = p.manager_path.clone();
        match personality {
            Personality::Generic => {
                p.slots = vec![
                    slot(SlotLocation::System, &sys, "CD1", CD_DVD),
                    slot(SlotLocation::System, &sys, "USB1", USB),
                ];
                p.system_media_link = Some(format!("{sys}/VirtualMedia"));
            }
            Personality::Dell => {
                p.platform_key = include_str!("../certs/vendor-pk-dell.pem");
                p.manufacturer = "Dell Inc.";
                p.model = "PowerEdge R750";
                p.bios_apply_times = &[
                    "OnReset",
                    "AtMaintenanceWindowStart",
                    "InMaintenanceWindowOnReset",
                ];
                p.bios_task = true;
                p.reset_types = DELL_RESET;
                p.boot_progress = false;
                p.secure_boot_initial_mode = "DeployedMode";
                p.reset_keys_types = DELL_RESET_KEYS;
                p.slots = vec![
                    slot(SlotLocation::System, &sys, "1", CD_DVD),
                    slot(SlotLocation::System, &sys, "2", CD_DVD_USB),
                    slot(SlotLocation::Manager, &mgr, "CD", CD_DVD),
                    slot(SlotLocation::Manager, &mgr, "RemovableDisk", USB),
                ];
                p.system_media_link = Some(format!("{sys}/VirtualMedia"));
                p.manager_media_link = Some(format!("{mgr}/VirtualMedia"));
                // The image is copied at insert, yet `TransferMethod` reads null.
                p.media_read = MediaRead::Upload;
                p.transfer_method_reported = false;
                p.stale_inserted_after_eject = true;
            }
            Personality::Hpe => {
                p.platform_key = include_str!("../certs/vendor-pk-hpe.pem");
                p.manufacturer = "HPE";
                p.model = "ProLiant DL385 Gen10 Plus v2";
                // iLO answers `/redfish/v1/systems/1/bios/settings/` as well (its URIs are case-insensitive); the
                // schema's URI templates are not, so the simulator publishes the cased form only.
                p.bios_unknown_message = "iLO.2.14.PropertyNotWritableOrUnknown";
                p.bios_read_only_message = "iLO.2.14.PropertyNotWritableOrUnknown";
                p.override_targets_listed = false;
                p.empty_image_is_blank = true;
                p.override_refused_during_post = true;
                p.last_reset_time = false;
                p.secure_boot_databases = false;
                p.reset_keys_listed = false;
                p.secure_boot_task = true;
                p.secure_boot_self_reboot = false;
                p.slots = vec![
                    SlotSpec {
                        oem_actions: true,
                        ..slot(SlotLocation::Manager, &mgr, "1", &["Floppy", "USBStick"])
                    },
                    SlotSpec {
                        oem_actions: true,
                        ..slot(SlotLocation::Manager, &mgr, "2", CD_DVD)
                    },
                ];
                p.manager_media_link = Some(format!("{mgr}/VirtualMedia"));
            }
            Personality::Lenovo => {
                p.platform_key = include_str!("../certs/vendor-pk-lenovo.pem");
                p.manufacturer = "Lenovo";
                p.model = "ThinkSystem SR670 V2";
                p.bios_settings_path = format!("{sys}/Bios/Pending");
                p.bios_apply_times = &["OnReset"];
                p.reset_action_info = true;
                p.override_enabled = &["Once", "Disabled"];
                p.secure_boot_databases = false;
                p.secure_boot_self_reboot = false;
                const IDS: [&str; 10] = [
                    "EXT1", "EXT2", "EXT3", "EXT4", "Remote1", "Remote2", "Remote3", "Remote4", "RDOC1",
                    "RDOC2",
                ];
                // Each slot is listed under the System and the Manager: one device, two URIs, the System's
                // first (where the System's `VirtualMedia` link leads).
                p.slots = [(SlotLocation::System, &sys), (SlotLocation::Manager, &mgr)]
                    .into_iter()
                    .flat_map(|(location, base)| {
                        IDS.iter().enumerate().map(move |(state, id)| SlotSpec {
                            state,
                            actions: false,
                            patchable: true,
                            ..slot(location, base, id, XCC_MEDIA)
                        })
                    })
                    .collect();
                p.system_media_link = Some(format!("{sys}/VirtualMedia"));
                p.manager_media_link = Some(format!("{mgr}/VirtualMedia"));
                p.media_read = MediaRead::StreamSpread;
            }
            Personality::Supermicro => {
                p.platform_key = include_str!("../certs/vendor-pk-supermicro.pem");
                p.manufacturer = "Supermicro";
                p.model = "SYS-821GE-TNHR";
                p.bios_settings_path = format!("{sys}/Bios/SD");
                p.reset_types = SUPERMICRO_RESET;
                p.reset_inline = false;
                p.reset_action_info = true;
                p.boot_progress = false;
                p.secure_boot_initial_mode = "SetupMode";
                let with_info = |id, media_types| SlotSpec {
                    insert_action_info: true,
                    ..slot(SlotLocation::Manager, &mgr, id, media_types)
                };
                p.slots = vec![
                    with_info("CD1", CD_DVD),
                    with_info("Floppy1", &["Floppy"]),
                    with_info("USBStick1", USB),
                ];
                p.system_media_link = Some(format!("{mgr}/VirtualMedia"));
                p.manager_media_link = Some(format!("{mgr}/VirtualMedia"));
                p.eject_hidden_when_empty = true;
            }
        }
        let mut next = 0;
        for s in &mut p.slots {
            if s.state == usize::MAX {
                s.state = next;
            }
            next = next.max(s.state + 1);
        }
        p
    }

    /// How many media devices the machine has (slots published twice count once).
    pub fn media_states(&self) -> usize {
        self.slots.iter().map(|s| s.state + 1).max().unwrap_or(0)
    }

    /// The `MessageRegistryFile` of the BIOS attribute registry.
    pub fn registry_file_path(&self) -> String {
        format!("/redfish/v1/Registries/{}", self.bios_registry.id)
    }

    /// Where the registry file's `Location` points: the `AttributeRegistry` document itself.
    pub fn registry_document_path(&self) -> String {
        format!("{}/{}.json", self.registry_file_path(), self.bios_registry.id)
    }

    /// Path of the Reset action's ActionInfo resource.
    pub fn reset_action_info_path(&self) -> String {
        format!("{}/ResetActionInfo", self.system_path)
    }
}

//! Fixtures shared by the integration tests: a plan, facts builders and a deterministic clock.

#![allow(dead_code)]

use chrono::{TimeZone, Utc};
use racklift_deploy::facts::{AttrValue, BiosFacts, BootProgress, Fingerprint, KeyDb, MediaSlot, PowerState};
use racklift_deploy::record::{BiosPlan, SecureBootPlan};
use racklift_deploy::{Config, Deployment, Facts, Plan, State, Time};

pub const IMAGE: &str = "https://racklift.example/media/d1.iso";
pub const MIB: u64 = 1024 * 1024;

/// Seconds after a fixed epoch: tests never read a clock.
pub fn t(secs: i64) -> Time {
    Utc.timestamp_opt(1_800_000_000, 0).unwrap() + chrono::TimeDelta::seconds(secs)
}

pub fn cfg() -> Config {
    Config::default()
}

pub fn fp(s: &str) -> Fingerprint {
    Fingerprint(s.to_owned())
}

pub fn plan() -> Plan {
    Plan {
        image_url: IMAGE.to_owned(),
        image_size_bytes: Some(3 * 1024 * MIB),
        force: false,
        skip_secure_boot_certificates: false,
        reinstall: false,
        bios_profiles: vec!["sriov".to_owned()],
        bios: BiosPlan {
            attributes: [("SriovGlobalEnable".to_owned(), AttrValue::Text("Enabled".into()))].into(),
            deferred_attributes: [("SriovVfCount".to_owned(), AttrValue::Int(8))].into(),
        },
        secure_boot: SecureBootPlan {
            incusos: [
                (KeyDb::PK, [fp("pk")].into()),
                (KeyDb::KEK, [fp("kek")].into()),
                (KeyDb::Db, [fp("db")].into()),
            ]
            .into(),
            allow: [(KeyDb::Db, [fp("msca")].into())].into(),
        },
        ..Plan::default()
    }
}

/// A deployment started at t(0) that entered `state` at `t(entered)`.
pub fn at_state(state: State, entered: i64) -> Deployment {
    let mut d = Deployment::new(plan(), t(0));
    d.machine.state = state;
    d.machine.state_entered_at = t(entered);
    d
}

pub fn power(p: PowerState) -> Facts {
    Facts {
        power: Some(p),
        ..Facts::default()
    }
}

pub fn on() -> Facts {
    power(PowerState::On)
}

pub fn off() -> Facts {
    power(PowerState::Off)
}

/// BIOS facts with the first pass and the deferred pass in effect or not; `None` leaves the
/// attribute unreported.
pub fn bios(first: Option<bool>, deferred: Option<bool>) -> Facts {
    let mut current = std::collections::BTreeMap::new();
    if let Some(ok) = first {
        let v = if ok { "Enabled" } else { "Disabled" };
        current.insert("SriovGlobalEnable".to_owned(), AttrValue::Text(v.into()));
    }
    if let Some(ok) = deferred {
        current.insert("SriovVfCount".to_owned(), AttrValue::Int(if ok { 8 } else { 0 }));
    }
    Facts {
        bios: Some(BiosFacts {
            current,
            pending: Default::default(),
        }),
        ..on()
    }
}

pub fn media(inserted: bool, image: Option<&str>) -> Facts {
    Facts {
        media: Some(MediaSlot {
            inserted,
            image: image.map(str::to_owned),
            transfer_method: None,
        }),
        ..on()
    }
}

/// Power on with the given reboot signals.
pub fn boot(lrt: Option<i64>, progress: Option<BootProgress>) -> Facts {
    Facts {
        last_reset_time: lrt.map(t),
        boot_progress: progress,
        ..on()
    }
}

/// Key databases that are all correct for [`plan`].
pub fn correct_key_dbs() -> std::collections::BTreeMap<KeyDb, Vec<Fingerprint>> {
    [
        (KeyDb::PK, vec![fp("pk")]),
        (KeyDb::KEK, vec![fp("kek")]),
        (KeyDb::Db, vec![fp("db"), fp("msca")]),
        (KeyDb::Dbx, vec![]),
    ]
    .into()
}

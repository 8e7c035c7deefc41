//! What a worker observed just before asking for a decision.
//!
//! Every field is optional or defaults to "not known": a BMC that does not report a property,
//! or a read that failed, must make a wait stay (and eventually time out), never make it fire.
//! Nothing here is remembered between decisions; that is what keeps waits re-derivable.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Time;

/// `PowerState` of the computer system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PowerState {
    On,
    Off,
    PoweringOn,
    PoweringOff,
    Paused,
}

/// `BootProgress.LastState`, ordered by how far a boot has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum BootProgress {
    None,
    PrimaryProcessorInitializationStarted,
    BusInitializationStarted,
    MemoryInitializationStarted,
    SecondaryProcessorInitializationStarted,
    PCIResourceConfigStarted,
    SystemHardwareInitializationComplete,
    SetupEntered,
    OSBootStarted,
    OSRunning,
    /// Vendor-specific; carries no order, so it is ignored by reboot detection.
    OEM,
}

impl BootProgress {
    /// Only a boot that got this far ran the installer.
    pub fn installer_started(self) -> bool {
        matches!(self, BootProgress::OSBootStarted | BootProgress::OSRunning)
    }

    pub(crate) fn is_ordered(self) -> bool {
        self != BootProgress::OEM
    }
}

/// `TransferMethod` the BMC negotiated for the virtual media.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TransferMethod {
    Stream,
    /// The BMC copies the whole image before the server boots, so its reads say nothing about the installer.
    Upload,
}

/// The selected virtual media device.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MediaSlot {
    pub inserted: bool,
    pub image: Option<String>,
    pub transfer_method: Option<TransferMethod>,
}

/// A BIOS attribute value as Redfish reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AttrValue {
    Bool(bool),
    Int(i64),
    Text(String),
}

/// BIOS attributes: those in effect (`Bios.Attributes`) and those staged (`Bios/Settings`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BiosFacts {
    pub current: BTreeMap<String, AttrValue>,
    pub pending: BTreeMap<String, AttrValue>,
}

/// State of the task monitor of a BIOS apply, where one was handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    Running,
    Completed,
    /// The task ended in an exception; verification decides what to do about it.
    Failed,
    /// 404: consumed, forgotten after a BMC reset, or never handed out.
    Unavailable,
}

/// A UEFI key database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum KeyDb {
    PK,
    KEK,
    #[serde(rename = "db")]
    Db,
    #[serde(rename = "dbx")]
    Dbx,
}

impl KeyDb {
    pub const ALL: [KeyDb; 4] = [KeyDb::PK, KeyDb::KEK, KeyDb::Db, KeyDb::Dbx];
}

/// SHA-256 fingerprint of a key database entry, lower-case hex.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(pub String);

/// Media read progress of this deployment's image, as recorded by the media server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaProgress {
    /// Distinct bytes served; `-1` when several readers cannot be told apart.
    pub bytes_read: i64,
    pub last_read_at: Option<Time>,
}

/// A cancellation requested through the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CancelRequest {
    pub skip_cleanup: bool,
}

/// Fresh observations from the BMC and the database.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Facts {
    pub power: Option<PowerState>,
    /// `LastResetTime`; not every BMC reports it.
    pub last_reset_time: Option<Time>,
    /// `BootProgress.LastState`; not every BMC reports it.
    pub boot_progress: Option<BootProgress>,
    /// `BootProgress.LastStateTime`: when that state was entered. The same state entered again later is a new
    /// boot even where the polls missed the POST in between.
    pub boot_progress_at: Option<Time>,
    /// The selected virtual media device; `None` when it could not be read.
    pub media: Option<MediaSlot>,
    pub bios: Option<BiosFacts>,
    /// The BMC has no Bios resource (it answered 404, 405 or 501 for it): some DMTF mockups, sushy-tools' fake
    /// driver, BMCs without BIOS settings over Redfish. Unlike `bios` being `None` (a read that failed), no retry
    /// makes attributes appear.
    pub bios_absent: bool,
    pub bios_task: Option<TaskState>,
    /// Entries per key database; a database missing here could not be read.
    pub key_dbs: BTreeMap<KeyDb, Vec<Fingerprint>>,
    /// The server registered itself with its token.
    pub registered: bool,
    /// Why the last registration carrying this deployment's token was refused, if one was.
    pub registration_refused: Option<String>,
    /// `None` when no progress has been recorded for this deployment.
    pub media_progress: Option<MediaProgress>,
    pub cancel: Option<CancelRequest>,
}

//! ComputerSystem: power state, reboot-detection signals, and reset with the types the BMC
//! advertises (inline `AllowableValues` or the `@Redfish.ActionInfo` resource).

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::boot::BootSettings;
use crate::client::{BmcClient, Idempotency};
use crate::error::{Error, Result};
use crate::model::{ActionInfo, ActionRef, Link, redfish_enum};
use crate::task::TaskMonitor;

redfish_enum!(
    /// `PowerState`.
    PowerState { On, Off, PoweringOn, PoweringOff, Paused }
);

redfish_enum!(
    /// `ResetType` of `#ComputerSystem.Reset`.
    ResetType {
        On, ForceOff, GracefulShutdown, GracefulRestart, ForceRestart, Nmi, ForceOn,
        PushPowerButton, PowerCycle, Suspend, Pause, Resume, FullPowerCycle,
    }
);

redfish_enum!(
    /// `BootProgress.LastState`.
    BootProgressState {
        None, PrimaryProcessorInitializationStarted, BusInitializationStarted,
        MemoryInitializationStarted, SecondaryProcessorInitializationStarted,
        PCIResourceConfigStarted, SystemHardwareInitializationComplete, SetupEntered,
        OSBootStarted, OSRunning, OEM,
    }
);

impl BootProgressState {
    /// Position in the boot sequence (1 = first); `None` for `None`, `OEM` and unknown
    /// values, which cannot be ordered.
    pub fn rank(&self) -> Option<u8> {
        Some(match self {
            Self::PrimaryProcessorInitializationStarted => 1,
            Self::BusInitializationStarted => 2,
            Self::MemoryInitializationStarted => 3,
            Self::SecondaryProcessorInitializationStarted => 4,
            Self::PCIResourceConfigStarted => 5,
            Self::SystemHardwareInitializationComplete => 6,
            Self::SetupEntered => 7,
            Self::OSBootStarted => 8,
            Self::OSRunning => 9,
            _ => return None,
        })
    }
}

/// `BootProgress`, as far as reboot detection needs it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BootProgress {
    /// The last boot stage reached.
    #[serde(default)]
    pub last_state: Option<BootProgressState>,
    /// When it was reached.
    #[serde(default, deserialize_with = "lenient_time")]
    pub last_state_time: Option<DateTime<Utc>>,
    /// `OemLastState`, for `LastState: OEM`.
    #[serde(default)]
    pub oem_last_state: Option<String>,
}

/// A ComputerSystem, reduced to what deployments use. Unknown fields stay in `extra`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SystemInfo {
    /// The resource URI.
    #[serde(rename = "@odata.id", default)]
    pub odata_id: String,
    /// `Id`.
    #[serde(default)]
    pub id: String,
    /// `UUID`: the system's SMBIOS UUID, IncusOS's default hostname.
    #[serde(rename = "UUID", default)]
    pub uuid: Option<String>,
    /// `Manufacturer` (`Dell Inc.`, `HPE`, `Lenovo`, `Supermicro`): what BIOS profiles may match on.
    #[serde(default)]
    pub manufacturer: Option<String>,
    /// `Model` (`PowerEdge R750`).
    #[serde(default)]
    pub model: Option<String>,
    /// `SKU` (`7Z23CTO1WW`); absent on some BMCs.
    #[serde(rename = "SKU", default)]
    pub sku: Option<String>,
    /// `PowerState` (absent on some BMCs while they boot).
    #[serde(default)]
    pub power_state: Option<PowerState>,
    /// `LastResetTime`; `None` when absent or unparseable (HPE, sushy-tools).
    #[serde(default, deserialize_with = "lenient_time")]
    pub last_reset_time: Option<DateTime<Utc>>,
    /// `BootProgress`; `None` when absent (Dell, sushy-tools).
    #[serde(default)]
    pub boot_progress: Option<BootProgress>,
    /// `Boot` (override settings).
    #[serde(default)]
    pub boot: Option<BootSettings>,
    /// `Bios` link.
    #[serde(default)]
    pub bios: Option<Link>,
    /// `SecureBoot` link.
    #[serde(default)]
    pub secure_boot: Option<Link>,
    /// `VirtualMedia` link (may point into Managers).
    #[serde(default)]
    pub virtual_media: Option<Link>,
    /// `Actions`.
    #[serde(default)]
    pub actions: Option<Map<String, Value>>,
    /// Everything else the BMC sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Parses a DateTime, treating absent, null, empty or malformed values as unknown: a BMC
/// with a broken clock field must read as "cannot tell", not as an unreadable system.
fn lenient_time<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    let raw = Option::<String>::deserialize(d)?;
    Ok(raw
        .and_then(|s| DateTime::parse_from_rfc3339(s.trim()).ok())
        .map(|t| t.with_timezone(&Utc)))
}

/// What a reset did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResetOutcome {
    /// The reset type sent.
    pub reset_type: ResetType,
    /// The task monitor, when the BMC answered 202.
    pub task: Option<TaskMonitor>,
}

/// What ensuring a power state did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PowerOutcome {
    /// The system already was in the target state; nothing was sent.
    AlreadyThere,
    /// A reset was sent; a wait step must still observe the state.
    Sent(ResetOutcome),
}

impl BmcClient {
    /// Reads the managed ComputerSystem.
    pub async fn read_system(&self) -> Result<SystemInfo> {
        self.within("read_system", self.system()).await
    }

    pub(crate) async fn system(&self) -> Result<SystemInfo> {
        let path = self.system_path().await?;
        self.get_json(&path).await
    }

    /// The reset types the BMC accepts: inline `ResetType@Redfish.AllowableValues`, else the
    /// ActionInfo's `ResetType` values; `None` when it advertises neither (anything goes).
    pub async fn allowed_reset_types(&self) -> Result<Option<Vec<ResetType>>> {
        self.within("allowed_reset_types", async {
            let system = self.system().await?;
            let action = reset_action(&system)?;
            self.allowable(&action, "ResetType")
                .await
                .map(|v| v.map(|v| v.iter().map(|s| ResetType::from(s.as_str())).collect()))
        })
        .await
    }

    /// Sends `#ComputerSystem.Reset` with `reset_type`, after checking it against what the
    /// BMC advertises. Only `On`, `ForceOn` and `ForceOff` are retried in-process: repeating
    /// a restart would restart twice.
    pub async fn reset(&self, reset_type: ResetType) -> Result<ResetOutcome> {
        self.within("reset", async {
            let system = self.system().await?;
            self.reset_with(&system, &[reset_type]).await
        })
        .await
    }

    /// Ensures the system is on: nothing if `PowerState` is `On`, else `On`, or `ForceOn`
    /// where `On` is not advertised.
    pub async fn power_on(&self) -> Result<PowerOutcome> {
        self.within(
            "power_on",
            self.ensure_power(PowerState::On, &[ResetType::On, ResetType::ForceOn]),
        )
        .await
    }

    /// Ensures the system is off, always by `ForceOff`: a graceful shutdown is an ACPI request
    /// that firmware in POST and installers ignore.
    pub async fn power_off(&self) -> Result<PowerOutcome> {
        self.within(
            "power_off",
            self.ensure_power(PowerState::Off, &[ResetType::ForceOff]),
        )
        .await
    }

    /// Restarts by `ForceRestart` (or `PowerCycle` where only that is advertised). Not an
    /// "ensure": the caller decides a restart is wanted. No operation needs `PushPowerButton`, which
    /// Supermicro X12/X13 do not offer (they offer `PowerCycle`).
    pub async fn force_restart(&self) -> Result<ResetOutcome> {
        self.within("force_restart", async {
            let system = self.system().await?;
            self.reset_with(&system, &[ResetType::ForceRestart, ResetType::PowerCycle])
                .await
        })
        .await
    }

    async fn ensure_power(&self, target: PowerState, candidates: &[ResetType]) -> Result<PowerOutcome> {
        let system = self.system().await?;
        // A transition already heading to the target counts: sending again would only earn
        // a 409 from BMCs that refuse resets mid-transition.
        let heading = match target {
            PowerState::On => PowerState::PoweringOn,
            _ => PowerState::PoweringOff,
        };
        if system
            .power_state
            .as_ref()
            .is_some_and(|s| *s == target || *s == heading)
        {
            return Ok(PowerOutcome::AlreadyThere);
        }
        self.reset_with(&system, candidates).await.map(PowerOutcome::Sent)
    }

    /// Sends the first candidate the BMC advertises.
    async fn reset_with(&self, system: &SystemInfo, candidates: &[ResetType]) -> Result<ResetOutcome> {
        let action = reset_action(system)?;
        let allowed = self.allowable(&action, "ResetType").await?;
        let chosen = match &allowed {
            None => candidates.first(),
            Some(allowed) => candidates
                .iter()
                .find(|c| allowed.iter().any(|a| a == c.as_str())),
        }
        .ok_or_else(|| Error::Unsupported {
            what: format!(
                "reset type {} (advertised: {})",
                candidates
                    .iter()
                    .map(ResetType::as_str)
                    .collect::<Vec<_>>()
                    .join(" or "),
                allowed.unwrap_or_default().join(", ")
            ),
        })?
        .clone();
        let idempotency = match chosen {
            ResetType::On | ResetType::ForceOn | ResetType::ForceOff => Idempotency::Idempotent,
            _ => Idempotency::Once,
        };
        let reply = self
            .post(
                &action.target,
                &json!({ "ResetType": chosen.as_str() }),
                idempotency,
            )
            .await?;
        Ok(ResetOutcome {
            reset_type: chosen,
            task: TaskMonitor::from_reply(&reply),
        })
    }

    /// The allowed values of `param` for an action: inline first, then ActionInfo.
    pub(crate) async fn allowable(&self, action: &ActionRef, param: &str) -> Result<Option<Vec<String>>> {
        if let Some((_, values)) = action.inline_allowable.iter().find(|(p, _)| p == param) {
            return Ok(Some(values.clone()));
        }
        match &action.action_info {
            Some(info) => {
                let info: ActionInfo = self.get_json(info).await?;
                Ok(info.parameter(param).and_then(|p| p.allowable_values.clone()))
            }
            None => Ok(None),
        }
    }
}

pub(crate) fn reset_action(system: &SystemInfo) -> Result<ActionRef> {
    ActionRef::find(system.actions.as_ref(), "#ComputerSystem.Reset").ok_or_else(|| Error::Unsupported {
        what: "#ComputerSystem.Reset action".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_dmtf_system_and_tolerates_missing_signals() {
        let sys: SystemInfo = serde_json::from_str(
            r##"{"@odata.id":"/redfish/v1/Systems/1","Id":"1","PowerState":"On",
                "LastResetTime":"2026-11-29T10:00:00+00:00",
                "BootProgress":{"LastState":"OSRunning","LastStateTime":"2026-11-29T10:01:00Z"},
                "Boot":{"BootSourceOverrideEnabled":"Disabled","BootSourceOverrideTarget":"None"},
                "Bios":{"@odata.id":"/redfish/v1/Systems/1/Bios"},
                "Oem":{"Vendor":{"x":1}}}"##,
        )
        .expect("system");
        assert_eq!(sys.power_state, Some(PowerState::On));
        assert_eq!(
            sys.last_reset_time.map(|t| t.to_rfc3339()).as_deref(),
            Some("2026-11-29T10:00:00+00:00")
        );
        let progress = sys.boot_progress.expect("progress");
        assert_eq!(progress.last_state, Some(BootProgressState::OSRunning));
        assert_eq!(progress.last_state.and_then(|s| s.rank()), Some(9));
        assert!(sys.extra.contains_key("Oem"));

        let bare: SystemInfo =
            serde_json::from_str(r##"{"Id":"x","PowerState":"Paused","LastResetTime":"garbage"}"##)
                .expect("bare");
        assert_eq!(bare.last_reset_time, None);
        assert_eq!(bare.boot_progress, None);
        assert_eq!(bare.power_state, Some(PowerState::Paused));
    }
}

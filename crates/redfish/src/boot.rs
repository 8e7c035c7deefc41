//! One-time boot override, with the continuous override where the BMC refuses one-time.
//!
//! The two behave differently past the request: a one-time override is spent on the boot it
//! was set for, a continuous one keeps sending the server back to the media until cleared.
//! The caller must know which one it got, so the outcome says.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::client::BmcClient;
use crate::error::{Error, Result};
use crate::model::redfish_enum;

redfish_enum!(
    /// `BootSourceOverrideEnabled`.
    BootSourceOverrideEnabled { Disabled, Once, Continuous }
);

redfish_enum!(
    /// `BootSourceOverrideTarget`.
    BootSourceOverrideTarget {
        None, Pxe, Floppy, Cd, Usb, Hdd, BiosSetup, Utilities, Diags, UefiShell, UefiTarget,
        SDCard, UefiHttp, RemoteDrive, UefiBootNext, Recovery,
    }
);

redfish_enum!(
    /// `BootSourceOverrideMode`.
    BootSourceOverrideMode { Legacy, UEFI }
);

/// The `Boot` object of a ComputerSystem.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct BootSettings {
    /// Whether (and how long) the override is armed.
    #[serde(rename = "BootSourceOverrideEnabled", default)]
    pub enabled: Option<BootSourceOverrideEnabled>,
    /// The override device.
    #[serde(rename = "BootSourceOverrideTarget", default)]
    pub target: Option<BootSourceOverrideTarget>,
    /// UEFI or Legacy.
    #[serde(rename = "BootSourceOverrideMode", default)]
    pub mode: Option<BootSourceOverrideMode>,
    /// Targets the BMC allows, if it says. iLO 5 does not: the target is then sent as asked, and a refusal is
    /// the BMC's answer.
    #[serde(rename = "BootSourceOverrideTarget@Redfish.AllowableValues", default)]
    pub allowed_targets: Option<Vec<String>>,
    /// `Enabled` values the BMC allows, if it says (Lenovo XCC: Once and Disabled only).
    #[serde(rename = "BootSourceOverrideEnabled@Redfish.AllowableValues", default)]
    pub allowed_enabled: Option<Vec<String>>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What setting the override achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootOverrideOutcome {
    /// The `Enabled` value the BMC accepted: `Once`, or `Continuous` where `Once` was refused.
    pub accepted: BootSourceOverrideEnabled,
    /// What the BMC reports afterwards (sushy-tools always reports `Continuous`).
    pub reported: Option<BootSourceOverrideEnabled>,
    /// Nothing was sent: the override already pointed at the target.
    pub unchanged: bool,
}

impl BmcClient {
    /// Reads the system's boot override settings.
    pub async fn read_boot(&self) -> Result<BootSettings> {
        self.within("read_boot", async {
            Ok(self.system().await?.boot.unwrap_or_default())
        })
        .await
    }

    /// Points the next boot at `target`: `Once` preferred, `Continuous` only where the BMC
    /// rejects the value `Once` (or does not list it). A target outside the advertised values
    /// is refused before anything is sent.
    pub async fn set_boot_override(
        &self,
        target: BootSourceOverrideTarget,
        mode: Option<BootSourceOverrideMode>,
    ) -> Result<BootOverrideOutcome> {
        self.within("set_boot_override", async {
            let system = self.system().await?;
            let boot = system.boot.clone().ok_or_else(|| Error::Unsupported {
                what: "Boot override".into(),
            })?;
            if let Some(allowed) = &boot.allowed_targets
                && !allowed.iter().any(|a| a == target.as_str())
            {
                return Err(Error::Unsupported {
                    what: format!("boot target {target} (advertised: {})", allowed.join(", ")),
                });
            }
            let armed = matches!(
                boot.enabled,
                Some(BootSourceOverrideEnabled::Once | BootSourceOverrideEnabled::Continuous)
            );
            if armed && boot.target.as_ref() == Some(&target) && (mode.is_none() || boot.mode == mode) {
                let current = boot.enabled.clone().unwrap_or(BootSourceOverrideEnabled::Once);
                return Ok(BootOverrideOutcome {
                    accepted: current.clone(),
                    reported: Some(current),
                    unchanged: true,
                });
            }
            let candidates: Vec<BootSourceOverrideEnabled> = [
                BootSourceOverrideEnabled::Once,
                BootSourceOverrideEnabled::Continuous,
            ]
            .into_iter()
            .filter(|c| {
                boot.allowed_enabled
                    .as_ref()
                    .is_none_or(|a| a.iter().any(|v| v == c.as_str()))
            })
            .collect();
            if candidates.is_empty() {
                return Err(Error::Unsupported {
                    what: "a one-time or continuous boot override".into(),
                });
            }
            let mut last_err = None;
            for enabled in candidates {
                let mut fields = json!({
                    "BootSourceOverrideTarget": target.as_str(),
                    "BootSourceOverrideEnabled": enabled.as_str(),
                });
                if let Some(mode) = &mode {
                    fields["BootSourceOverrideMode"] = json!(mode.as_str());
                }
                match self
                    .patch(&system.odata_id, &json!({ "Boot": fields }), None)
                    .await
                {
                    Ok(_) => {
                        let reported = self
                            .system()
                            .await
                            .ok()
                            .and_then(|s| s.boot)
                            .and_then(|b| b.enabled);
                        tracing::debug!(server = self.server(), accepted = %enabled, "boot override set");
                        return Ok(BootOverrideOutcome {
                            accepted: enabled,
                            reported,
                            unchanged: false,
                        });
                    }
                    // A refusal naming the target is final: `Continuous` would be refused the same (iLO 5 lists
                    // no targets, so its refusal is the first word on an unsupported one).
                    Err(e) if names_target(&e) => return Err(e),
                    Err(e) if e.is_value_rejected("BootSourceOverrideEnabled") => last_err = Some(e),
                    Err(e) => return Err(e),
                }
            }
            Err(last_err.unwrap_or_else(|| Error::Unsupported {
                what: "boot override".into(),
            }))
        })
        .await
    }

    /// Clears the override if it still points at `target` (another party's override is left
    /// alone). Sends `None` + `Disabled`, or `Disabled` alone where `None` is rejected.
    /// Returns whether anything was sent.
    pub async fn clear_boot_override(&self, target: BootSourceOverrideTarget) -> Result<bool> {
        self.within("clear_boot_override", async {
            let system = self.system().await?;
            let Some(boot) = system.boot else { return Ok(false) };
            let armed = !matches!(boot.enabled, None | Some(BootSourceOverrideEnabled::Disabled));
            if !armed || boot.target.as_ref() != Some(&target) {
                return Ok(false);
            }
            let full = json!({"Boot": {"BootSourceOverrideTarget": "None", "BootSourceOverrideEnabled": "Disabled"}});
            match self.patch(&system.odata_id, &full, None).await {
                Ok(_) => Ok(true),
                Err(e) if e.status() == Some(400) => {
                    let disable_only = json!({"Boot": {"BootSourceOverrideEnabled": "Disabled"}});
                    self.patch(&system.odata_id, &disable_only, None).await.map(|_| true)
                }
                Err(e) => Err(e),
            }
        })
        .await
    }
}

/// Whether a refused override PATCH says the target was the problem.
fn names_target(err: &Error) -> bool {
    err.status() == Some(400)
        && err.extended_info().iter().any(|e| {
            e.related_properties
                .iter()
                .any(|p| p.ends_with("BootSourceOverrideTarget"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_allowable_values() {
        let boot: BootSettings = serde_json::from_str(
            r##"{"BootSourceOverrideEnabled":"Disabled","BootSourceOverrideTarget":"None",
                "BootSourceOverrideEnabled@Redfish.AllowableValues":["Once","Disabled"],
                "BootSourceOverrideTarget@Redfish.AllowableValues":["None","Pxe","Cd","Hdd"],
                "UefiTargetBootSourceOverride":null}"##,
        )
        .expect("boot");
        assert_eq!(
            boot.allowed_enabled.as_deref(),
            Some(&["Once".to_owned(), "Disabled".to_owned()][..])
        );
        assert_eq!(boot.target, Some(BootSourceOverrideTarget::None));
        assert!(boot.extra.contains_key("UefiTargetBootSourceOverride"));
    }
}

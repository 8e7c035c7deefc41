//! BIOS: current attributes, pending values in the settings object, and staging new values.
//!
//! Values take effect at the next reset, so staging is a PATCH of the settings object named
//! by `@Redfish.Settings` (never a templated URI: HPE uses `/systems/1/bios/settings/`,
//! Lenovo `/Bios/Pending`, Supermicro `/Bios/SD`). Verification is the caller's read-back
//! after power-on.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::client::BmcClient;
use crate::error::{Error, Result};
use crate::model::{Link, SettingsInfo};
use crate::task::TaskMonitor;

/// A Bios resource.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Bios {
    /// The resource URI.
    #[serde(rename = "@odata.id", default)]
    pub odata_id: String,
    /// `AttributeRegistry` name.
    #[serde(default)]
    pub attribute_registry: Option<String>,
    /// Current values.
    #[serde(default)]
    pub attributes: Map<String, Value>,
    /// `@Redfish.Settings`, when the BMC stages writes in a settings object.
    #[serde(rename = "@Redfish.Settings", default)]
    pub settings: Option<SettingsInfo>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Bios {
    /// The attributes named in a `SettingsFailed` message of the last apply, from its
    /// `RelatedProperties` (`/Attributes/ProcTurboMode` → `ProcTurboMode`).
    pub fn failed_attributes(&self) -> Vec<String> {
        let Some(settings) = &self.settings else {
            return Vec::new();
        };
        settings
            .messages
            .iter()
            .filter(|m| m.suffix() == "SettingsFailed")
            .flat_map(|m| m.related_properties.iter())
            .map(|p| {
                p.trim_start_matches('#')
                    .trim_start_matches("/Attributes/")
                    .to_owned()
            })
            .collect()
    }
}

/// What staging did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageOutcome {
    /// Where the values were written.
    pub written_to: String,
    /// Whether `@Redfish.SettingsApplyTime: OnReset` was sent (only when advertised).
    pub apply_time_on_reset: bool,
    /// Task monitor, on a 202.
    pub task: Option<TaskMonitor>,
}

impl BmcClient {
    /// Reads the Bios resource (current attributes and `@Redfish.Settings`).
    pub async fn read_bios(&self) -> Result<Bios> {
        self.within("read_bios", self.bios()).await
    }

    /// Attributes staged in the settings object whose value differs from the current one:
    /// what the next reset will apply. Empty when the BMC has no settings object.
    pub async fn pending_bios_attributes(&self) -> Result<Map<String, Value>> {
        self.within("pending_bios_attributes", async {
            let bios = self.bios().await?;
            let Some(settings) = bios.settings.as_ref().and_then(|s| s.settings_object.as_ref()) else {
                return Ok(Map::new());
            };
            let pending: Value = self.get_json(&settings.odata_id).await?;
            let staged = pending
                .get("Attributes")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            Ok(staged
                .into_iter()
                .filter(|(k, v)| bios.attributes.get(k) != Some(v))
                .collect())
        })
        .await
    }

    /// Stages `attributes` for the next reset: PATCH of the settings object (with
    /// `ApplyTime: OnReset` only if the BMC lists it), or of the Bios resource itself when
    /// it has no settings object.
    pub async fn stage_bios_attributes(&self, attributes: Map<String, Value>) -> Result<StageOutcome> {
        self.within("stage_bios_attributes", async {
            if attributes.is_empty() {
                return Err(Error::Refused {
                    what: "staging an empty BIOS attribute set".into(),
                });
            }
            let bios = self.bios().await?;
            let settings = bios.settings.clone().unwrap_or_default();
            let target = match &settings.settings_object {
                Some(Link { odata_id }) => odata_id.clone(),
                None => bios.odata_id.clone(),
            };
            let on_reset = settings.supported_apply_times.iter().any(|t| t == "OnReset");
            let mut body = json!({ "Attributes": attributes });
            if on_reset {
                body["@Redfish.SettingsApplyTime"] = json!({ "ApplyTime": "OnReset" });
            }
            let etag = self.get(&target).await.ok().and_then(|r| r.etag);
            let reply = self.patch(&target, &body, etag.as_deref()).await?;
            Ok(StageOutcome {
                written_to: target,
                apply_time_on_reset: on_reset,
                task: TaskMonitor::from_reply(&reply),
            })
        })
        .await
    }

    async fn bios(&self) -> Result<Bios> {
        let system = self.system().await?;
        let link = system.bios.ok_or_else(|| Error::Unsupported {
            what: "Bios resource".into(),
        })?;
        let mut bios: Bios = self.get_json(&link.odata_id).await?;
        if bios.odata_id.is_empty() {
            bios.odata_id = link.odata_id;
        }
        Ok(bios)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_settings_and_failed_attributes() {
        let bios: Bios = serde_json::from_str(
            r##"{"@odata.id":"/redfish/v1/systems/1/bios","AttributeRegistry":"BiosAttributeRegistryU32",
                "Attributes":{"ProcTurboMode":"Enabled","BootMode":"Uefi"},
                "@Redfish.Settings":{"SettingsObject":{"@odata.id":"/redfish/v1/systems/1/bios/settings/"},
                  "SupportedApplyTimes":["OnReset"],
                  "Messages":[{"MessageId":"Base.1.0.SettingsFailed","RelatedProperties":["#/Attributes/ProcTurboMode"]}]}}"##,
        )
        .expect("bios");
        let settings = bios.settings.as_ref().expect("settings");
        assert_eq!(
            settings.settings_object.as_ref().map(|l| l.odata_id.as_str()),
            Some("/redfish/v1/systems/1/bios/settings/")
        );
        assert_eq!(bios.failed_attributes(), vec!["ProcTurboMode".to_owned()]);
        assert_eq!(bios.attributes.get("BootMode"), Some(&json!("Uefi")));
    }
}

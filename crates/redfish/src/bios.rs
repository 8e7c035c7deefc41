//! BIOS: current attributes, pending values in the settings object, and staging new values.
//!
//! Values take effect at the next reset, so staging is a PATCH of the settings object named
//! by `@Redfish.Settings` (never a templated URI: HPE uses `/systems/1/bios/settings/`,
//! Lenovo `/Bios/Pending`, Supermicro `/Bios/SD`). Verification is the caller's read-back
//! after power-on.
//!
//! What a BMC accepts is described by the attribute registry its Bios resource names
//! (`AttributeRegistry`), published under `/redfish/v1/Registries` as a `MessageRegistryFile` whose
//! `Location[].Uri` leads to the `AttributeRegistry` document: hundreds of entries with their `Type`,
//! `ReadOnly` flag and allowed `Value`s. [`BmcClient::read_attribute_registry`] reads it and
//! [`AttributeRegistry::check`] tells which of a profile's attributes the BMC would refuse, before anything is
//! staged; a refusal the BMC sends anyway names its attributes in the error ([`rejected_attributes`]).

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::client::BmcClient;
use crate::error::{Error, Result};
use crate::media::last_segment;
use crate::model::{Collection, Link, SettingsInfo, link_field, redfish_enum};
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

redfish_enum!(
    /// `Type` of an attribute registry entry.
    AttributeType { Enumeration, String, Integer, Boolean, Password }
);

/// One allowed value of an `Enumeration` attribute.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributeValue {
    /// The value as written in `Attributes`.
    #[serde(default)]
    pub value_name: String,
}

/// One entry of an attribute registry's `RegistryEntries.Attributes`. Vendors leave many fields null.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributeEntry {
    /// The name used in the Bios resource's `Attributes`.
    #[serde(default)]
    pub attribute_name: String,
    /// `Type`, when given.
    #[serde(rename = "Type", default)]
    pub kind: Option<AttributeType>,
    /// `ReadOnly` (absent or null: writable).
    #[serde(default)]
    pub read_only: Option<bool>,
    /// Allowed values of an `Enumeration`.
    #[serde(default)]
    pub value: Option<Vec<AttributeValue>>,
    /// Bounds of an `Integer`.
    #[serde(default)]
    pub lower_bound: Option<i64>,
    /// Bounds of an `Integer`.
    #[serde(default)]
    pub upper_bound: Option<i64>,
    /// Longest `String`.
    #[serde(default)]
    pub max_length: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RegistryEntries {
    #[serde(default)]
    attributes: Vec<AttributeEntry>,
}

/// An `AttributeRegistry` document, reduced to its attributes.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributeRegistry {
    /// `Id`: the name the Bios resource's `AttributeRegistry` gives.
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    registry_entries: RegistryEntries,
}

/// Why a BMC would refuse an attribute, by its registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttributeProblem {
    /// Not in the registry.
    Unknown(String),
    /// `ReadOnly`.
    ReadOnly(String),
    /// Outside the enumeration or the bounds, too long, or of another JSON type than `Type`.
    BadValue { name: String, value: String },
}

impl AttributeRegistry {
    /// Every attribute entry.
    pub fn attributes(&self) -> &[AttributeEntry] {
        &self.registry_entries.attributes
    }

    /// The entry of `name`.
    pub fn entry(&self, name: &str) -> Option<&AttributeEntry> {
        self.attributes().iter().find(|e| e.attribute_name == name)
    }

    /// What the BMC would refuse of `attributes`; empty when all would be accepted. Only what the registry
    /// states is checked: an entry without a `Type` accepts any value.
    pub fn check(&self, attributes: &Map<String, Value>) -> Vec<AttributeProblem> {
        attributes
            .iter()
            .filter_map(|(name, value)| {
                let Some(entry) = self.entry(name) else {
                    return Some(AttributeProblem::Unknown(name.clone()));
                };
                if entry.read_only == Some(true) {
                    return Some(AttributeProblem::ReadOnly(name.clone()));
                }
                let fits = match (&entry.kind, value) {
                    (Some(AttributeType::Enumeration), Value::String(v)) => entry
                        .value
                        .as_ref()
                        .is_none_or(|values| values.iter().any(|a| &a.value_name == v)),
                    (Some(AttributeType::Integer), Value::Number(n)) => n.as_i64().is_some_and(|v| {
                        entry.lower_bound.is_none_or(|l| v >= l) && entry.upper_bound.is_none_or(|u| v <= u)
                    }),
                    (Some(AttributeType::String | AttributeType::Password), Value::String(v)) => {
                        entry.max_length.is_none_or(|m| v.chars().count() as u64 <= m)
                    }
                    (Some(AttributeType::Boolean), Value::Bool(_)) => true,
                    (Some(AttributeType::Other(_)) | None, _) => true,
                    _ => false,
                };
                (!fits).then(|| AttributeProblem::BadValue {
                    name: name.clone(),
                    value: value.to_string(),
                })
            })
            .collect()
    }
}

/// A `MessageRegistryFile`: which registry it holds and where the document is.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RegistryFile {
    #[serde(default)]
    id: String,
    #[serde(default)]
    registry: String,
    #[serde(default)]
    location: Vec<RegistryLocation>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RegistryLocation {
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    uri: Option<String>,
}

impl RegistryFile {
    /// Whether this file holds `name`: by `Id`, else by `Registry`'s name before its version
    /// (`BiosAttributeRegistry.1.0` for `BiosAttributeRegistry.v1_0_0`, as iDRAC writes them).
    fn holds(&self, name: &str) -> bool {
        let stem = |s: &str| s.split('.').next().unwrap_or(s).to_owned();
        self.id == name || (!self.registry.is_empty() && stem(&self.registry) == stem(name))
    }

    /// The document's URI: the English location, else the first one.
    fn document(&self) -> Option<&str> {
        self.location
            .iter()
            .find(|l| l.language.as_deref() == Some("en"))
            .or_else(|| self.location.first())
            .and_then(|l| l.uri.as_deref())
    }
}

/// The attributes a BMC named in refusing a BIOS settings write: the `#/Attributes/<name>` related properties of
/// its messages, else their arguments (`PropertyUnknown`, `PropertyNotWritable` and iLO's
/// `PropertyNotWritableOrUnknown` name the property first; `PropertyValueNotInList` and
/// `PropertyValueTypeError` after the value).
pub fn rejected_attributes(err: &Error) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for e in err.extended_info() {
        let related = e
            .related_properties
            .iter()
            .filter_map(|p| p.trim_start_matches('#').strip_prefix("/Attributes/"))
            .map(str::to_owned);
        let from_args = match e.suffix() {
            "PropertyUnknown" | "PropertyNotWritable" | "PropertyNotWritableOrUnknown" => {
                e.message_args.first()
            }
            "PropertyValueNotInList" | "PropertyValueTypeError" | "PropertyValueFormatError" => {
                e.message_args.get(1)
            }
            _ => None,
        }
        .and_then(Value::as_str)
        .map(str::to_owned);
        let found: Vec<String> = related.collect();
        let found = if found.is_empty() {
            from_args.into_iter().collect()
        } else {
            found
        };
        for name in found {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

impl BmcClient {
    /// The attribute registry the Bios resource names, found through `/redfish/v1/Registries` (the member named
    /// like it, else the file whose `Id` or `Registry` matches) and read from the file's `Location`.
    pub async fn read_attribute_registry(&self) -> Result<AttributeRegistry> {
        self.within("read_attribute_registry", async {
            let bios = self.bios().await?;
            let unsupported = |what: &str| Error::Unsupported { what: what.into() };
            let name = bios
                .attribute_registry
                .filter(|n| !n.is_empty())
                .ok_or_else(|| unsupported("AttributeRegistry on the Bios resource"))?;
            let root: Map<String, Value> = self.get_json("/redfish/v1/").await?;
            let registries =
                link_field(&root, "Registries").ok_or_else(|| unsupported("Registries collection"))?;
            let files: Collection = self.get_json(&registries).await?;
            let mut ordered: Vec<&Link> = files.members.iter().collect();
            ordered.sort_by_key(|m| last_segment(&m.odata_id) != name);
            let mut found = None;
            for member in ordered {
                let file: RegistryFile = self.get_json(&member.odata_id).await?;
                if file.holds(&name) {
                    found = Some(file);
                    break;
                }
            }
            let file = found.ok_or_else(|| unsupported(&format!("registry file of {name}")))?;
            let uri = file
                .document()
                .ok_or_else(|| unsupported(&format!("location of registry {name}")))?;
            self.get_json(uri).await
        })
        .await
    }

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
            let etag = self.get(&target).await.ok().and_then(|r| r.etag());
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
    fn registry_checks_follow_the_entries() {
        let registry: AttributeRegistry = serde_json::from_str(
            r##"{"Id":"BiosAttributeRegistryR750.v1_0_0","RegistryEntries":{"Attributes":[
                {"AttributeName":"ProcVirtualization","Type":"Enumeration","ReadOnly":false,
                 "Value":[{"ValueName":"Enabled"},{"ValueName":"Disabled"}]},
                {"AttributeName":"PxeDev1VlanId","Type":"Integer","LowerBound":1,"UpperBound":4094,"ReadOnly":null},
                {"AttributeName":"SystemServiceTag","Type":"String","ReadOnly":true,"MaxLength":7},
                {"AttributeName":"OemThing","Type":"OemType"}]}}"##,
        )
        .expect("registry");
        assert_eq!(registry.attributes().len(), 4);
        let attrs: Map<String, Value> = serde_json::from_value(json!({
            "ProcVirtualization": "Disabled", "PxeDev1VlanId": 4094, "OemThing": [1],
        }))
        .expect("attrs");
        assert!(registry.check(&attrs).is_empty());
        let cases = [
            (
                json!({"NoSuchKnob": "x"}),
                AttributeProblem::Unknown("NoSuchKnob".into()),
            ),
            (
                json!({"SystemServiceTag": "x"}),
                AttributeProblem::ReadOnly("SystemServiceTag".into()),
            ),
            (
                json!({"ProcVirtualization": "Off"}),
                AttributeProblem::BadValue {
                    name: "ProcVirtualization".into(),
                    value: "\"Off\"".into(),
                },
            ),
            (
                json!({"PxeDev1VlanId": 0}),
                AttributeProblem::BadValue {
                    name: "PxeDev1VlanId".into(),
                    value: "0".into(),
                },
            ),
        ];
        for (attrs, want) in cases {
            let attrs: Map<String, Value> = serde_json::from_value(attrs).expect("attrs");
            assert_eq!(registry.check(&attrs), vec![want]);
        }
    }

    #[test]
    fn registry_files_match_by_id_or_registry_stem() {
        let file: RegistryFile = serde_json::from_str(
            r##"{"Id":"BiosAttributeRegistry","Registry":"BiosAttributeRegistry.1.0",
                "Location":[{"Language":"zh","Uri":"/zh"},{"Language":"en","Uri":"/en"}]}"##,
        )
        .expect("file");
        assert!(file.holds("BiosAttributeRegistry.v1_0_0"));
        assert!(!file.holds("Base.1.8"));
        assert_eq!(file.document(), Some("/en"));
    }

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

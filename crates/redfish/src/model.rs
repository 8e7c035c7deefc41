//! Wire types shared by the operations: links, collections, actions, ActionInfo and the
//! Redfish enums.
//!
//! Enums keep unknown values (`Other`) instead of failing: a BMC that reports a value from a
//! newer schema must not make the whole resource unreadable. Resources keep unknown JSON in
//! an `extra` map so OEM fields stay visible to callers.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Declares a string enum with an `Other(String)` catch-all and serde by name.
macro_rules! redfish_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
            /// A value this client does not know.
            Other(String),
        }

        impl $name {
            /// The wire name.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => stringify!($variant),)+
                    Self::Other(s) => s,
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $(stringify!($variant) => Self::$variant,)+
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <String as serde::Deserialize>::deserialize(d)?;
                Ok(Self::from(s.as_str()))
            }
        }
    };
}
pub(crate) use redfish_enum;

/// An `{"@odata.id": …}` link.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct Link {
    /// The linked resource's URI (a path, normally).
    #[serde(rename = "@odata.id")]
    pub odata_id: String,
}

/// A resource collection (only its members matter here).
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct Collection {
    #[serde(rename = "Members", default)]
    pub members: Vec<Link>,
}

/// The service root, `/redfish/v1/`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ServiceRoot {
    #[serde(default)]
    pub systems: Option<Link>,
    #[serde(default)]
    pub managers: Option<Link>,
}

/// An action found in a resource's `Actions` object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActionRef {
    /// Where to POST.
    pub target: String,
    /// Inline `<Param>@Redfish.AllowableValues`, as (parameter, values).
    pub inline_allowable: Vec<(String, Vec<String>)>,
    /// `@Redfish.ActionInfo` link, when the BMC publishes parameters there.
    pub action_info: Option<String>,
}

impl ActionRef {
    /// Reads `actions[name]`, if it has a target.
    pub(crate) fn find(actions: Option<&Map<String, Value>>, name: &str) -> Option<Self> {
        Self::from_value(actions?.get(name)?)
    }

    fn from_value(v: &Value) -> Option<Self> {
        let obj = v.as_object()?;
        let target = obj.get("target")?.as_str()?.to_owned();
        let inline_allowable = obj
            .iter()
            .filter_map(|(k, v)| {
                let param = k.strip_suffix("@Redfish.AllowableValues")?;
                let values = v
                    .as_array()?
                    .iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect();
                Some((param.to_owned(), values))
            })
            .collect();
        let action_info = obj
            .get("@Redfish.ActionInfo")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Some(Self {
            target,
            inline_allowable,
            action_info,
        })
    }

    /// Searches `Actions.Oem` (down to three levels) for an action whose name ends in
    /// `suffix`, such as `InsertVirtualMedia` (HPE `#HpeiLOVirtualMedia.InsertVirtualMedia`).
    /// The action among `actions` (one vendor's) whose name ends with `suffix`.
    pub(crate) fn find_named(actions: &Map<String, Value>, suffix: &str) -> Option<Self> {
        actions
            .iter()
            .filter(|(name, _)| name.ends_with(suffix))
            .find_map(|(_, action)| ActionRef::from_value(action))
    }

    pub(crate) fn find_oem(actions: Option<&Map<String, Value>>, suffix: &str) -> Option<Self> {
        fn walk(v: &Value, suffix: &str, depth: u8) -> Option<ActionRef> {
            let obj = v.as_object()?;
            for (k, child) in obj {
                if k.ends_with(suffix)
                    && let Some(found) = ActionRef::from_value(child)
                {
                    return Some(found);
                }
            }
            if depth == 0 {
                return None;
            }
            obj.values().find_map(|child| walk(child, suffix, depth - 1))
        }
        walk(actions?.get("Oem")?, suffix, 2)
    }
}

/// An ActionInfo resource: the parameters an action accepts.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ActionInfo {
    /// The parameters.
    #[serde(default)]
    pub parameters: Vec<ActionParameter>,
}

/// One ActionInfo parameter.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ActionParameter {
    /// Parameter name.
    pub name: String,
    /// Whether the action requires it.
    #[serde(default)]
    pub required: bool,
    /// The values allowed, if restricted.
    #[serde(default)]
    pub allowable_values: Option<Vec<String>>,
}

impl ActionInfo {
    /// The parameter called `name`, if listed.
    pub fn parameter(&self, name: &str) -> Option<&ActionParameter> {
        self.parameters.iter().find(|p| p.name == name)
    }
}

/// `@Redfish.Settings`: where pending values live and what apply times are offered.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
pub struct SettingsInfo {
    /// The settings object (pending values; writes go here).
    #[serde(default)]
    pub settings_object: Option<Link>,
    /// `SupportedApplyTimes`, when advertised.
    #[serde(default)]
    pub supported_apply_times: Vec<String>,
    /// Messages about the last apply, such as `SettingsFailed` with `RelatedProperties`.
    #[serde(default)]
    pub messages: Vec<crate::error::ExtendedInfo>,
    /// When the settings were last applied.
    #[serde(default)]
    pub time: Option<String>,
}

/// Reads a link field (`{"@odata.id": …}`).
pub(crate) fn link_field(obj: &Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key)?.get("@odata.id")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    redfish_enum!(
        /// Test enum.
        Colour { Red, Green }
    );

    #[test]
    fn enums_keep_unknown_values() {
        let c: Colour = serde_json::from_str("\"Blue\"").expect("parse");
        assert_eq!(c, Colour::Other("Blue".into()));
        assert_eq!(serde_json::to_string(&Colour::Red).expect("ser"), "\"Red\"");
        assert_eq!(Colour::from("Green"), Colour::Green);
    }

    #[test]
    fn actions_inline_actioninfo_and_oem() {
        let actions: Map<String, Value> = serde_json::from_str(
            r##"{"#ComputerSystem.Reset":{"target":"/r","ResetType@Redfish.AllowableValues":["On","ForceOff"],
                 "@Redfish.ActionInfo":"/r/info"},
                "Oem":{"Hpe":{"#HpeiLOVirtualMedia.InsertVirtualMedia":{"target":"/oem/insert"}}}}"##,
        )
        .expect("json");
        let reset = ActionRef::find(Some(&actions), "#ComputerSystem.Reset").expect("reset");
        assert_eq!(reset.target, "/r");
        assert_eq!(
            reset.inline_allowable,
            vec![("ResetType".into(), vec!["On".into(), "ForceOff".into()])]
        );
        assert_eq!(reset.action_info.as_deref(), Some("/r/info"));
        let oem = ActionRef::find_oem(Some(&actions), "InsertVirtualMedia").expect("oem");
        assert_eq!(oem.target, "/oem/insert");
        assert!(ActionRef::find_oem(Some(&actions), "EjectVirtualMedia").is_none());
        assert!(ActionRef::find(None, "#ComputerSystem.Reset").is_none());
    }
}

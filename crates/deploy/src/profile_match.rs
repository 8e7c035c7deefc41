//! Which BIOS profiles apply to a server: a pure function of a profile's match rules and the facts the deploy
//! pre-flight gathered, from the operator's record of the server (its name, its vendor hint) and from what its
//! BMC reports (the ComputerSystem's `Manufacturer`, `Model` and `SKU`, the Bios resource's
//! `AttributeRegistry`).
//!
//! The comparisons follow what real BMCs report (iDRAC9, iLO 5, XCC and Supermicro X13):
//!
//! | key | compared with | how |
//! |---|---|---|
//! | `vendor` | the server's vendor hint | case-insensitive, exact |
//! | `name_prefix` | the server's name | a prefix, case-sensitive (names are lowercase already) |
//! | `manufacturer` | `Manufacturer` (`Dell Inc.`, `HPE`, `Lenovo`, `Supermicro`) | case-insensitive, exact |
//! | `model` | `Model` (`PowerEdge R750`, `ThinkSystem SR670 V2`) | case-insensitive prefix, so a family (`ProLiant DL385 Gen10`) matches its variants (`… Plus v2`) |
//! | `sku` | `SKU` (`7Z23CTO1WW`, `P38411-B21`) | case-insensitive, exact: a SKU has no hierarchy |
//! | `attribute_registry` | the Bios `AttributeRegistry` | case-insensitive; a rule without a version matches every version |
//!
//! Registry names are a stem and a version after the first dot, written differently by each vendor:
//! `BiosAttributeRegistry.v1_0_3` (iDRAC), `BiosAttributeRegistryA42.v1_2_60` (iLO, whose stem names the ROM
//! family), `BiosAttributeRegistry.1.0.0` (XCC), `BiosAttributeRegistry.v1_0_0` (X13). A firmware update changes
//! the version, not what the profile's attributes mean, so a rule naming the stem alone (`BiosAttributeRegistryA42`)
//! matches them all, while a rule with a version (`BiosAttributeRegistry.v1_0_3`) pins one. A prefix would be
//! wrong here: `BiosAttributeRegistry` is a prefix of every vendor's name.
//!
//! Every rule of a profile must hold; a profile without rules applies to every server. A fact the BMC does not
//! report (a ComputerSystem without `SKU`, a BMC without a Bios resource) matches no rule on it: the profile then
//! simply does not apply, it is not an error.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a server's BIOS profiles were matched on: the server's record and its BMC's reports at pre-flight. Kept on
/// the deployment's plan, so the matched profiles can be explained after the catalog or the BMC changed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ServerFacts {
    /// The server's name.
    pub name: String,
    /// The operator's vendor hint.
    pub vendor_hint: Option<String>,
    /// The ComputerSystem's `Manufacturer`.
    pub manufacturer: Option<String>,
    /// The ComputerSystem's `Model`.
    pub model: Option<String>,
    /// The ComputerSystem's `SKU`.
    pub sku: Option<String>,
    /// The Bios resource's `AttributeRegistry`; `None` without a Bios resource.
    pub attribute_registry: Option<String>,
}

impl std::fmt::Display for ServerFacts {
    /// `s1 (vendor hint "dell", manufacturer "Dell Inc.", model "PowerEdge R750", no SKU, attribute registry
    /// "BiosAttributeRegistry.v1_0_3")`: what an operator needs to write a rule that matches.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (", self.name)?;
        for (i, (what, fact)) in [
            ("vendor hint", &self.vendor_hint),
            ("manufacturer", &self.manufacturer),
            ("model", &self.model),
            ("SKU", &self.sku),
            ("attribute registry", &self.attribute_registry),
        ]
        .into_iter()
        .enumerate()
        {
            let sep = if i == 0 { "" } else { ", " };
            match fact {
                Some(v) => write!(f, "{sep}{what} {v:?}")?,
                None => write!(f, "{sep}no {what}")?,
            }
        }
        write!(f, ")")
    }
}

/// A BIOS profile's `match_rules`, as stored: every key given must hold.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MatchRules {
    /// The server's vendor hint, case-insensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = false, pattern = r"\S", example = "dell")]
    pub vendor: Option<String>,
    /// A prefix of the server's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = false, pattern = r"\S", example = "rack1-")]
    pub name_prefix: Option<String>,
    /// The BMC's ComputerSystem `Manufacturer`, case-insensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = false, pattern = r"\S", example = "Dell Inc.")]
    pub manufacturer: Option<String>,
    /// A prefix of the BMC's ComputerSystem `Model`, case-insensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = false, pattern = r"\S", example = "PowerEdge R750")]
    pub model: Option<String>,
    /// The BMC's ComputerSystem `SKU`, case-insensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = false, pattern = r"\S", example = "7Z23CTO1WW")]
    pub sku: Option<String>,
    /// The Bios resource's `AttributeRegistry`, case-insensitive; without a version (nothing after the first
    /// dot) it matches every version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = false, pattern = r"\S", example = "BiosAttributeRegistryA42")]
    pub attribute_registry: Option<String>,
}

impl MatchRules {
    /// The keys `match_rules` may hold.
    pub const KEYS: [&'static str; 6] = [
        "vendor",
        "name_prefix",
        "manufacturer",
        "model",
        "sku",
        "attribute_registry",
    ];

    /// Whether every rule holds for `facts`.
    pub fn matches(&self, facts: &ServerFacts) -> bool {
        let reported = |fact: &Option<String>, rule: &Option<String>, test: fn(&str, &str) -> bool| match rule
        {
            None => true,
            Some(rule) => fact.as_deref().is_some_and(|fact| test(fact, rule)),
        };
        let name = Some(facts.name.clone());
        reported(&facts.vendor_hint, &self.vendor, eq_ignore_case)
            && reported(&name, &self.name_prefix, |name, prefix| name.starts_with(prefix))
            && reported(&facts.manufacturer, &self.manufacturer, eq_ignore_case)
            && reported(&facts.model, &self.model, prefix_ignore_case)
            && reported(&facts.sku, &self.sku, eq_ignore_case)
            && reported(
                &facts.attribute_registry,
                &self.attribute_registry,
                registry_matches,
            )
    }
}

fn eq_ignore_case(fact: &str, rule: &str) -> bool {
    fact.trim().eq_ignore_ascii_case(rule.trim())
}

fn prefix_ignore_case(fact: &str, rule: &str) -> bool {
    let (fact, rule) = (fact.trim(), rule.trim());
    fact.get(..rule.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(rule))
}

/// `rule` names `reported`: the same name, or the same stem when the rule carries no version.
fn registry_matches(reported: &str, rule: &str) -> bool {
    let (reported, rule) = (reported.trim(), rule.trim());
    if rule.contains('.') {
        return reported.eq_ignore_ascii_case(rule);
    }
    let stem = reported.split_once('.').map_or(reported, |(stem, _)| stem);
    stem.eq_ignore_ascii_case(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the captured BMCs report (iDRAC9 R750, iLO 5 DL385, XCC SR670 V2, X13 SYS-821GE), named by vendor.
    fn captured(vendor: &str) -> ServerFacts {
        let (manufacturer, model, sku, registry) = match vendor {
            "dell" => (
                "Dell Inc.",
                "PowerEdge R750",
                "F54P1G3",
                "BiosAttributeRegistry.v1_0_3",
            ),
            "hpe" => (
                "HPE",
                "ProLiant DL385 Gen10 Plus v2",
                "P38411-B21",
                "BiosAttributeRegistryA42.v1_2_60",
            ),
            "lenovo" => (
                "Lenovo",
                "ThinkSystem SR670 V2",
                "7Z23CTO1WW",
                "BiosAttributeRegistry.1.0.0",
            ),
            "supermicro" => (
                "Supermicro",
                "SYS-821GE-TNHR",
                "0x1D1415D9",
                "BiosAttributeRegistry.v1_0_0",
            ),
            other => panic!("no capture of {other}"),
        };
        ServerFacts {
            name: format!("rack1-{vendor}"),
            vendor_hint: Some(vendor.to_owned()),
            manufacturer: Some(manufacturer.to_owned()),
            model: Some(model.to_owned()),
            sku: Some(sku.to_owned()),
            attribute_registry: Some(registry.to_owned()),
        }
    }

    fn rules(json: &str) -> MatchRules {
        serde_json::from_str(json).expect("match rules")
    }

    #[test]
    fn rules_match_what_the_bmc_reports_and_the_operators_hints() {
        let bare = |name: &str| ServerFacts {
            name: name.to_owned(),
            ..ServerFacts::default()
        };
        let cases: &[(&str, ServerFacts, &str, bool)] = &[
            ("no rules match every server", bare("s1"), "{}", true),
            (
                "manufacturer alone",
                captured("dell"),
                r#"{"manufacturer":"Dell Inc."}"#,
                true,
            ),
            (
                "manufacturer, any case",
                captured("dell"),
                r#"{"manufacturer":"dell inc."}"#,
                true,
            ),
            (
                "manufacturer is exact",
                captured("dell"),
                r#"{"manufacturer":"Dell"}"#,
                false,
            ),
            (
                "another manufacturer",
                captured("hpe"),
                r#"{"manufacturer":"Dell Inc."}"#,
                false,
            ),
            (
                "model family prefix",
                captured("hpe"),
                r#"{"model":"ProLiant DL385 Gen10"}"#,
                true,
            ),
            (
                "model, any case",
                captured("lenovo"),
                r#"{"model":"thinksystem sr670 v2"}"#,
                true,
            ),
            (
                "wrong model",
                captured("dell"),
                r#"{"model":"PowerEdge R650"}"#,
                false,
            ),
            (
                "right manufacturer, wrong model",
                captured("dell"),
                r#"{"manufacturer":"Dell Inc.","model":"PowerEdge R650"}"#,
                false,
            ),
            ("sku exact", captured("lenovo"), r#"{"sku":"7z23cto1ww"}"#, true),
            (
                "sku is not a prefix",
                captured("lenovo"),
                r#"{"sku":"7Z23"}"#,
                false,
            ),
            (
                "registry with its version",
                captured("dell"),
                r#"{"attribute_registry":"BiosAttributeRegistry.v1_0_3"}"#,
                true,
            ),
            (
                "registry, another version",
                captured("dell"),
                r#"{"attribute_registry":"BiosAttributeRegistry.v1_0_0"}"#,
                false,
            ),
            (
                "registry stem, any version",
                captured("hpe"),
                r#"{"attribute_registry":"BiosAttributeRegistryA42"}"#,
                true,
            ),
            (
                "registry stem, XCC's dotted version",
                captured("lenovo"),
                r#"{"attribute_registry":"BiosAttributeRegistry"}"#,
                true,
            ),
            (
                "registry stem is not a prefix",
                captured("hpe"),
                r#"{"attribute_registry":"BiosAttributeRegistry"}"#,
                false,
            ),
            (
                "registry, another ROM family",
                captured("hpe"),
                r#"{"attribute_registry":"BiosAttributeRegistryU30"}"#,
                false,
            ),
            (
                "vendor hint, any case",
                captured("dell"),
                r#"{"vendor":"DELL"}"#,
                true,
            ),
            (
                "another vendor hint",
                captured("dell"),
                r#"{"vendor":"hpe"}"#,
                false,
            ),
            (
                "name prefix",
                captured("dell"),
                r#"{"name_prefix":"rack1-"}"#,
                true,
            ),
            (
                "name prefix is case-sensitive",
                captured("dell"),
                r#"{"name_prefix":"RACK1-"}"#,
                false,
            ),
            (
                "hint and BMC fact together",
                captured("supermicro"),
                r#"{"vendor":"supermicro","manufacturer":"Supermicro","name_prefix":"rack1-"}"#,
                true,
            ),
            ("no vendor hint", bare("s1"), r#"{"vendor":"dell"}"#, false),
            (
                "no manufacturer reported",
                bare("s1"),
                r#"{"manufacturer":"Dell Inc."}"#,
                false,
            ),
            (
                "no SKU reported",
                ServerFacts {
                    sku: None,
                    ..captured("dell")
                },
                r#"{"sku":"F54P1G3"}"#,
                false,
            ),
            (
                "no Bios resource",
                ServerFacts {
                    attribute_registry: None,
                    ..captured("dell")
                },
                r#"{"attribute_registry":"BiosAttributeRegistry"}"#,
                false,
            ),
        ];
        for (what, facts, json, want) in cases {
            assert_eq!(
                rules(json).matches(facts),
                *want,
                "{what}: {json} against {facts:?}"
            );
        }
    }

    #[test]
    fn facts_read_as_what_a_rule_would_name() {
        let facts = ServerFacts {
            sku: None,
            ..captured("dell")
        };
        assert_eq!(
            facts.to_string(),
            r#"rack1-dell (vendor hint "dell", manufacturer "Dell Inc.", model "PowerEdge R750", no SKU, attribute registry "BiosAttributeRegistry.v1_0_3")"#
        );
    }

    #[test]
    fn unknown_keys_do_not_parse() {
        assert!(serde_json::from_str::<MatchRules>(r#"{"colour":"red"}"#).is_err());
        for key in MatchRules::KEYS {
            let json = format!(r#"{{"{key}":"x"}}"#);
            assert!(serde_json::from_str::<MatchRules>(&json).is_ok(), "{key}");
        }
    }

    #[test]
    fn rules_serialize_only_the_keys_given() {
        let r = rules(r#"{"manufacturer":"HPE"}"#);
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"manufacturer":"HPE"}"#);
    }
}

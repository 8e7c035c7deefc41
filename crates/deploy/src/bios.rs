//! The two BIOS passes: which of them still have something to apply, and what to stage.
//!
//! Firmware rejects an attribute whose prerequisite is merely staged, so a profile splits such
//! attributes into a deferred second pass, applied once the first pass is in effect.

use std::collections::BTreeMap;

use crate::facts::{AttrValue, BiosFacts};

/// Whether every wanted attribute is in effect.
///
/// An attribute the BMC does not report at all counts as not applied: not being able to tell
/// has to run the pass, never skip it.
pub fn applied(wanted: &BTreeMap<String, AttrValue>, facts: Option<&BiosFacts>) -> bool {
    match facts {
        None => wanted.is_empty(),
        Some(f) => wanted
            .iter()
            .all(|(name, value)| f.current.get(name) == Some(value)),
    }
}

/// The attributes that are neither in effect nor staged with the wanted value already, so a
/// re-issued apply does not re-stage what the BMC holds (some BMCs reject a second PATCH while a
/// settings apply is pending).
pub fn to_stage(wanted: &BTreeMap<String, AttrValue>, facts: Option<&BiosFacts>) -> Vec<(String, AttrValue)> {
    wanted
        .iter()
        .filter(|(name, value)| match facts {
            None => true,
            Some(f) => f.current.get(*name) != Some(value) && f.pending.get(*name) != Some(value),
        })
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, AttrValue)]) -> BTreeMap<String, AttrValue> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    fn on() -> AttrValue {
        AttrValue::Text("Enabled".into())
    }
    fn off() -> AttrValue {
        AttrValue::Text("Disabled".into())
    }

    #[test]
    fn applied_cases() {
        let wanted = attrs(&[("SecureBoot", on()), ("Cores", AttrValue::Int(8))]);
        let all = BiosFacts {
            current: wanted.clone(),
            pending: BTreeMap::new(),
        };
        let wrong = BiosFacts {
            current: attrs(&[("SecureBoot", off()), ("Cores", AttrValue::Int(8))]),
            ..all.clone()
        };
        let missing = BiosFacts {
            current: attrs(&[("Cores", AttrValue::Int(8))]),
            ..all.clone()
        };
        let cases: [(&str, Option<&BiosFacts>, bool); 4] = [
            ("all match", Some(&all), true),
            ("one differs", Some(&wrong), false),
            ("one not reported keeps the pass pending", Some(&missing), false),
            ("no facts at all", None, false),
        ];
        for (name, facts, want) in cases {
            assert_eq!(applied(&wanted, facts), want, "{name}");
        }
        assert!(
            applied(&BTreeMap::new(), None),
            "nothing wanted is always applied"
        );
    }

    #[test]
    fn stages_only_what_is_not_pending() {
        let wanted = attrs(&[("A", on()), ("B", AttrValue::Bool(true))]);
        let facts = BiosFacts {
            current: BTreeMap::new(),
            pending: attrs(&[("A", on()), ("B", AttrValue::Bool(false))]),
        };
        assert_eq!(
            to_stage(&wanted, Some(&facts)),
            vec![("B".to_owned(), AttrValue::Bool(true))]
        );
        let in_effect = BiosFacts {
            current: attrs(&[("B", AttrValue::Bool(true))]),
            pending: BTreeMap::new(),
        };
        assert_eq!(to_stage(&wanted, Some(&in_effect)), vec![("A".to_owned(), on())]);
        assert_eq!(to_stage(&wanted, None).len(), 2);
    }
}

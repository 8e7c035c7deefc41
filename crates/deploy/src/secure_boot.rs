//! Judging the UEFI key databases one by one.
//!
//! A database that is correct already is left untouched, so a correct KEK survives a dbx that
//! has to be rewritten; one that cannot be read is reinitialised, since what cannot be told
//! apart cannot be trusted.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::facts::{Fingerprint, KeyDb};
use crate::record::SecureBootPlan;

/// What to do with one key database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DbPlan {
    /// Holds the IncusOS certificates plus allowed entries and nothing else.
    Correct,
    /// Delete every entry not in `keep`, then enroll `enroll` (entries already present are
    /// skipped by the worker; a delete answered 404/410 is done).
    Reinitialise {
        keep: Vec<Fingerprint>,
        enroll: Vec<Fingerprint>,
    },
}

/// Judges one database against the plan. `present` is `None` where the database could not be read.
pub fn judge(db: KeyDb, present: Option<&[Fingerprint]>, plan: &SecureBootPlan) -> DbPlan {
    let empty = BTreeSet::new();
    let incusos = plan.incusos.get(&db).unwrap_or(&empty);
    let allow = plan.allow.get(&db).unwrap_or(&empty);
    match present {
        None => DbPlan::Reinitialise {
            keep: allow.union(incusos).cloned().collect(),
            enroll: incusos.iter().cloned().collect(),
        },
        Some(present) => {
            let present: BTreeSet<&Fingerprint> = present.iter().collect();
            let has_all = incusos.iter().all(|f| present.contains(f));
            let nothing_else = present.iter().all(|f| incusos.contains(*f) || allow.contains(*f));
            if has_all && nothing_else {
                return DbPlan::Correct;
            }
            DbPlan::Reinitialise {
                keep: present
                    .iter()
                    .filter(|f| incusos.contains(**f) || allow.contains(**f))
                    .map(|f| (*f).clone())
                    .collect(),
                enroll: incusos.iter().filter(|f| !present.contains(f)).cloned().collect(),
            }
        }
    }
}

/// The databases that need writing; empty when all four are correct.
pub fn plan_enrollment(
    key_dbs: &BTreeMap<KeyDb, Vec<Fingerprint>>,
    plan: &SecureBootPlan,
) -> Vec<(KeyDb, DbPlan)> {
    KeyDb::ALL
        .iter()
        .map(|db| (*db, judge(*db, key_dbs.get(db).map(Vec::as_slice), plan)))
        .filter(|(_, p)| *p != DbPlan::Correct)
        .collect()
}

/// One profile's `secure_boot` section: `true` keeps an entry, `false` drops it, `null` undoes
/// what lower-priority layers said and falls back to the built-in list.
pub type AllowOverrides = BTreeMap<KeyDb, BTreeMap<Fingerprint, Option<bool>>>;

/// Layers profile allow lists (lowest priority first) over the built-in ones, which keep the
/// CAs most option ROMs are signed with.
pub fn layer_allow_lists(
    builtin: &BTreeMap<KeyDb, BTreeSet<Fingerprint>>,
    profiles: &[AllowOverrides],
) -> BTreeMap<KeyDb, BTreeSet<Fingerprint>> {
    let mut out = builtin.clone();
    for profile in profiles {
        for (db, entries) in profile {
            for (fp, verdict) in entries {
                let keep = match verdict {
                    Some(keep) => *keep,
                    None => builtin.get(db).is_some_and(|b| b.contains(fp)),
                };
                let set = out.entry(*db).or_default();
                if keep {
                    set.insert(fp.clone());
                } else {
                    set.remove(fp);
                }
            }
        }
    }
    out.retain(|_, set| !set.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(s: &str) -> Fingerprint {
        Fingerprint(s.to_owned())
    }
    fn set(items: &[&str]) -> BTreeSet<Fingerprint> {
        items.iter().map(|s| fp(s)).collect()
    }

    fn plan() -> SecureBootPlan {
        SecureBootPlan {
            incusos: [
                (KeyDb::PK, set(&["pk"])),
                (KeyDb::KEK, set(&["kek"])),
                (KeyDb::Db, set(&["db"])),
            ]
            .into(),
            allow: [(KeyDb::Db, set(&["msca"]))].into(),
        }
    }

    #[test]
    fn judge_cases() {
        let p = plan();
        let cases: Vec<(&str, KeyDb, Option<Vec<Fingerprint>>, DbPlan)> = vec![
            ("exact", KeyDb::KEK, Some(vec![fp("kek")]), DbPlan::Correct),
            (
                "plus allowed",
                KeyDb::Db,
                Some(vec![fp("db"), fp("msca")]),
                DbPlan::Correct,
            ),
            (
                "allowed entry absent is still correct",
                KeyDb::Db,
                Some(vec![fp("db")]),
                DbPlan::Correct,
            ),
            (
                "empty dbx with nothing wanted",
                KeyDb::Dbx,
                Some(vec![]),
                DbPlan::Correct,
            ),
            (
                "stranger present",
                KeyDb::Db,
                Some(vec![fp("db"), fp("msca"), fp("vendor")]),
                DbPlan::Reinitialise {
                    keep: vec![fp("db"), fp("msca")],
                    enroll: vec![],
                },
            ),
            (
                "ours missing",
                KeyDb::PK,
                Some(vec![fp("oldpk")]),
                DbPlan::Reinitialise {
                    keep: vec![],
                    enroll: vec![fp("pk")],
                },
            ),
            (
                "unreadable is reinitialised",
                KeyDb::Db,
                None,
                DbPlan::Reinitialise {
                    keep: vec![fp("db"), fp("msca")],
                    enroll: vec![fp("db")],
                },
            ),
        ];
        for (name, db, present, want) in cases {
            assert_eq!(judge(db, present.as_deref(), &p), want, "{name}");
        }
    }

    #[test]
    fn databases_are_judged_one_by_one() {
        let p = plan();
        let dbs: BTreeMap<KeyDb, Vec<Fingerprint>> = [
            (KeyDb::PK, vec![fp("pk")]),
            (KeyDb::KEK, vec![fp("kek")]),
            (KeyDb::Db, vec![fp("db")]),
            (KeyDb::Dbx, vec![fp("revoked-but-unknown")]),
        ]
        .into();
        let got = plan_enrollment(&dbs, &p);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, KeyDb::Dbx);
        let all_correct: BTreeMap<_, _> = dbs
            .into_iter()
            .filter(|(db, _)| *db != KeyDb::Dbx)
            .chain([(KeyDb::Dbx, vec![])])
            .collect();
        assert!(plan_enrollment(&all_correct, &p).is_empty());
    }

    #[test]
    fn layering() {
        let builtin: BTreeMap<KeyDb, BTreeSet<Fingerprint>> = [(KeyDb::Db, set(&["msca", "mswin"]))].into();
        let low: AllowOverrides = [(
            KeyDb::Db,
            [(fp("mswin"), Some(false)), (fp("vendor"), Some(true))].into(),
        )]
        .into();
        let high: AllowOverrides = [(KeyDb::Db, [(fp("mswin"), None), (fp("vendor"), None)].into())].into();
        assert_eq!(layer_allow_lists(&builtin, &[]), builtin);
        assert_eq!(
            layer_allow_lists(&builtin, std::slice::from_ref(&low))[&KeyDb::Db],
            set(&["msca", "vendor"])
        );
        assert_eq!(
            layer_allow_lists(&builtin, &[low, high])[&KeyDb::Db],
            set(&["msca", "mswin"])
        );
        let kek: AllowOverrides = [(KeyDb::KEK, [(fp("x"), Some(false))].into())].into();
        assert!(!layer_allow_lists(&builtin, &[kek]).contains_key(&KeyDb::KEK));
    }
}

//! Judging the UEFI key databases one by one.
//!
//! A database that is correct already is left untouched, so a correct KEK survives a dbx that
//! has to be rewritten; one that cannot be read is reinitialised, since what cannot be told
//! apart cannot be trusted. Every rewrite is planned from [`IncusosKeys`], which cannot be empty
//! for PK, KEK or db, and comes out as an [`Enrollment`], which only this module makes: so a
//! rewrite that would leave a database without its IncusOS certificates cannot be asked for.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::certificates::{CertificateError, CertificateSet, IncusosKeys, builtin_allow_lists};
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

/// Judges one database against the IncusOS keys and the layered allow lists. `present` is `None`
/// where the database could not be read.
pub fn judge(
    db: KeyDb,
    present: Option<&[Fingerprint]>,
    incusos: &IncusosKeys,
    allow: &BTreeMap<KeyDb, BTreeSet<Fingerprint>>,
) -> DbPlan {
    let empty = BTreeSet::new();
    let incusos = incusos.get(db);
    let allow = allow.get(&db).unwrap_or(&empty);
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

/// The key databases to rewrite, with the IncusOS keys they were planned from.
///
/// Only [`plan_enrollment`] makes one (deserialising re-checks its rule): every rewrite keeps or
/// enrolls each IncusOS certificate of its database, and PK, KEK and db have at least one. So
/// the worker, which takes nothing else, cannot be asked to empty PK, KEK or db.
///
/// ```compile_fail
/// use racklift_deploy::secure_boot::{DbPlan, Enrollment};
/// use racklift_deploy::facts::KeyDb;
/// // Private fields: a wipe of PK with nothing to enroll cannot be written down.
/// let wipe = Enrollment { dbs: vec![(KeyDb::PK, DbPlan::Reinitialise { keep: vec![], enroll: vec![] })] };
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "EnrollmentParts")]
pub struct Enrollment {
    incusos: IncusosKeys,
    /// `Reinitialise` plans only, in `KeyDb` order.
    dbs: Vec<(KeyDb, DbPlan)>,
}

#[derive(Deserialize)]
struct EnrollmentParts {
    incusos: IncusosKeys,
    dbs: Vec<(KeyDb, DbPlan)>,
}

/// A deserialised [`Enrollment`] that would drop an IncusOS certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the rewrite of {db:?} neither keeps nor enrolls IncusOS certificate {}", .fingerprint.0)]
pub struct EnrollmentError {
    pub db: KeyDb,
    pub fingerprint: Fingerprint,
}

impl TryFrom<EnrollmentParts> for Enrollment {
    type Error = EnrollmentError;

    fn try_from(parts: EnrollmentParts) -> Result<Self, Self::Error> {
        for (db, plan) in &parts.dbs {
            if let DbPlan::Reinitialise { keep, enroll } = plan
                && let Some(missing) = parts
                    .incusos
                    .get(*db)
                    .iter()
                    .find(|f| !keep.contains(f) && !enroll.contains(f))
            {
                return Err(EnrollmentError {
                    db: *db,
                    fingerprint: missing.clone(),
                });
            }
        }
        Ok(Enrollment {
            incusos: parts.incusos,
            dbs: parts
                .dbs
                .into_iter()
                .filter(|(_, p)| *p != DbPlan::Correct)
                .collect(),
        })
    }
}

impl Enrollment {
    /// The databases to rewrite; the correct ones are absent.
    pub fn dbs(&self) -> &[(KeyDb, DbPlan)] {
        &self.dbs
    }

    pub fn is_empty(&self) -> bool {
        self.dbs.is_empty()
    }

    /// The IncusOS keys the rewrites were planned from.
    pub fn incusos(&self) -> &IncusosKeys {
        &self.incusos
    }
}

/// The databases that need writing; empty when all four are correct.
pub fn plan_enrollment(
    key_dbs: &BTreeMap<KeyDb, Vec<Fingerprint>>,
    incusos: &IncusosKeys,
    allow: &BTreeMap<KeyDb, BTreeSet<Fingerprint>>,
) -> Enrollment {
    let dbs = KeyDb::ALL
        .iter()
        .map(|db| {
            (
                *db,
                judge(*db, key_dbs.get(db).map(Vec::as_slice), incusos, allow),
            )
        })
        .filter(|(_, p)| *p != DbPlan::Correct)
        .collect();
    Enrollment {
        incusos: incusos.clone(),
        dbs,
    }
}

impl SecureBootPlan {
    /// What a deployment snapshots: the fingerprints of `certificates` (the shipped IncusOS set
    /// in production) and the profiles' allow lists (lowest priority first) layered over the
    /// built-in one.
    pub fn new(certificates: &CertificateSet, profiles: &[AllowOverrides]) -> SecureBootPlan {
        SecureBootPlan {
            incusos: certificates.keys().to_map(),
            allow: layer_allow_lists(&builtin_allow_lists(), profiles),
        }
    }

    /// The IncusOS keys, refused when the snapshot has none for PK, KEK or db (a plan written
    /// past the API, or stored before the certificates were shipped).
    pub fn incusos_keys(&self) -> Result<IncusosKeys, CertificateError> {
        IncusosKeys::try_from(&self.incusos)
    }
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

    fn keys(p: &SecureBootPlan) -> IncusosKeys {
        p.incusos_keys().expect("the fixture has PK, KEK and db")
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
            assert_eq!(judge(db, present.as_deref(), &keys(&p), &p.allow), want, "{name}");
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
        let got = plan_enrollment(&dbs, &keys(&p), &p.allow);
        assert_eq!(got.dbs().len(), 1);
        assert_eq!(got.dbs()[0].0, KeyDb::Dbx);
        let all_correct: BTreeMap<_, _> = dbs
            .into_iter()
            .filter(|(db, _)| *db != KeyDb::Dbx)
            .chain([(KeyDb::Dbx, vec![])])
            .collect();
        assert!(plan_enrollment(&all_correct, &keys(&p), &p.allow).is_empty());
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

    /// What can be built: a plan from a certificate set (never an empty one), an enrolment from
    /// a plan's keys; an empty snapshot and a forged rewrite are refused.
    #[test]
    fn enrolments_come_only_from_complete_keys() {
        let shipped = CertificateSet::incusos();
        let plan = SecureBootPlan::new(&shipped, &[]);
        assert_eq!(plan.allow, builtin_allow_lists());
        let keys = plan.incusos_keys().expect("the shipped set");
        assert_eq!(keys, shipped.keys());

        // A snapshot without certificates (stored before they were shipped) cannot plan anything.
        let empty = SecureBootPlan::default();
        assert_eq!(
            empty.incusos_keys(),
            Err(CertificateError::EmptyDatabase(KeyDb::PK))
        );

        // Blank BMC: every IncusOS certificate is enrolled, nothing is dropped.
        let blank: BTreeMap<KeyDb, Vec<Fingerprint>> =
            KeyDb::ALL.iter().map(|db| (*db, Vec::new())).collect();
        let e = plan_enrollment(&blank, &keys, &plan.allow);
        let written: Vec<KeyDb> = e.dbs().iter().map(|(db, _)| *db).collect();
        assert_eq!(
            written,
            [KeyDb::PK, KeyDb::KEK, KeyDb::Db],
            "an empty dbx is correct"
        );
        for (db, p) in e.dbs() {
            let DbPlan::Reinitialise { enroll, .. } = p else {
                panic!("{db:?}: {p:?}")
            };
            assert_eq!(
                enroll.iter().collect::<BTreeSet<_>>(),
                keys.get(*db).iter().collect()
            );
        }

        // The wire form is checked again on the way in.
        let json = serde_json::to_value(&e).expect("json");
        assert_eq!(serde_json::from_value::<Enrollment>(json.clone()).ok(), Some(e));
        let mut forged = json.clone();
        forged["dbs"] = serde_json::json!([["PK", {"Reinitialise": {"keep": [], "enroll": []}}]]);
        assert!(serde_json::from_value::<Enrollment>(forged).is_err());
        let mut no_keys = json;
        no_keys["incusos"] = serde_json::json!({});
        assert!(serde_json::from_value::<Enrollment>(no_keys).is_err());
    }
}

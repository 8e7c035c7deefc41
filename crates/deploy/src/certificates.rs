//! The certificates a deployment enrols and the ones it keeps, shipped in the binary.
//!
//! Rewriting a key database with nothing to put back is the one secure boot mistake that bricks
//! hardware: a db without the Microsoft UEFI CA no longer runs the option ROMs of most NICs and
//! storage controllers, and a PK, KEK or db without the IncusOS certificates does not boot IncusOS.
//! So the IncusOS set is a [`CertificateSet`], which cannot be built with an empty PK, KEK or db,
//! and the fingerprints a plan snapshots are only usable for an enrolment as [`IncusosKeys`], which
//! carries the same guarantee. dbx is the exception on purpose: IncusOS has revoked no signing key
//! yet, so its set is empty, and dbx keeps only what the BIOS profiles allow.
//!
//! The PEM files live in `certs/` beside this crate's manifest; their provenance is in its README.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::facts::{Fingerprint, KeyDb};

/// A certificate compiled into the binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shipped {
    /// The file name under `certs/`, without `.pem`.
    pub name: &'static str,
    pub db: KeyDb,
    pub pem: &'static str,
}

macro_rules! shipped {
    ($db:expr, $name:literal) => {
        Shipped {
            name: $name,
            db: $db,
            pem: include_str!(concat!("../certs/", $name, ".pem")),
        }
    };
}

/// The IncusOS certificates: what a deployment enrols.
pub const INCUSOS: [Shipped; 4] = [
    shipped!(KeyDb::PK, "incusos-secureboot-PK-R1"),
    shipped!(KeyDb::KEK, "incusos-secureboot-KEK-R1"),
    shipped!(KeyDb::Db, "incusos-secureboot-DB-2025-R1"),
    shipped!(KeyDb::Db, "incusos-secureboot-DB-2026-R1"),
];

/// The built-in allow list: the Microsoft CAs most option ROMs and third-party loaders are signed
/// with, and the KEKs that let Microsoft sign db/dbx updates. The BIOS profiles layer over it.
pub const BUILTIN_ALLOWED: [Shipped; 5] = [
    shipped!(KeyDb::KEK, "microsoft-kek-ca-2011"),
    shipped!(KeyDb::KEK, "microsoft-kek-2k-ca-2023"),
    shipped!(KeyDb::Db, "microsoft-uefi-ca-2011"),
    shipped!(KeyDb::Db, "microsoft-uefi-ca-2023"),
    shipped!(KeyDb::Db, "microsoft-option-rom-uefi-ca-2023"),
];

/// SHA-256 of the certificate's DER, lower-case hex: what `openssl x509 -fingerprint -sha256`
/// shows an operator writing an allow list. A body that is not valid base64 (a test's stand-in)
/// is hashed as text, so it still has a stable identity. The one fingerprint function of
/// racklift: the plan, the worker's reading of a BMC and its enrolment all compare through it.
pub fn fingerprint_pem(pem: &str) -> Fingerprint {
    let body = pem_body(pem);
    let bytes = base64_decode(&body).unwrap_or_else(|| body.clone().into_bytes());
    Fingerprint(format!("{:x}", Sha256::digest(&bytes)))
}

fn pem_body(pem: &str) -> String {
    pem.lines()
        .filter(|l| !l.starts_with("-----"))
        .flat_map(|l| l.chars())
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// Standard base64, padded or not; `None` on anything else.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(text.trim_end_matches('='))
        .ok()
}

/// Why a certificate set or a key set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CertificateError {
    /// PK, KEK and db must each receive at least one IncusOS certificate.
    #[error("no IncusOS certificate for {0:?}: rewriting it would leave it without one")]
    EmptyDatabase(KeyDb),
    #[error("certificate {name:?} is not one PEM-encoded X.509 certificate")]
    NotPem { name: String },
}

/// One certificate to enrol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    name: String,
    pem: String,
    fingerprint: Fingerprint,
}

impl Certificate {
    /// Checks the armour and that the body is DER (an ASN.1 SEQUENCE), so a BMC never gets asked
    /// to enrol something it would refuse after the database has been emptied.
    fn parse(name: &str, pem: &str) -> Result<Certificate, CertificateError> {
        let not_pem = || CertificateError::NotPem {
            name: name.to_owned(),
        };
        let armoured = pem.matches("-----BEGIN CERTIFICATE-----").count() == 1
            && pem.trim_end().ends_with("-----END CERTIFICATE-----");
        let der = base64_decode(&pem_body(pem)).ok_or_else(not_pem)?;
        if !armoured || der.first() != Some(&0x30) || der.len() < 64 {
            return Err(not_pem());
        }
        Ok(Certificate {
            name: name.to_owned(),
            pem: pem.to_owned(),
            fingerprint: fingerprint_pem(pem),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pem(&self) -> &str {
        &self.pem
    }

    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }
}

/// The IncusOS certificates with their PEMs, per database: what a worker enrols from.
///
/// Only [`CertificateSet::incusos`] (the shipped set) and [`CertificateSet::from_pems`] (a
/// validated list) make one, and both refuse an empty PK, KEK or db; there is no `Default`.
///
/// ```compile_fail
/// // The fields are private: an empty set cannot be written down.
/// let empty = racklift_deploy::certificates::CertificateSet { by_db: Default::default() };
/// ```
///
/// ```compile_fail
/// let empty: racklift_deploy::certificates::CertificateSet = Default::default();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateSet {
    by_db: BTreeMap<KeyDb, Vec<Certificate>>,
}

impl CertificateSet {
    /// The certificates shipped in the binary ([`INCUSOS`]).
    pub fn incusos() -> CertificateSet {
        CertificateSet::from_pems(INCUSOS.iter().map(|c| (c.db, c.name, c.pem))).expect(
            "the shipped IncusOS certificates are complete and valid (checked by this module's tests)",
        )
    }

    /// A set from `(database, name, PEM)` entries; PK, KEK and db need one each at least, dbx may
    /// have none. A certificate listed twice for one database is kept once.
    pub fn from_pems<'a>(
        entries: impl IntoIterator<Item = (KeyDb, &'a str, &'a str)>,
    ) -> Result<CertificateSet, CertificateError> {
        let mut by_db: BTreeMap<KeyDb, Vec<Certificate>> = BTreeMap::new();
        for (db, name, pem) in entries {
            let cert = Certificate::parse(name, pem)?;
            let certs = by_db.entry(db).or_default();
            if !certs.iter().any(|c| c.fingerprint == cert.fingerprint) {
                certs.push(cert);
            }
        }
        for db in IncusosKeys::REQUIRED {
            if by_db.get(&db).is_none_or(Vec::is_empty) {
                return Err(CertificateError::EmptyDatabase(db));
            }
        }
        Ok(CertificateSet { by_db })
    }

    /// The certificates of one database (none for dbx today).
    pub fn certificates(&self, db: KeyDb) -> &[Certificate] {
        self.by_db.get(&db).map(Vec::as_slice).unwrap_or_default()
    }

    /// The PEM of the certificate with this fingerprint, in whichever database it is.
    pub fn pem(&self, fingerprint: &Fingerprint) -> Option<&str> {
        self.by_db
            .values()
            .flatten()
            .find(|c| &c.fingerprint == fingerprint)
            .map(|c| c.pem.as_str())
    }

    /// The fingerprints a plan snapshots.
    pub fn keys(&self) -> IncusosKeys {
        IncusosKeys(
            self.by_db
                .iter()
                .map(|(db, certs)| (*db, certs.iter().map(|c| c.fingerprint.clone()).collect()))
                .collect(),
        )
    }
}

/// The fingerprints of the IncusOS certificates each database must hold, with PK, KEK and db
/// each non-empty: the only form in which [`crate::secure_boot::judge`] takes them, so no
/// enrolment can be planned from an empty set. Deserialising checks the same rule.
///
/// ```compile_fail
/// let empty = racklift_deploy::certificates::IncusosKeys(Default::default());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    try_from = "BTreeMap<KeyDb, BTreeSet<Fingerprint>>",
    into = "BTreeMap<KeyDb, BTreeSet<Fingerprint>>"
)]
pub struct IncusosKeys(BTreeMap<KeyDb, BTreeSet<Fingerprint>>);

impl IncusosKeys {
    /// The databases that must receive at least one IncusOS certificate. dbx is not among them:
    /// IncusOS has no revoked signing key yet.
    pub const REQUIRED: [KeyDb; 3] = [KeyDb::PK, KeyDb::KEK, KeyDb::Db];

    /// The fingerprints `db` must hold (empty for dbx today).
    pub fn get(&self, db: KeyDb) -> &BTreeSet<Fingerprint> {
        static EMPTY: BTreeSet<Fingerprint> = BTreeSet::new();
        self.0.get(&db).unwrap_or(&EMPTY)
    }

    /// The plain map, as a plan stores it.
    pub fn to_map(&self) -> BTreeMap<KeyDb, BTreeSet<Fingerprint>> {
        self.0.clone()
    }
}

impl TryFrom<BTreeMap<KeyDb, BTreeSet<Fingerprint>>> for IncusosKeys {
    type Error = CertificateError;

    fn try_from(mut map: BTreeMap<KeyDb, BTreeSet<Fingerprint>>) -> Result<Self, Self::Error> {
        for db in Self::REQUIRED {
            if map.get(&db).is_none_or(BTreeSet::is_empty) {
                return Err(CertificateError::EmptyDatabase(db));
            }
        }
        map.retain(|_, set| !set.is_empty());
        Ok(IncusosKeys(map))
    }
}

impl TryFrom<&BTreeMap<KeyDb, BTreeSet<Fingerprint>>> for IncusosKeys {
    type Error = CertificateError;

    fn try_from(map: &BTreeMap<KeyDb, BTreeSet<Fingerprint>>) -> Result<Self, Self::Error> {
        IncusosKeys::try_from(map.clone())
    }
}

impl From<IncusosKeys> for BTreeMap<KeyDb, BTreeSet<Fingerprint>> {
    fn from(keys: IncusosKeys) -> Self {
        keys.0
    }
}

/// The built-in allow lists by fingerprint ([`BUILTIN_ALLOWED`]); dbx has none.
pub fn builtin_allow_lists() -> BTreeMap<KeyDb, BTreeSet<Fingerprint>> {
    let mut out: BTreeMap<KeyDb, BTreeSet<Fingerprint>> = BTreeMap::new();
    for c in BUILTIN_ALLOWED {
        out.entry(c.db).or_default().insert(fingerprint_pem(c.pem));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fingerprints `openssl x509 -noout -fingerprint -sha256` prints for the shipped files.
    const OPENSSL: [(&str, &str); 9] = [
        (
            "incusos-secureboot-PK-R1",
            "26dce4dbb3de2d72bd16ae91a85cfeda84535317d3ee77e0d4b2d65e714cf111",
        ),
        (
            "incusos-secureboot-KEK-R1",
            "9a42866f496834bde7e1b26a862b1e1b6dea7b78b91a948aecfc4e6ef79ea6c1",
        ),
        (
            "incusos-secureboot-DB-2025-R1",
            "21b6f423cf80fe6c436dfea0683460312f276debe2a14285bfdc22da2d00fc20",
        ),
        (
            "incusos-secureboot-DB-2026-R1",
            "2243c49fcf6f84fe670f100ecafa801389dc207536cb9ca87aa2c062ddebfde5",
        ),
        (
            "microsoft-kek-ca-2011",
            "a1117f516a32cefcba3f2d1ace10a87972fd6bbe8fe0d0b996e09e65d802a503",
        ),
        (
            "microsoft-kek-2k-ca-2023",
            "3cd3f0309edae228767a976dd40d9f4affc4fbd5218f2e8cc3c9dd97e8ac6f9d",
        ),
        (
            "microsoft-uefi-ca-2011",
            "48e99b991f57fc52f76149599bff0a58c47154229b9f8d603ac40d3500248507",
        ),
        (
            "microsoft-uefi-ca-2023",
            "f6124e34125bee3fe6d79a574eaa7b91c0e7bd9d929c1a321178efd611dad901",
        ),
        (
            "microsoft-option-rom-uefi-ca-2023",
            "e5be3e64c6e66a281457ecdece0d6d0787577aad2a3a0144262c10c14ba8d8f1",
        ),
    ];

    #[test]
    fn shipped_fingerprints_match_openssl() {
        let shipped: BTreeMap<&str, &str> = INCUSOS
            .iter()
            .chain(&BUILTIN_ALLOWED)
            .map(|c| (c.name, c.pem))
            .collect();
        assert_eq!(shipped.len(), OPENSSL.len());
        for (name, want) in OPENSSL {
            assert_eq!(fingerprint_pem(shipped[name]).0, want, "{name}");
        }
    }

    #[test]
    fn the_shipped_set_fills_pk_kek_and_db_and_leaves_dbx_empty() {
        let set = CertificateSet::incusos();
        let names = |db| -> Vec<&str> { set.certificates(db).iter().map(Certificate::name).collect() };
        assert_eq!(names(KeyDb::PK), ["incusos-secureboot-PK-R1"]);
        assert_eq!(names(KeyDb::KEK), ["incusos-secureboot-KEK-R1"]);
        assert_eq!(
            names(KeyDb::Db),
            ["incusos-secureboot-DB-2025-R1", "incusos-secureboot-DB-2026-R1"]
        );
        assert!(names(KeyDb::Dbx).is_empty(), "IncusOS has revoked nothing yet");
        let keys = set.keys();
        assert!(keys.get(KeyDb::Dbx).is_empty());
        for c in INCUSOS {
            assert_eq!(set.pem(&fingerprint_pem(c.pem)), Some(c.pem), "{}", c.name);
        }
    }

    #[test]
    fn the_builtin_allow_list_is_the_microsoft_cas_and_nothing_windows_only() {
        let allow = builtin_allow_lists();
        let fp = |name: &str| -> Fingerprint {
            let c = BUILTIN_ALLOWED.iter().find(|c| c.name == name).expect(name);
            fingerprint_pem(c.pem)
        };
        assert_eq!(
            allow[&KeyDb::Db],
            [
                fp("microsoft-uefi-ca-2011"),
                fp("microsoft-uefi-ca-2023"),
                fp("microsoft-option-rom-uefi-ca-2023")
            ]
            .into()
        );
        assert_eq!(
            allow[&KeyDb::KEK],
            [fp("microsoft-kek-ca-2011"), fp("microsoft-kek-2k-ca-2023")].into()
        );
        assert!(!allow.contains_key(&KeyDb::PK) && !allow.contains_key(&KeyDb::Dbx));
        // Microsoft Windows Production PCA 2011: Windows boot only, so a wipe removes it.
        let windows_pca = "e8e95f0733a55e8bad7be0a1413ee23c51fcea64b3c8fa6a786935fddcc71961";
        assert!(allow.values().flatten().all(|f| f.0 != windows_pca));
    }

    /// Every way to build a set or a key set, and what each gives: the empty cases are refused.
    #[test]
    fn only_complete_sets_can_be_built() {
        let pem = |name: &str| INCUSOS.iter().find(|c| c.name == name).expect(name).pem;
        let (pk, kek, db) = (
            pem("incusos-secureboot-PK-R1"),
            pem("incusos-secureboot-KEK-R1"),
            pem("incusos-secureboot-DB-2025-R1"),
        );
        let two = format!("{pk}{kek}");
        type Entries<'a> = Vec<(KeyDb, &'a str, &'a str)>;
        let cases: Vec<(&str, Entries, Result<(), CertificateError>)> = vec![
            ("nothing", vec![], Err(CertificateError::EmptyDatabase(KeyDb::PK))),
            (
                "no PK",
                vec![(KeyDb::KEK, "kek", kek), (KeyDb::Db, "db", db)],
                Err(CertificateError::EmptyDatabase(KeyDb::PK)),
            ),
            (
                "no KEK",
                vec![(KeyDb::PK, "pk", pk), (KeyDb::Db, "db", db)],
                Err(CertificateError::EmptyDatabase(KeyDb::KEK)),
            ),
            (
                "no db, a dbx instead",
                vec![
                    (KeyDb::PK, "pk", pk),
                    (KeyDb::KEK, "kek", kek),
                    (KeyDb::Dbx, "x", db),
                ],
                Err(CertificateError::EmptyDatabase(KeyDb::Db)),
            ),
            (
                "a stand-in that is no certificate",
                vec![(
                    KeyDb::PK,
                    "fake",
                    "-----BEGIN CERTIFICATE-----\nT3Vycw\n-----END CERTIFICATE-----\n",
                )],
                Err(CertificateError::NotPem { name: "fake".into() }),
            ),
            (
                "two certificates in one entry",
                vec![(KeyDb::PK, "two", &two)],
                Err(CertificateError::NotPem { name: "two".into() }),
            ),
            (
                "complete, dbx empty",
                vec![
                    (KeyDb::PK, "pk", pk),
                    (KeyDb::KEK, "kek", kek),
                    (KeyDb::Db, "db", db),
                ],
                Ok(()),
            ),
        ];
        for (name, entries, want) in cases {
            assert_eq!(CertificateSet::from_pems(entries).map(drop), want, "{name}");
        }

        let fp = |s: &str| Fingerprint(s.to_owned());
        let keys = |dbs: &[(KeyDb, &str)]| -> BTreeMap<KeyDb, BTreeSet<Fingerprint>> {
            let mut map: BTreeMap<KeyDb, BTreeSet<Fingerprint>> = BTreeMap::new();
            for (db, f) in dbs {
                map.entry(*db).or_default().insert(fp(f));
            }
            map
        };
        let mut with_empty_kek = keys(&[(KeyDb::PK, "p"), (KeyDb::Db, "d")]);
        with_empty_kek.insert(KeyDb::KEK, BTreeSet::new());
        let key_cases = [
            (
                "empty",
                BTreeMap::new(),
                Err(CertificateError::EmptyDatabase(KeyDb::PK)),
            ),
            (
                "empty KEK",
                with_empty_kek,
                Err(CertificateError::EmptyDatabase(KeyDb::KEK)),
            ),
            (
                "dbx alone",
                keys(&[(KeyDb::Dbx, "x")]),
                Err(CertificateError::EmptyDatabase(KeyDb::PK)),
            ),
            (
                "complete",
                keys(&[(KeyDb::PK, "p"), (KeyDb::KEK, "k"), (KeyDb::Db, "d")]),
                Ok(()),
            ),
        ];
        for (name, map, want) in key_cases {
            assert_eq!(IncusosKeys::try_from(&map).map(drop), want, "{name}");
            let json = serde_json::to_value(&map).expect("json");
            assert_eq!(
                serde_json::from_value::<IncusosKeys>(json).is_ok(),
                want.is_ok(),
                "{name}: deserialising checks the same rule"
            );
        }
    }

    #[test]
    fn fingerprints_hash_the_der() {
        // SHA-256 of the DER ("hello"), as `openssl x509 -fingerprint -sha256` shows it.
        let pem = "-----BEGIN CERTIFICATE-----\naGVs\nbG8=\n-----END CERTIFICATE-----\n";
        assert_eq!(
            fingerprint_pem(pem).0,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(base64_decode("aGVsbG8"), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("a?b"), None);
    }
}

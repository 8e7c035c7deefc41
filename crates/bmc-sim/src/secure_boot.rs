//! Secure-boot state: mode, enable flag and the UEFI key databases with their certificate and
//! signature entries. Key changes are remembered so the next POST can self-reboot.

use serde::Serialize;

/// The databases, in the order they are listed.
pub const DATABASES: [&str; 8] = [
    "PK",
    "KEK",
    "db",
    "dbx",
    "PKDefault",
    "KEKDefault",
    "dbDefault",
    "dbxDefault",
];

/// A certificate entry (PEM as given; the simulator does not parse it).
#[derive(Clone, Debug, Serialize)]
pub struct CertEntry {
    pub id: u64,
    pub pem: String,
    pub owner: String,
}

/// A signature (hash) entry.
#[derive(Clone, Debug, Serialize)]
pub struct SigEntry {
    pub id: u64,
    pub hash_hex: String,
    pub owner: String,
}

/// One key database.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Database {
    pub certs: Vec<CertEntry>,
    pub sigs: Vec<SigEntry>,
}

/// The secure-boot state of a machine.
#[derive(Clone, Debug, Serialize)]
pub struct SecureBoot {
    pub enable: bool,
    pub mode: &'static str,
    pub dbs: Vec<Database>,
    pub next_id: u64,
    /// Keys changed since the last boot: the firmware picks them up (and may reboot) at POST.
    pub keys_changed: bool,
}

/// Owner GUID of the vendor's own entries (its PK) and of entries enrolled through Redfish.
pub const VENDOR_OWNER: &str = "5d1a9c0e-7c1b-4f7a-9a43-52c0a8b1e6f2";

/// `SignatureOwner` of Microsoft's entries (the GUID Microsoft publishes for its signatures).
pub const MICROSOFT_OWNER: &str = "77fa9abd-0359-4d32-bd60-28f4e78f784b";

/// Microsoft Corporation KEK CA 2011: in KEK of nearly every server sold.
pub const MICROSOFT_KEK_CA_2011: &str = include_str!("../certs/microsoft-kek-ca-2011.pem");
/// Microsoft Corporation UEFI CA 2011: signs third-party option ROMs and loaders.
pub const MICROSOFT_UEFI_CA_2011: &str = include_str!("../certs/microsoft-uefi-ca-2011.pem");
/// Microsoft Windows Production PCA 2011: signs the Windows boot manager only.
pub const MICROSOFT_WINDOWS_PCA_2011: &str =
    include_str!("../certs/microsoft-windows-production-pca-2011.pem");

/// A revoked-hash entry of the factory dbx.
const FACTORY_DBX_HASH: &str = "80b4d96931bf0d02fd91a61e19d14f1da452e66db2408ca8604d411f92659f0a";

/// Why the firmware refused a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not one PEM-armoured DER certificate.
    NotACertificate,
    /// PK holds one key; the current one must be deleted first.
    PkOccupied,
}

/// A PEM certificate the firmware can parse: one armoured block whose body is DER (an ASN.1
/// SEQUENCE). A real BMC refuses anything else, so the simulator does too.
fn parses(pem: &str) -> bool {
    use base64::Engine;
    let body: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .flat_map(|l| l.chars())
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(body.trim_end_matches('='))
        .unwrap_or_default();
    pem.matches("-----BEGIN CERTIFICATE-----").count() == 1 && der.first() == Some(&0x30) && der.len() > 64
}

impl SecureBoot {
    /// Factory state: the vendor's `platform_key` in PK, the Microsoft KEK CA 2011 in KEK, the
    /// Microsoft UEFI CA 2011 and the Windows Production PCA 2011 in db, one revoked hash in dbx,
    /// and the same in the `*Default` databases. In setup mode PK is empty.
    pub fn new(mode: &'static str, platform_key: &'static str) -> SecureBoot {
        let mut sb = SecureBoot {
            enable: mode != "SetupMode",
            mode,
            dbs: vec![Database::default(); DATABASES.len()],
            next_id: 1,
            keys_changed: false,
        };
        for (i, name) in DATABASES.iter().enumerate() {
            let base = name.trim_end_matches("Default");
            let certs: &[(&str, &str)] = match base {
                "PK" => &[(platform_key, VENDOR_OWNER)],
                "KEK" => &[(MICROSOFT_KEK_CA_2011, MICROSOFT_OWNER)],
                "db" => &[
                    (MICROSOFT_UEFI_CA_2011, MICROSOFT_OWNER),
                    (MICROSOFT_WINDOWS_PCA_2011, MICROSOFT_OWNER),
                ],
                _ => &[],
            };
            for (pem, owner) in certs {
                let id = sb.take_id();
                sb.dbs[i].certs.push(CertEntry {
                    id,
                    pem: (*pem).to_owned(),
                    owner: (*owner).to_owned(),
                });
            }
            if base == "dbx" {
                let id = sb.take_id();
                sb.dbs[i].sigs.push(SigEntry {
                    id,
                    hash_hex: FACTORY_DBX_HASH.to_owned(),
                    owner: MICROSOFT_OWNER.to_owned(),
                });
            }
        }
        if mode == "SetupMode" {
            sb.dbs[0].certs.clear();
        }
        sb
    }

    /// Setup mode exactly while PK is empty (UEFI 2.x): enrolling a PK leaves it for user mode,
    /// deleting it enters it. `SecureBootEnable` is the operator's setting and stays as it is;
    /// `SecureBootCurrentBoot` follows from both.
    fn follow_pk(&mut self) {
        let pk_empty = self.dbs[0].certs.is_empty();
        if pk_empty {
            self.mode = "SetupMode";
        } else if self.mode == "SetupMode" {
            self.mode = "UserMode";
        }
    }

    fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id - 1
    }

    /// Add a certificate; returns its id.
    pub fn add_cert(&mut self, db: usize, pem: String) -> Result<u64, Refusal> {
        if !parses(&pem) {
            return Err(Refusal::NotACertificate);
        }
        if db == 0 && !self.dbs[0].certs.is_empty() {
            return Err(Refusal::PkOccupied);
        }
        let id = self.take_id();
        self.dbs[db].certs.push(CertEntry {
            id,
            pem,
            owner: VENDOR_OWNER.to_owned(),
        });
        self.keys_changed = true;
        if db == 0 {
            self.follow_pk();
        }
        Ok(id)
    }

    /// Delete an entry (certificate or signature); false when absent.
    pub fn delete(&mut self, db: usize, id: u64, sig: bool) -> bool {
        let before = self.dbs[db].certs.len() + self.dbs[db].sigs.len();
        if sig {
            self.dbs[db].sigs.retain(|s| s.id != id);
        } else {
            self.dbs[db].certs.retain(|c| c.id != id);
        }
        let changed = before != self.dbs[db].certs.len() + self.dbs[db].sigs.len();
        self.keys_changed |= changed;
        if db == 0 {
            self.follow_pk();
        }
        changed
    }

    /// `SecureBoot.ResetKeys` (and the per-database variant with `only`).
    pub fn reset_keys(&mut self, kind: &str, only: Option<usize>) -> bool {
        let targets: Vec<usize> = match (kind, only) {
            (_, Some(db)) => vec![db],
            ("ResetAllKeysToDefault" | "DeleteAllKeys", None) => vec![0, 1, 2, 3],
            ("DeletePK" | "ResetPK", None) => vec![0],
            ("ResetKEK", None) => vec![1],
            ("ResetDB", None) => vec![2],
            ("ResetDBX", None) => vec![3],
            _ => return false,
        };
        for db in targets {
            if db >= 4 {
                continue;
            }
            if kind.starts_with("Delete") {
                self.dbs[db] = Database::default();
            } else {
                self.dbs[db] = self.dbs[db + 4].clone();
            }
        }
        self.keys_changed = true;
        self.mode = if self.dbs[0].certs.is_empty() {
            "SetupMode"
        } else {
            "UserMode"
        };
        if self.mode == "SetupMode" {
            self.enable = false;
        }
        true
    }
}

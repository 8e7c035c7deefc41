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

/// Owner GUID used for the factory entries.
pub const VENDOR_OWNER: &str = "77fa9abd-0359-4d32-bd60-28f4e78f784b";

fn fake_pem(label: &str) -> String {
    // Not a parseable certificate: a stand-in the client can fingerprint and compare.
    format!("-----BEGIN CERTIFICATE-----\nU0lNVUxBVEVE{label}\n-----END CERTIFICATE-----\n")
}

impl SecureBoot {
    pub fn new(mode: &'static str) -> SecureBoot {
        let mut sb = SecureBoot {
            enable: mode != "SetupMode",
            mode,
            dbs: vec![Database::default(); DATABASES.len()],
            next_id: 1,
            keys_changed: false,
        };
        for (i, name) in DATABASES.iter().enumerate() {
            let base = name.trim_end_matches("Default");
            let labels: &[&str] = match base {
                "PK" => &["PlatformKey"],
                "KEK" => &["MicrosoftKEKCA2011"],
                "db" => &["MicrosoftWindowsPCA2011", "MicrosoftUEFICA2011"],
                _ => &[],
            };
            for label in labels {
                let id = sb.take_id();
                sb.dbs[i].certs.push(CertEntry {
                    id,
                    pem: fake_pem(label),
                    owner: VENDOR_OWNER.to_owned(),
                });
            }
            if base == "dbx" {
                let id = sb.take_id();
                sb.dbs[i].sigs.push(SigEntry {
                    id,
                    hash_hex: "80b4d96931bf0d02fd91a61e19d14f1da452e66db2408ca8604d411f92659f0a".to_owned(),
                    owner: VENDOR_OWNER.to_owned(),
                });
            }
        }
        if mode == "SetupMode" {
            sb.dbs[0].certs.clear();
        }
        sb
    }

    fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id - 1
    }

    /// Add a certificate; returns its id.
    pub fn add_cert(&mut self, db: usize, pem: String) -> u64 {
        let id = self.take_id();
        self.dbs[db].certs.push(CertEntry {
            id,
            pem,
            owner: VENDOR_OWNER.to_owned(),
        });
        self.keys_changed = true;
        id
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

//! Secure boot: mode, key databases (PK, KEK, db, dbx) with their certificates and
//! signatures, ResetKeys, enrolment and deletion.
//!
//! The decisions (which entries to keep, in which order to handle databases) belong to the
//! deployment; this module only reads and writes faithfully. HPE and Lenovo expose no
//! `SecureBootDatabases` link, which reads as an empty list rather than an error, so the
//! caller can choose the operator-enrolment path.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::client::{BmcClient, Idempotency};
use crate::error::{Error, Result};
use crate::model::{ActionRef, Collection, Link, link_field, redfish_enum};
use crate::task::TaskMonitor;

redfish_enum!(
    /// `SecureBootMode`.
    SecureBootMode { SetupMode, UserMode, AuditMode, DeployedMode }
);

redfish_enum!(
    /// `ResetKeysType` (Dell adds `ResetPK`, `ResetKEK`, `ResetDB`, `ResetDBX`).
    ResetKeysType { ResetAllKeysToDefault, DeleteAllKeys, DeletePK, ResetPK, ResetKEK, ResetDB, ResetDBX }
);

/// The SecureBoot resource.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SecureBoot {
    /// The resource URI.
    #[serde(rename = "@odata.id", default)]
    pub odata_id: String,
    /// `SecureBootEnable`.
    #[serde(default)]
    pub secure_boot_enable: Option<bool>,
    /// `SecureBootCurrentBoot` (`Enabled`/`Disabled`).
    #[serde(default)]
    pub secure_boot_current_boot: Option<String>,
    /// `SecureBootMode`.
    #[serde(default)]
    pub secure_boot_mode: Option<SecureBootMode>,
    /// `SecureBootDatabases` link; absent on HPE iLO and Lenovo XCC.
    #[serde(default)]
    pub secure_boot_databases: Option<Link>,
    /// `Actions`.
    #[serde(default)]
    pub actions: Option<Map<String, Value>>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One certificate of a key database.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeyCertificate {
    /// The entry URI (DELETE it to remove the entry).
    #[serde(rename = "@odata.id", default)]
    pub odata_id: String,
    /// PEM text.
    #[serde(default)]
    pub certificate_string: Option<String>,
    /// `PEM`, `PKCS7`, ….
    #[serde(default)]
    pub certificate_type: Option<String>,
    /// `UefiSignatureOwner` GUID.
    #[serde(default)]
    pub uefi_signature_owner: Option<String>,
}

/// One signature (hash) entry of a key database.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeySignature {
    /// The entry URI.
    #[serde(rename = "@odata.id", default)]
    pub odata_id: String,
    /// Hex signature data.
    #[serde(default)]
    pub signature_string: Option<String>,
    /// For example `EFI_CERT_SHA256_GUID`.
    #[serde(default)]
    pub signature_type: Option<String>,
    /// `UefiSignatureOwner` GUID.
    #[serde(default)]
    pub uefi_signature_owner: Option<String>,
}

/// A key database with its entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyDatabase {
    /// `DatabaseId` (else `Id`): `PK`, `KEK`, `db`, `dbx`.
    pub database_id: String,
    /// The database URI.
    pub odata_id: String,
    /// The Certificates collection URI (POST enrols there).
    pub certificates_uri: Option<String>,
    /// Certificates.
    pub certificates: Vec<KeyCertificate>,
    /// Signatures.
    pub signatures: Vec<KeySignature>,
}

/// What [`BmcClient::key_database_access`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyDatabaseAccess {
    /// SecureBoot has no `SecureBootDatabases` link (HPE iLO, Lenovo XCC): the key databases
    /// cannot be read or written through Redfish.
    NoDatabasesLink,
    /// The PK, KEK, db and dbx resources the collection lists (the `*Default` ones left out).
    Listed(Vec<ListedDatabase>),
}

/// One key database of the collection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedDatabase {
    /// `DatabaseId` (else `Id`, else `Name`).
    pub database_id: String,
    /// It links a `Certificates` collection, which is where a certificate is enrolled.
    pub certificates: bool,
}

/// A key database's name: `DatabaseId`, else `Id`, else `Name` (empty when it has none of them).
pub(crate) fn database_id(db: &Map<String, Value>) -> String {
    ["DatabaseId", "Id", "Name"]
        .iter()
        .find_map(|k| db.get(*k).and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned()
}

/// The databases the deployment manages; the `*Default` ones are read-only references.
const DATABASES: [&str; 4] = ["PK", "KEK", "db", "dbx"];

impl BmcClient {
    /// Reads the SecureBoot resource.
    pub async fn read_secure_boot(&self) -> Result<SecureBoot> {
        self.within("read_secure_boot", self.secure_boot()).await
    }

    /// Reads PK, KEK, db and dbx with their certificates and signatures. Empty when the BMC
    /// has no `SecureBootDatabases` link.
    pub async fn read_key_databases(&self) -> Result<Vec<KeyDatabase>> {
        self.within("read_key_databases", self.key_databases()).await
    }

    async fn key_databases(&self) -> Result<Vec<KeyDatabase>> {
        let sb = self.secure_boot().await?;
        let Some(link) = sb.secure_boot_databases else {
            return Ok(Vec::new());
        };
        let collection: Collection = self.get_json(&link.odata_id).await?;
        let mut out = Vec::new();
        for member in collection.members {
            let db: Map<String, Value> = self.get_json(&member.odata_id).await?;
            let id = database_id(&db);
            if !DATABASES.contains(&id.as_str()) {
                continue;
            }
            let certificates_uri = link_field(&db, "Certificates");
            let certificates = match &certificates_uri {
                Some(uri) => self.members::<KeyCertificate>(uri).await?,
                None => Vec::new(),
            };
            let signatures = match link_field(&db, "Signatures") {
                Some(uri) => self.members::<KeySignature>(&uri).await?,
                None => Vec::new(),
            };
            out.push(KeyDatabase {
                database_id: id,
                odata_id: member.odata_id,
                certificates_uri,
                certificates,
                signatures,
            });
        }
        Ok(out)
    }

    /// What the BMC lets Redfish do with the key databases, from the SecureBoot resource and the
    /// database resources alone (none of their entries): cheap enough for a pre-flight check.
    /// `Error::Unsupported` when the system has no SecureBoot resource at all.
    pub async fn key_database_access(&self) -> Result<KeyDatabaseAccess> {
        self.within("key_database_access", async {
            let sb = self.secure_boot().await?;
            let Some(link) = sb.secure_boot_databases else {
                return Ok(KeyDatabaseAccess::NoDatabasesLink);
            };
            let collection: Collection = self.get_json(&link.odata_id).await?;
            let mut listed = Vec::new();
            for member in collection.members {
                let db: Map<String, Value> = self.get_json(&member.odata_id).await?;
                let id = database_id(&db);
                if DATABASES.contains(&id.as_str()) {
                    listed.push(ListedDatabase {
                        certificates: link_field(&db, "Certificates").is_some(),
                        database_id: id,
                    });
                }
            }
            Ok(KeyDatabaseAccess::Listed(listed))
        })
        .await
    }

    /// Sends `#SecureBoot.ResetKeys` with `kind`, checked against advertised values.
    pub async fn reset_keys(&self, kind: ResetKeysType) -> Result<Option<TaskMonitor>> {
        self.within("reset_keys", async {
            let sb = self.secure_boot().await?;
            let action = ActionRef::find(sb.actions.as_ref(), "#SecureBoot.ResetKeys").ok_or_else(|| {
                Error::Unsupported {
                    what: "#SecureBoot.ResetKeys action".into(),
                }
            })?;
            if let Some(allowed) = self.allowable(&action, "ResetKeysType").await?
                && !allowed.iter().any(|a| a == kind.as_str())
            {
                return Err(Error::Unsupported {
                    what: format!("ResetKeysType {kind} (advertised: {})", allowed.join(", ")),
                });
            }
            let reply = self
                .post(
                    &action.target,
                    &json!({ "ResetKeysType": kind.as_str() }),
                    Idempotency::Idempotent,
                )
                .await?;
            Ok(TaskMonitor::from_reply(&reply))
        })
        .await
    }

    /// Enrols a PEM certificate into the key database `database_id` (`KEK`, `db`, `dbx`).
    /// Returns the new entry's URI when the BMC sends `Location`. Not retried in-process:
    /// a repeated POST would enrol the certificate twice.
    pub async fn enroll_certificate(&self, database_id: &str, pem: &str) -> Result<Option<String>> {
        self.within("enroll_certificate", async {
            let databases = self.key_databases().await?;
            let db = databases
                .iter()
                .find(|d| d.database_id == database_id)
                .ok_or_else(|| Error::Unsupported {
                    what: format!("key database {database_id}"),
                })?;
            let uri = db.certificates_uri.as_ref().ok_or_else(|| Error::Unsupported {
                what: format!("certificates of key database {database_id}"),
            })?;
            let body = json!({ "CertificateString": pem, "CertificateType": "PEM" });
            let reply = self.post(uri, &body, Idempotency::Once).await?;
            Ok(reply.location)
        })
        .await
    }

    /// Deletes a certificate or signature entry; 404 and 410 count as deleted, so a replay is
    /// safe.
    pub async fn delete_key_entry(&self, entry_uri: &str) -> Result<()> {
        self.within("delete_key_entry", async {
            match self.delete(entry_uri).await {
                Ok(_) => Ok(()),
                Err(e) if matches!(e.status(), Some(404 | 410)) => Ok(()),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// PATCHes `SecureBootEnable`.
    pub async fn set_secure_boot_enable(&self, enable: bool) -> Result<()> {
        self.within("set_secure_boot_enable", async {
            let sb = self.secure_boot().await?;
            if sb.secure_boot_enable == Some(enable) {
                return Ok(());
            }
            self.patch(&sb.odata_id, &json!({ "SecureBootEnable": enable }), None)
                .await
                .map(|_| ())
        })
        .await
    }

    async fn secure_boot(&self) -> Result<SecureBoot> {
        let system = self.system().await?;
        let link = system.secure_boot.ok_or_else(|| Error::Unsupported {
            what: "SecureBoot resource".into(),
        })?;
        let mut sb: SecureBoot = self.get_json(&link.odata_id).await?;
        if sb.odata_id.is_empty() {
            sb.odata_id = link.odata_id;
        }
        Ok(sb)
    }

    /// GETs a collection and each member (members may be expanded inline on some BMCs).
    async fn members<T: serde::de::DeserializeOwned>(&self, uri: &str) -> Result<Vec<T>> {
        let collection: Collection = self.get_json(uri).await?;
        let mut out = Vec::with_capacity(collection.members.len());
        for member in collection.members {
            out.push(self.get_json(&member.odata_id).await?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_secure_boot_without_databases() {
        let sb: SecureBoot = serde_json::from_str(
            r##"{"@odata.id":"/redfish/v1/Systems/1/SecureBoot","SecureBootEnable":false,
                "SecureBootCurrentBoot":"Disabled","SecureBootMode":"DeployedMode",
                "Actions":{"#SecureBoot.ResetKeys":{"target":"/redfish/v1/Systems/1/SecureBoot/Actions/SecureBoot.ResetKeys"}}}"##,
        )
        .expect("sb");
        assert_eq!(sb.secure_boot_mode, Some(SecureBootMode::DeployedMode));
        assert!(sb.secure_boot_databases.is_none());
        assert!(ActionRef::find(sb.actions.as_ref(), "#SecureBoot.ResetKeys").is_some());
    }
}

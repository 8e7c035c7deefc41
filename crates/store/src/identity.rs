//! racklift's client identity (`client_identity`, migration 0012): one certificate and key per installation,
//! shared by every API and worker instance through the database. It is what a registering IncusOS server is
//! handed (and adds to Incus's trusted certificates), and what racklift presents to that server's Incus API.

use crate::{Store, StoreError};

/// The certificate (PEM) and its private key (PEM). The key is left out of `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    pub certificate_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("certificate_pem", &self.certificate_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The common name of the identity's certificate: what an Incus server lists it as.
pub const CLIENT_IDENTITY_NAME: &str = "racklift";

impl ClientIdentity {
    /// A new self-signed client certificate (ECDSA P-256, for TLS client authentication, valid until rcgen's
    /// far end of 4096: nothing renews it, and a server trusts it by fingerprint, not by its dates).
    pub fn generate() -> Result<ClientIdentity, rcgen::Error> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, CLIENT_IDENTITY_NAME);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate()?;
        let certificate = params.self_signed(&key)?;
        Ok(ClientIdentity {
            certificate_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl Store {
    /// The installation's client identity, generated and stored by the first caller. Several instances asking
    /// at once each generate one, one insert wins (`ON CONFLICT DO NOTHING`), and all read back the winner's.
    pub async fn client_identity(&self) -> Result<ClientIdentity, StoreError> {
        if let Some(identity) = self.stored_identity().await? {
            return Ok(identity);
        }
        let fresh = ClientIdentity::generate().map_err(StoreError::Identity)?;
        sqlx::query(
            "INSERT INTO client_identity (id, certificate_pem, key_pem) VALUES (true, $1, $2) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&fresh.certificate_pem)
        .bind(&fresh.key_pem)
        .execute(&self.pool)
        .await?;
        self.stored_identity().await?.ok_or(StoreError::NotFound {
            what: "client identity",
            name: CLIENT_IDENTITY_NAME.to_owned(),
        })
    }

    async fn stored_identity(&self) -> Result<Option<ClientIdentity>, StoreError> {
        let row: Option<(String, String)> =
            sqlx::query_as("SELECT certificate_pem, key_pem FROM client_identity WHERE id")
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(certificate_pem, key_pem)| ClientIdentity {
            certificate_pem,
            key_pem,
        }))
    }
}

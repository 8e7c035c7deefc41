//! Builds a Redfish client for a stored server: reads its password reference under the site's rules
//! ([`secrets`]) and applies the TLS policy. Its own crate below both the API (whose deploy pre-flight reads the
//! BMC as a worker would) and the workers, so the API does not depend on the job handlers, and the rules for
//! where a password may come from are in one place for both.

mod cache;
pub mod cluster_certificate;
pub mod incus;
pub mod secrets;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use racklift_redfish::{BmcClient, BmcConfig, Credentials, Pin, Secret, TlsMode};
use racklift_store::Server;

pub use cache::ClientCache;
pub use secrets::{SecretError, Secrets};

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("server {server} has no BMC configured (address, username and password reference)")]
    NotConfigured { server: String },
    /// The password reference was refused or could not be read; the source says which.
    #[error("server {server}: BMC password reference")]
    Password {
        server: String,
        #[source]
        source: SecretError,
    },
    #[error(
        "server {server}: BMC address {address:?} is plain http://, which would send the BMC password in the clear; \
         use https:// or set allow_plain_http on the server"
    )]
    PlainHttp { server: String, address: String },
    #[error("server {server}: certificate pin {pin:?} is not valid")]
    BadPin { server: String, pin: String },
    #[error("server {server}: Redfish client")]
    Client {
        server: String,
        #[source]
        source: Box<racklift_redfish::Error>,
    },
}

/// A site-wide setting of [`AccessPolicy`] that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("the BMC CA bundle {}", path.display())]
    CaBundle {
        path: PathBuf,
        #[source]
        source: Box<racklift_redfish::Error>,
    },
    #[error("reading the BMC CA bundle {}", path.display())]
    ReadCaBundle {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the secrets directory {}", path.display())]
    SecretsDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the secrets directory {} is not a directory", path.display())]
    SecretsDirNotADirectory { path: PathBuf },
    #[error(
        "the secret prefix {prefix:?} is not the start of a variable name (A-Z a-z 0-9 _, not empty, no __)"
    )]
    EnvPrefix { prefix: String },
}

/// Site-wide rules for reaching BMCs, from racklift.toml: which CAs sign their certificates (when a server has no
/// pin of its own), and where password references may point. The default is the compiled defaults: the public
/// roots, `/etc/racklift/secrets` and `RACKLIFT_SECRET_`.
#[derive(Clone, Debug, Default)]
pub struct AccessPolicy {
    ca_bundle: Option<Arc<Vec<u8>>>,
    secrets: Secrets,
}

impl AccessPolicy {
    /// Reads and checks the CA bundle at `ca_file`, and the secret rules. A secrets directory that does not exist
    /// is not an error here (it may be mounted later, and `racklift api` on a laptop has none): it is logged once,
    /// and `file:` references fail naming it until it exists. One that exists but cannot be used is an error.
    pub fn load(
        ca_file: Option<&Path>,
        secrets_dir: &Path,
        env_prefix: &str,
    ) -> Result<AccessPolicy, PolicyError> {
        let ca_bundle = match ca_file {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|source| PolicyError::ReadCaBundle {
                    path: path.to_owned(),
                    source,
                })?;
                TlsMode::CaBundlePem(pem.clone())
                    .check()
                    .map_err(|source| PolicyError::CaBundle {
                        path: path.to_owned(),
                        source: Box::new(source),
                    })?;
                Some(Arc::new(pem))
            }
            None => None,
        };
        let secrets = Secrets::new(secrets_dir, env_prefix).ok_or_else(|| PolicyError::EnvPrefix {
            prefix: env_prefix.to_owned(),
        })?;
        match std::fs::metadata(secrets_dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(PolicyError::SecretsDirNotADirectory {
                    path: secrets_dir.to_owned(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(
                    secrets_dir = %secrets_dir.display(),
                    "the secrets directory does not exist: file: BMC password references fail until it does"
                );
            }
            Err(source) => {
                return Err(PolicyError::SecretsDir {
                    path: secrets_dir.to_owned(),
                    source,
                });
            }
        }
        Ok(AccessPolicy { ca_bundle, secrets })
    }

    /// Where password references may point.
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// How a server without a pin (and not insecure) is verified.
    fn default_tls(&self) -> TlsMode {
        match &self.ca_bundle {
            Some(pem) => TlsMode::CaBundlePem(pem.as_ref().clone()),
            None => TlsMode::WebPkiRoots,
        }
    }
}

/// Refuses a plain `http://` BMC unless the server allows it, and logs every use of one that does: its password
/// crosses the network in the clear each time.
fn check_transport(server: &Server) -> Result<(), AccessError> {
    let plain = server
        .bmc_address
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"));
    if !plain {
        return Ok(());
    }
    if !server.allow_plain_http {
        return Err(AccessError::PlainHttp {
            server: server.name.clone(),
            address: server.bmc_address.clone(),
        });
    }
    tracing::warn!(
        server = %server.name,
        bmc_address = %server.bmc_address,
        "using a plain http:// BMC (allow_plain_http): its password crosses the network in the clear"
    );
    Ok(())
}

/// A client for the server's BMC with the given per-call deadline. The password is read now, off the runtime.
pub async fn client_for(
    server: &Server,
    call_deadline: Duration,
    policy: &AccessPolicy,
) -> Result<BmcClient, AccessError> {
    let password = password_for(server, policy).await?;
    build(server, password, call_deadline, policy)
}

/// The server's password, after the checks that must come before it is read: a BMC is configured, and its
/// transport does not send the password in the clear without consent. Rows written by an older version or by
/// hand are held to the same rules as what the API accepts today.
async fn password_for(server: &Server, policy: &AccessPolicy) -> Result<Secret, AccessError> {
    if !server.bmc_configured() {
        return Err(AccessError::NotConfigured {
            server: server.name.clone(),
        });
    }
    check_transport(server)?;
    let reference = server.bmc_password_ref.as_deref().unwrap_or_default();
    policy
        .secrets
        .resolve(reference)
        .await
        .map_err(|source| AccessError::Password {
            server: server.name.clone(),
            source,
        })
}

fn build(
    server: &Server,
    password: Secret,
    call_deadline: Duration,
    policy: &AccessPolicy,
) -> Result<BmcClient, AccessError> {
    let tls = if let Some(pin) = &server.bmc_cert_pin {
        let parsed: Pin = pin.parse().map_err(|_| AccessError::BadPin {
            server: server.name.clone(),
            pin: pin.clone(),
        })?;
        TlsMode::Pinned(vec![parsed])
    } else if server.bmc_insecure {
        TlsMode::InsecureNoVerify
    } else {
        policy.default_tls()
    };
    let mut config = BmcConfig::new(
        server.name.clone(),
        server.bmc_address.clone(),
        Credentials::new(server.bmc_username.clone(), password),
        tls,
    );
    config.call_deadline = call_deadline;
    config.vendor = server.vendor_hint.clone();
    config.system_path = server.system_id.clone();
    BmcClient::new(config).map_err(|source| AccessError::Client {
        server: server.name.clone(),
        source: Box::new(source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(address: &str, allow_plain_http: bool, reference: &str) -> Server {
        let now = chrono::Utc::now();
        Server {
            name: "s1".into(),
            bmc_address: address.into(),
            bmc_username: "root".into(),
            bmc_password_ref: Some(reference.into()),
            bmc_cert_pin: None,
            bmc_insecure: false,
            allow_plain_http,
            vendor_hint: None,
            system_id: None,
            status: racklift_store::ServerStatus::Unregistered,
            status_detail: String::new(),
            fence: 0,
            registered_at: None,
            created_at: now,
            updated_at: now,
        }
    }

    fn password_error(err: &AccessError) -> Option<&SecretError> {
        match err {
            AccessError::Password { source, .. } => Some(source),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_plain_http_bmc_is_refused_before_its_password_is_read() {
        let policy = AccessPolicy::default();
        let unset = "env:RACKLIFT_SECRET_TEST_BMC_PASSWORD_NOT_SET";
        let deadline = Duration::from_secs(1);
        let err = client_for(&server("http://10.0.0.1", false, unset), deadline, &policy)
            .await
            .unwrap_err();
        assert!(matches!(err, AccessError::PlainHttp { .. }), "{err}");
        assert!(err.to_string().contains("allow_plain_http"), "{err}");
        // With consent it gets as far as the password (not set here).
        for address in ["http://10.0.0.1", "https://10.0.0.1"] {
            let err = client_for(&server(address, true, unset), deadline, &policy)
                .await
                .unwrap_err();
            assert!(
                matches!(password_error(&err), Some(SecretError::EnvNotSet { .. })),
                "{address}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn a_stored_reference_outside_the_rules_is_refused_by_the_client_builder() {
        let policy = AccessPolicy::default();
        for reference in ["file:/etc/passwd", "file:../x", "env:DATABASE_URL", "hunter2"] {
            let err = client_for(
                &server("https://10.0.0.1", false, reference),
                Duration::from_secs(1),
                &policy,
            )
            .await
            .unwrap_err();
            let source = password_error(&err).unwrap_or_else(|| panic!("{reference}: {err}"));
            assert!(
                matches!(
                    source,
                    SecretError::BadForm { .. } | SecretError::EnvPrefix { .. }
                ),
                "{reference}: {source}"
            );
        }
    }

    #[test]
    fn a_ca_bundle_that_holds_no_certificate_fails_at_load() {
        let dir = std::env::temp_dir().join(format!("racklift-ca-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bmc-ca.pem");
        std::fs::write(&path, "not a certificate").unwrap();
        let load = |ca: &Path| AccessPolicy::load(Some(ca), &dir, secrets::DEFAULT_ENV_PREFIX);
        assert!(matches!(load(&path), Err(PolicyError::CaBundle { .. })));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(load(&path), Err(PolicyError::ReadCaBundle { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_secret_rules_load_without_a_directory_but_not_with_a_bad_one() {
        let base = std::env::temp_dir().join(format!("racklift-policy-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&base).unwrap();
        let file = base.join("a-file");
        std::fs::write(&file, "x").unwrap();
        let prefix = secrets::DEFAULT_ENV_PREFIX;
        let policy = AccessPolicy::load(None, &base.join("missing"), prefix).expect("a missing directory");
        assert_eq!(policy.secrets().dir(), base.join("missing"));
        assert!(matches!(
            AccessPolicy::load(None, &file, prefix),
            Err(PolicyError::SecretsDirNotADirectory { .. })
        ));
        assert!(matches!(
            AccessPolicy::load(None, &base, ""),
            Err(PolicyError::EnvPrefix { .. })
        ));
        std::fs::remove_dir_all(&base).unwrap();
    }
}

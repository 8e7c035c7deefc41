//! Builds a Redfish client for a stored server: resolves the password reference and the TLS policy. Shared by
//! the workers and the API's pre-flight reads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use racklift_redfish::{BmcClient, BmcConfig, Credentials, Pin, Secret, TlsMode};
use racklift_store::Server;

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("server {server} has no BMC configured (address, username and password reference)")]
    NotConfigured { server: String },
    #[error("server {server}: password reference {reference:?} is not of the form env:NAME or file:PATH")]
    BadReference { server: String, reference: String },
    #[error("server {server}: password reference {reference:?} could not be read")]
    Unreadable {
        server: String,
        reference: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "server {server}: BMC address {address:?} is plain http://, which would send the BMC password in the clear; \
         use https:// or set allow_plain_http on the server"
    )]
    PlainHttp { server: String, address: String },
    #[error("server {server}: password reference {reference:?} is outside the secrets directory {}", dir.display())]
    OutsideSecretsDir {
        server: String,
        reference: String,
        dir: PathBuf,
    },
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
}

/// Site-wide rules for reaching BMCs, from racklift.toml: which CAs sign their certificates (when a server has no
/// pin of its own), and where `file:` password references may point.
#[derive(Clone, Debug, Default)]
pub struct AccessPolicy {
    ca_bundle: Option<Arc<Vec<u8>>>,
    secrets_dir: Option<PathBuf>,
}

impl AccessPolicy {
    /// Reads and checks the CA bundle at `ca_file`, and resolves `secrets_dir` (which must exist).
    pub fn load(ca_file: Option<&Path>, secrets_dir: Option<&Path>) -> Result<AccessPolicy, PolicyError> {
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
        let secrets_dir = match secrets_dir {
            Some(dir) => Some(
                std::fs::canonicalize(dir).map_err(|source| PolicyError::SecretsDir {
                    path: dir.to_owned(),
                    source,
                })?,
            ),
            None => None,
        };
        Ok(AccessPolicy {
            ca_bundle,
            secrets_dir,
        })
    }

    /// The secrets directory `file:` references must stay inside, when one is set.
    pub fn secrets_dir(&self) -> Option<&Path> {
        self.secrets_dir.as_deref()
    }

    /// How a server without a pin (and not insecure) is verified.
    fn default_tls(&self) -> TlsMode {
        match &self.ca_bundle {
            Some(pem) => TlsMode::CaBundlePem(pem.as_ref().clone()),
            None => TlsMode::WebPkiRoots,
        }
    }

    /// Whether a `file:` reference stays inside the secrets directory (always, when none is set). Symbolic links
    /// are followed for a file that exists, so a link inside cannot point out; a file not created yet is judged
    /// by its path.
    pub fn allows_reference(&self, reference: &str) -> bool {
        let (Some(dir), Some(("file", path))) = (&self.secrets_dir, reference.split_once(':')) else {
            return true;
        };
        let path = Path::new(path);
        let resolved = std::fs::canonicalize(path).or_else(|_| std::path::absolute(path));
        resolved.is_ok_and(|p| {
            p.starts_with(dir) && !p.components().any(|c| c == std::path::Component::ParentDir)
        })
    }
}

/// Reads a password reference: `env:NAME` or `file:PATH` (trailing newline dropped), a file only inside the
/// policy's secrets directory when it has one.
pub fn resolve_password(server: &str, reference: &str, policy: &AccessPolicy) -> Result<Secret, AccessError> {
    if !policy.allows_reference(reference) {
        return Err(AccessError::OutsideSecretsDir {
            server: server.to_owned(),
            reference: reference.to_owned(),
            dir: policy.secrets_dir.clone().unwrap_or_default(),
        });
    }
    let bad = || AccessError::BadReference {
        server: server.to_owned(),
        reference: reference.to_owned(),
    };
    let unreadable = |source| AccessError::Unreadable {
        server: server.to_owned(),
        reference: reference.to_owned(),
        source,
    };
    match reference.split_once(':') {
        Some(("env", name)) if !name.is_empty() => std::env::var(name).map(Secret::new).map_err(|_| {
            unreadable(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "variable not set",
            ))
        }),
        Some(("file", path)) if !path.is_empty() => std::fs::read_to_string(path)
            .map(|s| Secret::new(s.trim_end_matches(['\r', '\n'])))
            .map_err(unreadable),
        _ => Err(bad()),
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

/// A client for the server's BMC with the given per-call deadline.
pub fn client_for(
    server: &Server,
    call_deadline: Duration,
    policy: &AccessPolicy,
) -> Result<BmcClient, AccessError> {
    let password = password_for(server, policy)?;
    build(server, password, call_deadline, policy)
}

fn password_for(server: &Server, policy: &AccessPolicy) -> Result<Secret, AccessError> {
    if !server.bmc_configured() {
        return Err(AccessError::NotConfigured {
            server: server.name.clone(),
        });
    }
    check_transport(server)?;
    let reference = server.bmc_password_ref.as_deref().unwrap_or_default();
    resolve_password(&server.name, reference, policy)
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
    BmcClient::new(config).map_err(|source| AccessError::Client {
        server: server.name.clone(),
        source: Box::new(source),
    })
}

/// What a cached client was built from; any change (a rotated password included) builds a new one.
#[derive(PartialEq, Eq)]
struct AccessKey {
    address: String,
    username: String,
    password: Secret,
    pin: Option<String>,
    insecure: bool,
    /// The client's metrics carry the vendor hint, so a corrected hint takes a new client too.
    vendor: Option<String>,
}

impl AccessKey {
    fn of(server: &Server, password: &Secret) -> Self {
        Self {
            address: server.bmc_address.clone(),
            username: server.bmc_username.clone(),
            password: password.clone(),
            pin: server.bmc_cert_pin.clone(),
            insecure: server.bmc_insecure,
            vendor: server.vendor_hint.clone(),
        }
    }
}

struct Cached {
    key: AccessKey,
    client: BmcClient,
    used: Instant,
}

/// Clients kept across leases, one per server. A client owns the BMC's connection pool and the System and
/// Manager paths it discovered, so building one per step would cost a TCP (and TLS) handshake and the
/// discovery GETs on every poll. The password reference is read again on every use, so a rotation takes effect
/// at the next step.
#[derive(Clone, Default)]
pub struct ClientCache {
    clients: Arc<Mutex<HashMap<String, Cached>>>,
    policy: AccessPolicy,
}

/// Clients unused this long are dropped when the cache grows past [`ClientCache::PRUNE_ABOVE`].
const IDLE_EVICTION: Duration = Duration::from_secs(600);

impl ClientCache {
    const PRUNE_ABOVE: usize = 4096;

    /// An empty cache whose clients follow `policy`.
    pub fn new(policy: AccessPolicy) -> ClientCache {
        ClientCache {
            clients: Arc::default(),
            policy,
        }
    }

    /// The cached client for `server` if its BMC settings are unchanged, else a new one, with `call_deadline`.
    pub fn client_for(&self, server: &Server, call_deadline: Duration) -> Result<BmcClient, AccessError> {
        let password = password_for(server, &self.policy)?;
        let key = AccessKey::of(server, &password);
        let now = Instant::now();
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cached) = clients.get_mut(&server.name)
            && cached.key == key
        {
            cached.used = now;
            return Ok(cached.client.with_deadline(call_deadline));
        }
        let client = build(server, password, call_deadline, &self.policy)?;
        if clients.len() >= Self::PRUNE_ABOVE {
            clients.retain(|_, c| now.duration_since(c.used) < IDLE_EVICTION);
        }
        clients.insert(
            server.name.clone(),
            Cached {
                key,
                client: client.clone(),
                used: now,
            },
        );
        Ok(client)
    }

    /// Forgets the server's client, so the next step rediscovers the BMC (after a BMC reset renamed its
    /// resources, say).
    pub fn forget(&self, server: &str) {
        self.clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(server);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(address: &str, allow_plain_http: bool) -> Server {
        let now = chrono::Utc::now();
        Server {
            name: "s1".into(),
            bmc_address: address.into(),
            bmc_username: "root".into(),
            bmc_password_ref: Some("env:RACKLIFT_TEST_BMC_PASSWORD_THAT_IS_NOT_SET".into()),
            bmc_cert_pin: None,
            bmc_insecure: false,
            allow_plain_http,
            vendor_hint: None,
            status: racklift_store::ServerStatus::Unregistered,
            status_detail: String::new(),
            fence: 0,
            registered_at: None,
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn a_plain_http_bmc_is_refused_before_its_password_is_read() {
        let policy = AccessPolicy::default();
        let err = client_for(&server("http://10.0.0.1", false), Duration::from_secs(1), &policy).unwrap_err();
        assert!(matches!(err, AccessError::PlainHttp { .. }), "{err}");
        assert!(err.to_string().contains("allow_plain_http"), "{err}");
        // With consent it gets as far as the password (not set here).
        let err = client_for(&server("http://10.0.0.1", true), Duration::from_secs(1), &policy).unwrap_err();
        assert!(matches!(err, AccessError::Unreadable { .. }), "{err}");
        let err = client_for(
            &server("https://10.0.0.1", false),
            Duration::from_secs(1),
            &policy,
        )
        .unwrap_err();
        assert!(matches!(err, AccessError::Unreadable { .. }), "{err}");
    }

    #[test]
    fn a_secrets_directory_confines_file_references() {
        let base = std::env::temp_dir().join(format!("racklift-secrets-{}", std::process::id()));
        let secrets = base.join("secrets");
        std::fs::create_dir_all(&secrets).unwrap();
        std::fs::write(secrets.join("bmc"), "pw\n").unwrap();
        std::fs::write(base.join("outside"), "other\n").unwrap();
        std::os::unix::fs::symlink(base.join("outside"), secrets.join("link-out")).unwrap();
        let policy = AccessPolicy::load(None, Some(&secrets)).unwrap();
        let inside = format!("file:{}", secrets.join("bmc").display());
        assert_eq!(resolve_password("s1", &inside, &policy).unwrap().expose(), "pw");
        for reference in [
            format!("file:{}", base.join("outside").display()),
            format!("file:{}", secrets.join("link-out").display()),
            format!("file:{}/../outside", secrets.display()),
        ] {
            let err = resolve_password("s1", &reference, &policy).unwrap_err();
            assert!(
                matches!(err, AccessError::OutsideSecretsDir { .. }),
                "{reference}: {err}"
            );
        }
        // Without a secrets directory every file is allowed, as before.
        let open = AccessPolicy::default();
        assert!(resolve_password("s1", &format!("file:{}", base.join("outside").display()), &open).is_ok());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_ca_bundle_that_holds_no_certificate_fails_at_load() {
        let path = std::env::temp_dir().join(format!("racklift-ca-{}.pem", std::process::id()));
        std::fs::write(&path, "not a certificate").unwrap();
        assert!(matches!(
            AccessPolicy::load(Some(&path), None),
            Err(PolicyError::CaBundle { .. })
        ));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            AccessPolicy::load(Some(&path), None),
            Err(PolicyError::ReadCaBundle { .. })
        ));
    }
}

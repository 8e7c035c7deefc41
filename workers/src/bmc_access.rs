//! Builds a Redfish client for a stored server: resolves the password reference and the TLS policy. Shared by
//! the workers and the API's pre-flight reads.

use std::collections::HashMap;
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
    #[error("server {server}: certificate pin {pin:?} is not valid")]
    BadPin { server: String, pin: String },
    #[error("server {server}: Redfish client")]
    Client {
        server: String,
        #[source]
        source: Box<racklift_redfish::Error>,
    },
}

/// Reads a password reference: `env:NAME` or `file:PATH` (trailing newline dropped).
pub fn resolve_password(server: &str, reference: &str) -> Result<Secret, AccessError> {
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

/// A client for the server's BMC with the given per-call deadline.
pub fn client_for(server: &Server, call_deadline: Duration) -> Result<BmcClient, AccessError> {
    let password = password_for(server)?;
    build(server, password, call_deadline)
}

fn password_for(server: &Server) -> Result<Secret, AccessError> {
    if !server.bmc_configured() {
        return Err(AccessError::NotConfigured {
            server: server.name.clone(),
        });
    }
    let reference = server.bmc_password_ref.as_deref().unwrap_or_default();
    resolve_password(&server.name, reference)
}

fn build(server: &Server, password: Secret, call_deadline: Duration) -> Result<BmcClient, AccessError> {
    let tls = if let Some(pin) = &server.bmc_cert_pin {
        let parsed: Pin = pin.parse().map_err(|_| AccessError::BadPin {
            server: server.name.clone(),
            pin: pin.clone(),
        })?;
        TlsMode::Pinned(vec![parsed])
    } else if server.bmc_insecure {
        TlsMode::InsecureNoVerify
    } else {
        TlsMode::WebPkiRoots
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
}

/// Clients unused this long are dropped when the cache grows past [`ClientCache::PRUNE_ABOVE`].
const IDLE_EVICTION: Duration = Duration::from_secs(600);

impl ClientCache {
    const PRUNE_ABOVE: usize = 4096;

    /// The cached client for `server` if its BMC settings are unchanged, else a new one, with `call_deadline`.
    pub fn client_for(&self, server: &Server, call_deadline: Duration) -> Result<BmcClient, AccessError> {
        let password = password_for(server)?;
        let key = AccessKey::of(server, &password);
        let now = Instant::now();
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cached) = clients.get_mut(&server.name)
            && cached.key == key
        {
            cached.used = now;
            return Ok(cached.client.with_deadline(call_deadline));
        }
        let client = build(server, password, call_deadline)?;
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

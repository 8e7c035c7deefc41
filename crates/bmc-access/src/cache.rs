//! Clients kept across leases, one per server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use racklift_redfish::{BmcClient, Secret};
use racklift_store::Server;

use crate::{AccessError, AccessPolicy, build, password_for};

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
    /// The client caches the System it resolved, so naming another one takes a new client.
    system_id: Option<String>,
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
            system_id: server.system_id.clone(),
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
/// at the next step, and a reference the rules no longer allow stops working at once.
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
    /// The password is read first, off the runtime and without the cache's lock.
    pub async fn client_for(
        &self,
        server: &Server,
        call_deadline: Duration,
    ) -> Result<BmcClient, AccessError> {
        let password = password_for(server, &self.policy).await?;
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

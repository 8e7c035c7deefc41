//! Reaching a registered server's Incus API for cluster operations: racklift's client identity (from the
//! store) presented over mutual TLS, the server's certificate pinned (its cluster's certificate once racklift
//! knows it, else the one it registered with, which Incus also serves; the certificate it serves now only after
//! an operator's repin), and what a rolling run needs polled into
//! [`MemberFacts`]: the member's status in the cluster, the OS and application versions, and the versions
//! racklift's update catalog offers it.
//!
//! Both the API (launch rules, cluster creation) and the workers (every tick of a run) poll through this, so
//! what a launch is refused for and what a run acts on are read the same way.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use racklift_deploy::rolling::RollingStep;
use racklift_deploy::rolling_run::{BootTime, MemberFacts, MemberStatus, Phase, RollingRun};
use racklift_incus::{
    CertPin, ClientIdentity, Fence, IncusClient, IncusConfig, OperationStatus, ServerTrust,
};
use racklift_store::{EndpointTrust, IncusEndpoint, Store, StoreError};

use crate::cluster_certificate::{self, CertificateDecision, CertificateRefusal, MemberCertificate};
use tokio::sync::OnceCell;

/// How the Incus APIs of servers are reached.
#[derive(Debug, Clone)]
pub struct IncusSettings {
    /// Deadline of one call.
    pub call_timeout: Duration,
    /// Accept `http://` connection URLs (a simulator without TLS); never for real servers.
    pub allow_plain_http: bool,
}

/// Why a set of servers is not one reachable Incus cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterCheckError {
    #[error("server {server} has not registered (no connection URL for its Incus API)")]
    NotRegistered { server: String },
    #[error("server {server}: Incus API at {url}")]
    Unreachable {
        server: String,
        url: String,
        #[source]
        source: racklift_incus::Error,
    },
    #[error("the servers do not form one Incus cluster: {detail}")]
    NotOneCluster { detail: String },
    #[error("no certificate can be trusted for the cluster: {0}")]
    CertificateRefused(#[from] CertificateRefusal),
    #[error("racklift's client identity")]
    Identity(#[source] StoreError),
    #[error(
        "server {server} registered no certificate racklift could trust; `racklift server repin` trusts the one it serves"
    )]
    NoCertificate { server: String },
}

/// A member as one poll found it.
#[derive(Debug, Clone)]
pub struct IncusEndpointFacts {
    pub server: String,
    pub endpoint: IncusEndpoint,
    pub facts: MemberFacts,
}

/// Clients for servers' Incus APIs, sharing racklift's identity.
pub struct IncusAccess {
    store: Store,
    settings: IncusSettings,
    identity: OnceCell<ClientIdentity>,
    /// One client per server, kept across ticks while its URL and pin stay what they were: the identity is
    /// loaded into a TLS configuration once, and later calls resume its TLS sessions instead of a full
    /// handshake each.
    clients: Mutex<HashMap<String, CachedClient>>,
}

struct CachedClient {
    url: String,
    pin: Option<String>,
    client: IncusClient,
}

impl IncusAccess {
    pub fn new(store: Store, settings: IncusSettings) -> IncusAccess {
        IncusAccess {
            store,
            settings,
            identity: OnceCell::new(),
            clients: Mutex::new(HashMap::new()),
        }
    }

    async fn identity(&self) -> Result<ClientIdentity, StoreError> {
        self.identity
            .get_or_try_init(|| async {
                let id = self.store.client_identity().await?;
                Ok(ClientIdentity::from_pem(id.certificate_pem, id.key_pem))
            })
            .await
            .cloned()
    }

    /// A client for the endpoint; `None` when the server has not registered its connection URL.
    async fn client(&self, endpoint: &IncusEndpoint) -> Result<Option<IncusClient>, ClusterCheckError> {
        let Some(url) = &endpoint.connection_url else {
            return Ok(None);
        };
        if let Some(cached) = self.cached(endpoint, url) {
            return Ok(Some(cached));
        }
        let trust = match &endpoint.trust {
            EndpointTrust::Cluster(pin) | EndpointTrust::Server(pin) => match pin.parse::<CertPin>() {
                Ok(pin) => ServerTrust::Pinned(pin),
                Err(_) => {
                    return Err(ClusterCheckError::NoCertificate {
                        server: endpoint.server.clone(),
                    });
                }
            },
            EndpointTrust::Repin => ServerTrust::FirstUse,
            EndpointTrust::Unknown => {
                return Err(ClusterCheckError::NoCertificate {
                    server: endpoint.server.clone(),
                });
            }
        };
        let identity = self.identity().await.map_err(ClusterCheckError::Identity)?;
        let mut config = IncusConfig::new(&endpoint.server, url, identity, trust);
        config.allow_plain_http = self.settings.allow_plain_http;
        config.call_deadline = self.settings.call_timeout;
        let client = IncusClient::new(config).map_err(|source| ClusterCheckError::Unreachable {
            server: endpoint.server.clone(),
            url: url.clone(),
            source,
        })?;
        self.lock_clients().insert(
            endpoint.server.clone(),
            CachedClient {
                url: url.clone(),
                pin: endpoint.pin().map(str::to_owned),
                client: client.clone(),
            },
        );
        Ok(Some(client))
    }

    /// The kept client for the endpoint, unless its URL or pin changed since it was built.
    fn cached(&self, endpoint: &IncusEndpoint, url: &str) -> Option<IncusClient> {
        self.lock_clients()
            .get(&endpoint.server)
            .filter(|c| c.url == url && c.pin.as_deref() == endpoint.pin())
            .map(|c| c.client.clone())
    }

    fn lock_clients(&self) -> std::sync::MutexGuard<'_, HashMap<String, CachedClient>> {
        // The map holds no invariant a panicking holder could break.
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores the certificate the first connection after an operator's repin recorded, so later calls are
    /// pinned to it.
    async fn keep_pin(&self, endpoint: &IncusEndpoint, client: &IncusClient) {
        if endpoint.trust != EndpointTrust::Repin {
            return;
        }
        let Some(pin) = client.observed_pin() else {
            return;
        };
        match self
            .store
            .pin_incus_certificate(&endpoint.server, &pin.to_string())
            .await
        {
            Ok(true) => {
                tracing::info!(server = %endpoint.server, certificate = %pin, "Incus certificate pinned after a repin")
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(server = %endpoint.server, error = %e, "could not store the Incus certificate pin")
            }
        }
    }

    /// Learns the cluster's certificate from its members when none is recorded yet (any member not trusted by a
    /// cluster certificate): each member is read once over a connection that notes the certificate it serves
    /// without trusting it for any other call, and [`cluster_certificate::decide`] rules. `Some(fingerprint)`
    /// is the certificate to record and pin; `None` when one is recorded already or the members are not all
    /// clustered yet (each keeps its registration pin).
    pub async fn learn_cluster_certificate(
        &self,
        endpoints: &[IncusEndpoint],
    ) -> Result<Option<String>, ClusterCheckError> {
        if endpoints.is_empty()
            || endpoints
                .iter()
                .all(|e| matches!(e.trust, EndpointTrust::Cluster(_)))
        {
            return Ok(None);
        }
        let identity = self.identity().await.map_err(ClusterCheckError::Identity)?;
        let mut members = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let Some(url) = &endpoint.connection_url else {
                return Err(ClusterCheckError::NotRegistered {
                    server: endpoint.server.clone(),
                });
            };
            let unreachable = |source| ClusterCheckError::Unreachable {
                server: endpoint.server.clone(),
                url: url.clone(),
                source,
            };
            // A client of its own, never cached: what it accepted is not trust for any later call.
            let mut config = IncusConfig::new(&endpoint.server, url, identity.clone(), ServerTrust::FirstUse);
            config.allow_plain_http = self.settings.allow_plain_http;
            config.call_deadline = self.settings.call_timeout;
            let client = IncusClient::new(config).map_err(unreachable)?;
            let info = client.server_info().await.map_err(unreachable)?;
            let Some(served) = client.observed_pin() else {
                // Plain HTTP (a simulator without TLS) presents no certificate: there is nothing to learn.
                return Ok(None);
            };
            let reported = CertPin::of_pem(info.environment.certificate.as_bytes())
                .ok()
                .map(|p| p.to_string());
            let registered = match &endpoint.trust {
                EndpointTrust::Server(pin) | EndpointTrust::Cluster(pin) => Some(pin.clone()),
                EndpointTrust::Repin | EndpointTrust::Unknown => None,
            };
            members.push(MemberCertificate {
                server: endpoint.server.clone(),
                registered,
                served: served.to_string(),
                reported,
                clustered: info.environment.server_clustered,
            });
        }
        match cluster_certificate::decide(&members)? {
            CertificateDecision::Cluster(pin) => Ok(Some(pin)),
            CertificateDecision::KeepRegistration => Ok(None),
        }
    }

    /// Checks that the servers form one Incus cluster: each is clustered, and every one lists exactly the
    /// members the others list, those members being these servers. The members are first asked which
    /// certificate the cluster serves ([`IncusAccess::learn_cluster_certificate`]); the check then trusts them by
    /// it, and the learned fingerprint is returned for the cluster's record.
    pub async fn check_one_cluster(
        &self,
        endpoints: &[IncusEndpoint],
    ) -> Result<Option<String>, ClusterCheckError> {
        let learned = self.learn_cluster_certificate(endpoints).await?;
        let pinned: Vec<IncusEndpoint>;
        let endpoints = match &learned {
            Some(pin) => {
                pinned = endpoints
                    .iter()
                    .map(|e| IncusEndpoint {
                        trust: EndpointTrust::Cluster(pin.clone()),
                        ..e.clone()
                    })
                    .collect();
                &pinned[..]
            }
            None => endpoints,
        };
        let mut names = Vec::with_capacity(endpoints.len());
        let mut views: Vec<(String, Vec<String>)> = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let Some(client) = self.client(endpoint).await? else {
                return Err(ClusterCheckError::NotRegistered {
                    server: endpoint.server.clone(),
                });
            };
            let unreachable = |source| ClusterCheckError::Unreachable {
                server: endpoint.server.clone(),
                url: endpoint.connection_url.clone().unwrap_or_default(),
                source,
            };
            let cluster = client.cluster().await.map_err(unreachable)?;
            self.keep_pin(endpoint, &client).await;
            if !cluster.enabled || cluster.server_name.is_empty() {
                return Err(ClusterCheckError::NotOneCluster {
                    detail: format!("{} is not clustered", endpoint.server),
                });
            }
            let mut members: Vec<String> = client
                .members()
                .await
                .map_err(unreachable)?
                .into_iter()
                .map(|m| m.server_name)
                .collect();
            members.sort();
            names.push(cluster.server_name.clone());
            views.push((endpoint.server.clone(), members));
        }
        let mut expected = names.clone();
        expected.sort();
        expected.dedup();
        if expected.len() != names.len() {
            return Err(ClusterCheckError::NotOneCluster {
                detail: "two servers report the same member name".into(),
            });
        }
        for (server, members) in &views {
            if members != &expected {
                return Err(ClusterCheckError::NotOneCluster {
                    detail: format!(
                        "{server} lists the members [{}], the servers are [{}]",
                        members.join(", "),
                        expected.join(", ")
                    ),
                });
            }
        }
        Ok(learned)
    }

    /// Polls every member for a launch: `Err` only when a server is not registered or the identity is missing;
    /// a member that does not answer is reported as such in its facts.
    pub async fn poll(
        &self,
        endpoints: &[IncusEndpoint],
    ) -> Result<Vec<(String, MemberFacts)>, ClusterCheckError> {
        for e in endpoints {
            if e.connection_url.is_none() {
                return Err(ClusterCheckError::NotRegistered {
                    server: e.server.clone(),
                });
            }
        }
        self.identity().await.map_err(ClusterCheckError::Identity)?;
        let polled = self
            .poll_with(endpoints, &BTreeMap::new(), &BTreeMap::new(), |_| true, true)
            .await;
        Ok(polled.into_iter().map(|p| (p.server, p.facts)).collect())
    }

    /// Polls every member for a tick of `run`, reading the operation of each step in flight. Only the servers
    /// the tick decides on are read whole ([`RollingRun::reads_fully`]); the others are asked their member
    /// status, which is all the health gate needs, in one call each. The catalog is read only while an update
    /// still has servers to stage.
    pub async fn poll_run(&self, endpoints: &[IncusEndpoint], run: &RollingRun) -> Vec<IncusEndpointFacts> {
        let operations: BTreeMap<String, String> = run
            .servers
            .iter()
            .filter_map(|s| s.operation.clone().map(|op| (s.name.clone(), op)))
            .collect();
        let names: BTreeMap<String, String> = run
            .servers
            .iter()
            .filter_map(|s| s.member_name.clone().map(|n| (s.name.clone(), n)))
            .collect();
        let with_offers = run.phase == Phase::Update && !run.canceling;
        self.poll_with(
            endpoints,
            &operations,
            &names,
            |server| run.reads_fully(server),
            with_offers,
        )
        .await
    }

    async fn poll_with(
        &self,
        endpoints: &[IncusEndpoint],
        operations: &BTreeMap<String, String>,
        member_names: &BTreeMap<String, String>,
        fully: impl Fn(&str) -> bool,
        with_offers: bool,
    ) -> Vec<IncusEndpointFacts> {
        let offers = if with_offers {
            self.catalog_offers().await
        } else {
            Vec::new()
        };
        let polls = endpoints.iter().map(|e| {
            let status_of = (!fully(&e.server)).then(|| member_names.get(&e.server)).flatten();
            self.poll_one(e, operations.get(&e.server), status_of)
        });
        let mut out: Vec<IncusEndpointFacts> = futures::future::join_all(polls).await;
        // A member that does not answer cannot report itself; the cluster's view of it is read from a member
        // that does (Incus reports a member without heartbeats as Offline).
        let asker = out.iter().find(|p| p.facts.reachable).map(|p| p.endpoint.clone());
        for p in out.iter_mut().filter(|p| !p.facts.reachable) {
            let Some(name) = member_names.get(&p.server).cloned() else {
                continue;
            };
            p.facts.member_name = Some(name.clone());
            if let Some(asker) = &asker
                && let Ok(Some(client)) = self.client(asker).await
                && let Ok(member) = client.member(&name).await
            {
                p.facts.status = Some(MemberStatus::parse(member.status.as_str()));
            }
        }
        for p in &mut out {
            let channel = p.facts.channel.clone().unwrap_or_default();
            if let Some((version, apps)) = offers
                .iter()
                .find(|(_, channels, _)| channel.is_empty() || channels.contains(&channel))
                .map(|(v, _, apps)| (v, apps))
            {
                p.facts.available_version = Some(version.clone());
                for app in apps {
                    p.facts
                        .available_applications
                        .insert(app.clone(), version.clone());
                }
            }
        }
        out
    }

    /// The published updates, newest first: version, channels, the applications they carry.
    async fn catalog_offers(&self) -> Vec<(String, Vec<String>, Vec<String>)> {
        let Ok(updates) = self.store.updates().await else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(updates.len());
        for u in updates {
            let apps = match self.store.update_files(u.uuid).await {
                Ok(files) => files
                    .into_iter()
                    .filter(|f| f.component != "os")
                    .map(|f| f.component)
                    .collect(),
                Err(_) => Vec::new(),
            };
            out.push((u.version, u.channels, apps));
        }
        out
    }

    /// Reads one member through its own API: whole, or only its status under the member name `status_of`.
    async fn poll_one(
        &self,
        endpoint: &IncusEndpoint,
        operation: Option<&String>,
        status_of: Option<&String>,
    ) -> IncusEndpointFacts {
        let mut facts = MemberFacts::default();
        match self.client(endpoint).await {
            Ok(Some(client)) => {
                let read = match status_of {
                    Some(name) => read_status(&client, name, &mut facts).await,
                    None => read_member(&client, &mut facts, operation).await,
                };
                if let Err(e) = read {
                    facts.reachable = false;
                    facts.error = Some(error_text(&e));
                } else {
                    self.keep_pin(endpoint, &client).await;
                }
            }
            Ok(None) => facts.error = Some("the server has not registered its Incus API".into()),
            Err(e) => facts.error = Some(e.to_string()),
        }
        IncusEndpointFacts {
            server: endpoint.server.clone(),
            endpoint: endpoint.clone(),
            facts,
        }
    }

    /// Issues `step` on the member, carrying `fence` (a restore in Incus's `restore_mode`). Returns the Incus
    /// operation's URL for evacuate and restore.
    pub async fn act(
        &self,
        target: &IncusEndpointFacts,
        step: RollingStep,
        fence: i64,
        restore_mode: &str,
    ) -> Result<Option<String>, ActError> {
        let client = match self.client(&target.endpoint).await {
            Ok(Some(c)) => c.with_fence(Fence(fence)),
            Ok(None) => {
                return Err(ActError::NotRegistered {
                    server: target.server.clone(),
                });
            }
            Err(e) => return Err(ActError::Check(e)),
        };
        let member = || {
            target
                .facts
                .member_name
                .clone()
                .ok_or_else(|| ActError::NoMemberName {
                    server: target.server.clone(),
                })
        };
        match step {
            RollingStep::Evacuate => Ok(Some(client.evacuate(&member()?).await?.url)),
            RollingStep::Restore => Ok(Some(client.restore(&member()?, restore_mode).await?.url)),
            RollingStep::Reboot => client.reboot().await.map(|()| None).map_err(ActError::from),
            RollingStep::Update => client.check_update().await.map(|()| None).map_err(ActError::from),
        }
    }
}

impl IncusAccess {
    /// After a reboot was accepted: watches the server's own API closely until it stops answering (the reboot
    /// has begun) or `limit` passes. A real server takes seconds to go down and minutes to come back, a poll
    /// every tick could miss neither; a compressed simulation can go down and up between two ticks, so the
    /// moment is caught here. `true` when it was seen down.
    pub async fn watch_down(&self, target: &IncusEndpointFacts, limit: Duration) -> bool {
        let Ok(Some(client)) = self.client(&target.endpoint).await else {
            return false;
        };
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if client.os().await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }
}

/// Why a trigger could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    #[error("server {server} has not registered its Incus API")]
    NotRegistered { server: String },
    #[error("server {server}: its cluster member name is not known (its API did not answer the last poll)")]
    NoMemberName { server: String },
    #[error(transparent)]
    Check(ClusterCheckError),
    #[error(transparent)]
    Incus(#[from] racklift_incus::Error),
}

impl ActError {
    /// The call got no answer (the connection failed or the deadline ran out): the server may have acted on it.
    pub fn unanswered(&self) -> bool {
        matches!(self, Self::Incus(e)
            if matches!(e.class(), racklift_incus::ErrorClass::Transport | racklift_incus::ErrorClass::Deadline))
    }
}

/// Reads only a member's status in the cluster, through its own API, under its known member name.
async fn read_status(
    client: &IncusClient,
    name: &str,
    facts: &mut MemberFacts,
) -> Result<(), racklift_incus::Error> {
    facts.member_name = Some(name.to_owned());
    let member = client.member(name).await?;
    facts.status = Some(MemberStatus::parse(member.status.as_str()));
    facts.reachable = true;
    Ok(())
}

/// Reads one member's facts through its own API.
async fn read_member(
    client: &IncusClient,
    facts: &mut MemberFacts,
    operation: Option<&String>,
) -> Result<(), racklift_incus::Error> {
    let cluster = client.cluster().await?;
    facts.member_name = Some(cluster.server_name.clone());
    let member = client.member(&cluster.server_name).await?;
    facts.status = Some(MemberStatus::parse(member.status.as_str()));
    let sent = chrono::Utc::now();
    let os = client.os().await?;
    let received = chrono::Utc::now();
    facts.booted = os
        .environment
        .uptime
        .and_then(|up| BootTime::from_uptime(up, sent, received));
    facts.running_version = Some(os.environment.os_version.clone());
    facts.staged_version = Some(
        os.staged_version()
            .unwrap_or(os.environment.os_version.as_str())
            .to_owned(),
    );
    let update = client.update_state().await?;
    facts.channel = update
        .config
        .get("channel")
        .and_then(|c| c.as_str())
        .map(str::to_owned);
    // Busy: an Incus operation of its own still runs on it (an evacuation, a restore), whoever started it.
    facts.busy = client
        .operations()
        .await
        .unwrap_or_default()
        .into_iter()
        .find(|op| matches!(op.status, OperationStatus::Pending | OperationStatus::Running))
        .map(|op| {
            if op.description.is_empty() {
                format!("operation {} running", op.id)
            } else {
                op.description.to_lowercase()
            }
        });
    // An application counts at the newest version it runs or has staged: staged is what an update step waits for.
    facts.applications = client
        .applications()
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|(name, state)| {
            let version = state.newest().unwrap_or_default().to_owned();
            (name, version)
        })
        .collect();
    if let Some(url) = operation {
        let id = url.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
        // An operation the member no longer knows (it restarted) leaves the status to decide. One that could not
        // be read for another reason may still run: Incus shows a member Online as soon as its restore starts, so
        // taking the status then would call a restore done that is about to fail.
        match client.operation(id).await {
            Err(e) if e.class() == racklift_incus::ErrorClass::NotFound => {}
            Err(_) => facts.operation_running = true,
            Ok(op) => match op.status {
                OperationStatus::Failure => {
                    facts.operation_error = Some(if op.err.is_empty() {
                        "operation failed".into()
                    } else {
                        op.err
                    });
                }
                OperationStatus::Pending | OperationStatus::Running | OperationStatus::Cancelling => {
                    facts.operation_running = true;
                }
                _ => {}
            },
        }
    }
    facts.reachable = true;
    Ok(())
}

fn error_text(e: &racklift_incus::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

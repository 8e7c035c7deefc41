//! `racklift-bmc-sim`: a rack of simulated Redfish BMCs and IncusOS servers in one process.
//!
//! One listener serves every BMC under its own path prefix (`/bmc/<name>/redfish/v1/...`), each
//! with a vendor [`Personality`] reproducing the quirks in `reference/redfish.md`, a simulated
//! machine (power, POST with `BootProgress`, BIOS, secure boot, virtual media, an installer
//! reading the media over HTTP `Range` and acting on the IncusOS seed inside it, the installed OS
//! registering with the seed's provider over TLS, serving its Incus API on a TLS listener of its
//! own with mutual TLS, in Incus clusters formed through the control API), fault injection and
//! audits (highest request concurrency, stale fenced mutations, members out for evacuation at once). Test and development use only: no
//! production code path depends on this crate.
//!
//! ```no_run
//! # async fn demo() -> Result<(), racklift_bmc_sim::SimError> {
//! use racklift_bmc_sim::{PersonalityChoice, Sim, SimConfig};
//! let sim = Sim::start(SimConfig::new(10, PersonalityChoice::Mix).with_time_scale(0.001)).await?;
//! let base = sim.bmc_url(0); // http://127.0.0.1:PORT/bmc/sim-0000 ; Redfish root at base + "/redfish/v1"
//! let truth = sim.truth(0); // power, installed, registered, media bytes read, ...
//! sim.shutdown().await;
//! # Ok(()) }
//! ```

mod accounts;
mod audit;
mod bios_registry;
mod bmc;
mod clock;
mod cluster;
mod cluster_audit;
mod config;
mod control;
mod driver;
mod etag;
mod faults;
mod incus;
mod incus_listener;
mod incus_tls;
mod install;
mod machine;
mod os;
mod os_update;
mod profile;
pub mod recorder;
pub mod register;
mod reply;
mod routes;
mod secure_boot;
pub mod seed;
mod server;
mod tls;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use audit::{AuditReport, FENCE_HEADER, MUTATION_LOG_CAP, Mutation, StaleMutation};
pub use cluster::ClusterError;
pub use cluster_audit::{ClusterAuditReport, IncusStaleMutation, MemberCounts};
pub use config::{Personality, PersonalityChoice, SimConfig, Timings, UnknownPersonality};
pub use faults::{ExtraSystem, Faults};
pub use routes::metadata_document;
pub use secure_boot::{MICROSOFT_KEK_CA_2011, MICROSOFT_UEFI_CA_2011, MICROSOFT_WINDOWS_PCA_2011};

use bmc::{Bmc, Shared};
use clock::Clock;
use profile::Profile;
use routes::RouteTable;
use server::Fleet;

/// Why the simulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("binding {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("generating the self-signed certificate")]
    Certificate(#[source] rcgen::Error),
    #[error("configuring TLS")]
    Tls(#[source] rustls::Error),
    #[error("building the HTTP client the machines read media with")]
    HttpClient(#[source] reqwest::Error),
}

/// Entry point.
pub struct Sim;

impl Sim {
    /// Bind, build the fleet and start serving. Must be called inside a Tokio runtime.
    pub async fn start(config: SimConfig) -> Result<SimHandle, SimError> {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| SimError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: config.listen,
            source,
        })?;
        let tls = if config.tls {
            Some(tls::self_signed()?)
        } else {
            None
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base_url = format!("{scheme}://{addr}");
        let cancel = CancellationToken::new();
        let http = reqwest::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .build()
            .map_err(SimError::HttpClient)?;
        let shared = Arc::new(Shared {
            clock: Clock::new(config.time_scale, cancel.clone()),
            timings: config.timings.clone(),
            http,
            basic_auth: format!(
                "Basic {}",
                tls::base64(format!("{}:{}", config.username, config.password).as_bytes())
            ),
            username: config.username.clone(),
            password: config.password.clone(),
            base_url: base_url.clone(),
            cancel: cancel.clone(),
            fleet: OnceLock::new(),
        });
        let mut tables: HashMap<Personality, (Arc<Profile>, Arc<RouteTable>)> = HashMap::new();
        let mut bmcs = Vec::with_capacity(config.servers);
        let mut by_name = HashMap::with_capacity(config.servers);
        for i in 0..config.servers {
            let personality = config.personality.for_index(i);
            let (profile, routes) = tables
                .entry(personality)
                .or_insert_with(|| {
                    let profile = Profile::new(personality);
                    let routes = RouteTable::new(&profile);
                    (Arc::new(profile), Arc::new(routes))
                })
                .clone();
            let name = format!("{}-{i:04}", config.name_prefix);
            by_name.insert(name.clone(), i);
            bmcs.push(Arc::new(Bmc::new(i, name, profile, routes, shared.clone())));
        }
        let fleet = Arc::new(Fleet {
            bmcs,
            by_name,
            shared: shared.clone(),
            clusters: Mutex::new(std::collections::BTreeMap::new()),
        });
        let _ = shared.fleet.set(Arc::downgrade(&fleet));
        let acceptor = tls.as_ref().map(|t| t.acceptor.clone());
        let task = tokio::spawn(server::serve(listener, acceptor, fleet.clone(), cancel.clone()));
        Ok(SimHandle {
            fleet,
            addr,
            base_url,
            cert_pem: tls.as_ref().map(|t| t.cert_pem.clone()),
            cert_der: tls.map(|t| t.cert_der),
            username: config.username,
            password: config.password,
            cancel,
            task: Some(task),
        })
    }
}

/// Why [`SimHandle::boot_installed`] could not put IncusOS on a server's disk.
#[derive(Debug, thiserror::Error)]
pub enum BootInstalledError {
    #[error(transparent)]
    Seed(#[from] seed::SeedError),
    #[error("making the Incus certificate: {0}")]
    Certificate(String),
}

/// A running simulator. Dropping it stops the listener and every machine.
pub struct SimHandle {
    fleet: Arc<Fleet>,
    addr: SocketAddr,
    base_url: String,
    cert_pem: Option<String>,
    cert_der: Option<Vec<u8>>,
    username: String,
    password: String,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl SimHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http(s)://127.0.0.1:PORT`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Number of servers.
    pub fn len(&self) -> usize {
        self.fleet.bmcs.len()
    }

    /// True when the fleet has no servers.
    pub fn is_empty(&self) -> bool {
        self.fleet.bmcs.is_empty()
    }

    /// Name of server `i` (`sim-0000`, ...). Panics when `i` is out of range.
    pub fn name(&self, i: usize) -> &str {
        &self.fleet.bmcs[i].name
    }

    /// Personality of server `i`.
    pub fn personality(&self, i: usize) -> Personality {
        self.fleet.bmcs[i].profile.personality
    }

    /// Base URL of BMC `i`: `<base_url>/bmc/<name>`; its Redfish root is `+ "/redfish/v1"`.
    pub fn bmc_url(&self, i: usize) -> String {
        format!("{}/bmc/{}", self.base_url, self.fleet.bmcs[i].name)
    }

    /// Base URL of server `i`'s Incus API, `https://127.0.0.1:<port>`, once its Incus has started (the port is
    /// then kept for the machine's life).
    pub fn incus_url(&self, i: usize) -> Option<String> {
        self.fleet.bmcs[i].incus_url()
    }

    /// The certificate (PEM) server `i`'s Incus serves, once its installed OS has made one: its own `server.crt`
    /// (the one it also presents as a client), or its cluster's certificate once it is a cluster member.
    pub fn incus_certificate_pem(&self, i: usize) -> Option<String> {
        self.fleet.served_identity(i).map(|id| id.cert_pem.clone())
    }

    /// The certificate (PEM) every member of cluster `cluster` serves, made when the cluster was formed.
    pub fn cluster_certificate_pem(&self, cluster: &str) -> Option<String> {
        self.fleet
            .clusters()
            .get(cluster)
            .map(|c| c.certificate.cert_pem.clone())
    }

    /// Make servers `servers` (indices) the Incus cluster `cluster`, as its administrator would with `incus cluster
    /// enable` and joins. Members are named by their hostnames; forming it again replaces the member list.
    pub fn form_cluster(&self, cluster: &str, servers: &[usize]) -> Result<(), ClusterError> {
        self.fleet.form_cluster(cluster, servers)
    }

    /// The audit of cluster `cluster` (`None` when there is no such cluster).
    pub fn cluster_audit(&self, cluster: &str) -> Option<ClusterAuditReport> {
        self.fleet.cluster_audit(cluster)
    }

    /// Reset the audit of cluster `cluster`, from the members evacuated now.
    pub fn reset_cluster_audit(&self, cluster: &str) {
        self.fleet.reset_cluster_audit(cluster);
    }

    /// The audit of server `i`'s Incus API (requests in flight, fencing of its mutations).
    pub fn incus_audit(&self, i: usize) -> AuditReport {
        self.fleet.bmcs[i].incus_audit.report()
    }

    /// `<base_url>/control`.
    pub fn control_url(&self) -> String {
        format!("{}/control", self.base_url)
    }

    /// Basic-auth credentials every BMC accepts.
    pub fn credentials(&self) -> (&str, &str) {
        (&self.username, &self.password)
    }

    /// The self-signed certificate (PEM) when serving TLS.
    pub fn cert_pem(&self) -> Option<&str> {
        self.cert_pem.as_deref()
    }

    /// The self-signed certificate (DER) when serving TLS, for pinning tests.
    pub fn cert_der(&self) -> Option<&[u8]> {
        self.cert_der.as_deref()
    }

    /// The machine truth of server `i` (same JSON as `GET /control/servers/<name>/truth`).
    pub fn truth(&self, i: usize) -> serde_json::Value {
        self.fleet.bmcs[i].machine().truth(Instant::now())
    }

    /// What the key databases PK, KEK, db and dbx of server `i` hold: the PEM of each certificate
    /// and the hex of each signature, in the order the firmware lists them.
    pub fn key_databases(&self, i: usize) -> std::collections::BTreeMap<String, Vec<String>> {
        let m = self.fleet.bmcs[i].machine();
        secure_boot::DATABASES[..4]
            .iter()
            .zip(&m.secure_boot.dbs)
            .map(|(name, db)| {
                let certs = db.certs.iter().map(|c| c.pem.clone());
                let sigs = db.sigs.iter().map(|s| s.hash_hex.clone());
                ((*name).to_owned(), certs.chain(sigs).collect())
            })
            .collect()
    }

    /// Powers server `i` on with IncusOS already on its disk, installed and registered earlier from the seed
    /// archive `seed` (a tar, as the installer found it at the start of partition 2): for tests of the installed
    /// OS (updates, cluster operations). It boots from disk, reads the seed and starts Incus.
    /// The seed's applications (`incus` without an `applications` file) were installed then, at the running
    /// version, and Incus was initialised: its certificate exists and its preseed's certificates are trusted.
    pub fn boot_installed(&self, i: usize, seed: &[u8]) -> Result<(), BootInstalledError> {
        let files = seed::SeedFiles::from_partition(seed)?;
        let applications = match files.applications()? {
            Some(a) if !a.applications.is_empty() => a.applications.into_iter().map(|a| a.name).collect(),
            _ => vec!["incus".to_owned()],
        };
        let preseed = files
            .incus()?
            .map(|incus| incus.preseed_certificates())
            .unwrap_or_default();
        let bmc = &self.fleet.bmcs[i];
        let hostname = files
            .network()?
            .and_then(|n| n.hostname())
            .unwrap_or_else(|| bmc.uuid.clone());
        let identity = register::ClientIdentity::generate(&hostname)
            .map_err(|e| BootInstalledError::Certificate(e.to_string()))?;
        let mut m = bmc.machine();
        m.os.install_fresh(files.without_install(), None);
        m.os.registered = true;
        m.os.set_identity(identity);
        m.os.trusted_certificates = preseed;
        let version = m.os.running_version.clone();
        m.os.applications = applications
            .into_iter()
            .map(|name| machine::AppState {
                name,
                version: version.clone(),
                staged_version: None,
            })
            .collect();
        driver::power_on(bmc, &mut m);
        Ok(())
    }

    /// The SHA-256 fingerprint of server `i`'s Incus client certificate, once its installed OS has made one.
    pub fn client_certificate_sha256(&self, i: usize) -> Option<String> {
        self.fleet.bmcs[i]
            .machine()
            .os
            .identity
            .as_ref()
            .map(|id| id.sha256())
    }

    /// The secure boot mode of server `i` (`SetupMode`, `UserMode`, `DeployedMode`).
    pub fn secure_boot_mode(&self, i: usize) -> &'static str {
        self.fleet.bmcs[i].machine().secure_boot.mode
    }

    /// The audit of BMC `i`.
    pub fn audit(&self, i: usize) -> AuditReport {
        self.fleet.bmcs[i].audit.report()
    }

    /// Replace the faults of server `i`.
    pub fn set_faults(&self, i: usize, faults: Faults) {
        *self.fleet.bmcs[i].faults() = faults;
    }

    /// Stop serving and stop every machine.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

//! The sections of `racklift.toml` other than `[deploy]` (which is `racklift_deploy::Config` itself). The
//! defaults here are the ones the binaries used before they read a file, so an empty file changes nothing.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::secret::DatabaseUrl;

/// `[database]`: how every process reaches PostgreSQL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// A file holding the connection URL (a mounted secret), read at start; `DATABASE_URL` wins over it. The URL
    /// itself is never a key: it carries a password.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url_file: Option<PathBuf>,
    /// The URL in effect, filled in from `DATABASE_URL` or `url_file` after loading. Printed redacted.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub url: Option<DatabaseUrl>,
    /// Connections each process keeps at most.
    pub max_connections: u32,
    /// How long a query waits for a free connection before it fails.
    pub acquire_timeout_secs: u64,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        DatabaseSettings {
            url_file: None,
            url: None,
            max_connections: 16,
            acquire_timeout_secs: 30,
        }
    }
}

/// `[api]`: the API, its installation media server and the deploy pre-flight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSettings {
    /// Where the API, the media and `/metrics` listen (`racklift api` and `racklift up`).
    pub listen: SocketAddr,
    /// The largest request body accepted; every body is small JSON.
    pub body_limit_bytes: usize,
    /// Deadline of the BMC read the deploy pre-flight makes.
    pub bmc_read_timeout_secs: u64,
    /// How often served media ranges are written to the database (the install-idle signal reads them).
    pub media_flush_interval_ms: u64,
    /// The file name in media URLs; some BMCs insist on a recognisable extension.
    pub media_file_name: String,
    /// A connection that has not sent a whole request head this long after connecting (or after its last
    /// request) is closed.
    pub header_read_timeout_secs: u64,
    /// Deadline of a whole request, answered 408 past it; the media streams are exempt (an image takes minutes).
    /// Keep it above `bmc_read_timeout_secs`: the deploy pre-flight reads the BMC inside the request.
    pub request_timeout_secs: u64,
    /// Longest pause while a request body is read; past it the request is answered 408.
    pub body_timeout_secs: u64,
    /// Connections open at once; past it new ones wait until one closes. Above three quarters of it, connections
    /// that have not completed a request are closed oldest first.
    pub max_connections: usize,
    /// Connections open at once from one source address; past it a new one from that address is closed at once.
    pub max_connections_per_peer: usize,
    /// The API's TLS certificate (PEM, the leaf first, then its chain), with `tls_key`. IncusOS calls the API
    /// over TLS 1.3 only; `racklift up` generates one in the data directory when this is unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_certificate: Option<PathBuf>,
    /// The private key (PEM) of `tls_certificate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// Serve the API over plain HTTP: only behind a TLS-terminating proxy or in a test. `racklift api` refuses to
    /// start without either this or a certificate.
    pub plain_http: bool,
    /// Also serve the installation media (only `/media/…`) over plain HTTP here, with the same limits: many BMCs
    /// cannot fetch virtual media over HTTPS from a self-signed certificate. Needs `media_public_address`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_listen: Option<SocketAddr>,
    /// The URL BMCs reach `media_listen` at (`http://racklift.example.net:7879`); media URLs are built from it
    /// instead of the public address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_public_address: Option<String>,
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            body_limit_bytes: 1024 * 1024,
            bmc_read_timeout_secs: 30,
            media_flush_interval_ms: 500,
            media_file_name: "incusos.img".to_owned(),
            header_read_timeout_secs: 10,
            request_timeout_secs: 60,
            body_timeout_secs: 30,
            max_connections: 1024,
            max_connections_per_peer: 256,
            tls_certificate: None,
            tls_key: None,
            plain_http: false,
            media_listen: None,
            media_public_address: None,
        }
    }
}

/// `[worker]`: one worker pool (`racklift worker`, and the pool inside `racklift up`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerSettings {
    /// Jobs (deployment steps, BMC actions) a pool runs at once. Operations Center's control loop advanced 8
    /// servers at once; a step here is one BMC call or one poll, mostly waiting on the network, so a pool runs
    /// many more. Each BMC still sees one call at a time (the per-BMC limiter and the per-server resource key).
    pub concurrency: usize,
    /// The most jobs one lease statement claims.
    pub batch: usize,
    /// Fallback poll when no notification wakes the pool.
    pub poll_interval_ms: u64,
    /// How often the pool looks for expired leases of dead workers.
    pub rescue_interval_ms: u64,
    /// How often the pool purges completed jobs past `queue.completed_retention_secs` and idempotency keys past
    /// `queue.idempotency_retention_secs`.
    pub purge_interval_secs: u64,
    /// Completion statements in flight at once per pool.
    pub completer_flushes: usize,
    /// Where `racklift worker` serves Prometheus metrics (and the probes); port 0 picks a free port.
    pub metrics_listen: SocketAddr,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        WorkerSettings {
            concurrency: 100,
            batch: 100,
            poll_interval_ms: 1000,
            rescue_interval_ms: 5000,
            purge_interval_secs: 60,
            completer_flushes: 1,
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9187)),
        }
    }
}

/// `[queue]`: leases, durable retries and retention, shared by every process on the database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueSettings {
    /// How long a lease lasts without a heartbeat (heartbeats run every third of it): how soon a dead
    /// worker's jobs are taken over.
    pub lease_ttl_ms: u64,
    /// Base of the jittered exponential backoff between durable retries of a failed job.
    pub retry_backoff_base_ms: u64,
    /// Cap of that backoff.
    pub retry_backoff_max_ms: u64,
    /// How long completed jobs are kept for inspection; 0 deletes a job the moment it completes.
    pub completed_retention_secs: u64,
    /// How long the `Idempotency-Key` of a `:power` or `:media` request is remembered: a retry within it gets the
    /// first request's job even after that job has finished; afterwards the key is free again. At least the
    /// longest a client keeps retrying one request.
    pub idempotency_retention_secs: u64,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            lease_ttl_ms: 30_000,
            retry_backoff_base_ms: 1000,
            retry_backoff_max_ms: 300_000,
            completed_retention_secs: 86_400,
            idempotency_retention_secs: 86_400,
        }
    }
}

/// `[paths]`: where files live, and so where the BMC passwords and the images racklift hands out may come from.
/// There is no unconfined setting: a password reference or an image path names something inside these, because
/// whoever registers a server or an image chooses what racklift reads and where it sends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PathSettings {
    /// `racklift up`'s own files: the embedded PostgreSQL, the simulated rack's secret and image, the demo's log.
    /// Relative paths are taken from the working directory.
    pub data_dir: PathBuf,
    /// The directory `file:NAME` BMC password references are names in (readable by racklift only). It may be
    /// missing at start (a warning; such references fail until it exists).
    pub secrets_dir: PathBuf,
    /// The prefix a variable needs for `env:NAME` references to name it, so no other variable of the process
    /// (`DATABASE_URL`, say) can be sent to a BMC.
    pub secret_env_prefix: String,
    /// The directory catalog images must be files in; the media server serves nothing outside it.
    pub images_dir: PathBuf,
}

/// `paths.secrets_dir` unless set.
pub const DEFAULT_SECRETS_DIR: &str = "/etc/racklift/secrets";
/// `paths.secret_env_prefix` unless set.
pub const DEFAULT_SECRET_ENV_PREFIX: &str = "RACKLIFT_SECRET_";
/// `paths.images_dir` unless set.
pub const DEFAULT_IMAGES_DIR: &str = "/var/lib/racklift/images";

impl Default for PathSettings {
    fn default() -> Self {
        PathSettings {
            data_dir: PathBuf::from(".racklift"),
            secrets_dir: PathBuf::from(DEFAULT_SECRETS_DIR),
            secret_env_prefix: DEFAULT_SECRET_ENV_PREFIX.to_owned(),
            images_dir: PathBuf::from(DEFAULT_IMAGES_DIR),
        }
    }
}

/// `[tls]`: how BMC certificates are verified when a server has no pin of its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSettings {
    /// A PEM bundle of the CAs that sign the BMCs' certificates (a site CA); without it the Mozilla root set
    /// is used. A server's `bmc_cert_pin` wins over either.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bmc_ca_file: Option<PathBuf>,
}

/// `[simulation]`: simulated hardware instead of real (tests, `racklift up`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimulationSettings {
    /// Simulated hardware runs this much faster than real (0.01 makes a 25-minute install take 15 s); the
    /// `[deploy]` defaults shrink with it. Absent: real hardware timing. `racklift up` assumes 0.01.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<f64>,
}

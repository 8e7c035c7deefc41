//! The configuration of the server commands (`api`, `worker`, `up`, `migrate`, `token`): `racklift.toml` layered
//! with the environment and the command's flags (see `racklift_config`), turned into each crate's own settings.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context;
use racklift_api::{ApiConfig, MediaConfig};
use racklift_bmc_access::AccessPolicy;
use racklift_config::{Settings, Sources};
use racklift_queue::{Backoff, QueueConfig, WorkerConfig};

/// `--config`, given once on the command line for the whole process.
static CONFIG_PATH: OnceLock<Option<PathBuf>> = OnceLock::new();

/// Records the global `--config` flag; called once by `main`.
pub fn set_config_path(path: Option<PathBuf>) {
    let _ = CONFIG_PATH.set(path);
}

/// Loads the configuration: the file (`--config` or `RACKLIFT_CONFIG`), the environment, then the flags that
/// `flags` adds. `default_time_scale` is the simulation time scale assumed when nothing sets one.
pub fn load(default_time_scale: Option<f64>, flags: impl FnOnce(&mut Sources)) -> anyhow::Result<Settings> {
    let mut sources = Sources {
        file: CONFIG_PATH.get().cloned().flatten(),
        default_time_scale,
        ..Sources::default()
    };
    flags(&mut sources);
    Settings::load(&sources).context("invalid configuration")
}

/// The database URL, or what to do about its absence.
pub fn database_url(settings: &Settings) -> anyhow::Result<String> {
    settings
        .database
        .url
        .as_ref()
        .map(|u| u.expose().to_owned())
        .context(
            "no database: set DATABASE_URL (or database.url_file in racklift.toml) to a PostgreSQL URL, or use \
             `racklift up`, which embeds one",
        )
}

pub fn queue_config(s: &Settings) -> QueueConfig {
    QueueConfig {
        lease_ttl: Duration::from_millis(s.queue.lease_ttl_ms),
        backoff: Backoff {
            base: Duration::from_millis(s.queue.retry_backoff_base_ms),
            cap: Duration::from_millis(s.queue.retry_backoff_max_ms),
        },
        completed_retention: Duration::from_secs(s.queue.completed_retention_secs),
        idempotency_retention: Duration::from_secs(s.queue.idempotency_retention_secs),
    }
}

pub fn worker_config(s: &Settings) -> WorkerConfig {
    WorkerConfig {
        concurrency: s.worker.concurrency,
        batch: s.worker.batch,
        poll_interval: Duration::from_millis(s.worker.poll_interval_ms),
        rescue_interval: Duration::from_millis(s.worker.rescue_interval_ms),
        purge_interval: Duration::from_secs(s.worker.purge_interval_secs),
        completer_flushes: s.worker.completer_flushes,
        ..WorkerConfig::default()
    }
}

/// How BMCs are reached: `[tls] bmc_ca_file`, `[paths] secrets_dir` and `secret_env_prefix`, read and checked now
/// so a bad one stops the start (a secrets directory that does not exist yet is only logged).
pub fn access_policy(s: &Settings) -> anyhow::Result<AccessPolicy> {
    AccessPolicy::load(
        s.tls.bmc_ca_file.as_deref(),
        &s.paths.secrets_dir,
        &s.paths.secret_env_prefix,
    )
    .context("invalid configuration")
}

/// The API's settings, with the BMC access policy `access` (see [`access_policy`]).
pub fn api_config(s: &Settings, access: AccessPolicy) -> ApiConfig {
    ApiConfig {
        deploy: s.deploy.clone(),
        media: MediaConfig {
            flush_interval: Duration::from_millis(s.api.media_flush_interval_ms),
            file_name: s.api.media_file_name.clone(),
            public_address: s
                .api
                .media_public_address
                .as_ref()
                .map(|a| a.trim_end_matches('/').to_owned()),
        },
        body_limit_bytes: s.api.body_limit_bytes,
        bmc_read_timeout: Duration::from_secs(s.api.bmc_read_timeout_secs),
        bmc_access: access,
        images_dir: s.paths.images_dir.clone(),
        listener: racklift_listener::Limits {
            header_read_timeout: Duration::from_secs(s.api.header_read_timeout_secs),
            max_connections: s.api.max_connections,
            max_connections_per_peer: s.api.max_connections_per_peer,
        },
        request_timeout: Duration::from_secs(s.api.request_timeout_secs),
        body_timeout: Duration::from_secs(s.api.body_timeout_secs),
        // Set by the caller: `api_transport` or `racklift up`'s generated certificate (`ApiTransport::apply`).
        transport: racklift_listener::Transport::Plain,
        server_certificate_pem: None,
    }
}

/// How the API's listener speaks, and the certificate IncusOS must be handed when it is self-signed.
pub struct ApiTransport {
    pub transport: racklift_listener::Transport,
    pub self_signed_pem: Option<String>,
}

impl ApiTransport {
    /// TLS with `cert_pem` (the leaf first) and `key_pem`.
    pub fn tls(cert_pem: &str, key_pem: &str) -> Result<ApiTransport, racklift_listener::tls::TlsError> {
        Ok(ApiTransport {
            transport: racklift_listener::Transport::Tls(racklift_listener::tls::server_config(
                cert_pem, key_pem,
            )?),
            self_signed_pem: racklift_listener::tls::self_signed_leaf(cert_pem),
        })
    }

    pub fn scheme(&self) -> &'static str {
        self.transport.scheme()
    }

    /// Into the API's configuration.
    pub fn apply(self, config: &mut ApiConfig) {
        config.transport = self.transport;
        config.server_certificate_pem = self.self_signed_pem;
    }
}

/// The API's transport from `[api]`: TLS with the configured certificate and key (read now, so a missing or bad
/// file stops the start naming its key), plain HTTP when `plain_http` says so, `None` when neither is
/// configured (`racklift api` refuses that; `racklift up` generates a certificate).
pub fn api_transport(s: &Settings) -> anyhow::Result<Option<ApiTransport>> {
    use anyhow::Context;
    if let (Some(cert), Some(key)) = (&s.api.tls_certificate, &s.api.tls_key) {
        let cert_pem = std::fs::read_to_string(cert)
            .with_context(|| format!("api.tls_certificate: reading {}", cert.display()))?;
        let key_pem = std::fs::read_to_string(key)
            .with_context(|| format!("api.tls_key: reading {}", key.display()))?;
        let transport = ApiTransport::tls(&cert_pem, &key_pem)
            .with_context(|| format!("api.tls_certificate / api.tls_key ({})", cert.display()))?;
        return Ok(Some(transport));
    }
    Ok(s.api.plain_http.then_some(ApiTransport {
        transport: racklift_listener::Transport::Plain,
        self_signed_pem: None,
    }))
}

/// `racklift config show`.
#[derive(clap::Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(clap::Subcommand)]
enum ConfigCommand {
    /// Print the effective configuration (file, environment and defaults) as TOML, secrets redacted.
    Show {
        /// Print the compiled defaults instead, every key present: a starting point for racklift.toml.
        #[arg(long)]
        defaults: bool,
    },
}

pub fn config_command(args: ConfigArgs) -> anyhow::Result<()> {
    match args.command {
        ConfigCommand::Show { defaults } => {
            let text = if defaults {
                Settings::defaults_toml()?
            } else {
                load(None, |_| {})?.to_toml()?
            };
            print!("{text}");
        }
    }
    Ok(())
}

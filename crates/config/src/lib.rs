//! `racklift.toml`: every setting of `racklift api`, `racklift worker` and `racklift up` in one file.
//!
//! Values are layered, later layers winning: the compiled defaults (Operations Center's constants for the
//! deployment state machine, scaled when a simulation time scale is set), the file (`--config` or
//! `RACKLIFT_CONFIG`), `RACKLIFT_<SECTION>__<KEY>` environment variables, then command-line flags. Every key
//! carries its unit in its name (`_secs`, `_ms`, `_bytes`), because a bare number in a file is ambiguous. An
//! unknown key or a value of the wrong type is an error naming the key and where it came from; values that
//! parse but cannot work (a zero concurrency, a backoff cap below its base) are rejected by [`Settings::validate`]
//! with the key's full name.
//!
//! Secrets never sit in the file: the database URL comes from `DATABASE_URL` or from a file named by
//! `database.url_file`, and serialising [`Settings`] (as `racklift config show` does) redacts its password.

mod secret;
mod sections;

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

pub use secret::DatabaseUrl;
pub use sections::{
    ApiSettings, DEFAULT_IMAGES_DIR, DEFAULT_SECRET_ENV_PREFIX, DEFAULT_SECRETS_DIR, DatabaseSettings,
    PathSettings, QueueSettings, SimulationSettings, TlsSettings, WorkerSettings,
};

/// The variable naming the configuration file when `--config` is not given.
pub const CONFIG_ENV: &str = "RACKLIFT_CONFIG";
/// The prefix of the override variables: `RACKLIFT_WORKER__CONCURRENCY=50` sets `worker.concurrency`.
pub const ENV_PREFIX: &str = "RACKLIFT_";
/// `__` separates a section from its key in an override variable (a single `_` is part of key names).
pub const ENV_SEPARATOR: &str = "__";

/// Short names kept for the two settings every deployment sets per process (the systemd units and the
/// Kubernetes manifests use them), beside the general `RACKLIFT_<SECTION>__<KEY>` form.
pub const ENV_ALIASES: [(&str, &str); 2] = [
    ("RACKLIFT_API_LISTEN", "api.listen"),
    ("RACKLIFT_METRICS_LISTEN", "worker.metrics_listen"),
];

/// The whole configuration. `#[serde(default)]` everywhere: a file names only what it changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub database: DatabaseSettings,
    pub api: ApiSettings,
    pub worker: WorkerSettings,
    pub queue: QueueSettings,
    /// The deployment state machine's timing and budgets (spec 000's constants).
    pub deploy: racklift_deploy::Config,
    pub paths: PathSettings,
    pub tls: TlsSettings,
    pub simulation: SimulationSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::defaults_for(None)
    }
}

/// Where the file comes from, and what the command line overrides.
#[derive(Debug, Default)]
pub struct Sources {
    /// `--config PATH`; `RACKLIFT_CONFIG` when absent; no file when neither is set.
    pub file: Option<PathBuf>,
    /// The simulation time scale to assume when neither the file nor the environment sets one (`racklift up`
    /// runs a simulated rack at 0.01 unless told otherwise).
    pub default_time_scale: Option<f64>,
    /// Flags given on the command line, as (dotted key, value): they win over everything else.
    pub flags: Vec<(&'static str, figment::value::Value)>,
    /// `racklift up`: `paths.secrets_dir` and `paths.images_dir` default to `secrets` and `images` under
    /// `paths.data_dir` instead of the system directories, which an unprivileged user trying racklift has not
    /// got; a value from the file, the environment or a flag still wins.
    pub paths_in_data_dir: bool,
}

impl Sources {
    /// Adds a flag's value when it was given.
    pub fn flag<T: Serialize>(&mut self, key: &'static str, value: Option<T>) -> &mut Self {
        if let Some(v) = value
            && let Ok(v) = figment::value::Value::serialize(v)
        {
            self.flags.push((key, v));
        }
        self
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("configuration file {path} does not exist")]
    MissingFile { path: PathBuf },
    /// A key that does not exist, a value of the wrong type or a malformed file; figment's message names the
    /// key and its source (the file or the variable).
    #[error(transparent)]
    Load(Box<figment::Error>),
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    #[error("reading database.url_file {path}")]
    UrlFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the database URL (from {from}) is not a postgres:// or postgresql:// URL")]
    BadDatabaseUrl { from: String },
    #[error("printing the configuration")]
    Render(#[source] Box<toml::ser::Error>),
}

impl From<figment::Error> for ConfigError {
    fn from(e: figment::Error) -> Self {
        ConfigError::Load(Box::new(e))
    }
}

impl Settings {
    /// The compiled defaults; with a time scale, the deployment timing is that of simulated hardware at it.
    pub fn defaults_for(time_scale: Option<f64>) -> Settings {
        Settings {
            database: DatabaseSettings::default(),
            api: ApiSettings::default(),
            worker: WorkerSettings::default(),
            queue: QueueSettings::default(),
            deploy: match time_scale {
                Some(scale) => racklift_deploy::Config::for_simulation(scale),
                None => racklift_deploy::Config::default(),
            },
            paths: PathSettings::default(),
            tls: TlsSettings::default(),
            simulation: SimulationSettings { time_scale },
        }
    }

    /// Loads, layers and validates the configuration, reading the process environment.
    pub fn load(sources: &Sources) -> Result<Settings, ConfigError> {
        let file = sources.file.clone().or_else(|| {
            std::env::var_os(CONFIG_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        if let Some(path) = &file
            && !path.exists()
        {
            return Err(ConfigError::MissingFile { path: path.clone() });
        }
        let layers = layers(file.as_deref(), &sources.flags);
        // The time scale decides the deployment defaults underneath everything else, so it is read first.
        // A value of the wrong type is left to the full extraction below, which reports it with its key.
        let time_scale = layers
            .find_value("simulation.time_scale")
            .ok()
            .and_then(|v| v.deserialize::<f64>().ok())
            .or(sources.default_time_scale);
        let mut defaults = Settings::defaults_for(time_scale);
        if sources.paths_in_data_dir {
            // Like the time scale, read before the full extraction, which reports a bad value with its key.
            let data_dir = layers
                .find_value("paths.data_dir")
                .ok()
                .and_then(|v| v.deserialize::<PathBuf>().ok())
                .unwrap_or_else(|| defaults.paths.data_dir.clone());
            defaults.paths.secrets_dir = data_dir.join("secrets");
            defaults.paths.images_dir = data_dir.join("images");
        }
        let mut settings: Settings = Figment::from(Serialized::defaults(defaults))
            .merge(layers)
            .extract()?;
        settings.database.url = database_url(&settings.database)?;
        settings.validate()?;
        Ok(settings)
    }

    /// Rejects values that parse but cannot work, naming the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive: [(&str, u64); 17] = [
            ("database.max_connections", self.database.max_connections.into()),
            (
                "database.acquire_timeout_secs",
                self.database.acquire_timeout_secs,
            ),
            ("api.body_limit_bytes", self.api.body_limit_bytes as u64),
            ("api.bmc_read_timeout_secs", self.api.bmc_read_timeout_secs),
            ("api.media_flush_interval_ms", self.api.media_flush_interval_ms),
            ("api.header_read_timeout_secs", self.api.header_read_timeout_secs),
            ("api.request_timeout_secs", self.api.request_timeout_secs),
            ("api.body_timeout_secs", self.api.body_timeout_secs),
            ("api.max_connections", self.api.max_connections as u64),
            (
                "api.max_connections_per_peer",
                self.api.max_connections_per_peer as u64,
            ),
            ("worker.concurrency", self.worker.concurrency as u64),
            ("worker.batch", self.worker.batch as u64),
            ("worker.poll_interval_ms", self.worker.poll_interval_ms),
            ("worker.rescue_interval_ms", self.worker.rescue_interval_ms),
            ("worker.completer_flushes", self.worker.completer_flushes as u64),
            ("queue.lease_ttl_ms", self.queue.lease_ttl_ms),
            (
                "queue.idempotency_retention_secs",
                self.queue.idempotency_retention_secs,
            ),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(invalid(key, "must be greater than zero"));
            }
        }
        if self.queue.lease_ttl_ms < 300 {
            return Err(invalid(
                "queue.lease_ttl_ms",
                "must be at least 300: heartbeats run every third of it",
            ));
        }
        if self.queue.retry_backoff_max_ms < self.queue.retry_backoff_base_ms {
            return Err(invalid(
                "queue.retry_backoff_max_ms",
                format!(
                    "is below queue.retry_backoff_base_ms ({} < {})",
                    self.queue.retry_backoff_max_ms, self.queue.retry_backoff_base_ms
                ),
            ));
        }
        if self.api.request_timeout_secs <= self.api.bmc_read_timeout_secs {
            return Err(invalid(
                "api.request_timeout_secs",
                format!(
                    "must be longer than api.bmc_read_timeout_secs ({} s): the deploy pre-flight reads the BMC \
                     inside the request",
                    self.api.bmc_read_timeout_secs
                ),
            ));
        }
        match (&self.api.tls_certificate, &self.api.tls_key) {
            (Some(_), None) => return Err(invalid("api.tls_key", "is needed with api.tls_certificate")),
            (None, Some(_)) => return Err(invalid("api.tls_certificate", "is needed with api.tls_key")),
            (Some(_), Some(_)) if self.api.plain_http => {
                return Err(invalid(
                    "api.plain_http",
                    "contradicts api.tls_certificate: the API serves one or the other",
                ));
            }
            _ => {}
        }
        match (&self.api.media_listen, &self.api.media_public_address) {
            (Some(_), None) => {
                return Err(invalid(
                    "api.media_public_address",
                    "is needed with api.media_listen: media URLs must point at the media listener",
                ));
            }
            (_, Some(url))
                if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 =>
            {
                return Err(invalid(
                    "api.media_public_address",
                    "must be an http:// or https:// URL with a host",
                ));
            }
            _ => {}
        }
        if self.api.media_file_name.is_empty() || self.api.media_file_name.contains('/') {
            return Err(invalid("api.media_file_name", "must be a file name without '/'"));
        }
        for (key, dir) in [
            ("paths.secrets_dir", &self.paths.secrets_dir),
            ("paths.images_dir", &self.paths.images_dir),
        ] {
            let root = dir.has_root()
                && dir
                    .components()
                    .all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::CurDir));
            if root || dir.as_os_str().is_empty() {
                return Err(invalid(
                    key,
                    "must name a directory of its own, not / or nothing: it confines what may be read",
                ));
            }
        }
        if !valid_secret_env_prefix(&self.paths.secret_env_prefix) {
            return Err(invalid(
                "paths.secret_env_prefix",
                "must be the non-empty start of a variable name (A-Z a-z 0-9 _, not starting with a digit, \
                 no __): an empty one would let env: references name any variable",
            ));
        }
        if let Some(scale) = self.simulation.time_scale
            && !(scale.is_finite() && scale > 0.0 && scale <= 1.0)
        {
            return Err(invalid(
                "simulation.time_scale",
                "must be greater than 0 and at most 1",
            ));
        }
        self.deploy.validate().map_err(|e| {
            let message = e.to_string();
            // The deploy crate's messages start with the field's bare name; the key here is the dotted one.
            let field = message.split_whitespace().next().unwrap_or_default().to_owned();
            invalid(format!("deploy.{field}"), message)
        })?;
        Ok(())
    }

    /// The effective configuration as TOML, with secrets redacted: what `racklift config show` prints.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string(self).map_err(|e| ConfigError::Render(Box::new(e)))
    }

    /// The documented defaults as TOML, every key present (for `racklift config show --defaults`).
    pub fn defaults_toml() -> Result<String, ConfigError> {
        Settings::default().to_toml()
    }
}

/// The rule `racklift_bmc_access` holds references to, checked here so a bad prefix stops the start with its key.
fn valid_secret_env_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && !prefix.starts_with(|c: char| c.is_ascii_digit())
        && prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !prefix.contains("__")
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// The file, the environment and the flags, without the defaults.
fn layers(file: Option<&Path>, flags: &[(&'static str, figment::value::Value)]) -> Figment {
    let mut figment = Figment::new();
    if let Some(path) = file {
        figment = figment.merge(Toml::file_exact(path));
    }
    figment = figment.merge(
        Env::prefixed(ENV_PREFIX)
            .filter(|key| key.as_str().contains(ENV_SEPARATOR))
            .split(ENV_SEPARATOR),
    );
    for (variable, key) in ENV_ALIASES {
        figment = figment.merge(Env::raw().only(&[variable]).map(move |_| key.into()));
    }
    for (key, value) in flags {
        figment = figment.merge(Serialized::global(key, value.clone()));
    }
    figment
}

/// `DATABASE_URL` wins over `database.url_file`: a process's environment is how a one-off command points at
/// another database.
fn database_url(db: &DatabaseSettings) -> Result<Option<DatabaseUrl>, ConfigError> {
    if let Some(url) = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) {
        return DatabaseUrl::parse(url.trim(), "DATABASE_URL").map(Some);
    }
    match &db.url_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::UrlFile {
                path: path.clone(),
                source,
            })?;
            DatabaseUrl::parse(text.trim(), &format!("database.url_file {}", path.display())).map(Some)
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests;

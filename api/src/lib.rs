//! The HTTP API: the operator-facing REST surface under `/1.0`, the registration callback the installed OS
//! calls, and the installation media server BMCs read from.
//!
//! Every request that changes something becomes rows in PostgreSQL (through `racklift-store`), never a direct
//! BMC mutation: the only BMC traffic here is the read-only pre-flight check of the deploy endpoint.

mod auth;
mod bmc_actions;
mod body_deadline;
mod catalog;
mod certificates;
mod clusters;
pub mod demo;
mod deploy;
mod error;
mod image_files;
pub mod incus_envelope;
mod media;
mod media_targets;
mod metrics;
pub mod openapi;
mod preflight;
mod read_buffers;
mod registration;
mod routes;
mod seeding;
mod self_update;
mod servers;
mod triage;
mod triage_actions;
mod ui;
mod unique_keys;
pub mod update_catalog;
mod updates;
mod validate;
mod views;

pub use deploy::DeployRequest;
/// The dashboard's routes and who may use each (what its auth matrix walks).
pub use ui::{Access as UiAccess, Page as UiPage, table as ui_pages};

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

pub use error::{ApiError, ServeError};
/// The media server's Range handling as a pure function, for the fuzz targets; not part of the API.
#[doc(hidden)]
pub use media::{MAX_RANGES, RangePlan, plan_ranges};
#[doc(hidden)]
pub mod fuzzing;

/// The cluster requests and views, for clients (the CLI) that send and decode them.
pub use clusters::{ClusterCreate, ControlRequest, RebootRequest, UpdateRequest};
pub use views::{ClusterOperationView, ClusterServerView, ClusterView};

/// Settings of the media server.
#[derive(Debug, Clone)]
pub struct MediaConfig {
    /// How often served ranges are written to `media_reads`: often enough for the install-idle signal,
    /// rarely enough that a BMC reading 4 KiB blocks does not turn into a write per block.
    pub flush_interval: Duration,
    /// File name in the media URL; BMCs such as iDRAC insist on a recognisable extension.
    pub file_name: String,
    /// Where BMCs fetch media from when that is not the public address: the plain-HTTP media listener's URL
    /// (`[api] media_public_address`), since many BMCs cannot fetch virtual media over HTTPS from a self-signed
    /// certificate. `None`: the public address.
    pub public_address: Option<String>,
}

impl Default for MediaConfig {
    fn default() -> Self {
        MediaConfig {
            flush_interval: Duration::from_millis(500),
            file_name: "incusos.img".to_owned(),
            public_address: None,
        }
    }
}

/// Everything the API is configured with.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The deployment state machine's timing: the deploy endpoint checks token validity against its overall
    /// timeout, and the media server caps stored ranges with it.
    pub deploy: racklift_deploy::Config,
    pub media: MediaConfig,
    /// Largest accepted request body; every body is small JSON, so anything larger is a mistake or an attack.
    pub body_limit_bytes: usize,
    /// Deadline of the BMC read made by the deploy pre-flight check.
    pub bmc_read_timeout: Duration,
    /// How BMCs are reached (CA bundle, where password references may point): the pre-flight reads the BMC as a
    /// worker would, and a stored reference is checked against the same rules.
    pub bmc_access: racklift_bmc_access::AccessPolicy,
    /// Catalog images must be regular files inside this directory (checked when registered and when served).
    pub images_dir: std::path::PathBuf,
    /// The listener's header read timeout and connection cap.
    pub listener: racklift_listener::Limits,
    /// Deadline of a whole request and its response, except the media streams (an image takes minutes to
    /// read): longer than the deploy pre-flight's BMC read, which is part of a request.
    pub request_timeout: Duration,
    /// Longest pause while a request body is read.
    pub body_timeout: Duration,
    /// Plain HTTP or TLS on the API's listener. `racklift api` refuses to start plain unless the configuration
    /// says so (`[api] plain_http`); an embedder (tests) chooses here.
    pub transport: racklift_listener::Transport,
    /// The API's certificate (PEM) when it is self-signed: each deployment's seed hands it to IncusOS as
    /// `server_certificate`, the one certificate it will then trust for racklift. `None` when a CA signed it
    /// (IncusOS trusts its system roots) or the API is plain HTTP.
    pub server_certificate_pem: Option<String>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            deploy: racklift_deploy::Config::default(),
            media: MediaConfig::default(),
            body_limit_bytes: 1024 * 1024,
            bmc_read_timeout: Duration::from_secs(30),
            bmc_access: Default::default(),
            images_dir: std::path::PathBuf::from("/var/lib/racklift/images"),
            listener: racklift_listener::Limits::default(),
            request_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            transport: racklift_listener::Transport::Plain,
            server_certificate_pem: None,
        }
    }
}

/// What every handler shares. Cloning is cheap.
#[derive(Clone)]
pub struct AppState {
    pub store: racklift_store::Store,
    pub queue: racklift_queue::Queue,
    pub config: Arc<ApiConfig>,
    /// Registered servers' Incus APIs, for cluster creation and the launch rules of cluster operations.
    pub incus: Arc<racklift_bmc_access::incus::IncusAccess>,
    media_reads: media::Recorder,
    media_targets: media_targets::MediaTargets,
    /// Image and update files hashed again since they changed.
    rechecks: image_files::Rechecks,
}

impl AppState {
    pub fn new(store: racklift_store::Store, queue: racklift_queue::Queue, config: ApiConfig) -> AppState {
        let incus = racklift_bmc_access::incus::IncusAccess::new(
            store.clone(),
            racklift_bmc_access::incus::IncusSettings {
                call_timeout: std::time::Duration::from_secs(config.deploy.rolling.incus_call_timeout_secs),
                allow_plain_http: false,
            },
        );
        AppState {
            store,
            queue,
            incus: Arc::new(incus),
            config: Arc::new(config),
            media_reads: media::Recorder::default(),
            media_targets: media_targets::MediaTargets::default(),
            rechecks: image_files::Rechecks::default(),
        }
    }

    /// Writes the media ranges served so far. [`serve`] calls it periodically and at shutdown; exposed so an
    /// embedder using [`router`] alone can drive it.
    pub async fn flush_media_reads(&self) -> Result<(), racklift_store::StoreError> {
        self.media_reads
            .flush(&self.store, self.config.deploy.media_max_ranges)
            .await
    }
}

/// The whole API as a router. Media reads are recorded in memory; [`serve`] flushes them.
pub fn router(state: AppState) -> Router {
    let limit = state.config.body_limit_bytes;
    let (api, streams, _) = routes::split();
    // Everything but the media streams answers within the request timeout (408 past it).
    let timed = api
        // The operator dashboard (HTML, cookie session); see `ui`.
        .nest("/ui", ui::router())
        .route("/ui/", axum::routing::get(ui::trailing_slash))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            state.config.request_timeout,
        ));
    let inner = Router::new()
        .merge(timed)
        .merge(streams)
        .fallback(error::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.config.body_timeout,
            body_deadline::limit_pauses,
        ))
        .layer(axum::middleware::from_fn(error::reject_nul))
        // The limit sits inside the error rewriter so its plain-text 413 gets the error shape too.
        .layer(RequestBodyLimitLayer::new(limit))
        .layer(axum::middleware::map_response(error::json_errors))
        .with_state(state);
    // Action paths (`…/s1:deploy`) are rewritten before routing, which only a service around the router can do.
    Router::new().fallback_service(tower::ServiceExt::map_request(inner, openapi::action_rewrite))
}

/// The media streams alone (`/media/…`), with the same body limits and error shape: what the plain-HTTP media
/// listener serves.
pub fn media_router(state: AppState) -> Router {
    routes::media_only()
        .fallback(error::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.config.body_timeout,
            body_deadline::limit_pauses,
        ))
        .layer(axum::middleware::from_fn(error::reject_nul))
        .layer(RequestBodyLimitLayer::new(state.config.body_limit_bytes))
        .layer(axum::middleware::map_response(error::json_errors))
        .with_state(state)
}

/// Serves the API on `listener` until `shutdown` fires, with the media read flusher alongside; the flusher
/// writes once more after the server drained so no served range is lost.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    serve_all(listener, None, state, shutdown).await
}

/// As [`serve`], with the media streams also served over plain HTTP on `media` when given (the same limits).
pub async fn serve_all(
    listener: tokio::net::TcpListener,
    media: Option<tokio::net::TcpListener>,
    state: AppState,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let flusher = tokio::spawn(media::flush_loop(state.clone(), shutdown.clone()));
    let token = shutdown.clone();
    let api = racklift_listener::serve_with(
        listener,
        router(state.clone()),
        state.config.listener,
        state.config.transport.clone(),
        async move { token.cancelled().await },
    );
    let media_only = async {
        match media {
            Some(listener) => {
                let token = shutdown.clone();
                // The images go out with `sendfile`, not through hyper (see `racklift_listener::files`).
                racklift_listener::files::serve_files(
                    listener,
                    media_router(state.clone()),
                    state.config.listener,
                    async move { token.cancelled().await },
                )
                .await
            }
            None => Ok(()),
        }
    };
    let (served, media_served) = tokio::join!(
        async {
            let served = api.await;
            // One listener failing stops the other.
            shutdown.cancel();
            served
        },
        async {
            let served = media_only.await;
            if served.is_err() {
                shutdown.cancel();
            }
            served
        }
    );
    let served = served.and(media_served);
    flusher.await.ok();
    if let Err(error) = state.flush_media_reads().await {
        tracing::error!(%error, "final media read flush failed");
    }
    served.map_err(ServeError::Io)
}

//! Answering a scrape: refresh the database-sampled gauges (bounded in time), then render the registry.
//!
//! `/metrics` doubles as the liveness and readiness probe of both deployments (ops/kubernetes), so it answers 200
//! whether or not the database answered: a slow or unreachable PostgreSQL must not get healthy processes
//! restarted. The gauges then keep their last values and the failure is logged by the sampler.

use std::future::Future;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::Mutex;

use crate::{global, render};

/// The text exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How long the database sample may take before the scrape answers with the last values. Below the probes'
/// 3-second timeout, so a slow database never fails a probe.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(2);

/// Scrapes closer together than this reuse the last sample: the kubelet's probes and Prometheus may arrive at
/// once, and each sample costs the database a scan of the queue table.
const RESAMPLE_AFTER: Duration = Duration::from_secs(1);

/// When the gauges were last sampled. Held while sampling and rendering, so concurrent scrapes never see a
/// gauge between being zeroed and being set (see [`crate::set_gauges`]).
static SAMPLED: Mutex<Option<Instant>> = Mutex::const_new(None);

/// Runs `sample` (which sets the database-sampled gauges and logs its own failures) unless another scrape did
/// within the last second, then answers with every metric of the process.
pub async fn scrape(sample: impl Future<Output = ()>) -> Response {
    let body = {
        let mut sampled = SAMPLED.lock().await;
        if sampled.is_none_or(|at| at.elapsed() >= RESAMPLE_AFTER) {
            if tokio::time::timeout(SAMPLE_TIMEOUT, sample).await.is_err() {
                tracing::warn!(
                    timeout_ms = SAMPLE_TIMEOUT.as_millis() as u64,
                    "sampling the database for /metrics timed out; serving the last values"
                );
            }
            *sampled = Some(Instant::now());
        }
        render(&global().registry)
    };
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response()
}

/// A router answering `GET /metrics`, sampling with `sample` per scrape. No authentication: Prometheus and the
/// probes scrape it, and it carries counts only (no names, addresses or ids).
pub fn router<S, F>(sample: S) -> Router
where
    S: Fn() -> F + Clone + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    Router::new().route("/metrics", get(move || scrape(sample())))
}

/// Serves [`router`] on `listener` until `shutdown` completes. The workers' metrics server: small and separate
/// from the pool, so a drain keeps answering probes until the pool has stopped.
pub async fn serve<S, F>(
    listener: tokio::net::TcpListener,
    sample: S,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    S: Fn() -> F + Clone + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    racklift_listener::serve(
        listener,
        router(sample),
        racklift_listener::Limits::default(),
        shutdown,
    )
    .await
}

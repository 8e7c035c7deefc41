//! `GET /metrics`: Prometheus metrics of this process, plus the gauges read from PostgreSQL at scrape time.
//!
//! No bearer auth: Prometheus scrapes it and the kubelet probes it (ops/kubernetes), and it holds counts only.

use axum::extract::State;
use axum::response::Response;

use crate::AppState;

/// The kinds the API enqueues: their queue gauges read 0 rather than nothing while the queue has none.
const KINDS: &[&str] = &[racklift_store::STEP_KIND, racklift_store::BMC_ACTION_KIND];

/// Prometheus metrics (public: counts only).
#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Prometheus text exposition", content_type = "text/plain; version=0.0.4",
        body = String)))]
pub async fn serve_metrics(State(state): State<AppState>) -> Response {
    racklift_metrics::scrape(async move {
        if let Err(error) = state.store.sample_gauges(&state.queue, KINDS).await {
            // The store's errors name the layer; the cause is in the chain.
            let mut message = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                message = format!("{message}: {cause}");
                source = std::error::Error::source(cause);
            }
            tracing::warn!(error = %message, "sampling the database for /metrics failed; serving the last values");
        }
    })
    .await
}

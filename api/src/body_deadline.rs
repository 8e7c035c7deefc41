//! The limit on a pause in a request body (`api.body_timeout_secs`): a body that delivers nothing for that long
//! ends the request with `408 Request Timeout` in the error shape (`request_timeout`, field `body`), whatever the
//! handler was reading it with, and the connection is then closed (the rest of the body is never read).
//!
//! tower-http's `TimeoutBody` measures the pause (reset at every frame); its error reaches the handler as a
//! failed body read, which an extractor would answer 400 or 422. The middleware notes that the pause, not the
//! input, ended the read, and answers 408 instead of what the handler made of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use tower_http::timeout::{TimeoutBody, TimeoutError};

use crate::error::ApiError;

/// Middleware (`from_fn_with_state` with the pause limit): see the module documentation.
pub async fn limit_pauses(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    let paused = Arc::new(AtomicBool::new(false));
    let noted = paused.clone();
    let request = request.map(|body| {
        Body::new(TimeoutBody::new(limit, body).map_err(move |error| {
            if error.is::<TimeoutError>() {
                noted.store(true, Ordering::Relaxed);
            }
            error
        }))
    });
    let response = next.run(request).await;
    if paused.load(Ordering::Relaxed) {
        tracing::info!(
            pause_limit_ms = limit.as_millis() as u64,
            "a request body paused past its limit: answered 408"
        );
        return ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!("the request body paused for more than {} ms", limit.as_millis()),
        )
        .field("body")
        .into_response();
    }
    response
}

//! `POST …/servers/{name}:power` and `…:media`: ad-hoc BMC actions, enqueued as fenced jobs on the server's
//! resource key (never run beside a deployment step), idempotent under an `Idempotency-Key` header: the key is
//! remembered per server for the queue's idempotency retention (24 h by default), after its job has finished
//! too, and concurrent copies of one request make one job.

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use racklift_store::{BmcAction, BmcActionPayload, StoreError};
use serde::Deserialize;
use serde_json::json;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerRequest {
    action: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediaRequest {
    action: String,
    image_url: Option<String>,
}

pub fn power_action(req: PowerRequest) -> Result<BmcAction, ApiError> {
    match req.action.as_str() {
        "on" => Ok(BmcAction::PowerOn),
        "off" => Ok(BmcAction::PowerOff),
        "cycle" => Ok(BmcAction::PowerCycle),
        other => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            format!("power action {other:?} is not one of on, off, cycle"),
        )
        .field("action")),
    }
}

pub fn media_action(req: MediaRequest) -> Result<BmcAction, ApiError> {
    match (req.action.as_str(), req.image_url) {
        ("insert", Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
            Ok(BmcAction::InsertMedia { image_url: url })
        }
        ("insert", _) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            "insert needs an http(s) image_url",
        )
        .field("image_url")),
        ("eject", None) => Ok(BmcAction::EjectMedia),
        ("eject", Some(_)) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            "eject takes no image_url",
        )
        .field("image_url")),
        (other, _) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            format!("media action {other:?} is not one of insert, eject"),
        )
        .field("action")),
    }
}

/// Enqueues the action for `name`: 202 with the job id, 200 with the same job id for a retried request with the
/// same key, 422 `idempotency_key_reused` (field `Idempotency-Key`) when the key was used for another request.
pub async fn enqueue(
    state: &AppState,
    caller: &Caller,
    name: &str,
    headers: &HeaderMap,
    action: BmcAction,
) -> Result<Response, ApiError> {
    let key = crate::deploy::idempotency_key(headers)?;
    let server = state.store.server(name).await.map_err(|e| match e {
        StoreError::NotFound { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "server_not_found", e.to_string()).field("name")
        }
        other => other.into(),
    })?;
    if !server.bmc_configured() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "bmc_not_configured",
            format!("server {name} has no BMC address, username and password reference"),
        )
        .field("name"));
    }
    let payload = BmcActionPayload {
        server: name.to_owned(),
        action,
        requested_by: caller.name().to_owned(),
    };
    match state
        .store
        .enqueue_bmc_action(&state.queue, &payload, key.as_deref())
        .await
    {
        Ok((job_id, created)) => {
            tracing::info!(
                server = name,
                job_id,
                created,
                action = payload.action.name(),
                by = caller.name(),
                "BMC action requested"
            );
            let status = if created {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            Ok((
                status,
                Json(json!({ "job_id": job_id, "server": name, "action": payload.action })),
            )
                .into_response())
        }
        Err(StoreError::Conflict { .. }) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "server_busy",
            format!(
                "server {name} has a deployment step or another BMC action running; try again when it ends"
            ),
        )
        .field("name")),
        // The same key for a different request is the client's mistake; answering with the other request's job
        // would report an action that was never asked for (status 422 as in the IETF Idempotency-Key draft).
        Err(StoreError::IdempotencyKeyReused { existing_job, .. }) => Err(ApiError::unprocessable(
            "idempotency_key_reused",
            "Idempotency-Key",
            format!(
                "this Idempotency-Key was used for another request to server {name} (job {existing_job}); use a \
                 new key for a new request"
            ),
        )),
        Err(e) => Err(e.into()),
    }
}

//! `POST …/servers/{name}:power` and `…:media`: ad-hoc BMC actions, enqueued as fenced jobs on the server's
//! resource key (never run beside a deployment step), idempotent under an `Idempotency-Key` header.

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

/// Enqueues the action for `name`: 202 with the job id, 200 for a retried request with the same key.
pub async fn enqueue(
    state: &AppState,
    caller: &Caller,
    name: &str,
    headers: &HeaderMap,
    action: BmcAction,
) -> Result<Response, ApiError> {
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
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok());
    let payload = BmcActionPayload {
        server: name.to_owned(),
        action,
        requested_by: caller.name().to_owned(),
    };
    match state.store.enqueue_bmc_action(&state.queue, &payload, key).await {
        Ok((job_id, created)) => {
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
        Err(e) => Err(e.into()),
    }
}

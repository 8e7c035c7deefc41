//! The dead-letter actions: retry (from the failed state or an earlier trigger), discard, cancel, and bulk retry.
//! Operators act; each action names a reason and is carried out by the store in one transaction, conditional
//! on the dead letter still being open (a second operator gets 409 `already_triaged`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use racklift_store::TriageStatus;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Operator;
use crate::error::{ActionBody, ApiError, ErrorBody};
use crate::openapi::OperatorErrors;
use crate::triage::{DEFAULT_BULK, FilterSpec, MAX_BULK, parse_id, reason, to_json, triage_error};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryBody {
    /// Why; recorded with the caller's token name and role.
    #[schema(value_type = String, required = true, pattern = r"\S", max_length = 2000)]
    reason: Option<String>,
    /// The failed state or an earlier trigger to resume from; deployments only (422 when it cannot be).
    from_state: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscardBody {
    /// Why; recorded with the caller's token name and role.
    #[schema(value_type = String, required = true, pattern = r"\S", max_length = 2000)]
    note: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Why; recorded with the caller's token name and role.
    #[schema(value_type = String, required = true, pattern = r"\S", max_length = 2000)]
    reason: Option<String>,
    /// Leave the media inserted and the server as it is.
    #[serde(default)]
    skip_cleanup: bool,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkBody {
    /// Why; recorded with the caller's token name and role.
    #[schema(value_type = String, required = true, pattern = r"\S", max_length = 2000)]
    reason: Option<String>,
    /// The group to retry: at least one of operation, error_class, message_id, vendor, state, server.
    filter: Option<FilterSpec>,
    /// At most this many (default 100).
    #[schema(minimum = 1, maximum = 1000)]
    limit: Option<u64>,
}

#[derive(Serialize, ToSchema)]
pub struct Discarded {
    dead_letter_id: i64,
    #[schema(example = "discarded")]
    triage_status: &'static str,
    action_id: i64,
}

/// Retry a dead letter, from its failed state or an earlier trigger, with a fresh budget.
#[utoipa::path(post, path = "/1.0/deadletters/{id}/_action/retry", tag = "triage",
    security(("bearer" = ["operator"])),
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Dead letter id")),
    request_body = RetryBody,
    responses(
        (status = 202, description = "Retried: the job enqueued", body = racklift_store::Retried),
        (status = 404, description = "No such dead letter", body = ErrorBody),
        (status = 409, description = "Triaged already, superseded, or the server is busy", body = ErrorBody),
        (status = 422, description = "Cannot be resumed from there", body = ErrorBody),
        OperatorErrors))]
pub async fn retry(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(id): Path<String>,
    ActionBody(b): ActionBody<RetryBody>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let why = reason("reason", b.reason)?;
    let from_state = b
        .from_state
        .map(|s| {
            s.parse::<racklift_deploy::State>().map_err(|_| {
                ApiError::unprocessable(
                    "unknown_state",
                    "from_state",
                    format!("{s:?} is not a deployment state"),
                )
            })
        })
        .transpose()?;
    let r = state
        .store
        .retry_dead_letter(&state.queue, id, &caller.0, &why, from_state)
        .await
        .map_err(triage_error)?;
    tracing::info!(dead_letter_id = id, server = ?r.server, deployment_id = ?r.deployment_id,
        job_id = r.job_id, state = ?r.state, by = caller.name(), "dead letter retried");
    Ok((StatusCode::ACCEPTED, Json(to_json(r)?)).into_response())
}

/// Discard a dead letter, with a note.
#[utoipa::path(post, path = "/1.0/deadletters/{id}/_action/discard", tag = "triage",
    security(("bearer" = ["operator"])),
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Dead letter id")),
    request_body = DiscardBody,
    responses(
        (status = 200, description = "Discarded", body = Discarded),
        (status = 404, description = "No such dead letter", body = ErrorBody),
        (status = 409, description = "Triaged already", body = ErrorBody),
        OperatorErrors))]
pub async fn discard(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(id): Path<String>,
    ActionBody(b): ActionBody<DiscardBody>,
) -> Result<Json<Discarded>, ApiError> {
    let id = parse_id(&id)?;
    let note = reason("note", b.note)?;
    let action_id = state
        .store
        .discard_dead_letter(id, &caller.0, &note)
        .await
        .map_err(triage_error)?;
    tracing::info!(dead_letter_id = id, by = caller.name(), "dead letter discarded");
    Ok(Json(Discarded {
        dead_letter_id: id,
        triage_status: "discarded",
        action_id,
    }))
}

/// Cancel the deployment of a dead letter, cleaning up unless told not to.
#[utoipa::path(post, path = "/1.0/deadletters/{id}/_action/cancel", tag = "triage",
    security(("bearer" = ["operator"])),
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Dead letter id")),
    request_body = CancelBody,
    responses(
        (status = 202, description = "Canceled; the clean-up job enqueued", body = racklift_store::Canceled),
        (status = 200, description = "Canceled without clean-up", body = racklift_store::Canceled),
        (status = 404, description = "No such dead letter", body = ErrorBody),
        (status = 409, description = "Triaged already or finished", body = ErrorBody),
        (status = 422, description = "No deployment to cancel", body = ErrorBody),
        OperatorErrors))]
pub async fn cancel(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(id): Path<String>,
    ActionBody(b): ActionBody<CancelBody>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let why = reason("reason", b.reason)?;
    let c = state
        .store
        .cancel_dead_letter(&state.queue, id, &caller.0, &why, b.skip_cleanup)
        .await
        .map_err(triage_error)?;
    tracing::info!(dead_letter_id = id, deployment_id = c.deployment_id, job_id = ?c.job_id,
        skip_cleanup = c.skip_cleanup, by = caller.name(), "deployment of dead letter canceled");
    let status = if c.job_id.is_some() {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(to_json(c)?)).into_response())
}

/// Retry the open dead letters a filter matches (at least one grouping key must be set, so a bare request cannot
/// retry everything), up to `limit`.
#[utoipa::path(post, path = "/1.0/deadletters/_action/bulk-retry", tag = "triage",
    security(("bearer" = ["operator"])),
    request_body = BulkBody,
    responses(
        (status = 200, description = "What was retried and skipped", body = racklift_store::BulkRetry),
        (status = 422, description = "No filter given", body = ErrorBody),
        OperatorErrors))]
pub async fn bulk_retry(
    State(state): State<AppState>,
    Operator(caller): Operator,
    ActionBody(b): ActionBody<BulkBody>,
) -> Result<Json<Value>, ApiError> {
    let token = &caller.0;
    let why = reason("reason", b.reason)?;
    let spec = b.filter.unwrap_or_default();
    if spec.is_empty() {
        return Err(ApiError::unprocessable(
            "filter_required",
            "filter",
            "name the group to retry: at least one of operation, error_class, message_id, vendor, state, server",
        ));
    }
    let filter = spec.validate("filter.", TriageStatus::Open)?;
    let limit = b.limit.unwrap_or(DEFAULT_BULK);
    if !(1..=MAX_BULK).contains(&limit) {
        return Err(ApiError::invalid("limit", format!("must be 1 to {MAX_BULK}")));
    }
    let r = state
        .store
        .bulk_retry(&state.queue, &filter, token, &why, limit)
        .await
        .map_err(triage_error)?;
    tracing::info!(
        bulk_id = r.bulk_id,
        matched = r.matched,
        retried = r.retried,
        skipped = r.skipped,
        by = caller.name(),
        "dead letters bulk retried"
    );
    Ok(Json(to_json(r)?))
}

//! `/1.0/deadletters` and `/1.0/stuck`: the dead-letter triage. What is stuck, since when and why (lists, group
//! counts, one dead letter with its deployment and timeline, live deployments past their state's budget), and
//! the actions on it (retry, retry from an earlier trigger, cancel, discard, bulk retry).
//!
//! Viewers read; operators act. Every action names a reason, is carried out in one transaction by the store
//! (conditional on the dead letter still being open: a second operator gets 409 `already_triaged`), and is
//! recorded with the caller's token name and role. Every answer passes through [`racklift_store::redact`]: the
//! queue stores whatever context a handler gave it, so nothing secret is trusted to be absent.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use racklift_store::{Cursor, DeadLetterFilter, Role, TriageError, TriageStatus, redact};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::servers::deployment_view;
use crate::validate::action_body;

/// Operations whose dead letters can be listed; rolling runs are named ahead of their handlers.
const OPERATIONS: &[&str] = &["deployment", "bmc_action", "rolling_reboot", "rolling_update"];
const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;
const MAX_GROUPS: i64 = 1000;
const DEFAULT_BULK: u64 = 100;
const MAX_BULK: u64 = 1000;
/// Reasons and notes are for people; a page of text is plenty.
const MAX_REASON: usize = 2000;

/// The filter of a bulk retry's body, and the query of the lists once parsed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilterSpec {
    operation: Option<String>,
    error_class: Option<String>,
    message_id: Option<String>,
    vendor: Option<String>,
    state: Option<String>,
    server: Option<String>,
    min_age_secs: Option<i64>,
}

impl FilterSpec {
    /// Checks every field, naming it (with `prefix`, e.g. `filter.`) when it is wrong.
    fn validate(self, prefix: &str, status: TriageStatus) -> Result<DeadLetterFilter, ApiError> {
        let text = |name: &str, v: Option<String>| -> Result<Option<String>, ApiError> {
            match v {
                Some(v) if v.is_empty() || v.len() > 200 => Err(ApiError::invalid(
                    &format!("{prefix}{name}"),
                    "must be 1 to 200 characters",
                )),
                other => Ok(other),
            }
        };
        if let Some(op) = &self.operation
            && !OPERATIONS.contains(&op.as_str())
        {
            return Err(ApiError::invalid(
                &format!("{prefix}operation"),
                format!("{op:?} is not one of {}", OPERATIONS.join(", ")),
            ));
        }
        if let Some(state) = &self.state
            && state.parse::<racklift_deploy::State>().is_err()
        {
            return Err(ApiError::invalid(
                &format!("{prefix}state"),
                format!("{state:?} is not a deployment state"),
            ));
        }
        if self
            .min_age_secs
            .is_some_and(|s| !(0..=MAX_AGE_SECS).contains(&s))
        {
            return Err(ApiError::invalid(
                &format!("{prefix}min_age_secs"),
                format!("must be between 0 and {MAX_AGE_SECS} (ten years)"),
            ));
        }
        Ok(DeadLetterFilter {
            operation: self.operation,
            error_class: text("error_class", self.error_class)?,
            message_id: text("message_id", self.message_id)?,
            vendor: text("vendor", self.vendor)?,
            state: self.state,
            server: text("server", self.server)?,
            min_age_secs: self.min_age_secs,
            status,
        })
    }

    fn is_empty(&self) -> bool {
        [
            &self.operation,
            &self.error_class,
            &self.message_id,
            &self.vendor,
            &self.state,
            &self.server,
        ]
        .iter()
        .all(|v| v.is_none())
    }
}

/// The query of the list and group endpoints: the filters, `status`, and `limit` / `cursor` where `paged`.
/// Unknown parameters are refused, so a misspelt filter is an error rather than silently everything.
fn parse_query(
    mut q: BTreeMap<String, String>,
    paged: bool,
) -> Result<(DeadLetterFilter, i64, Option<Cursor>), ApiError> {
    let int = |name: &str, v: Option<String>| -> Result<Option<i64>, ApiError> {
        v.map(|s| {
            s.parse::<i64>()
                .map_err(|_| ApiError::invalid(name, format!("{s:?} is not an integer")))
        })
        .transpose()
    };
    let spec = FilterSpec {
        operation: q.remove("operation"),
        error_class: q.remove("error_class"),
        message_id: q.remove("message_id"),
        vendor: q.remove("vendor"),
        state: q.remove("state"),
        server: q.remove("server"),
        min_age_secs: int("min_age_secs", q.remove("min_age_secs"))?,
    };
    let status = match q.remove("status") {
        None => TriageStatus::Open,
        Some(s) => TriageStatus::parse(&s).ok_or_else(|| {
            ApiError::invalid(
                "status",
                format!("{s:?} is not one of open, retried, discarded, resolved, canceled"),
            )
        })?,
    };
    let max = if paged { MAX_PAGE } else { MAX_GROUPS };
    let limit = int("limit", q.remove("limit"))?.unwrap_or(if paged { DEFAULT_PAGE } else { MAX_GROUPS });
    if !(1..=max).contains(&limit) {
        return Err(ApiError::invalid("limit", format!("must be 1 to {max}")));
    }
    let cursor = match q.remove("cursor") {
        Some(c) if paged => Some(
            Cursor::decode(&c)
                .ok_or_else(|| ApiError::invalid("cursor", "not a cursor this list handed out"))?,
        ),
        Some(_) => return Err(ApiError::invalid("cursor", "groups are not paged")),
        None => None,
    };
    if let Some(unknown) = q.keys().next() {
        return Err(ApiError::invalid(unknown, "unknown query parameter"));
    }
    Ok((spec.validate("", status)?, limit, cursor))
}

fn to_json(v: impl serde::Serialize) -> Result<Value, ApiError> {
    let mut v = serde_json::to_value(v).map_err(|e| ApiError::internal(e.to_string()))?;
    redact(&mut v);
    Ok(v)
}

/// `GET /1.0/deadletters`: a page, newest first.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    let (filter, limit, cursor) = parse_query(q, true)?;
    let page = state.store.dead_letters(&filter, cursor, limit).await?;
    Ok(Json(to_json(page)?))
}

/// `GET /1.0/deadletters/groups`: counts per (operation, error class, MessageId, vendor, state).
pub async fn groups(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    let (filter, limit, _) = parse_query(q, false)?;
    let groups = state.store.dead_letter_groups(&filter, limit).await?;
    let total: i64 = groups.iter().map(|g| g.count).sum();
    Ok(Json(to_json(json!({ "groups": groups, "total": total }))?))
}

/// `GET /1.0/stuck?all=`: live deployments past their state's budget (with `all=true`, every live one).
pub async fn stuck(
    State(state): State<AppState>,
    caller: Caller,
    Query(mut q): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    let all = match q.remove("all").as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "all",
                format!("{other:?} is not true or false"),
            ));
        }
    };
    if let Some(unknown) = q.keys().next() {
        return Err(ApiError::invalid(unknown, "unknown query parameter"));
    }
    let items = state.store.stuck_deployments(&state.config.deploy, all).await?;
    Ok(Json(to_json(json!({ "items": items }))?))
}

/// The default and largest window of `/1.0/stats/state-durations`, in hours.
const DEFAULT_WINDOW_HOURS: i64 = 24 * 7;
const MAX_WINDOW_HOURS: i64 = 24 * 366;

/// `GET /1.0/stats/state-durations?window_hours=`: p50 / p95 / max time per state and vendor over the
/// deployments started in the window, beside each state's budget, for tuning timeouts.
pub async fn state_durations(
    State(state): State<AppState>,
    caller: Caller,
    Query(mut q): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    let hours = window_hours(q.remove("window_hours"))?;
    if let Some(unknown) = q.keys().next() {
        return Err(ApiError::invalid(unknown, "unknown query parameter"));
    }
    let items = state
        .store
        .state_durations(hours * 3600, &state.config.deploy)
        .await?;
    Ok(Json(to_json(json!({ "window_hours": hours, "items": items }))?))
}

/// `window_hours` as given (1 to a year), or a week.
pub fn window_hours(v: Option<String>) -> Result<i64, ApiError> {
    let Some(s) = v.filter(|s| !s.is_empty()) else {
        return Ok(DEFAULT_WINDOW_HOURS);
    };
    s.parse::<i64>()
        .ok()
        .filter(|h| (1..=MAX_WINDOW_HOURS).contains(h))
        .ok_or_else(|| {
            ApiError::invalid(
                "window_hours",
                format!("{s:?} is not a whole number of hours from 1 to {MAX_WINDOW_HOURS}"),
            )
        })
}

fn parse_id(s: &str) -> Result<i64, ApiError> {
    s.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::invalid("id", format!("{s:?} is not a dead letter id")))
}

/// `GET /1.0/deadletters/{id}`: the dead letter, its deployment (state, machine, plan, facts, last error, media
/// progress, where it may be resumed), its timeline, the server's live job and lease, and the actions so far.
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    let id = parse_id(&id)?;
    let detail = state.store.dead_letter_detail(id).await.map_err(|e| match e {
        racklift_store::StoreError::NotFound { .. } => not_found(id),
        other => other.into(),
    })?;
    let deployment = match &detail.deployment {
        Some(d) => {
            let m = &d.deployment.machine;
            let mut v = deployment_view(&state.store, d).await?;
            v["seq"] = json!(m.seq);
            v["machine"] = to_json(m)?;
            v["plan"] = to_json(&d.deployment.plan)?;
            v["last_facts"] = json!(d.last_facts);
            v["last_error_detail"] = json!(d.last_error);
            v["resume_states"] = json!(
                racklift_deploy::triage::resume_states(m)
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
            );
            if !d.is_finished() {
                let now = chrono::Utc::now();
                v["progress"] = to_json(racklift_deploy::triage::progress(m, now, &state.config.deploy))?;
            }
            v
        }
        None => Value::Null,
    };
    let doc = json!({
        "dead_letter": detail.dead_letter,
        "deployment": deployment,
        "timeline": detail.timeline,
        "live_job": detail.live_job,
        "actions": detail.actions,
    });
    Ok(Json(to_json(doc)?))
}

fn not_found(id: i64) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("dead letter {id} not found"),
    )
    .field("id")
}

/// A store refusal as answered: the code names the cause, the field what to change.
fn triage_error(e: TriageError) -> ApiError {
    let e = match e {
        TriageError::Store(inner) => return inner.into(),
        TriageError::NotFound { id } => return not_found(id),
        other => other,
    };
    let message = match std::error::Error::source(&e) {
        Some(source) => format!("{e}: {source}"),
        None => e.to_string(),
    };
    let (status, field) = match &e {
        TriageError::AlreadyTriaged { .. } => (StatusCode::CONFLICT, Some("id")),
        TriageError::Superseded { .. } | TriageError::Finished { .. } | TriageError::ServerBusy { .. } => {
            (StatusCode::CONFLICT, None)
        }
        TriageError::NoDeployment { .. } | TriageError::Unsupported { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, Some("id"))
        }
        TriageError::Resume { .. } | TriageError::FromStateNotAllowed { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, Some("from_state"))
        }
        _ => (StatusCode::INTERNAL_SERVER_ERROR, None),
    };
    let err = ApiError::new(status, e.code(), message);
    match field {
        Some(f) => err.field(f),
        None => err,
    }
}

/// The oldest age a filter may ask for: older than anything kept, and far from where an interval overflows.
const MAX_AGE_SECS: i64 = 10 * 365 * 24 * 3600;

/// A required free-text field: who reads the audit later needs to know why.
pub(crate) fn reason(field: &str, v: Option<String>) -> Result<String, ApiError> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Err(ApiError::invalid(field, "is required: say why")),
        Some(r) if r.len() > MAX_REASON => Err(ApiError::invalid(
            field,
            format!("must be at most {MAX_REASON} bytes"),
        )),
        Some(r) => Ok(r.to_owned()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryBody {
    reason: Option<String>,
    from_state: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscardBody {
    note: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    reason: Option<String>,
    #[serde(default)]
    skip_cleanup: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkBody {
    reason: Option<String>,
    filter: Option<FilterSpec>,
    limit: Option<u64>,
}

/// `POST /1.0/deadletters/{id}:retry | :discard | :cancel`. A segment cannot mix a capture with literal text in
/// axum, so `{id}:{action}` is captured whole and split on `:`.
pub async fn action(
    State(state): State<AppState>,
    caller: Caller,
    Path(id_action): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some((id, action)) = id_action.split_once(':') else {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "POST needs an action: {id}:retry, {id}:discard or {id}:cancel",
        ));
    };
    if !matches!(action, "retry" | "discard" | "cancel") {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no action {action:?}; expected retry, discard or cancel"),
        ));
    }
    let token = caller.require(Role::Operator)?;
    let id = parse_id(id)?;
    match action {
        "retry" => {
            let b: RetryBody = action_body(&body)?;
            let why = reason("reason", b.reason)?;
            let from_state = b
                .from_state
                .map(|s| {
                    s.parse::<racklift_deploy::State>().map_err(|_| {
                        ApiError::invalid("from_state", format!("{s:?} is not a deployment state"))
                    })
                })
                .transpose()?;
            let r = state
                .store
                .retry_dead_letter(&state.queue, id, token, &why, from_state)
                .await
                .map_err(triage_error)?;
            tracing::info!(dead_letter_id = id, server = ?r.server, deployment_id = ?r.deployment_id,
                job_id = r.job_id, state = ?r.state, by = caller.name(), "dead letter retried");
            Ok((StatusCode::ACCEPTED, Json(to_json(r)?)).into_response())
        }
        "discard" => {
            let b: DiscardBody = action_body(&body)?;
            let note = reason("note", b.note)?;
            let action_id = state
                .store
                .discard_dead_letter(id, token, &note)
                .await
                .map_err(triage_error)?;
            tracing::info!(dead_letter_id = id, by = caller.name(), "dead letter discarded");
            let v = json!({ "dead_letter_id": id, "triage_status": "discarded", "action_id": action_id });
            Ok(Json(v).into_response())
        }
        _ => {
            let b: CancelBody = action_body(&body)?;
            let why = reason("reason", b.reason)?;
            let c = state
                .store
                .cancel_dead_letter(&state.queue, id, token, &why, b.skip_cleanup)
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
    }
}

/// `POST /1.0/deadletters:bulk-retry`: retries the open dead letters a filter matches (at least one grouping
/// key must be set, so a bare request cannot retry everything), up to `limit`.
pub async fn bulk_retry(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let token = caller.require(Role::Operator)?;
    let b: BulkBody = action_body(&body)?;
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

//! `/1.0/deadletters` and `/1.0/stuck`: the dead-letter triage. What is stuck, since when and why (lists, group
//! counts, one dead letter with its deployment and timeline, live deployments past their state's budget), and
//! the actions on it (retry, retry from an earlier trigger, cancel, discard, bulk retry).
//!
//! Viewers read; operators act. Every action names a reason, is carried out in one transaction by the store
//! (conditional on the dead letter still being open: a second operator gets 409 `already_triaged`), and is
//! recorded with the caller's token name and role. Every answer passes through [`racklift_store::redact`]: the
//! queue stores whatever context a handler gave it, so nothing secret is trusted to be absent.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use racklift_deploy::triage::Progress;
use racklift_deploy::{Machine, Plan};
use racklift_store::{
    Cursor, DeadLetter, DeadLetterFilter, DeadLetterGroup, DeadLetterPage, Event, LiveJob, StateDuration,
    StuckDeployment, TriageAction, TriageError, TriageStatus, redact,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::auth::Viewer;
use crate::error::{ApiError, ErrorBody, Params};
use crate::openapi::ViewerErrors;
use crate::views::DeploymentView;

/// Operations whose dead letters can be listed; rolling runs are named ahead of their handlers.
const OPERATIONS: &[&str] = &["deployment", "bmc_action", "rolling_reboot", "rolling_update"];
const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;
const MAX_GROUPS: i64 = 1000;
pub(crate) const DEFAULT_BULK: u64 = 100;
pub(crate) const MAX_BULK: u64 = 1000;
/// Reasons and notes are for people; a page of text is plenty.
const MAX_REASON: usize = 2000;

/// The filter of a bulk retry's body, and the query of the lists once parsed.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilterSpec {
    #[schema(value_type = Option<Operation>)]
    operation: Option<String>,
    #[schema(min_length = 1, max_length = 200)]
    error_class: Option<String>,
    #[schema(min_length = 1, max_length = 200)]
    message_id: Option<String>,
    #[schema(min_length = 1, max_length = 200)]
    vendor: Option<String>,
    /// A deployment state's name.
    #[schema(value_type = Option<StateName>)]
    state: Option<String>,
    #[schema(min_length = 1, max_length = 200)]
    server: Option<String>,
    #[schema(minimum = 0, maximum = 315360000)]
    min_age_secs: Option<i64>,
}

impl FilterSpec {
    /// Checks every field, naming it (with `prefix`, e.g. `filter.`) when it is wrong.
    pub(crate) fn validate(self, prefix: &str, status: TriageStatus) -> Result<DeadLetterFilter, ApiError> {
        let text = |name: &str, v: Option<String>| -> Result<Option<String>, ApiError> {
            match v {
                Some(v) if v.is_empty() || v.chars().count() > 200 => Err(ApiError::invalid(
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
            return Err(ApiError::unprocessable(
                "unknown_state",
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

    pub(crate) fn is_empty(&self) -> bool {
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

macro_rules! filter_query {
    ($(#[$doc:meta])* $name:ident { $($extra:tt)* }) => {
        $(#[$doc])*
        #[derive(Debug, Default, Deserialize, IntoParams)]
        #[serde(deny_unknown_fields)]
        #[into_params(parameter_in = Query)]
        pub struct $name {
            /// The kind of work.
            #[param(value_type = Option<Operation>)]
            operation: Option<String>,
            /// The error class the work died with.
            #[param(min_length = 1, max_length = 200)]
            error_class: Option<String>,
            /// Redfish MessageId of the last BMC error.
            #[param(min_length = 1, max_length = 200)]
            message_id: Option<String>,
            /// The server's vendor_hint.
            #[param(min_length = 1, max_length = 200)]
            vendor: Option<String>,
            /// The deployment state the work failed in.
            #[param(value_type = Option<StateName>)]
            state: Option<String>,
            /// Server name.
            #[param(min_length = 1, max_length = 200)]
            server: Option<String>,
            /// Dead for at least this long.
            #[param(minimum = 0, maximum = 315360000)]
            min_age_secs: Option<i64>,
            /// Default open.
            #[param(value_type = Option<Status>)]
            status: Option<String>,
            $($extra)*
        }

        impl $name {
            fn filter(&self) -> Result<DeadLetterFilter, ApiError> {
                let status = match &self.status {
                    None => TriageStatus::Open,
                    Some(s) => TriageStatus::parse(s).ok_or_else(|| {
                        ApiError::invalid(
                            "status",
                            format!("{s:?} is not one of open, retried, discarded, resolved, canceled"),
                        )
                    })?,
                };
                FilterSpec {
                    operation: self.operation.clone(),
                    error_class: self.error_class.clone(),
                    message_id: self.message_id.clone(),
                    vendor: self.vendor.clone(),
                    state: self.state.clone(),
                    server: self.server.clone(),
                    min_age_secs: self.min_age_secs,
                }
                .validate("", status)
            }
        }
    };
}

/// The operations whose dead letters are kept (the schema of `operation`).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum Operation {
    Deployment,
    BmcAction,
    RollingReboot,
    RollingUpdate,
}

/// Where a dead letter is in its triage (the schema of `status`).
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum Status {
    Open,
    Retried,
    Discarded,
    Resolved,
    Canceled,
}

/// A deployment state's name (the schema of `state`): the states of the deployment table, so a filter naming
/// none is refused by the document rather than answered 422 `unknown_state`.
pub struct StateName;

impl utoipa::PartialSchema for StateName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some("A deployment state's name."))
            .enum_values(Some(racklift_deploy::State::all().map(|s| s.name())))
            .into()
    }
}

impl ToSchema for StateName {}

filter_query!(
    /// The query of `GET /1.0/deadletters`: filters, then a page.
    ListQuery {
        /// Page size (default 50).
        #[param(minimum = 1, maximum = 500)]
        limit: Option<i64>,
        /// `next_cursor` of the previous page (422 `unknown_cursor` for one no page handed out).
        #[param(pattern = r"^-?[0-9]{1,19}\.[0-9]{1,19}$")]
        cursor: Option<String>,
    }
);

filter_query!(
    /// The query of `GET /1.0/deadletters/groups`.
    GroupsQuery {
        /// At most this many groups (default 1000).
        #[param(minimum = 1, maximum = 1000)]
        limit: Option<i64>,
    }
);

fn limit(v: Option<i64>, default: i64, max: i64) -> Result<i64, ApiError> {
    let limit = v.unwrap_or(default);
    if (1..=max).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::invalid("limit", format!("must be 1 to {max}")))
    }
}

pub(crate) fn to_json(v: impl serde::Serialize) -> Result<Value, ApiError> {
    let mut v = serde_json::to_value(v).map_err(|e| ApiError::internal(e.to_string()))?;
    redact(&mut v);
    Ok(v)
}

/// A page of dead letters, newest first.
#[utoipa::path(get, path = "/1.0/deadletters", tag = "triage", security(("bearer" = ["viewer"])),
    params(ListQuery),
    responses((status = 200, description = "A page, newest first", body = DeadLetterPage), ViewerErrors))]
pub async fn list(
    State(state): State<AppState>,
    _: Viewer,
    Params(q): Params<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let filter = q.filter()?;
    let limit = limit(q.limit, DEFAULT_PAGE, MAX_PAGE)?;
    let cursor = q
        .cursor
        .as_deref()
        .map(|c| {
            Cursor::decode(c).ok_or_else(|| {
                ApiError::unprocessable("unknown_cursor", "cursor", "not a cursor this list handed out")
            })
        })
        .transpose()?;
    let page = state.store.dead_letters(&filter, cursor, limit).await?;
    Ok(Json(to_json(page)?))
}

/// Dead-letter counts per operation, error class, MessageId, vendor and state.
#[utoipa::path(get, path = "/1.0/deadletters/groups", tag = "triage", security(("bearer" = ["viewer"])),
    params(GroupsQuery),
    responses((status = 200, description = "The groups", body = GroupsView), ViewerErrors))]
pub async fn groups(
    State(state): State<AppState>,
    _: Viewer,
    Params(q): Params<GroupsQuery>,
) -> Result<Json<Value>, ApiError> {
    let filter = q.filter()?;
    let limit = limit(q.limit, MAX_GROUPS, MAX_GROUPS)?;
    let groups = state.store.dead_letter_groups(&filter, limit).await?;
    let total: i64 = groups.iter().map(|g| g.count).sum();
    Ok(Json(to_json(GroupsView { groups, total })?))
}

/// Dead letters counted by what they share, and the sum.
#[derive(Serialize, ToSchema)]
pub struct GroupsView {
    groups: Vec<DeadLetterGroup>,
    total: i64,
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StuckQuery {
    /// Include live deployments on track.
    #[serde(default)]
    all: bool,
}

/// Live deployments past their state's budget (with `all=true`, every live one).
#[utoipa::path(get, path = "/1.0/stuck", tag = "triage", security(("bearer" = ["viewer"])),
    params(StuckQuery),
    responses((status = 200, description = "The live deployments", body = StuckView), ViewerErrors))]
pub async fn stuck(
    State(state): State<AppState>,
    _: Viewer,
    Params(q): Params<StuckQuery>,
) -> Result<Json<Value>, ApiError> {
    let items = state.store.stuck_deployments(&state.config.deploy, q.all).await?;
    Ok(Json(to_json(StuckView { items })?))
}

/// Live deployments past their state's budget (or every live one), each with why it looks stuck.
#[derive(Serialize, ToSchema)]
pub struct StuckView {
    items: Vec<StuckDeployment>,
}

/// Time per state and vendor over the window.
#[derive(Serialize, ToSchema)]
pub struct DurationsView {
    window_hours: i64,
    items: Vec<StateDuration>,
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DurationsQuery {
    /// Deployments started this many hours back (default a week).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 8784)]
    window_hours: Option<String>,
}

/// The default and largest window of `/1.0/stats/state-durations`, in hours.
const DEFAULT_WINDOW_HOURS: i64 = 24 * 7;
const MAX_WINDOW_HOURS: i64 = 24 * 366;

/// p50 / p95 / max time per state and vendor over the deployments started in the window, beside each state's
/// budget, for tuning timeouts.
#[utoipa::path(get, path = "/1.0/stats/state-durations", tag = "triage", security(("bearer" = ["viewer"])),
    params(DurationsQuery),
    responses((status = 200, description = "The durations", body = DurationsView), ViewerErrors))]
pub async fn state_durations(
    State(state): State<AppState>,
    _: Viewer,
    Params(q): Params<DurationsQuery>,
) -> Result<Json<Value>, ApiError> {
    // The dashboard's form may send an empty field for "the default"; the API's parameter is an integer.
    if q.window_hours.as_deref() == Some("") {
        return Err(ApiError::invalid(
            "window_hours",
            "must be a whole number of hours",
        ));
    }
    let hours = window_hours(q.window_hours)?;
    let items = state
        .store
        .state_durations(hours * 3600, &state.config.deploy)
        .await?;
    Ok(Json(to_json(DurationsView {
        window_hours: hours,
        items,
    })?))
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

pub(crate) fn parse_id(s: &str) -> Result<i64, ApiError> {
    s.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::invalid("id", format!("{s:?} is not a dead letter id")))
}

/// The dead letter, its deployment (state, machine, plan, facts, last error, media progress, where it may be
/// resumed), its timeline, the server's live job and lease, and the actions so far.
#[utoipa::path(get, path = "/1.0/deadletters/{id}", tag = "triage", security(("bearer" = ["viewer"])),
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Dead letter id")),
    responses(
        (status = 200, description = "The dead letter in detail", body = DeadLetterDetailView),
        (status = 404, description = "No such dead letter", body = ErrorBody),
        ViewerErrors))]
pub async fn show(
    State(state): State<AppState>,
    Viewer(caller): Viewer,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    let detail = state.store.dead_letter_detail(id).await.map_err(|e| match e {
        racklift_store::StoreError::NotFound { .. } => not_found(id),
        other => other.into(),
    })?;
    let deployment = match &detail.deployment {
        Some(d) => {
            let m = &d.deployment.machine;
            Some(TriageDeployment {
                view: DeploymentView::of(&state.store, d, caller.0.role).await?,
                seq: m.seq,
                machine: m.clone(),
                plan: d.deployment.plan.clone(),
                last_facts: d.last_facts.clone(),
                last_error_detail: d.last_error.clone(),
                resume_states: racklift_deploy::triage::resume_states(m)
                    .iter()
                    .map(|s| s.name().to_owned())
                    .collect(),
                progress: (!d.is_finished())
                    .then(|| racklift_deploy::triage::progress(m, chrono::Utc::now(), &state.config.deploy)),
            })
        }
        None => None,
    };
    Ok(Json(to_json(DeadLetterDetailView {
        dead_letter: detail.dead_letter,
        deployment,
        timeline: detail.timeline,
        live_job: detail.live_job,
        actions: detail.actions,
    })?))
}

/// A dead letter, its deployment, its timeline, the live job on its server and the triage so far.
#[derive(Serialize, ToSchema)]
pub struct DeadLetterDetailView {
    dead_letter: DeadLetter,
    /// `null` for work that is not a deployment.
    deployment: Option<TriageDeployment>,
    /// Events of the deployment (or of the server up to the death), oldest first.
    timeline: Vec<Event>,
    live_job: Option<LiveJob>,
    actions: Vec<TriageAction>,
}

/// A dead letter's deployment: the view every deployment has, plus what triage needs to judge it.
#[derive(Serialize, ToSchema)]
pub struct TriageDeployment {
    #[serde(flatten)]
    view: DeploymentView,
    /// The machine's sequence number, bumped on every write.
    seq: u64,
    /// The state machine's record (spec 000).
    #[schema(value_type = Object)]
    machine: Machine,
    /// What the deployment was asked to do, snapshotted when it was created.
    #[schema(value_type = Object)]
    plan: Plan,
    /// The facts of the last step (`null` before one ran).
    last_facts: Option<Value>,
    /// The last error with its server, step and cause.
    last_error_detail: Option<Value>,
    /// The triggers a retry may resume from.
    #[schema(example = json!(["PowerOff", "InsertMedia"]))]
    resume_states: Vec<String>,
    /// How far a live deployment is into its state and budgets; absent once it finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    progress: Option<Progress>,
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
pub(crate) fn triage_error(e: TriageError) -> ApiError {
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

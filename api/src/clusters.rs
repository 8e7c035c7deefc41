//! `/1.0/provisioning/clusters`: clusters of registered servers and their cluster-wide operations (spec 001):
//! `:update`, `:reboot`, `:cancel-operation`, and beyond the spec `:pause` / `:resume`.
//!
//! A request only launches: it reads every member's Incus API (the launch rules need what the servers report
//! now, so a refused launch names its reason at once), seeds the run and stores it with its job in one
//! transaction. The workers drive it from there.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use racklift_bmc_access::incus::ClusterCheckError;
use racklift_deploy::rolling_run::{LaunchRefused, RollingRun, RunKind};
use racklift_deploy::rolling_window::{DailyWindow, Schedule, ScheduleError};
use racklift_store::{NewCluster, OperationControl, RestoreMode, StoreError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::{Admin, Caller, Operator, Viewer};
use crate::deploy::idempotency_key;
use crate::error::{ActionBody, ApiError, Body, ErrorBody};
use crate::openapi::{AdminErrors, OperatorErrors, ViewerErrors};
use crate::validate;
use crate::views::ClusterView;

/// The largest cluster racklift drives (Incus clusters are far smaller in practice).
const MAX_MEMBERS: usize = 100;
/// More applications than an IncusOS server could have installed.
const MAX_APPLICATIONS: usize = 32;
/// A day: a longer post-restore delay is a mistake, not a policy.
const MAX_POST_RESTORE_DELAY_SECS: u64 = 86_400;

/// A cluster to create from registered servers that already form one Incus cluster.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterCreate {
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,62}$", example = "rack1")]
    pub name: String,
    /// Registered servers, in the order rolling operations take them.
    #[schema(schema_with = server_names, example = json!(["s1", "s2", "s3"]))]
    pub servers: Vec<String>,
    /// Wait this long after a member's restore before the next member is evacuated (default: the config's).
    #[schema(maximum = 86400)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_restore_delay_secs: Option<u64>,
    /// `skip`: a restored member's instances stay where the evacuation put them (default: moved back).
    #[serde(default)]
    pub restore_mode: RestoreMode,
}

/// What [`validate::name`] accepts, for the schema of name lists.
const NAME_PATTERN: &str = r"^[a-z0-9][a-z0-9._-]{0,62}$";

fn names(min: usize, max: usize) -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(NAME_PATTERN)),
        )
        .min_items(Some(min))
        .max_items(Some(max))
        .unique_items(true)
        .build()
}

fn server_names() -> utoipa::openapi::schema::Array {
    names(1, MAX_MEMBERS)
}

fn application_names() -> utoipa::openapi::schema::Array {
    names(0, MAX_APPLICATIONS)
}

/// A rolling update: unrestricted, the OS update covers the applications too.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    /// Only the OS decides whether a server needs an update; applications stay on their version.
    #[serde(default)]
    pub os_only: bool,
    /// Only these applications decide; servers without them are skipped.
    #[serde(default)]
    #[schema(schema_with = application_names, example = json!([]))]
    pub applications: Vec<String>,
    /// Start no member before this time (RFC 3339, at most 9999-12-31T23:59:59Z).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "racklift_store::rfc3339::option::deserialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-12-24T22:00:00Z")]
    pub not_before: Option<chrono::DateTime<chrono::Utc>>,
    /// Start members only inside this daily window (UTC); one in flight when it closes is finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<DailyWindow>,
}

/// Why an operator cancels, pauses or resumes; kept with the operation.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ControlRequest {
    #[schema(pattern = r"\S", max_length = 2000)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// When a rolling reboot may start its members; an empty body starts it now.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RebootRequest {
    /// Start no member before this time (RFC 3339, at most 9999-12-31T23:59:59Z).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "racklift_store::rfc3339::option::deserialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-12-24T22:00:00Z")]
    pub not_before: Option<chrono::DateTime<chrono::Utc>>,
    /// Start members only inside this daily window (UTC); one in flight when it closes is finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<DailyWindow>,
}

fn schedule(
    not_before: Option<chrono::DateTime<chrono::Utc>>,
    window: Option<DailyWindow>,
) -> Result<Schedule, ApiError> {
    let schedule = Schedule { not_before, window };
    schedule.validate().map_err(|e| {
        let field = match e {
            ScheduleError::Start => "window.start_utc",
            ScheduleError::Duration => "window.duration_secs",
        };
        ApiError::invalid(field, e.to_string())
    })?;
    Ok(schedule)
}

/// List clusters with their operation in progress (or their last one).
#[utoipa::path(get, path = "/1.0/provisioning/clusters", tag = "clusters", security(("bearer" = ["viewer"])),
    responses((status = 200, description = "Every cluster", body = Vec<ClusterView>), ViewerErrors))]
pub async fn list(State(state): State<AppState>, _: Viewer) -> Result<Json<Vec<ClusterView>>, ApiError> {
    let mut out = Vec::new();
    for cluster in state.store.clusters().await? {
        let op = state.store.latest_cluster_operation(&cluster.name).await?;
        out.push(ClusterView::of(cluster, op.as_ref()));
    }
    Ok(Json(out))
}

/// Create a cluster: every server must be registered, and their Incus APIs must agree they form one cluster.
#[utoipa::path(post, path = "/1.0/provisioning/clusters", tag = "clusters", security(("bearer" = ["admin"])),
    request_body = ClusterCreate,
    responses(
        (status = 201, description = "Created", body = ClusterView),
        (status = 404, description = "A listed server does not exist", body = ErrorBody),
        (status = 409, description = "The name is taken, or a server is in another cluster", body = ErrorBody),
        (status = 422, description = "A server is not registered, or the servers do not form one Incus cluster",
            body = ErrorBody),
        (status = 502, description = "A server's Incus API could not be read", body = ErrorBody),
        AdminErrors))]
pub async fn create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(new): Body<ClusterCreate>,
) -> Result<impl IntoResponse, ApiError> {
    validate::name("name", &new.name)?;
    if new.servers.is_empty() || new.servers.len() > MAX_MEMBERS {
        return Err(ApiError::invalid(
            "servers",
            format!("must list 1 to {MAX_MEMBERS} servers"),
        ));
    }
    for (i, s) in new.servers.iter().enumerate() {
        validate::name(&format!("servers.{i}"), s)?;
        if new.servers[..i].contains(s) {
            return Err(ApiError::invalid(
                &format!("servers.{i}"),
                format!("{s} is listed twice"),
            ));
        }
    }
    if new
        .post_restore_delay_secs
        .is_some_and(|d| d > MAX_POST_RESTORE_DELAY_SECS)
    {
        return Err(ApiError::invalid(
            "post_restore_delay_secs",
            format!("must be at most {MAX_POST_RESTORE_DELAY_SECS}"),
        ));
    }
    let endpoints = state
        .store
        .incus_endpoints(&new.servers)
        .await
        .map_err(|e| match e {
            StoreError::NotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "server_not_found", e.to_string()).field("servers")
            }
            other => other.into(),
        })?;
    let certificate = state
        .incus
        .check_one_cluster(&endpoints)
        .await
        .map_err(cluster_check_error)?;
    let cluster = state
        .store
        .create_cluster(&NewCluster {
            name: new.name.clone(),
            members: new.servers.clone(),
            post_restore_delay_secs: new.post_restore_delay_secs,
            restore_mode: new.restore_mode,
        })
        .await
        .map_err(|e| match e {
            StoreError::Conflict { what: "cluster", .. } => {
                ApiError::new(StatusCode::CONFLICT, "cluster_exists", e.to_string()).field("name")
            }
            StoreError::Conflict { .. } => {
                ApiError::new(StatusCode::CONFLICT, "server_in_cluster", e.to_string()).field("servers")
            }
            StoreError::NotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "server_not_found", e.to_string()).field("servers")
            }
            other => other.into(),
        })?;
    if let Some(sha256) = &certificate {
        state
            .store
            .record_cluster_certificate(&cluster.name, sha256)
            .await?;
        tracing::info!(cluster = %cluster.name, certificate = %sha256, "cluster certificate pinned");
    }
    tracing::info!(cluster = %cluster.name, by = caller.name(), "cluster created");
    Ok((StatusCode::CREATED, Json(ClusterView::of(cluster, None))))
}

fn cluster_check_error(e: ClusterCheckError) -> ApiError {
    match &e {
        ClusterCheckError::NotRegistered { .. } => {
            ApiError::unprocessable("server_not_registered", "servers", e.to_string())
        }
        ClusterCheckError::NotOneCluster { .. } => {
            ApiError::unprocessable("not_one_cluster", "servers", e.to_string())
        }
        ClusterCheckError::CertificateRefused(_) => {
            ApiError::unprocessable("cluster_certificate_refused", "servers", e.to_string())
        }
        ClusterCheckError::NoCertificate { .. } => {
            ApiError::unprocessable("server_certificate_unknown", "servers", e.to_string())
        }
        ClusterCheckError::Unreachable { .. } => {
            ApiError::new(StatusCode::BAD_GATEWAY, "incus_unreachable", e.to_string()).field("servers")
        }
        ClusterCheckError::Identity(_) => {
            ApiError::internal("racklift's client identity could not be loaded")
        }
    }
}

/// Show a cluster with its operation in progress (or its last one): phase, `[k/N]`, each server's step.
#[utoipa::path(get, path = "/1.0/provisioning/clusters/{name}", tag = "clusters", security(("bearer" = ["viewer"])),
    params(("name" = String, Path, example = "rack1", description = "Cluster name")),
    responses(
        (status = 200, description = "The cluster", body = ClusterView),
        (status = 404, description = "No such cluster", body = ErrorBody),
        ViewerErrors))]
pub async fn show(
    State(state): State<AppState>,
    _: Viewer,
    Path(name): Path<String>,
) -> Result<Json<ClusterView>, ApiError> {
    let cluster = state.store.cluster(&name).await.map_err(cluster_not_found)?;
    let op = state.store.latest_cluster_operation(&name).await?;
    Ok(Json(ClusterView::of(cluster, op.as_ref())))
}

/// Delete a cluster (its servers stay registered) when no operation runs on it.
#[utoipa::path(delete, path = "/1.0/provisioning/clusters/{name}", tag = "clusters",
    security(("bearer" = ["admin"])),
    params(("name" = String, Path, example = "rack1", description = "Cluster name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such cluster", body = ErrorBody),
        (status = 409, description = "An operation is running on it", body = ErrorBody),
        AdminErrors))]
pub async fn remove(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.store.delete_cluster(&name).await.map_err(|e| match e {
        StoreError::Conflict { .. } => {
            ApiError::new(StatusCode::CONFLICT, "operation_running", e.to_string()).field("name")
        }
        other => cluster_not_found(other),
    })?;
    tracing::info!(cluster = %name, by = caller.name(), "cluster deleted");
    Ok(StatusCode::NO_CONTENT)
}

fn cluster_not_found(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "cluster_not_found", e.to_string()).field("name")
        }
        other => other.into(),
    }
}

/// Start a rolling update: stage what the servers need, then restart them one at a time.
#[utoipa::path(post, path = "/1.0/provisioning/clusters/{name}/_action/update", tag = "clusters",
    security(("bearer" = ["operator"])),
    params(("name" = String, Path, example = "rack1", description = "Cluster name"),
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,255}$",
            description = "1 to 255 visible ASCII characters")),
    request_body(content = Option<UpdateRequest>, description = "Optional; an empty body is {}"),
    responses(
        (status = 202, description = "Operation started", body = ClusterView),
        (status = 200, description = "The operation this Idempotency-Key already started", body = ClusterView),
        (status = 404, description = "No such cluster", body = ErrorBody),
        (status = 409, description = "Another operation runs on the cluster; the message names it", body = ErrorBody),
        (status = 422, description = "A launch rule refused it; `code` names the rule", body = ErrorBody),
        (status = 502, description = "A member's Incus API could not be read", body = ErrorBody),
        OperatorErrors))]
pub async fn update_action(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(name): Path<String>,
    headers: HeaderMap,
    ActionBody(req): ActionBody<UpdateRequest>,
) -> Result<Response, ApiError> {
    if req.os_only && !req.applications.is_empty() {
        return Err(ApiError::invalid(
            "applications",
            "an update is restricted to the OS or to applications, not both",
        ));
    }
    if req.applications.len() > MAX_APPLICATIONS {
        return Err(ApiError::invalid(
            "applications",
            format!("must list at most {MAX_APPLICATIONS} applications"),
        ));
    }
    for (i, a) in req.applications.iter().enumerate() {
        validate::name(&format!("applications.{i}"), a)?;
        if req.applications[..i].contains(a) {
            return Err(ApiError::invalid(
                &format!("applications.{i}"),
                format!("{a} is listed twice"),
            ));
        }
    }
    let schedule = schedule(req.not_before, req.window)?;
    let kind = RunKind::Update {
        os_only: req.os_only,
        applications: req.applications,
    };
    launch(&state, &caller, &name, &headers, kind, schedule).await
}

/// Start a rolling reboot of every server, one at a time (every server must be idle).
#[utoipa::path(post, path = "/1.0/provisioning/clusters/{name}/_action/reboot", tag = "clusters",
    security(("bearer" = ["operator"])),
    params(("name" = String, Path, example = "rack1", description = "Cluster name"),
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,255}$",
            description = "1 to 255 visible ASCII characters")),
    request_body(content = Option<RebootRequest>, description = "Optional; an empty body is {}: start now"),
    responses(
        (status = 202, description = "Operation started", body = ClusterView),
        (status = 200, description = "The operation this Idempotency-Key already started", body = ClusterView),
        (status = 404, description = "No such cluster", body = ErrorBody),
        (status = 409, description = "Another operation runs on the cluster; the message names it", body = ErrorBody),
        (status = 422, description = "A server is busy; the message names it", body = ErrorBody),
        (status = 502, description = "A member's Incus API could not be read", body = ErrorBody),
        OperatorErrors))]
pub async fn reboot_action(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(name): Path<String>,
    headers: HeaderMap,
    ActionBody(req): ActionBody<RebootRequest>,
) -> Result<Response, ApiError> {
    let schedule = schedule(req.not_before, req.window)?;
    launch(&state, &caller, &name, &headers, RunKind::Reboot, schedule).await
}

async fn launch(
    state: &AppState,
    caller: &Caller,
    name: &str,
    headers: &HeaderMap,
    kind: RunKind,
    schedule: Schedule,
) -> Result<Response, ApiError> {
    let store = &state.store;
    let key = idempotency_key(headers)?;
    let cluster = store.cluster(name).await.map_err(cluster_not_found)?;
    if let Some(key) = &key
        && let Some(op) = store.cluster_operation_by_key(name, key).await?
    {
        return Ok((StatusCode::OK, Json(ClusterView::of(cluster, Some(&op)))).into_response());
    }
    let previous = store.latest_cluster_operation(name).await?;
    if let Some(op) = &previous
        && op.status.is_live()
    {
        return Err(running(op));
    }
    let mut endpoints = store.cluster_endpoints(name).await?;
    // No certificate recorded (a repin cleared it): learn it before reading the members by it. A member that
    // cannot be read now is left to the poll, which reports it to the launch rules.
    match state.incus.learn_cluster_certificate(&endpoints).await {
        Ok(Some(sha256)) => {
            if store.record_cluster_certificate(name, &sha256).await? {
                tracing::info!(cluster = %name, certificate = %sha256, "cluster certificate pinned");
            }
            endpoints = store.cluster_endpoints(name).await?;
        }
        Ok(None) => {}
        Err(e @ ClusterCheckError::CertificateRefused(_)) => return Err(cluster_check_error(e)),
        Err(e) => tracing::debug!(cluster = %name, error = %e, "cluster certificate not learned yet"),
    }
    let facts = state.incus.poll(&endpoints).await.map_err(cluster_check_error)?;
    let mut run = RollingRun::launch(kind, &facts).map_err(launch_refused)?;
    if let Some(previous) = &previous {
        run = run.after(&previous.run);
    }
    run.schedule = schedule;
    let (op, created) = store
        .start_cluster_operation(&state.queue, name, &run, key.as_deref(), caller.name())
        .await
        .map_err(|e| match e {
            StoreError::Conflict { .. } => {
                ApiError::new(StatusCode::CONFLICT, "operation_running", e.to_string()).field("name")
            }
            other => other.into(),
        })?;
    tracing::info!(cluster = %name, operation = run.kind.operation(), operation_id = op.id, by = caller.name(),
        "cluster operation started");
    let status = if created {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(ClusterView::of(cluster, Some(&op)))).into_response())
}

fn running(op: &racklift_store::ClusterOperation) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "operation_running",
        format!(
            "operation {} ({}) is {} on the cluster; cancel it first",
            op.id,
            op.run.kind.operation(),
            op.status.as_str()
        ),
    )
    .field("name")
}

fn launch_refused(e: LaunchRefused) -> ApiError {
    match &e {
        LaunchRefused::Busy { .. } => ApiError::unprocessable("server_busy", "name", e.to_string()),
        LaunchRefused::ApplicationNowhere { .. } => {
            ApiError::unprocessable("application_not_installed", "applications", e.to_string())
        }
        LaunchRefused::NothingToUpdate => ApiError::unprocessable("nothing_to_update", "body", e.to_string()),
        LaunchRefused::Unreadable { .. } => {
            ApiError::new(StatusCode::BAD_GATEWAY, "incus_unreachable", e.to_string()).field("name")
        }
    }
}

/// Cancel the operation in progress: the server being worked on is restored (without its reboot if that has
/// not started), the others are left as they are.
#[utoipa::path(post, path = "/1.0/provisioning/clusters/{name}/_action/cancel-operation", tag = "clusters",
    security(("bearer" = ["operator"])),
    params(("name" = String, Path, example = "rack1", description = "Cluster name")),
    request_body(content = Option<ControlRequest>, description = "Optional; an empty body is {}"),
    responses(
        (status = 202, description = "Cancel requested", body = ClusterView),
        (status = 404, description = "No such cluster, or no operation runs on it", body = ErrorBody),
        OperatorErrors))]
pub async fn cancel_action(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(name): Path<String>,
    ActionBody(req): ActionBody<ControlRequest>,
) -> Result<Response, ApiError> {
    control(&state, &caller, &name, OperationControl::Cancel, req).await
}

/// Pause the operation after the step in flight; `:resume` goes on from there.
#[utoipa::path(post, path = "/1.0/provisioning/clusters/{name}/_action/pause", tag = "clusters",
    security(("bearer" = ["operator"])),
    params(("name" = String, Path, example = "rack1", description = "Cluster name")),
    request_body(content = Option<ControlRequest>, description = "Optional; an empty body is {}"),
    responses(
        (status = 202, description = "Pause requested", body = ClusterView),
        (status = 404, description = "No such cluster, or no operation runs on it", body = ErrorBody),
        OperatorErrors))]
pub async fn pause_action(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(name): Path<String>,
    ActionBody(req): ActionBody<ControlRequest>,
) -> Result<Response, ApiError> {
    control(&state, &caller, &name, OperationControl::Pause, req).await
}

/// Resume a paused operation (paused by an operator or by the health gate).
#[utoipa::path(post, path = "/1.0/provisioning/clusters/{name}/_action/resume", tag = "clusters",
    security(("bearer" = ["operator"])),
    params(("name" = String, Path, example = "rack1", description = "Cluster name")),
    request_body(content = Option<ControlRequest>, description = "Optional; an empty body is {}"),
    responses(
        (status = 202, description = "Resumed", body = ClusterView),
        (status = 404, description = "No such cluster, or no operation runs on it", body = ErrorBody),
        OperatorErrors))]
pub async fn resume_action(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(name): Path<String>,
    ActionBody(req): ActionBody<ControlRequest>,
) -> Result<Response, ApiError> {
    control(&state, &caller, &name, OperationControl::Resume, req).await
}

async fn control(
    state: &AppState,
    caller: &Caller,
    name: &str,
    what: OperationControl,
    req: ControlRequest,
) -> Result<Response, ApiError> {
    if let Some(reason) = &req.reason {
        crate::triage::reason("reason", Some(reason.clone()))?;
    }
    let cluster = state.store.cluster(name).await.map_err(cluster_not_found)?;
    let op = state
        .store
        .request_cluster_control(&state.queue, name, what)
        .await
        .map_err(|e| match e {
            StoreError::NotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "no_operation_running", e.to_string()).field("name")
            }
            other => other.into(),
        })?;
    tracing::info!(cluster = %name, operation_id = op.id, control = ?what, by = caller.name(),
        reason = req.reason.as_deref().unwrap_or(""), "cluster operation control requested");
    Ok((StatusCode::ACCEPTED, Json(ClusterView::of(cluster, Some(&op)))).into_response())
}

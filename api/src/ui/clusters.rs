//! `GET /ui/clusters`: every cluster with its operation in progress (or its last one), live-refreshing like the
//! dead-letter list; `GET /ui/clusters/{name}`: one cluster's run server by server, with the operator's forms:
//! cancel, pause, resume, and retry of a failed run, or a retry skipping the server it failed on. The views are
//! the JSON API's own ([`ClusterView`]), and the controls the same store calls as
//! `/1.0/provisioning/clusters/{name}/_action/…`.
//!
//! A retry starts the failed run's operation again as a new one seeded by
//! [`RollingRun::resume_from`]: the servers it had restarted stay done, the others' records start fresh. Its
//! idempotency key names the failed operation, so a form submitted twice starts one retry.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use racklift_deploy::rolling_run::RollingRun;
use racklift_store::{OperationControl, OperationStatus, StoreError};

use super::actions::{authorize, required};
use super::pages::html_with;
use super::view::{dash, query_string, redact_string, short};
use super::{Session, error_page, render, see_other, take_flash};
use crate::AppState;
use crate::views::{ClusterOperationView, ClusterView};

fn internal(e: StoreError) -> Box<Response> {
    tracing::error!(error = ?e, "ui store call failed");
    Box::new(error_page(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal error; see the server log",
    ))
}

fn not_found() -> Response {
    error_page(StatusCode::NOT_FOUND, "no such cluster")
}

/// The dead letters a failed run left, filtered to its operation and the server it failed on.
fn dead_letters_href(op: &ClusterOperationView) -> Option<String> {
    if op.status != OperationStatus::Failed {
        return None;
    }
    let mut pairs = vec![("operation", op.operation.as_str())];
    if let Some(server) = &op.failed_server {
        pairs.push(("server", server.as_str()));
    }
    Some(format!("/ui{}", query_string(pairs.into_iter())))
}

fn time(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// One cluster as a row of the list.
struct ClusterRow {
    name: String,
    members: usize,
    operation: String,
    status: String,
    progress: String,
    description: String,
    current: String,
    failed: String,
    first_error: String,
    last_error: String,
    dead_letters: Option<String>,
}

impl ClusterRow {
    fn new(v: &ClusterView) -> ClusterRow {
        let Some(op) = &v.operation else {
            return ClusterRow {
                name: v.name.clone(),
                members: v.servers.len(),
                operation: "—".into(),
                status: "none yet".into(),
                progress: "—".into(),
                description: "—".into(),
                current: "—".into(),
                failed: "—".into(),
                first_error: "—".into(),
                last_error: "—".into(),
                dead_letters: None,
            };
        };
        let failed = op.status == OperationStatus::Failed;
        ClusterRow {
            name: v.name.clone(),
            members: v.servers.len(),
            operation: format!("#{} {}", op.id, op.operation),
            status: op.status.as_str().to_owned(),
            progress: op.progress.clone(),
            description: redact_string(&op.status_description),
            current: match (&op.current_server, &op.current_step) {
                (Some(s), Some(step)) => format!("{s}: {step}"),
                (Some(s), None) => s.clone(),
                _ => "—".into(),
            },
            failed: match (&op.failed_server, &op.failed_step) {
                (Some(s), Some(step)) if failed => format!("{s}: {step}"),
                (Some(s), None) if failed => s.clone(),
                _ => "—".into(),
            },
            first_error: if failed {
                redact_string(&short(&op.first_error, 160))
            } else {
                "—".into()
            },
            last_error: if failed {
                redact_string(&short(&op.last_error, 160))
            } else {
                "—".into()
            },
            dead_letters: dead_letters_href(op),
        }
    }
}

async fn views(state: &AppState) -> Result<Vec<ClusterView>, StoreError> {
    let mut out = Vec::new();
    for cluster in state.store.clusters().await? {
        let op = state.store.latest_cluster_operation(&cluster.name).await?;
        out.push(ClusterView::of(cluster, op.as_ref()));
    }
    Ok(out)
}

fn updated() -> String {
    chrono::Utc::now().format("%H:%M:%S UTC").to_string()
}

/// The live part of the list page.
#[derive(Template)]
#[template(path = "ui/clusters_live.html")]
struct ListLive {
    rows: Vec<ClusterRow>,
    updated: String,
}

async fn list_live(state: &AppState) -> Result<String, Box<Response>> {
    let rows = views(state).await.map_err(internal)?;
    render(&ListLive {
        rows: rows.iter().map(ClusterRow::new).collect(),
        updated: updated(),
    })
}

#[derive(Template)]
#[template(path = "ui/clusters.html")]
struct ListPage {
    me: String,
    role: String,
    csrf: String,
    flash: Option<String>,
    live: String,
}

/// `GET /ui/clusters`.
pub async fn list(State(state): State<AppState>, session: Session, headers: HeaderMap) -> Response {
    let live = match list_live(&state).await {
        Ok(html) => html,
        Err(r) => return *r,
    };
    let (flash, clear) = take_flash(&headers);
    let page = ListPage {
        me: session.token.name.clone(),
        role: session.token.role.as_str().to_owned(),
        csrf: session.csrf(),
        flash,
        live,
    };
    html_with(render(&page), clear)
}

/// `GET /ui/fragments/clusters`: the list's live part alone, for the page's five-second refresh.
pub async fn list_fragment(State(state): State<AppState>, _session: Session) -> Response {
    match list_live(&state).await {
        Ok(html) => Html(html).into_response(),
        Err(r) => *r,
    }
}

/// One server's record in the run.
struct ServerRow {
    name: String,
    step: String,
    attempts: u32,
    reboot_pending: &'static str,
    kept_evacuated: &'static str,
    done: &'static str,
    first_error: String,
    last_error: String,
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// The live part of a cluster's page: its operation and each server's record.
#[derive(Template)]
#[template(path = "ui/cluster_live.html")]
struct DetailLive {
    status: String,
    facts: Vec<(String, String)>,
    servers: Vec<ServerRow>,
    /// The members, when no operation ever ran.
    members: Vec<String>,
    dead_letters: Option<String>,
    updated: String,
}

async fn cluster_view(state: &AppState, name: &str) -> Result<Option<ClusterView>, Box<Response>> {
    if crate::validate::name("name", name).is_err() {
        return Ok(None);
    }
    let cluster = match state.store.cluster(name).await {
        Ok(c) => c,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(internal(e)),
    };
    let op = state
        .store
        .latest_cluster_operation(name)
        .await
        .map_err(internal)?;
    Ok(Some(ClusterView::of(cluster, op.as_ref())))
}

fn detail_live(v: &ClusterView) -> Result<String, Box<Response>> {
    let kv = |k: &str, v: String| (k.to_owned(), v);
    let Some(op) = &v.operation else {
        return render(&DetailLive {
            status: "none yet".into(),
            facts: Vec::new(),
            servers: Vec::new(),
            members: v.servers.clone(),
            dead_letters: None,
            updated: updated(),
        });
    };
    let mut facts = vec![
        kv("operation", format!("#{} {}", op.id, op.operation)),
        kv("progress", op.progress.clone()),
        kv("status description", redact_string(&op.status_description)),
        kv("phase", op.phase.clone()),
        kv(
            "current server",
            match (&op.current_server, &op.current_step) {
                (Some(s), Some(step)) => format!("{s} ({step})"),
                (Some(s), None) => s.clone(),
                _ => "—".into(),
            },
        ),
        kv("status reason", redact_string(&dash(&op.status_reason))),
    ];
    if op.status == OperationStatus::Failed {
        facts.push(kv("failed server", dash(&op.failed_server)));
        facts.push(kv("failed step", dash(&op.failed_step)));
        facts.push(kv("first error", redact_string(&dash(&op.first_error))));
        facts.push(kv("last error", redact_string(&dash(&op.last_error))));
    }
    if op.operation == "rolling_update" {
        let scope = if op.os_only {
            "the OS only".to_owned()
        } else if !op.applications.is_empty() {
            format!("applications {}", op.applications.join(", "))
        } else {
            "unrestricted".to_owned()
        };
        facts.push(kv("update of", scope));
    }
    if !op.pending_reboot.is_empty() {
        facts.push(kv("reboot pending", op.pending_reboot.join(", ")));
    }
    if op.cancel_requested {
        facts.push(kv("cancel", "requested".into()));
    }
    if op.pause_requested && op.status == OperationStatus::Running {
        facts.push(kv("pause", "requested".into()));
    }
    facts.push(kv("requested by", op.requested_by.clone()));
    facts.push(kv("started", time(&op.created_at)));
    facts.push(kv("updated", time(&op.updated_at)));
    if let Some(at) = &op.finished_at {
        facts.push(kv("finished", time(at)));
    }
    render(&DetailLive {
        status: op.status.as_str().to_owned(),
        facts,
        servers: op
            .servers
            .iter()
            .map(|s| ServerRow {
                name: s.name.clone(),
                step: dash(&s.step),
                attempts: s.attempts,
                reboot_pending: yes(s.reboot_pending),
                kept_evacuated: yes(s.kept_evacuated),
                done: match (s.skipped, s.done) {
                    (true, _) => "skipped",
                    (false, done) => yes(done),
                },
                first_error: redact_string(&dash(&s.first_error)),
                last_error: redact_string(&dash(&s.last_error)),
            })
            .collect(),
        members: Vec::new(),
        dead_letters: dead_letters_href(op),
        updated: updated(),
    })
}

#[derive(Template)]
#[template(path = "ui/cluster.html")]
struct DetailPage {
    me: String,
    role: String,
    can_act: bool,
    csrf: String,
    flash: Option<String>,
    name: String,
    members: String,
    post_restore_delay: String,
    fragment_url: String,
    live: String,
    /// The forms that apply to the operation as the page was opened.
    can_cancel: bool,
    can_pause: bool,
    can_resume: bool,
    can_retry: bool,
    /// The server a retry may skip: the one the failed run ended on.
    skip_server: Option<String>,
}

/// `GET /ui/clusters/{name}`.
pub async fn detail(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let v = match cluster_view(&state, &name).await {
        Ok(Some(v)) => v,
        Ok(None) => return not_found(),
        Err(r) => return *r,
    };
    let live = match detail_live(&v) {
        Ok(html) => html,
        Err(r) => return *r,
    };
    let status = v.operation.as_ref().map(|op| op.status);
    let (flash, clear) = take_flash(&headers);
    let page = DetailPage {
        me: session.token.name.clone(),
        role: session.token.role.as_str().to_owned(),
        can_act: session.can_act(),
        csrf: session.csrf(),
        flash,
        members: v.servers.join(", "),
        post_restore_delay: v
            .post_restore_delay_secs
            .map(|d| format!("{d} s"))
            .unwrap_or_else(|| "the configuration's".into()),
        fragment_url: format!("/ui/fragments/clusters/{}", v.name),
        name: v.name,
        live,
        can_cancel: status.is_some_and(OperationStatus::is_live),
        can_pause: status == Some(OperationStatus::Running),
        can_resume: status == Some(OperationStatus::Paused),
        can_retry: status == Some(OperationStatus::Failed),
        skip_server: v
            .operation
            .as_ref()
            .filter(|op| op.status == OperationStatus::Failed)
            .and_then(|op| op.failed_server.clone()),
    };
    html_with(render(&page), clear)
}

/// `GET /ui/fragments/clusters/{name}`: the cluster page's live part alone.
pub async fn detail_fragment(
    State(state): State<AppState>,
    _session: Session,
    Path(name): Path<String>,
) -> Response {
    let v = match cluster_view(&state, &name).await {
        Ok(Some(v)) => v,
        Ok(None) => return not_found(),
        Err(r) => return *r,
    };
    match detail_live(&v) {
        Ok(html) => Html(html).into_response(),
        Err(r) => *r,
    }
}

/// `POST /ui/clusters/{name}/{cancel-operation|pause|resume|retry|skip-server}`, each with a required reason
/// (`skip-server` also with the `server` to skip).
pub async fn act(
    State(state): State<AppState>,
    session: Session,
    Path((name, action)): Path<(String, String)>,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    if let Err(r) = authorize(&session, &form, "clusters") {
        return *r;
    }
    let control = match action.as_str() {
        "cancel-operation" => Some(OperationControl::Cancel),
        "pause" => Some(OperationControl::Pause),
        "resume" => Some(OperationControl::Resume),
        "retry" | "skip-server" => None,
        _ => {
            return error_page(
                StatusCode::NOT_FOUND,
                "no such action; expected cancel-operation, pause, resume, retry or skip-server",
            );
        }
    };
    if crate::validate::name("name", &name).is_err() {
        return not_found();
    }
    let back = format!("/ui/clusters/{name}");
    let why = match required(&form, "reason") {
        Ok(w) => w,
        Err(msg) => return see_other(&back, Some(&format!("nothing done: {msg}"))),
    };
    let skip = if action == "skip-server" {
        match required(&form, "server") {
            Ok(server) => Some(server),
            Err(msg) => return see_other(&back, Some(&format!("nothing done: {msg}"))),
        }
    } else {
        None
    };
    match state.store.cluster(&name).await {
        Ok(_) => {}
        Err(StoreError::NotFound { .. }) => return not_found(),
        Err(e) => return *internal(e),
    }
    let by = &session.token.name;
    let outcome = match control {
        Some(control) => match state
            .store
            .request_cluster_control(&state.queue, &name, control)
            .await
        {
            Ok(op) => {
                tracing::info!(cluster = %name, operation_id = op.id, control = ?control, by = %by,
                    reason = %why, "cluster operation control requested from the dashboard");
                Ok(format!(
                    "{} requested for operation {} ({})",
                    match control {
                        OperationControl::Cancel => "cancel",
                        OperationControl::Pause => "pause",
                        OperationControl::Resume => "resume",
                    },
                    op.id,
                    op.run.kind.operation()
                ))
            }
            Err(StoreError::NotFound { .. }) => Err("no operation runs on the cluster".to_owned()),
            Err(e) => return *internal(e),
        },
        None => retry(&state, &name, skip.as_deref(), by, &why).await,
    };
    match outcome {
        Ok(msg) => see_other(&back, Some(&msg)),
        Err(msg) => see_other(&back, Some(&format!("{action} refused: {msg}"))),
    }
}

/// Starts the cluster's failed operation again, as a new operation resumed from it, skipping `skip` if given.
async fn retry(
    state: &AppState,
    name: &str,
    skip: Option<&str>,
    by: &str,
    why: &str,
) -> Result<String, String> {
    let failed = match state.store.latest_cluster_operation(name).await {
        Ok(Some(op)) if op.status == OperationStatus::Failed => op,
        Ok(Some(op)) => {
            return Err(format!(
                "operation {} is {}; only a failed run is retried",
                op.id,
                op.status.as_str()
            ));
        }
        Ok(None) => return Err("no operation ran on the cluster yet".into()),
        Err(e) => {
            tracing::error!(error = ?e, "ui store call failed");
            return Err("internal error; see the server log".into());
        }
    };
    let run = match skip {
        Some(server) => RollingRun::resume_skipping(&failed.run, server).map_err(|e| e.to_string())?,
        None => RollingRun::resume_from(&failed.run),
    };
    let (done, total) = run.progress();
    // One retry per failed run, whichever form started it.
    let key = format!("ui-retry-of/{}", failed.id);
    match state
        .store
        .start_cluster_operation(&state.queue, name, &run, Some(&key), by)
        .await
    {
        Ok((op, true)) => {
            tracing::info!(cluster = %name, operation = run.kind.operation(), operation_id = op.id,
                retry_of = failed.id, skipped = skip.unwrap_or(""), by = %by, reason = %why,
                "cluster operation retried from the dashboard");
            let skipped = skip.map(|s| format!(", {s} skipped")).unwrap_or_default();
            Ok(format!(
                "operation {} ({}) retried as operation {}{skipped}: [{done}/{total}] done already",
                failed.id,
                run.kind.operation(),
                op.id
            ))
        }
        Ok((op, false)) => Ok(format!(
            "operation {} was already retried as operation {}",
            failed.id, op.id
        )),
        Err(StoreError::Conflict { name, .. }) => Err(format!("an operation runs on {name}")),
        Err(e) => {
            tracing::error!(error = ?e, "ui cluster retry failed");
            Err("internal error; see the server log".into())
        }
    }
}

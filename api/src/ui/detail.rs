//! `GET /ui/deadletters/{id}`: one dead letter with everything needed to decide what to do about it: the
//! deployment's timeline (each transition and BMC call with its status, duration and fence), first and last
//! error, the last BMC facts (redacted), media progress, the live job's lease holder, and what was done so far.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use racklift_store::{DeadLetterDetail, Event, StoreError};
use serde_json::Value;

use super::pages::html_with;
use super::view::{dash, human_secs, redact, redact_string};
use super::{Session, error_page, render, take_flash};
use crate::AppState;

/// One event of the timeline.
struct EventRow {
    at: String,
    kind: String,
    what: String,
    status: String,
    duration_ms: String,
    fence: String,
    error: String,
}

impl EventRow {
    fn new(e: &Event) -> EventRow {
        let mut d = e.detail.clone();
        redact(&mut d);
        let text = |k: &str| match &d[k] {
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let what = match e.kind.as_str() {
            "transition" => {
                let cause = text("cause");
                format!(
                    "{} → {}{}",
                    text("from"),
                    text("to"),
                    if cause.is_empty() {
                        cause
                    } else {
                        format!(" ({cause})")
                    }
                )
            }
            // The outcome's kind; its error has its own column (older events carry the whole outcome).
            "bmc_call" => {
                let outcome = text("outcome");
                let outcome = outcome.split(" {").next().unwrap_or_default();
                format!("{}: {outcome}", text("action"))
            }
            _ => d.to_string(),
        };
        let status = match text("bmc_status") {
            s if s.is_empty() => text("status"),
            s => s,
        };
        EventRow {
            at: e.at.format("%H:%M:%S%.3f").to_string(),
            kind: e.kind.clone(),
            what,
            status,
            duration_ms: text("duration_ms"),
            fence: e.fence.map(|f| f.to_string()).unwrap_or_default(),
            error: text("error"),
        }
    }
}

struct ActionRow {
    at: String,
    action: String,
    actor: String,
    reason: String,
}

#[derive(Template)]
#[template(path = "ui/detail.html")]
struct DetailPage {
    me: String,
    role: String,
    can_act: bool,
    csrf: String,
    flash: Option<String>,
    id: i64,
    open: bool,
    triage: String,
    facts: Vec<(String, String)>,
    first_error: String,
    last_error: String,
    deployment: Vec<(String, String)>,
    timeline: Vec<EventRow>,
    bmc_facts: Option<String>,
    error_detail: Option<String>,
    live_job: Vec<(String, String)>,
    actions: Vec<ActionRow>,
    /// Where a retry may resume; the last (the failed state) is preselected.
    resume_states: Vec<String>,
    /// Whether the dead letter has a deployment to cancel.
    cancellable: bool,
}

fn pretty(v: &Option<Value>) -> Option<String> {
    let mut v = v.clone().filter(|v| !v.is_null())?;
    redact(&mut v);
    serde_json::to_string_pretty(&v).ok()
}

fn kv(k: &str, v: impl Into<String>) -> (String, String) {
    (k.to_owned(), v.into())
}

/// The deployment's numbers: state, attempts, timing, media bytes read of the image size.
async fn deployment_facts(
    state: &AppState,
    d: &DeadLetterDetail,
) -> Result<Vec<(String, String)>, StoreError> {
    let Some(rec) = &d.deployment else {
        return Ok(Vec::new());
    };
    let m = &rec.deployment.machine;
    let (readers, last_read) = state.store.media_progress(rec.id).await?;
    let read = readers.values().map(|r| r.total()).max();
    let size = rec.deployment.plan.image_size_bytes;
    let media = match (read, size) {
        (Some(r), Some(s)) if s > 0 => format!("{r} of {s} bytes ({:.0}%)", r as f64 * 100.0 / s as f64),
        (Some(r), None) => format!("{r} bytes (image size unknown)"),
        (None, Some(s)) => format!("nothing read of {s} bytes"),
        _ => "nothing read".into(),
    };
    let mut out = vec![
        kv("deployment", format!("#{} (seq {})", rec.id, m.seq)),
        kv("state", m.state.name()),
        kv("retries", m.retries.to_string()),
        kv("BIOS fallbacks", m.bios_fallbacks.to_string()),
        kv(
            "started",
            m.started_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        ),
        kv(
            "in state since",
            m.state_entered_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        ),
        kv("requested by", rec.requested_by.clone()),
        kv("media read", media),
    ];
    if let Some(at) = last_read {
        out.push(kv(
            "last media read",
            at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        ));
    }
    if let Some(f) = &m.failure {
        out.push(kv(
            "failed in",
            format!("{} ({})", f.state.name(), f.cause.name()),
        ));
        let last: Option<racklift_deploy::Facts> = rec
            .last_facts
            .clone()
            .and_then(|v| serde_json::from_value(v).ok());
        out.push(kv(
            "why",
            racklift_deploy::explain::failure_sentence(&rec.server, m, last.as_ref()),
        ));
    }
    if !rec.is_finished() {
        let p = racklift_deploy::triage::progress(m, chrono::Utc::now(), &state.config.deploy);
        out.push(kv(
            "time in state",
            format!(
                "{} of {} budget",
                human_secs(p.time_in_state_secs),
                human_secs(p.state_budget_secs as i64)
            ),
        ));
    }
    Ok(out)
}

/// `GET /ui/deadletters/{id}`.
pub async fn detail(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let Some(id) = id.parse::<i64>().ok().filter(|i| *i > 0) else {
        return error_page(StatusCode::NOT_FOUND, "no such dead letter");
    };
    let internal = |e: StoreError| {
        tracing::error!(error = ?e, "ui store call failed");
        error_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error; see the server log",
        )
    };
    let d = match state.store.dead_letter_detail(id).await {
        Ok(d) => d,
        Err(StoreError::NotFound { .. }) => return error_page(StatusCode::NOT_FOUND, "no such dead letter"),
        Err(e) => return internal(e),
    };
    let deployment = match deployment_facts(&state, &d).await {
        Ok(f) => f,
        Err(e) => return internal(e),
    };
    let s = &d.dead_letter.summary;
    let facts = vec![
        kv("server", dash(&s.server)),
        kv("vendor", dash(&s.vendor)),
        kv("operation", s.operation.clone().unwrap_or_else(|| s.kind.clone())),
        kv("failed state", dash(&s.state)),
        kv("why the queue gave up", s.reason.clone()),
        kv("cause", dash(&s.cause)),
        kv("error class", dash(&s.error_class)),
        kv("Redfish MessageId", dash(&s.message_id)),
        kv(
            "HTTP status",
            s.bmc_status
                .as_ref()
                .map(|v| v.to_string())
                .unwrap_or_else(|| "—".into()),
        ),
        kv("job attempts", format!("{}/{}", s.attempts, s.max_attempts)),
        kv(
            "dead since",
            format!(
                "{} ({} ago)",
                s.dead_at.format("%Y-%m-%d %H:%M:%S UTC"),
                human_secs(s.age_secs)
            ),
        ),
        kv(
            "fence",
            d.dead_letter
                .fence
                .map(|f| f.to_string())
                .unwrap_or_else(|| "—".into()),
        ),
    ];
    let live_job = match &d.live_job {
        Some(j) => vec![
            kv("job", format!("#{} {} ({})", j.id, j.kind, j.state)),
            kv("attempts", format!("{}/{}", j.attempts, j.max_attempts)),
            kv(
                "lease holder",
                j.leased_by.clone().unwrap_or_else(|| "not leased".into()),
            ),
            kv(
                "lease expires",
                j.lease_expires_at
                    .map(|t| t.format("%H:%M:%S UTC").to_string())
                    .unwrap_or_else(|| "—".into()),
            ),
            kv(
                "fence",
                j.fence.map(|f| f.to_string()).unwrap_or_else(|| "—".into()),
            ),
        ],
        None => Vec::new(),
    };
    let (bmc_facts, error_detail) = match &d.deployment {
        Some(rec) => (pretty(&rec.last_facts), pretty(&rec.last_error)),
        None => (pretty(&Some(d.dead_letter.context["last_facts"].clone())), None),
    };
    let resume_states = d
        .deployment
        .as_ref()
        .map(|r| {
            racklift_deploy::triage::resume_states(&r.deployment.machine)
                .iter()
                .map(|s| s.name().to_owned())
                .collect()
        })
        .unwrap_or_default();
    let (flash, clear) = take_flash(&headers);
    let page = DetailPage {
        me: session.token.name.clone(),
        role: session.token.role.as_str().to_owned(),
        can_act: session.can_act(),
        csrf: session.csrf(),
        flash,
        id,
        open: s.triage_status == "open",
        triage: match (&s.triaged_by, &s.triage_note) {
            (Some(by), Some(note)) => format!("{} by {by}: {note}", s.triage_status),
            (Some(by), None) => format!("{} by {by}", s.triage_status),
            _ => s.triage_status.clone(),
        },
        facts,
        first_error: redact_string(&dash(&s.first_error)),
        last_error: redact_string(&dash(&s.last_error)),
        deployment,
        timeline: d.timeline.iter().map(EventRow::new).collect(),
        bmc_facts,
        error_detail,
        live_job,
        actions: d
            .actions
            .iter()
            .map(|a| ActionRow {
                at: a.at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
                action: a.action.clone(),
                actor: format!("{} ({})", a.actor, a.actor_role),
                reason: redact_string(&a.reason),
            })
            .collect(),
        resume_states,
        cancellable: s.deployment_id.is_some(),
    };
    html_with(render(&page), clear)
}

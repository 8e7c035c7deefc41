//! The dashboard's forms: retry (optionally from an earlier trigger), discard, cancel, and bulk retry of the
//! current filter. Each checks the CSRF token, then the role (operator or admin), then calls the same store
//! action as the JSON API's handlers, recorded with the session's token name and the reason given, and answers
//! 303 back to a page with a flash message saying what happened (or why nothing did).

use std::collections::BTreeMap;

use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use racklift_store::{Role, TriageError, TriageStatus};

use super::view::ListQuery;
use super::{Session, csrf_ok, error_page, see_other};
use crate::AppState;

/// Reasons and notes are for people; a page of text is plenty (the JSON API's limit).
const MAX_REASON: usize = 2000;
/// One bulk retry touches at most this many dead letters; the flash says when more match.
const BULK_LIMIT: u64 = 100;

/// The checks every form shares: the signed-in session's own CSRF token, and a role that may act on `what`.
pub(super) fn authorize(
    session: &Session,
    form: &BTreeMap<String, String>,
    what: &str,
) -> Result<(), Box<Response>> {
    if !csrf_ok(session, form.get("csrf").map(String::as_str)) {
        return Err(Box::new(error_page(
            StatusCode::FORBIDDEN,
            "missing or wrong CSRF token; reload the page and submit again",
        )));
    }
    if session.token.role < Role::Operator {
        return Err(Box::new(error_page(
            StatusCode::FORBIDDEN,
            &format!(
                "token {:?} has the {} role; acting on {what} needs operator",
                session.token.name,
                session.token.role.as_str()
            ),
        )));
    }
    Ok(())
}

/// A required free-text field, trimmed: whoever reads the audit later needs to know why.
pub(super) fn required(form: &BTreeMap<String, String>, field: &str) -> Result<String, String> {
    match form.get(field).map(|s| s.trim()) {
        None | Some("") => Err(format!("{field} is required: say why")),
        Some(r) if r.len() > MAX_REASON => Err(format!("{field} must be at most {MAX_REASON} bytes")),
        Some(r) => Ok(r.to_owned()),
    }
}

/// A store refusal as one line for the flash message.
fn refusal(e: &TriageError) -> String {
    match std::error::Error::source(e) {
        Some(source) if !matches!(e, TriageError::Store(_)) => format!("{} ({e}: {source})", e.code()),
        _ if matches!(e, TriageError::Store(_)) => {
            tracing::error!(error = ?e, "ui triage action failed");
            "internal error; see the server log".into()
        }
        _ => format!("{} ({e})", e.code()),
    }
}

/// `POST /ui/deadletters/{id}/{retry|discard|cancel}`.
pub async fn single(
    State(state): State<AppState>,
    session: Session,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    if let Err(r) = authorize(&session, &form, "dead letters") {
        return *r;
    }
    let Some(id) = id.parse::<i64>().ok().filter(|i| *i > 0) else {
        return error_page(StatusCode::NOT_FOUND, "no such dead letter");
    };
    let back = format!("/ui/deadletters/{id}");
    let token = &session.token;
    let (field, done) = match action.as_str() {
        "retry" | "cancel" => ("reason", action.as_str()),
        "discard" => ("note", "discard"),
        _ => {
            return error_page(
                StatusCode::NOT_FOUND,
                "no such action; expected retry, discard or cancel",
            );
        }
    };
    let why = match required(&form, field) {
        Ok(w) => w,
        Err(msg) => return see_other(&back, Some(&format!("nothing done: {msg}"))),
    };
    let outcome = match done {
        "retry" => {
            let from_state = match form.get("from_state").map(|s| s.trim()).filter(|s| !s.is_empty()) {
                None => None,
                Some(s) => match s.parse::<racklift_deploy::State>() {
                    Ok(st) => Some(st),
                    Err(_) => return see_other(&back, Some(&format!("nothing done: {s:?} is not a state"))),
                },
            };
            state
                .store
                .retry_dead_letter(&state.queue, id, token, &why, from_state)
                .await
                .map(|r| {
                    tracing::info!(dead_letter_id = id, job_id = r.job_id, state = ?r.state, by = %token.name,
                        "dead letter retried from the dashboard");
                    format!(
                        "dead letter {id} retried: job {} enqueued{}",
                        r.job_id,
                        r.state
                            .map(|s| format!(", deployment resumes in {s}"))
                            .unwrap_or_default()
                    )
                })
        }
        "discard" => state.store.discard_dead_letter(id, token, &why).await.map(|_| {
            tracing::info!(dead_letter_id = id, by = %token.name, "dead letter discarded from the dashboard");
            format!("dead letter {id} discarded")
        }),
        _ => {
            let skip_cleanup = form.get("skip_cleanup").is_some_and(|v| v == "on" || v == "true");
            state
                .store
                .cancel_dead_letter(&state.queue, id, token, &why, skip_cleanup)
                .await
                .map(|c| {
                    tracing::info!(dead_letter_id = id, deployment_id = c.deployment_id, skip_cleanup,
                        by = %token.name, "deployment of dead letter canceled from the dashboard");
                    format!(
                        "deployment {} of dead letter {id} canceled ({})",
                        c.deployment_id, c.state
                    )
                })
        }
    };
    match outcome {
        Ok(msg) => see_other("/ui", Some(&msg)),
        Err(e) => see_other(&back, Some(&format!("{done} refused: {}", refusal(&e)))),
    }
}

/// `POST /ui/deadletters/bulk-retry`: retries the open dead letters of the filter the form carries (at least
/// one grouping key, so a bare submit cannot retry everything), up to [`BULK_LIMIT`].
pub async fn bulk_retry(
    State(state): State<AppState>,
    session: Session,
    Form(mut form): Form<BTreeMap<String, String>>,
) -> Response {
    if let Err(r) = authorize(&session, &form, "dead letters") {
        return *r;
    }
    let why = required(&form, "reason");
    form.remove("csrf");
    form.remove("reason");
    form.remove("status");
    let q = ListQuery::parse(form);
    let back = format!("/ui{}", q.query(&[]));
    let why = match why {
        Ok(w) => w,
        Err(msg) => return see_other(&back, Some(&format!("nothing done: {msg}"))),
    };
    if !q.errors.is_empty() || !q.has_group_key() {
        let msg = "nothing done: bulk retry needs a valid filter (operation, error class, message id, vendor, state or server)";
        return see_other(&back, Some(msg));
    }
    let mut filter = q.filter.clone();
    filter.status = TriageStatus::Open;
    match state
        .store
        .bulk_retry(&state.queue, &filter, &session.token, &why, BULK_LIMIT)
        .await
    {
        Ok(r) => {
            tracing::info!(bulk_id = r.bulk_id, matched = r.matched, retried = r.retried, skipped = r.skipped,
                by = %session.token.name, "dead letters bulk retried from the dashboard");
            let more = if r.more { "; more match, submit again" } else { "" };
            let msg = format!(
                "bulk retry #{}: {} retried, {} skipped of {} matched{more}",
                r.bulk_id, r.retried, r.skipped, r.matched
            );
            see_other(&back, Some(&msg))
        }
        Err(e) => see_other(&back, Some(&format!("bulk retry refused: {}", refusal(&e)))),
    }
}

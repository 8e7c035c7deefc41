//! `GET /ui/stats`: time per state by vendor (p50, p95, max) beside each state's budget, the figures operators
//! tune timeouts with. Same store call as `/1.0/stats/state-durations`.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

use super::{Session, error_page, render};
use crate::AppState;
use crate::triage::window_hours;

/// One table row, formatted for display.
pub struct DurationRow {
    pub vendor: String,
    pub state: String,
    pub count: i64,
    pub p50: String,
    pub p95: String,
    pub max: String,
    pub budget: String,
    /// p95 is past 80% of the budget: the timeout is tight for this vendor.
    pub tight: bool,
}

#[derive(Template)]
#[template(path = "ui/stats.html")]
struct StatsPage {
    me: String,
    role: String,
    csrf: String,
    window_hours: i64,
    rows: Vec<DurationRow>,
}

/// Seconds to one decimal below a minute, whole seconds above.
fn secs(v: f64) -> String {
    if v < 60.0 {
        format!("{v:.1} s")
    } else {
        format!("{v:.0} s")
    }
}

pub async fn state_durations(
    State(state): State<AppState>,
    session: Session,
    Query(mut q): Query<BTreeMap<String, String>>,
) -> Response {
    let hours = match window_hours(q.remove("window_hours")) {
        Ok(h) => h,
        Err(_) => {
            return error_page(
                StatusCode::BAD_REQUEST,
                "window_hours must be a whole number of hours from 1 to 8784",
            );
        }
    };
    let items = match state
        .store
        .state_durations(hours * 3600, &state.config.deploy)
        .await
    {
        Ok(items) => items,
        Err(e) => {
            tracing::error!(error = ?e, "ui state durations failed");
            return error_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error; see the server log",
            );
        }
    };
    let rows = items
        .into_iter()
        .map(|d| DurationRow {
            tight: d.budget_secs.is_some_and(|b| d.p95_secs > 0.8 * b as f64),
            vendor: d.vendor.unwrap_or_else(|| "-".to_owned()),
            state: d.state,
            count: d.count,
            p50: secs(d.p50_secs),
            p95: secs(d.p95_secs),
            max: secs(d.max_secs),
            budget: d.budget_secs.map_or("-".to_owned(), |b| format!("{b} s")),
        })
        .collect();
    let page = StatsPage {
        me: session.token.name.clone(),
        role: session.token.role.as_str().to_owned(),
        csrf: session.csrf(),
        window_hours: hours,
        rows,
    };
    match render(&page) {
        Ok(html) => Html(html).into_response(),
        Err(r) => *r,
    }
}

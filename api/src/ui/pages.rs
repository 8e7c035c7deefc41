//! The dashboard's pages: the open dead letters (groups, list, stuck work) with their live-refresh fragment, and
//! one dead letter in detail. Reads only; the forms post to [`super::actions`].

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use racklift_store::StoreError;

use super::view::{self, GroupRow, ListQuery, PAGE_SIZE, Row, StuckRow};
use super::{Session, error_page, render, take_flash};
use crate::AppState;

const MAX_GROUPS: i64 = 200;

/// The live part of the list page: re-rendered every few seconds by the page's script.
#[derive(Template)]
#[template(path = "ui/live.html")]
struct Live {
    status: String,
    groups: Vec<GroupRow>,
    total: i64,
    rows: Vec<Row>,
    next_href: Option<String>,
    stuck: Vec<StuckRow>,
    updated: String,
}

#[derive(Template)]
#[template(path = "ui/deadletters.html")]
struct ListPage {
    me: String,
    role: String,
    can_act: bool,
    csrf: String,
    flash: Option<String>,
    errors: Vec<String>,
    /// (key, current value) of each filter input.
    fields: Vec<(String, String)>,
    status: String,
    statuses: Vec<String>,
    operation: String,
    operations: Vec<String>,
    /// Hidden fields carrying the current filter into the bulk retry; `None` when no grouping key is set.
    bulk: Option<Vec<(String, String)>>,
    fragment_url: String,
    live: String,
}

fn internal(e: StoreError) -> Response {
    tracing::error!(error = ?e, "ui store call failed");
    error_page(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal error; see the server log",
    )
}

async fn live(state: &AppState, q: &ListQuery) -> Result<String, Box<Response>> {
    let store = &state.store;
    let page = store
        .dead_letters(&q.filter, q.cursor, PAGE_SIZE)
        .await
        .map_err(internal)?;
    let groups = store
        .dead_letter_groups(&q.filter, MAX_GROUPS)
        .await
        .map_err(internal)?;
    let stuck = store
        .stuck_deployments(&state.config.deploy, false)
        .await
        .map_err(internal)?;
    let now = chrono::Utc::now();
    let live = Live {
        status: q.filter.status.as_str().to_owned(),
        total: groups.iter().map(|g| g.count).sum(),
        groups: groups.iter().map(|g| GroupRow::new(g, now)).collect(),
        rows: page.items.iter().map(Row::new).collect(),
        next_href: page
            .next_cursor
            .as_deref()
            .map(|c| format!("/ui{}", q.query(&[("cursor", c)]))),
        stuck: stuck.iter().map(StuckRow::new).collect(),
        updated: now.format("%H:%M:%S UTC").to_string(),
    };
    render(&live)
}

/// `GET /ui`: open dead letters grouped and listed (filters as query parameters), and the stuck work.
pub async fn dead_letters(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let q = ListQuery::parse(q);
    let live = match live(&state, &q).await {
        Ok(html) => html,
        Err(r) => return *r,
    };
    let (flash, clear) = take_flash(&headers);
    let page = ListPage {
        me: session.token.name.clone(),
        role: session.token.role.as_str().to_owned(),
        can_act: session.can_act(),
        csrf: session.csrf(),
        flash,
        errors: q.errors.clone(),
        fields: view::FILTER_KEYS
            .iter()
            .filter(|k| **k != "operation")
            .map(|k| (k.to_string(), q.value(k)))
            .collect(),
        status: q.filter.status.as_str().to_owned(),
        statuses: ["open", "retried", "discarded", "resolved", "canceled"]
            .map(String::from)
            .to_vec(),
        operation: q.value("operation"),
        operations: view::OPERATIONS.iter().map(|s| s.to_string()).collect(),
        bulk: q
            .has_group_key()
            .then(|| q.params.iter().filter(|(k, _)| k != "status").cloned().collect()),
        fragment_url: format!(
            "/ui/fragments/deadletters{}",
            q.query(
                &q.cursor_raw
                    .as_deref()
                    .map(|c| ("cursor", c))
                    .into_iter()
                    .collect::<Vec<_>>()
            )
        ),
        live,
    };
    html_with(render(&page), clear)
}

/// A rendered page, clearing the flash cookie it showed.
pub fn html_with(
    page: Result<String, Box<Response>>,
    clear: Option<(axum::http::header::HeaderName, axum::http::HeaderValue)>,
) -> Response {
    match page {
        Ok(html) => {
            let mut resp = Html(html).into_response();
            if let Some((k, v)) = clear {
                resp.headers_mut().append(k, v);
            }
            resp
        }
        Err(r) => *r,
    }
}

/// `GET /ui/fragments/deadletters?…`: the live part alone, for the page's five-second refresh.
pub async fn fragment(
    State(state): State<AppState>,
    _session: Session,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let q = ListQuery::parse(q);
    match live(&state, &q).await {
        Ok(html) => Html(html).into_response(),
        Err(r) => *r,
    }
}

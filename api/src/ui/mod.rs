//! The operator dashboard under `/ui`: server-rendered HTML over the same store calls as the JSON triage API
//! (`/1.0/deadletters`, `/1.0/stuck`, `/1.0/provisioning/clusters`), so the pages and the API can never disagree
//! about what is open.
//!
//! Browsers cannot attach a bearer header to a navigation, so `/ui/login` takes a pasted API token, checks it
//! like [`crate::auth`] does, and opens a server-side session (`ui_sessions`): the cookie carries only the
//! session's random 256-bit id (`Secure; HttpOnly; SameSite=Strict; Path=/ui`), never the token, so a cookie
//! that leaks through a proxy log or a backup is worth 12 hours at most and cannot be replayed as a bearer token.
//! The session is looked up on every request and re-checks its token, so logging out, revoking or expiring the
//! token ends it at once. Every form that changes something carries a CSRF token derived from the session (see
//! [`csrf_token`]); SameSite=Strict is the second line. The login form, which has no session yet, refuses a post
//! from another site by its `Origin` and `Sec-Fetch-Site` headers ([`origin`]). Every response carries the headers
//! of [`assets`].

mod actions;
mod assets;
mod clusters;
mod detail;
mod origin;
mod pages;
mod stats;
mod view;

use std::time::Duration;

use askama::Template;
use axum::Router;
use axum::extract::{Form, FromRequestParts, OriginalUri, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use hmac::{Hmac, Mac};
use racklift_store::{ApiToken, Role};
use serde::Deserialize;
use sha2::Sha256;

use crate::AppState;

const SESSION_COOKIE: &str = "racklift_session";
const FLASH_COOKIE: &str = "racklift_flash";
/// How long a dashboard session lasts (less when its token expires sooner): a working day of triage.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// The attributes of both cookies: HTTPS only (browsers treat `localhost` as secure too), no script access,
/// never sent on a cross-site request, and only to the dashboard.
const COOKIE_ATTRIBUTES: &str = "Secure; HttpOnly; SameSite=Strict; Path=/ui";

/// Who may use a dashboard route. The router is built from [`pages`], and the auth matrix test walks the same
/// table, so a new form cannot escape it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone: the login form, the stylesheet and the script.
    Public,
    /// Anyone, with an API token in the form: opens a session.
    Login,
    /// A session of any role; with `csrf`, the form's CSRF token too.
    Viewer { csrf: bool },
    /// A session of an operator or admin, and the form's CSRF token.
    Operator,
}

/// One route of the dashboard, relative to `/ui`.
#[derive(Debug, Clone)]
pub struct Page {
    pub method: Method,
    pub path: &'static str,
    pub access: Access,
}

/// Every dashboard route with who may use it and its handler.
fn pages() -> Vec<(Page, MethodRouter<AppState>)> {
    use Access::*;
    let page = |method, path, access| Page { method, path, access };
    vec![
        (
            page(Method::GET, "/", Viewer { csrf: false }),
            get(pages::dead_letters),
        ),
        (
            page(Method::GET, "/fragments/deadletters", Viewer { csrf: false }),
            get(pages::fragment),
        ),
        (
            page(Method::GET, "/deadletters/{id}", Viewer { csrf: false }),
            get(detail::detail),
        ),
        (
            page(Method::POST, "/deadletters/{id}/{action}", Operator),
            post(actions::single),
        ),
        (
            page(Method::POST, "/deadletters/bulk-retry", Operator),
            post(actions::bulk_retry),
        ),
        (
            page(Method::GET, "/clusters", Viewer { csrf: false }),
            get(clusters::list),
        ),
        (
            page(Method::GET, "/fragments/clusters", Viewer { csrf: false }),
            get(clusters::list_fragment),
        ),
        (
            page(Method::GET, "/clusters/{name}", Viewer { csrf: false }),
            get(clusters::detail),
        ),
        (
            page(Method::GET, "/fragments/clusters/{name}", Viewer { csrf: false }),
            get(clusters::detail_fragment),
        ),
        (
            page(Method::POST, "/clusters/{name}/{action}", Operator),
            post(clusters::act),
        ),
        (
            page(Method::GET, "/stats", Viewer { csrf: false }),
            get(stats::state_durations),
        ),
        (page(Method::GET, "/login", Public), get(login_form)),
        (page(Method::POST, "/login", Login), post(login)),
        (page(Method::POST, "/logout", Viewer { csrf: true }), post(logout)),
        (
            page(Method::GET, "/assets/ui.css", Public),
            get(assets::stylesheet),
        ),
        (
            page(Method::GET, "/assets/live.js", Public),
            get(assets::live_script),
        ),
    ]
}

/// The dashboard's routes and who may use each, for the auth matrix.
pub fn table() -> Vec<Page> {
    pages().into_iter().map(|(p, _)| p).collect()
}

/// The dashboard's routes, to be nested under `/ui`.
pub fn router() -> Router<AppState> {
    pages()
        .into_iter()
        .fold(Router::new(), |r, (p, handler)| r.route(p.path, handler))
        .fallback(|| async { error_page(StatusCode::NOT_FOUND, "no such page") })
        .layer(axum::middleware::map_response(assets::security_headers))
}

/// `/ui/` is the dashboard too: a permanent redirect to `/ui`, query kept, with the dashboard's headers.
pub async fn trailing_slash(OriginalUri(uri): OriginalUri) -> Response {
    let to = match uri.query() {
        Some(q) => format!("/ui?{q}"),
        None => "/ui".to_owned(),
    };
    assets::security_headers((StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, to)]).into_response()).await
}

/// The browser's session, verified on this request: the API token it was opened with.
pub struct Session {
    pub token: ApiToken,
    /// The session id from the cookie; used to derive the CSRF token and to log out.
    id: String,
}

impl Session {
    pub fn can_act(&self) -> bool {
        self.token.role >= Role::Operator
    }

    pub fn csrf(&self) -> String {
        csrf_token(&self.id)
    }
}

/// A value of a cookie in the request's `Cookie` headers.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

impl FromRequestParts<AppState> for Session {
    type Rejection = Response;

    /// Without a valid session a page navigation goes to the login form, while the live-refresh fragment and
    /// the forms get 401 (a redirect there would swap a login page into the table, or lose the POST).
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let id = cookie(&parts.headers, SESSION_COOKIE).filter(|s| !s.is_empty());
        let token = match &id {
            Some(id) => state.store.ui_session(id).await.map_err(|e| {
                tracing::error!(error = ?e, "ui session lookup failed");
                error_page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error; see the server log",
                )
            })?,
            None => None,
        };
        match (token, id) {
            (Some(token), Some(id)) => Ok(Session { token, id }),
            _ if parts.method == Method::GET && !parts.uri.path().contains("/fragments/") => {
                Err(see_other("/ui/login", None))
            }
            _ => Err(error_page(
                StatusCode::UNAUTHORIZED,
                "not logged in (or the session ended)",
            )),
        }
    }
}

/// HMAC-SHA256 keyed with the session id: only someone holding the session (its cookie is HttpOnly and never sent
/// cross-site) can compute it, the tag does not give the id away, and every API instance computes the same one.
fn csrf_mac(session_id: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(session_id.as_bytes()).expect("HMAC takes any key length");
    mac.update(b"racklift-ui-csrf");
    mac
}

/// The CSRF token of a session: a page embeds it in each form, and a cross-site page can neither read it nor
/// compute it.
pub fn csrf_token(session_id: &str) -> String {
    let tag = csrf_mac(session_id).finalize().into_bytes();
    tag.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `given` is the signed-in session's own CSRF token; compared in constant time.
fn csrf_ok(session: &Session, given: Option<&str>) -> bool {
    let Some(bytes) = given.and_then(hex_decode) else {
        return false;
    };
    csrf_mac(&session.id).verify_slice(&bytes).is_ok()
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn hex_encode(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// 303 to `to`, with a one-shot flash message for the page it lands on.
pub fn see_other(to: &str, flash: Option<&str>) -> Response {
    let mut resp = (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_owned())]).into_response();
    if let Some(text) = flash {
        // Hex keeps any message a valid cookie value; the page escapes it when it shows it.
        let c = format!(
            "{FLASH_COOKIE}={}; {COOKIE_ATTRIBUTES}; Max-Age=60",
            hex_encode(text)
        );
        if let Ok(v) = HeaderValue::from_str(&c) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    resp
}

/// The pending flash message, and the header that clears it once shown.
pub fn take_flash(headers: &HeaderMap) -> (Option<String>, Option<(header::HeaderName, HeaderValue)>) {
    let Some(raw) = cookie(headers, FLASH_COOKIE) else {
        return (None, None);
    };
    let text = hex_decode(&raw).and_then(|b| String::from_utf8(b).ok());
    let clear = HeaderValue::from_str(&format!("{FLASH_COOKIE}=; {COOKIE_ATTRIBUTES}; Max-Age=0"))
        .ok()
        .map(|v| (header::SET_COOKIE, v));
    (text, clear)
}

#[derive(Template)]
#[template(path = "ui/error.html")]
struct ErrorPage<'a> {
    status: u16,
    message: &'a str,
}

/// An HTML error page (the JSON error rewriter leaves `text/html` answers alone).
pub fn error_page(status: StatusCode, message: &str) -> Response {
    let page = ErrorPage {
        status: status.as_u16(),
        message,
    };
    match page.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(_) => (status, Html(String::from("error"))).into_response(),
    }
}

/// Renders a template, or a 500 page naming nothing internal (boxed: a response is large).
pub fn render(t: &impl Template) -> Result<String, Box<Response>> {
    t.render().map_err(|e| {
        tracing::error!(error = %e, "ui template failed");
        Box::new(error_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error; see the server log",
        ))
    })
}

#[derive(Template)]
#[template(path = "ui/login.html")]
struct LoginPage {
    error: Option<String>,
}

async fn login_form() -> Response {
    match render(&LoginPage { error: None }) {
        Ok(html) => Html(html).into_response(),
        Err(r) => *r,
    }
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// Whether a pasted string can be an API token at all (hex or plain words, not kilobytes of text), before it costs
/// a database lookup.
fn plausible_token(s: &str) -> bool {
    !s.is_empty() && s.len() <= 512 && s.bytes().all(|b| b.is_ascii_graphic() && !b"\";,\\".contains(&b))
}

/// Checks the pasted token like the bearer check does and opens a session with it; the cookie gets the session's
/// id. No CSRF token here: there is no session yet to bind one to. A post from another site is refused 403 by the
/// standard headers instead (see [`origin`]), so a cross-site page cannot log a browser into a token of its own.
async fn login(State(state): State<AppState>, headers: HeaderMap, Form(form): Form<LoginForm>) -> Response {
    if let Some(reason) = origin::cross_site(&headers) {
        tracing::warn!(
            origin = ?headers.get(header::ORIGIN),
            sec_fetch_site = ?headers.get("sec-fetch-site"),
            "ui login refused as cross-site"
        );
        return error_page(StatusCode::FORBIDDEN, &reason);
    }
    let secret = form.token.trim();
    let opened = if plausible_token(secret) {
        match state.store.create_ui_session(secret, SESSION_TTL).await {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = ?e, "ui login lookup failed");
                return error_page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error; see the server log",
                );
            }
        }
    } else {
        None
    };
    let Some(session) = opened else {
        let page = LoginPage {
            error: Some("unknown API token".into()),
        };
        return match render(&page) {
            Ok(html) => (StatusCode::UNAUTHORIZED, Html(html)).into_response(),
            Err(r) => *r,
        };
    };
    let token = &session.token;
    tracing::info!(token = %token.name, role = token.role.as_str(), "ui login");
    let mut resp = see_other(
        "/ui",
        Some(&format!("logged in as {} ({})", token.name, token.role.as_str())),
    );
    let c = format!(
        "{SESSION_COOKIE}={}; {COOKIE_ATTRIBUTES}; Max-Age={}",
        session.id,
        SESSION_TTL.as_secs()
    );
    if let Ok(v) = HeaderValue::from_str(&c) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

#[derive(Deserialize)]
struct CsrfOnly {
    csrf: Option<String>,
}

/// Logs out: the session's row is deleted, so its cookie is worthless even if the browser kept it (CSRF-checked,
/// so a cross-site page cannot log an operator out mid-triage).
async fn logout(State(state): State<AppState>, session: Session, Form(form): Form<CsrfOnly>) -> Response {
    if !csrf_ok(&session, form.csrf.as_deref()) {
        return error_page(
            StatusCode::FORBIDDEN,
            "missing or wrong CSRF token; reload the page",
        );
    }
    if let Err(e) = state.store.end_ui_session(&session.id).await {
        tracing::error!(error = ?e, "ui logout failed");
        return error_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error; see the server log",
        );
    }
    tracing::info!(token = %session.token.name, "ui logout");
    let mut resp = see_other("/ui/login", None);
    let c = format!("{SESSION_COOKIE}=; {COOKIE_ATTRIBUTES}; Max-Age=0");
    if let Ok(v) = HeaderValue::from_str(&c) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_tokens_are_per_session_and_hex_round_trips() {
        let a = csrf_token("alpha");
        assert_eq!(a.len(), 64);
        assert_ne!(a, csrf_token("beta"));
        assert_eq!(
            hex_decode(&hex_encode("héllo")).as_deref(),
            Some("héllo".as_bytes())
        );
        assert_eq!(hex_decode("abc"), None);
        assert!(plausible_token("operator-secret") && !plausible_token("a b") && !plausible_token("a;b"));
    }
}

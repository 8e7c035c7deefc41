//! The operator dashboard under `/ui`: server-rendered HTML over the same store calls as the JSON triage API
//! (`/1.0/deadletters`, `/1.0/stuck`), so the pages and the API can never disagree about what is open.
//!
//! Browsers cannot attach a bearer header to a navigation, so `/ui/login` takes a pasted API token, checks it
//! like [`crate::auth`] does, and keeps it in an `HttpOnly; SameSite=Strict; Path=/ui` cookie. The token is
//! looked up again on every request, so revoking it in the database logs the browser out at once. Every form
//! that changes something carries a CSRF token (see [`csrf_token`]); SameSite=Strict is the second line.

mod actions;
mod detail;
mod pages;
mod stats;
mod view;

use std::sync::OnceLock;

use askama::Template;
use axum::Router;
use axum::extract::{Form, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use racklift_store::{ApiToken, Role};
use serde::Deserialize;
use sha2::Sha256;

use crate::AppState;

const SESSION_COOKIE: &str = "racklift_session";
const FLASH_COOKIE: &str = "racklift_flash";

/// The dashboard's routes, to be nested under `/ui`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(pages::dead_letters))
        .route("/fragments/deadletters", get(pages::fragment))
        .route("/deadletters/{id}", get(detail::detail))
        .route("/deadletters/{id}/{action}", post(actions::single))
        .route("/deadletters/bulk-retry", post(actions::bulk_retry))
        .route("/stats", get(stats::state_durations))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
}

/// The browser's session: the API token its cookie holds, verified on this request.
pub struct Session {
    pub token: ApiToken,
    /// The raw API token from the cookie; only ever used to derive the CSRF token.
    secret: String,
}

impl Session {
    pub fn can_act(&self) -> bool {
        self.token.role >= Role::Operator
    }

    pub fn csrf(&self) -> String {
        csrf_token(&self.secret)
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
        let secret = cookie(&parts.headers, SESSION_COOKIE).filter(|s| !s.is_empty());
        let token = match &secret {
            Some(s) => state.store.api_token(s).await.map_err(|e| {
                tracing::error!(error = ?e, "ui session lookup failed");
                error_page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error; see the server log",
                )
            })?,
            None => None,
        };
        match (token, secret) {
            (Some(token), Some(secret)) => Ok(Session { token, secret }),
            _ if parts.method == Method::GET && !parts.uri.path().contains("/fragments/") => {
                Err(see_other("/ui/login", None))
            }
            _ => Err(error_page(
                StatusCode::UNAUTHORIZED,
                "not logged in (or the token was revoked)",
            )),
        }
    }
}

/// The per-process key of the CSRF tokens. A restart invalidates open forms, which only costs a reload.
fn csrf_key() -> &'static [u8] {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(racklift_store::new_secret).as_bytes()
}

fn csrf_mac(secret: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(csrf_key()).expect("HMAC takes any key length");
    mac.update(b"racklift-ui-csrf\0");
    mac.update(secret.as_bytes());
    mac
}

/// HMAC-SHA256 of the session's token under [`csrf_key`]: a page of this process embeds it in each form, and a
/// cross-site page cannot read it, nor compute it without the key.
pub fn csrf_token(secret: &str) -> String {
    let tag = csrf_mac(secret).finalize().into_bytes();
    tag.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `given` is the signed-in session's own CSRF token; compared in constant time.
fn csrf_ok(session: &Session, given: Option<&str>) -> bool {
    let Some(bytes) = given.and_then(hex_decode) else {
        return false;
    };
    csrf_mac(&session.secret).verify_slice(&bytes).is_ok()
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
            "{FLASH_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=60",
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
    let clear = HeaderValue::from_str(&format!(
        "{FLASH_COOKIE}=; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=0"
    ))
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

/// A token's characters must all be valid in a cookie value; API tokens are hex or plain words.
fn cookie_safe(s: &str) -> bool {
    !s.is_empty() && s.len() <= 512 && s.bytes().all(|b| b.is_ascii_graphic() && !b"\";,\\".contains(&b))
}

/// Checks the pasted token like the bearer check does and keeps it in the session cookie. No CSRF token here:
/// there is no session yet to bind one to, and logging someone in needs a valid token of one's own.
async fn login(State(state): State<AppState>, Form(form): Form<LoginForm>) -> Response {
    let secret = form.token.trim();
    let known = if cookie_safe(secret) {
        match state.store.api_token(secret).await {
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
    let Some(token) = known else {
        let page = LoginPage {
            error: Some("unknown API token".into()),
        };
        return match render(&page) {
            Ok(html) => (StatusCode::UNAUTHORIZED, Html(html)).into_response(),
            Err(r) => *r,
        };
    };
    tracing::info!(token = %token.name, role = token.role.as_str(), "ui login");
    let mut resp = see_other(
        "/ui",
        Some(&format!("logged in as {} ({})", token.name, token.role.as_str())),
    );
    let c = format!("{SESSION_COOKIE}={secret}; HttpOnly; SameSite=Strict; Path=/ui");
    if let Ok(v) = HeaderValue::from_str(&c) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

#[derive(Deserialize)]
struct CsrfOnly {
    csrf: Option<String>,
}

/// Logs out (CSRF-checked, so a cross-site page cannot log an operator out mid-triage).
async fn logout(session: Session, Form(form): Form<CsrfOnly>) -> Response {
    if !csrf_ok(&session, form.csrf.as_deref()) {
        return error_page(
            StatusCode::FORBIDDEN,
            "missing or wrong CSRF token; reload the page",
        );
    }
    let mut resp = see_other("/ui/login", None);
    let c = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=0");
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
        assert!(cookie_safe("operator-secret") && !cookie_safe("a b") && !cookie_safe("a;b"));
    }
}

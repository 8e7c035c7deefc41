//! What every dashboard response carries, and the stylesheet and script the pages load.
//!
//! The pages run no inline code and carry no inline style, so the Content-Security-Policy needs neither
//! `unsafe-inline` nor hashes: a string that slipped past autoescaping still could not run. `frame-ancestors`
//! (and `X-Frame-Options` for older browsers) keeps the forms out of other sites' frames, where a click could be
//! borrowed; pages showing dead letters are never stored by a cache.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// Everything from this origin only; no frames of the dashboard anywhere; forms post only here.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'";

/// Adds the security headers to a `/ui` response, and `Cache-Control: no-store` unless it set its own.
pub async fn security_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

/// Static files may be kept a few minutes: they hold no data, and a new release changes them rarely.
const ASSET_CACHE: &str = "public, max-age=300";

pub async fn stylesheet() -> Response {
    asset(
        "text/css; charset=utf-8",
        include_str!("../../templates/ui/ui.css"),
    )
}

pub async fn live_script() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("../../templates/ui/live.js"),
    )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, ASSET_CACHE),
        ],
        body,
    )
        .into_response()
}

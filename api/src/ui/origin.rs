//! Where a dashboard form was posted from, by the standard headers (OWASP's "verify origin with standard headers"):
//! a login form has no session to bind a CSRF token to, so a cross-site page could otherwise log a browser into
//! the attacker's own token (login CSRF) and watch what its user then does in the dashboard.
//!
//! The rule, pure over the request's headers:
//! - `Sec-Fetch-Site`, when sent (every current browser sends it), must be `same-origin` or `none` (typed into the
//!   address bar, a bookmark);
//! - `Origin`, when sent, must name this dashboard: its `host[:port]` is the request's `Host` (a reverse proxy in
//!   front must pass `Host` through, as it must for the links the pages hold). `Origin: null` is what a browser
//!   sends for the dashboard's own form under its `Referrer-Policy: no-referrer`, and also from a sandboxed frame
//!   or after a redirect across sites: it is accepted only when `Sec-Fetch-Site` vouches for the post, so a
//!   browser too old for that header (Safari before 16.4) cannot log in from the form;
//! - a request with neither (curl, a script, a browser too old for both) is accepted: only a browser carries a
//!   victim's cookies, and a browser that sends neither header is not one an attacker can rely on.

use axum::http::{HeaderMap, header};

/// Why a form post is refused as cross-site, in words for the error page; `None` when it is not.
pub fn cross_site(headers: &HeaderMap) -> Option<String> {
    let fetch_site = headers.get("sec-fetch-site");
    if let Some(site) = fetch_site {
        let site = site.to_str().unwrap_or_default();
        if !matches!(site, "same-origin" | "none") {
            return Some(format!(
                "cross-site form post refused: the browser says it came from another site (Sec-Fetch-Site: {site})"
            ));
        }
    }
    let origin = headers.get(header::ORIGIN)?;
    let origin = origin.to_str().unwrap_or_default();
    if origin == "null" && fetch_site.is_some() {
        return None;
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let authority = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    match authority {
        Some(authority) if !host.is_empty() && authority.eq_ignore_ascii_case(host) => None,
        _ => Some(format!(
            "cross-site form post refused: Origin {origin:?} is not this dashboard's origin"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn same_origin_or_no_browser_headers_pass_and_anything_else_is_cross_site() {
        for ok in [
            &[][..],
            &[("host", "racklift.example:8443")][..],
            &[
                ("host", "racklift.example:8443"),
                ("origin", "https://racklift.example:8443"),
            ][..],
            &[
                ("host", "Racklift.Example"),
                ("origin", "https://racklift.example"),
            ][..],
            &[
                ("host", "127.0.0.1:8080"),
                ("origin", "http://127.0.0.1:8080"),
                ("sec-fetch-site", "same-origin"),
            ][..],
            &[("sec-fetch-site", "none")][..],
            &[
                ("host", "racklift.example"),
                ("origin", "null"),
                ("sec-fetch-site", "same-origin"),
            ][..],
        ] {
            assert_eq!(cross_site(&headers(ok)), None, "{ok:?}");
        }
        for bad in [
            &[("host", "racklift.example"), ("origin", "https://evil.example")][..],
            &[
                ("host", "racklift.example"),
                ("origin", "https://racklift.example.evil.example"),
            ][..],
            &[
                ("host", "racklift.example:8443"),
                ("origin", "https://racklift.example"),
            ][..],
            &[("host", "racklift.example"), ("origin", "null")][..],
            &[("origin", "https://racklift.example")][..],
            &[("host", "racklift.example"), ("sec-fetch-site", "cross-site")][..],
            &[("host", "racklift.example"), ("sec-fetch-site", "same-site")][..],
            &[
                ("host", "racklift.example"),
                ("origin", "https://evil.example"),
                ("sec-fetch-site", "same-origin"),
            ][..],
        ] {
            assert!(cross_site(&headers(bad)).is_some(), "{bad:?}");
        }
    }
}

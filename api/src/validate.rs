//! Input checks shared by the handlers. They mirror the database's CHECK constraints so a bad value is a 400
//! naming the field instead of a constraint violation surfacing as a 500.

use axum::body::Bytes;
use axum::http::{StatusCode, Uri};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// The JSON body of an action endpoint (`…:deploy`, `…/{id}:retry`, …). Actions are parsed after routing because
/// the body's shape depends on the action; an empty body is `{}`.
pub fn action_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    serde_json::from_slice(body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()))
}

/// `^[a-z0-9][a-z0-9._-]{0,62}$`, the name rule of servers, seeds and BIOS profiles.
pub fn name(field: &str, value: &str) -> Result<(), ApiError> {
    let mut chars = value.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    if first_ok && rest_ok && value.len() <= 63 {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!(
                "{value:?} is not a valid name: lower-case letters, digits, '.', '_', '-', at most 63, starting with a letter or digit"
            ),
        ))
    }
}

/// An absolute `http://` or `https://` URL with a host.
pub fn http_url(field: &str, value: &str) -> Result<(), ApiError> {
    let bad = || {
        ApiError::invalid(
            field,
            format!("{value:?} is not an http:// or https:// URL with a host"),
        )
    };
    let uri: Uri = value.parse().map_err(|_| bad())?;
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    let host_ok = uri.host().is_some_and(|h| !h.is_empty());
    if scheme_ok && host_ok { Ok(()) } else { Err(bad()) }
}

/// 64 lower-case hex digits.
pub fn sha256_hex(field: &str, value: &str) -> Result<(), ApiError> {
    if value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            "must be 64 lower-case hex digits (a SHA-256)",
        ))
    }
}

/// A certificate pin the Redfish client accepts.
pub fn cert_pin(field: &str, value: &str) -> Result<(), ApiError> {
    value
        .parse::<racklift_redfish::Pin>()
        .map(|_| ())
        .map_err(|_| ApiError::invalid(field, "not a valid certificate pin"))
}

/// A non-empty value without surrounding whitespace.
pub fn non_empty(field: &str, value: &str) -> Result<(), ApiError> {
    if value.is_empty() || value.trim() != value {
        Err(ApiError::invalid(
            field,
            "must be non-empty without surrounding whitespace",
        ))
    } else {
        Ok(())
    }
}

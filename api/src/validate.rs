//! Input checks shared by the handlers. They mirror the database's CHECK constraints so a bad value is a 400
//! naming the field instead of a constraint violation surfacing as a 500.

use axum::http::Uri;

use crate::error::ApiError;

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

/// `env:NAME` or `file:PATH`: the database only ever holds a reference to a BMC password.
pub fn password_ref(field: &str, value: &str) -> Result<(), ApiError> {
    match value.split_once(':') {
        Some(("env" | "file", rest)) if !rest.is_empty() => Ok(()),
        _ => Err(ApiError::invalid(
            field,
            "must be env:NAME or file:PATH (never the password itself)",
        )),
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

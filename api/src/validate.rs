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
    if is_http_url(value) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!("{value:?} is not an http:// or https:// URL with a host"),
        ))
    }
}

/// The rule of [`http_url`], and of the `pattern` the OpenAPI document gives such fields:
/// `^https?://(HOST|[IPv6])(:PORT)?(/PATH)?$` (the scheme in any case), the path and host in URL-safe characters,
/// no user info, no query.
fn is_http_url(value: &str) -> bool {
    // Schemes are case-insensitive (RFC 3986 §3.1).
    let scheme_end = value.find("://").unwrap_or(0);
    if !matches!(
        value[..scheme_end].to_ascii_lowercase().as_str(),
        "http" | "https"
    ) {
        return false;
    }
    let rest = &value[scheme_end + 3..];
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, port))
                if !addr.is_empty()
                    && addr
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') =>
            {
                (addr, port)
            }
            _ => return false,
        },
        None => {
            let (host, port) = authority.split_at(authority.find(':').unwrap_or(authority.len()));
            if host.is_empty()
                || !host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            {
                return false;
            }
            (host, port)
        }
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()));
    let path_ok = path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._~!$&()*+,;=:@%/-".contains(&b));
    !host.is_empty() && port_ok && path_ok && value.parse::<Uri>().is_ok()
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
    // Unicode's white space and U+FEFF: what `[^\s\u0085]` of the document's pattern refuses at either end.
    let space = |c: char| c.is_whitespace() || c == '\u{feff}';
    if value.is_empty() || value.trim_matches(space) != value {
        Err(ApiError::invalid(
            field,
            "must be non-empty without surrounding whitespace",
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::is_http_url;

    #[test]
    fn http_urls_follow_the_documented_pattern() {
        for (url, ok) in [
            ("https://10.0.40.7", true),
            ("HTTP://10.0.0.1", true),
            ("http://bmc-7.rack1.example.net:8443/redfish/v1", true),
            ("https://[fd00::7]:443", true),
            ("https://R:64440", true),
            ("https://R:64440*", false),
            ("https://user@host", false),
            ("https://host/a?b=c", false),
            ("https://", false),
            ("ftp://host", false),
            ("https://ho st", false),
            ("https://host:123456", false),
            ("https://[]", false),
        ] {
            assert_eq!(is_http_url(url), ok, "{url}");
        }
    }
}

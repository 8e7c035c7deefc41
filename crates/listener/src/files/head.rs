//! A request head of the media listener: parsed by httparse (hyper's own parser), then its message framing checked
//! as RFC 9112 asks of a server (sections 5.2, 6.1 and 6.3), since this listener reads no request body and must
//! never take a body's bytes for the next request.
//!
//! Refused with 400, the connection then closed: a `Transfer-Encoding` of any kind (no body is read here, so a
//! chunked one could not be delimited; a final coding other than `chunked` is refused by RFC 9112 section 6.3
//! anyway), `Content-Length` beside `Transfer-Encoding`, a `Content-Length` that is not all digits, repeated
//! `Content-Length` fields that differ, and obsolete line folding (a header line beginning with a space or tab,
//! which httparse refuses in requests). A request that announces a body with a valid `Content-Length` is
//! answered and its connection closed, the body unread.

use axum::http::{self, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use serde::Serialize;

/// Longest request head read (request line and headers); past it the answer is 431.
pub(super) const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Most headers in one request; past it the answer is 431.
pub(super) const MAX_HEADERS: usize = 64;

/// A request head, parsed.
pub(super) struct HeadParts {
    pub(super) method: Method,
    pub(super) uri: http::Uri,
    pub(super) http10: bool,
    pub(super) headers: HeaderMap,
    /// Whether the request announces a body (a `Content-Length` above 0).
    pub(super) has_body: bool,
}

pub(super) enum Parsed {
    /// The head took this many bytes.
    Complete(usize, Box<HeadParts>),
    Partial,
    Bad(BadHead),
}

/// Why a request head is refused: answered with [`BadHead::status`] and [`BadHead::body`], then the connection
/// closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BadHead {
    /// Not an HTTP/1 request head: a bad request line, header name or value.
    Malformed,
    /// A header line begins with a space or tab (obsolete line folding).
    ObsoleteFold,
    /// Longer than [`MAX_HEAD_BYTES`] or more than [`MAX_HEADERS`] headers.
    TooLarge,
    /// The body's framing is refused; `field` is the header to blame.
    Framing {
        field: &'static str,
        reason: &'static str,
    },
}

/// The error shape of racklift's API (`{"error": {"code", "message", "field"}}`), so a client of the media
/// listener reads a refusal as it reads the API's.
#[derive(Serialize)]
struct Refusal {
    error: RefusalDetail,
}

#[derive(Serialize)]
struct RefusalDetail {
    code: &'static str,
    message: &'static str,
    field: &'static str,
}

impl BadHead {
    pub(super) fn status(self) -> StatusCode {
        match self {
            BadHead::TooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            BadHead::Malformed | BadHead::ObsoleteFold | BadHead::Framing { .. } => StatusCode::BAD_REQUEST,
        }
    }

    /// The JSON body of the refusal.
    pub(super) fn body(self) -> Vec<u8> {
        let (code, message, field) = match self {
            BadHead::Malformed => ("malformed_head", "the request head is not valid HTTP/1.1", "head"),
            BadHead::ObsoleteFold => (
                "obsolete_line_folding",
                "a header line begins with a space or tab (obsolete line folding, RFC 9112 section 5.2)",
                "head",
            ),
            BadHead::TooLarge => (
                "head_too_large",
                "the request head has too many or too long header fields",
                "head",
            ),
            BadHead::Framing { field, reason } => ("bad_framing", reason, field),
        };
        let refusal = Refusal {
            error: RefusalDetail { code, message, field },
        };
        serde_json::to_vec(&refusal).expect("a struct of strings serializes")
    }
}

pub(super) fn parse_head(buf: &[u8]) -> Parsed {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    let consumed = match request.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => return Parsed::Bad(BadHead::TooLarge),
        Err(_) if folds_a_line(buf) => return Parsed::Bad(BadHead::ObsoleteFold),
        Err(_) => return Parsed::Bad(BadHead::Malformed),
    };
    let bad = Parsed::Bad(BadHead::Malformed);
    let (Some(method), Some(path), Some(version)) = (request.method, request.path, request.version) else {
        return bad;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return bad;
    };
    let Ok(uri) = http::Uri::try_from(path) else {
        return bad;
    };
    let mut headers = HeaderMap::with_capacity(request.headers.len());
    for h in request.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) else {
            return bad;
        };
        headers.append(name, value);
    }
    let has_body = match announces_body(&headers) {
        Ok(has_body) => has_body,
        Err(refused) => return Parsed::Bad(refused),
    };
    Parsed::Complete(
        consumed,
        Box::new(HeadParts {
            method,
            uri,
            http10: version == 0,
            headers,
            has_body,
        }),
    )
}

/// Whether the head read so far has a header line that begins with a space or tab: an obs-fold, where httparse
/// only says the header name is bad.
fn folds_a_line(buf: &[u8]) -> bool {
    let head = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(buf, |end| &buf[..end]);
    head.windows(2)
        .any(|w| w[0] == b'\n' && (w[1] == b' ' || w[1] == b'\t'))
}

/// Whether a request with `headers` announces a body, or why its framing is refused (see the module's
/// documentation).
pub(super) fn announces_body(headers: &HeaderMap) -> Result<bool, BadHead> {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        let reason = if headers.contains_key(header::CONTENT_LENGTH) {
            "Content-Length and Transfer-Encoding together (RFC 9112 section 6.1)"
        } else {
            "this listener takes no request body, so no Transfer-Encoding"
        };
        return Err(BadHead::Framing {
            field: "Transfer-Encoding",
            reason,
        });
    }
    let mut length = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        let refused = |reason| BadHead::Framing {
            field: "Content-Length",
            reason,
        };
        let bytes = value.as_bytes();
        if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
            return Err(refused("Content-Length is not a number of bytes (digits only)"));
        }
        let value = std::str::from_utf8(bytes)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or(refused("Content-Length is too large"))?;
        if length.is_some_and(|first| first != value) {
            return Err(refused(
                "Content-Length fields that differ (RFC 9112 section 6.3)",
            ));
        }
        length = Some(value);
    }
    Ok(length.is_some_and(|length| length > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn framing_is_refused_as_rfc_9112_asks_and_a_plain_length_is_kept() {
        const CL: &str = "Content-Length";
        const TE: &str = "Transfer-Encoding";
        type Case = (
            &'static [(&'static str, &'static str)],
            Result<bool, &'static str>,
        );
        let cases: [Case; 13] = [
            (&[], Ok(false)),
            (&[(CL, "0")], Ok(false)),
            (&[(CL, "000")], Ok(false)),
            (&[(CL, "5")], Ok(true)),
            (&[(CL, "5"), (CL, "5")], Ok(true)),
            (&[(CL, "0"), (CL, "5")], Err(CL)),
            (&[(CL, "5, 5")], Err(CL)),
            (&[(CL, "+5")], Err(CL)),
            (&[(CL, "-1")], Err(CL)),
            (&[(CL, "0x10")], Err(CL)),
            (&[(CL, "99999999999999999999999")], Err(CL)),
            (&[(TE, "chunked")], Err(TE)),
            (&[(CL, "0"), (TE, "chunked")], Err(TE)),
        ];
        for (pairs, want) in cases {
            let got = announces_body(&headers(pairs)).map_err(|bad| match bad {
                BadHead::Framing { field, .. } => field,
                other => panic!("{other:?}"),
            });
            assert_eq!(got, want, "{pairs:?}");
        }
        assert!(announces_body(&headers(&[(TE, "gzip")])).is_err());
    }

    #[test]
    fn a_folded_header_line_is_told_apart_from_other_malformed_heads() {
        let folded = b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n";
        assert!(matches!(parse_head(folded), Parsed::Bad(BadHead::ObsoleteFold)));
        let tabbed = b"GET / HTTP/1.1\r\nHost: x\r\n\tX-A: 1\r\n\r\n";
        assert!(matches!(parse_head(tabbed), Parsed::Bad(BadHead::ObsoleteFold)));
        let broken = b"GET / HTTP/1.1\r\nBad Header\r\n\r\n";
        assert!(matches!(parse_head(broken), Parsed::Bad(BadHead::Malformed)));
    }

    #[test]
    fn a_refusal_names_its_field_in_the_api_error_shape() {
        let bad = announces_body(&headers(&[("Content-Length", "1"), ("Content-Length", "2")])).unwrap_err();
        let body: serde_json::Value = serde_json::from_slice(&bad.body()).unwrap();
        assert_eq!(body["error"]["code"], "bad_framing");
        assert_eq!(body["error"]["field"], "Content-Length");
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    }
}

//! The client's error type and its classification.
//!
//! The client retries only GETs, and only within a call's deadline; durable retries belong to the caller's state
//! machine. [`Error::class`] tells it whether one makes sense, and [`ErrorClass::as_str`] / [`Error::as_str`] are
//! the bounded names metrics and dead letters carry. `Display` never repeats the source error: the chain is
//! logged once, where it is handled.

use std::time::Duration;

use crate::tls::CertPin;

/// Result alias for the client.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed transport-level cause (I/O, hyper).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong, coarse enough to drive retry policy and a triage dashboard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// Connection refused or reset, a connect timeout, a broken body: the server may be back soon (a rebooting
    /// server looks like this for minutes).
    Transport,
    /// The TLS handshake failed: the server's certificate is not the pinned one, or it refused ours. Retrying
    /// cannot fix it; the pin or the server's trust store has to change.
    Tls,
    /// The call's deadline ran out: the server accepted the connection and stopped answering.
    Deadline,
    /// 401/403: the server does not trust racklift's client certificate.
    NotAuthorized,
    /// 404: no such member, operation or application.
    NotFound,
    /// 408, 409, 429, 503: the server is busy or the resource is in transition; later may work.
    Busy,
    /// Any other 4xx: the server refused the request.
    Rejected,
    /// Any other 5xx: the server failed.
    Server,
    /// The server answered with something that is not the Incus envelope or resource expected.
    Protocol,
    /// A mistake on our side: bad configuration, `http://` without the opt-in.
    Client,
}

impl ErrorClass {
    /// Whether a later attempt (a durable retry by the caller) may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Transport | Self::Deadline | Self::Busy | Self::Server)
    }

    /// A stable lower-case name for metrics and dead letters.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transport => "transport",
            Self::Tls => "tls",
            Self::Deadline => "deadline",
            Self::NotAuthorized => "not_authorized",
            Self::NotFound => "not_found",
            Self::Busy => "busy",
            Self::Rejected => "rejected",
            Self::Server => "server",
            Self::Protocol => "protocol",
            Self::Client => "client",
        }
    }

    /// The class of an HTTP error status.
    pub fn of_status(status: u16) -> Self {
        match status {
            401 | 403 => Self::NotAuthorized,
            404 => Self::NotFound,
            408 | 409 | 425 | 429 | 503 => Self::Busy,
            400..=499 => Self::Rejected,
            500..=599 => Self::Server,
            _ => Self::Protocol,
        }
    }
}

/// Client errors. Variants carry context; none repeats its source in `Display`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The base URL is `http://` and the configuration did not opt in to plain HTTP.
    #[error("{url}: plain http refused (the Incus API is mutual TLS)")]
    PlainHttp { url: String },
    /// The client configuration is unusable.
    #[error("invalid client configuration: {reason}")]
    Config { reason: String },
    /// The request never got a complete HTTP answer.
    #[error("{method} {path}: transport failure")]
    Transport {
        method: &'static str,
        path: String,
        #[source]
        source: BoxError,
    },
    /// The TLS handshake failed for a reason other than the pin.
    #[error("{method} {path}: TLS handshake failed")]
    Tls {
        method: &'static str,
        path: String,
        #[source]
        source: BoxError,
    },
    /// The server presented a certificate other than the pinned (or first-seen) one.
    #[error("server certificate sha256 {presented} does not match the expected {expected}")]
    PinMismatch { expected: CertPin, presented: CertPin },
    /// The call's deadline ran out.
    #[error("{operation}: call deadline of {} ms exceeded", deadline.as_millis())]
    Deadline {
        operation: &'static str,
        deadline: Duration,
    },
    /// The server answered with an error status or an error envelope.
    #[error("{method} {path}: HTTP {status}: {message}")]
    Http {
        method: &'static str,
        path: String,
        status: u16,
        /// The envelope's `error`, else the start of the body.
        message: String,
    },
    /// The body was not the envelope or resource expected.
    #[error("{path}: unexpected answer: {what}")]
    Protocol {
        path: String,
        what: String,
        #[source]
        source: Option<serde_json::Error>,
    },
}

impl Error {
    /// The class of the error, which decides retryability.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::PlainHttp { .. } | Self::Config { .. } => ErrorClass::Client,
            Self::Transport { .. } => ErrorClass::Transport,
            Self::Tls { .. } | Self::PinMismatch { .. } => ErrorClass::Tls,
            Self::Deadline { .. } => ErrorClass::Deadline,
            Self::Http { status, .. } => ErrorClass::of_status(*status),
            Self::Protocol { .. } => ErrorClass::Protocol,
        }
    }

    /// Whether a durable retry may succeed.
    pub fn is_retryable(&self) -> bool {
        self.class().is_retryable()
    }

    /// A stable name of the variant, finer than the class, for dead letters.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::PlainHttp { .. } => "plain_http",
            Self::Config { .. } => "config",
            Self::Transport { .. } => "transport",
            Self::Tls { .. } => "tls",
            Self::PinMismatch { .. } => "pin_mismatch",
            Self::Deadline { .. } => "deadline",
            Self::Http { .. } => "http",
            Self::Protocol { .. } => "protocol",
        }
    }

    /// The HTTP status, when the server answered with an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The server's error message, when it sent one.
    pub fn message(&self) -> Option<&str> {
        match self {
            Self::Http { message, .. } => Some(message),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16) -> Error {
        Error::Http {
            method: "POST",
            path: "/1.0/cluster/members/n1/state".into(),
            status,
            message: "Member is busy".into(),
        }
    }

    #[test]
    fn classifies_statuses() {
        let cases = [
            (400, ErrorClass::Rejected, false),
            (401, ErrorClass::NotAuthorized, false),
            (403, ErrorClass::NotAuthorized, false),
            (404, ErrorClass::NotFound, false),
            (409, ErrorClass::Busy, true),
            (412, ErrorClass::Rejected, false),
            (429, ErrorClass::Busy, true),
            (500, ErrorClass::Server, true),
            (502, ErrorClass::Server, true),
            (503, ErrorClass::Busy, true),
        ];
        for (status, class, retryable) in cases {
            let e = http(status);
            assert_eq!(e.class(), class, "{status}");
            assert_eq!(e.is_retryable(), retryable, "{status}");
            assert_eq!(e.as_str(), "http");
        }
        assert_eq!(
            http(403).to_string(),
            "POST /1.0/cluster/members/n1/state: HTTP 403: Member is busy"
        );
    }

    #[test]
    fn other_variants_classify() {
        let deadline = Error::Deadline {
            operation: "members",
            deadline: Duration::from_secs(2),
        };
        assert_eq!(deadline.class(), ErrorClass::Deadline);
        assert!(deadline.is_retryable());
        let pin = Error::PinMismatch {
            expected: CertPin::from_bytes([0xaa; 32]),
            presented: CertPin::from_bytes([0xbb; 32]),
        };
        assert_eq!((pin.class(), pin.as_str()), (ErrorClass::Tls, "pin_mismatch"));
        assert!(!pin.is_retryable());
        let text = pin.to_string();
        assert!(
            text.contains(&"aa".repeat(32)) && text.contains(&"bb".repeat(32)),
            "{text}"
        );
        let plain = Error::PlainHttp {
            url: "http://10.0.0.5:8443".into(),
        };
        assert_eq!(plain.class().as_str(), "client");
    }
}

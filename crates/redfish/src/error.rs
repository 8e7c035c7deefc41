//! The client's error type and its classification.
//!
//! The client never retries durably; it tells the caller whether a durable retry makes
//! sense. [`Error::class`] answers that, and [`Error::status`] / [`Error::message_id`]
//! carry what a dead letter shows an operator. `Display` never repeats the source error:
//! the chain is logged once, where it is handled.

use std::time::Duration;

use serde::Deserialize;

/// Result alias for the client.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, coarse enough to drive retry policy and a triage dashboard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// Connection refused or reset, DNS, a broken body: the BMC may be back soon.
    Transport,
    /// The certificate was rejected (wrong pin, unknown CA). Retrying cannot fix it; an
    /// operator has to update the pin or the CA.
    Tls,
    /// The call deadline ran out: the BMC accepted the connection and stopped answering.
    Deadline,
    /// 401/403: wrong credentials or a locked account.
    Auth,
    /// 5xx, 409, 429, or a busy/too-many-sessions message such as iDRAC `RAC0218`.
    Busy,
    /// Any other 4xx: the BMC refused the request or a value (`PropertyValueNotInList`).
    Rejected,
    /// The BMC lacks the resource or action (404, 405, 501, no link, value not allowed).
    Unsupported,
    /// The BMC answered with something that is not the Redfish resource expected.
    Protocol,
    /// A mistake on our side: bad configuration, a mutation without a fencing token.
    Client,
}

impl ErrorClass {
    /// Whether a later attempt (a durable retry by the queue) may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Transport | Self::Deadline | Self::Busy)
    }

    /// A stable lower-case name for metrics and dead letters.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transport => "transport",
            Self::Tls => "tls",
            Self::Deadline => "deadline",
            Self::Auth => "auth",
            Self::Busy => "busy",
            Self::Rejected => "rejected",
            Self::Unsupported => "unsupported",
            Self::Protocol => "protocol",
            Self::Client => "client",
        }
    }
}

/// One entry of `@Message.ExtendedInfo`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExtendedInfo {
    /// Full message id, for example `IDRAC.2.4.RAC0218` or `Base.1.8.PropertyValueNotInList`.
    #[serde(default)]
    pub message_id: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: Option<String>,
    /// Message arguments (for `ActionParameterMissing`, the missing parameter's name).
    #[serde(default)]
    pub message_args: Vec<serde_json::Value>,
    /// JSON pointers of the properties concerned, such as `#/Boot/BootSourceOverrideEnabled`.
    #[serde(default)]
    pub related_properties: Vec<String>,
}

impl ExtendedInfo {
    /// The id without its `<Registry>.<major>.<minor>.` prefix: `RAC0218`, `GeneralError`.
    pub fn suffix(&self) -> &str {
        message_suffix(&self.message_id)
    }
}

/// The part of a MessageId after its last dot.
pub fn message_suffix(id: &str) -> &str {
    id.rsplit('.').next().unwrap_or(id)
}

/// Client errors. Variants carry context; none repeats its source in `Display`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request never got an HTTP answer.
    #[error("{method} {path}: transport failure")]
    Transport {
        method: String,
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The TLS handshake rejected the BMC's certificate.
    #[error("{method} {path}: BMC certificate rejected")]
    Tls {
        method: String,
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The operation's call deadline ran out.
    #[error("{operation}: call deadline of {} ms exceeded", deadline.as_millis())]
    Deadline {
        operation: &'static str,
        deadline: Duration,
    },
    /// The BMC answered with a non-success status.
    #[error("{method} {path}: HTTP {status}{}", message_id.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Status {
        method: String,
        path: String,
        status: u16,
        /// The first `@Message.ExtendedInfo[].MessageId`, else `error.code`.
        message_id: Option<String>,
        /// Every extended-info entry the BMC sent.
        extended: Vec<ExtendedInfo>,
        /// `Retry-After`, when sent in seconds.
        retry_after: Option<Duration>,
    },
    /// The body was not the resource expected.
    #[error("{path}: unexpected response body")]
    Decode {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    /// The BMC does not offer what was asked for.
    #[error("not supported by this BMC: {what}")]
    Unsupported { what: String },
    /// The request was refused before sending because the BMC's state or its advertised
    /// values rule it out (foreign media in the slot, a value outside AllowableValues).
    #[error("refused: {what}")]
    Refused { what: String },
    /// A Redfish task finished in a failed state.
    #[error("task {uri} ended in state {state}")]
    TaskFailed {
        uri: String,
        state: String,
        message_ids: Vec<String>,
    },
    /// A mutation was attempted by a client that carries no fencing token.
    #[error("BMC mutation without a fencing token")]
    NoFence,
    /// The client configuration is unusable.
    #[error("invalid client configuration: {reason}")]
    Config { reason: String },
    /// No System was named and the BMC lists more than one that could be the host (not a DPU, OS or virtual
    /// System), or none at all: which one to manage is the operator's choice.
    #[error(
        "the BMC lists several ComputerSystems and none is the only candidate host: choose one of {} by its Id",
        quoted(candidates)
    )]
    AmbiguousSystem {
        /// The `Id`s of the Systems that could be the host (every member's when none could).
        candidates: Vec<String>,
    },
    /// The System named in the configuration is not a member of the BMC's `Systems`.
    #[error("the BMC has no ComputerSystem {id:?}; its Systems are {}", quoted(available))]
    SystemNotFound {
        /// The Id (or URI) asked for.
        id: String,
        /// The `Id`s the BMC lists.
        available: Vec<String>,
    },
}

/// `"a", "b"`, or `none` for an empty list.
fn quoted(ids: &[String]) -> String {
    if ids.is_empty() {
        return "none".to_owned();
    }
    ids.iter()
        .map(|id| format!("{id:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Error {
    /// The class of the error, which decides retryability.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Transport { .. } => ErrorClass::Transport,
            Self::Tls { .. } => ErrorClass::Tls,
            Self::Deadline { .. } => ErrorClass::Deadline,
            Self::Status {
                status,
                extended,
                message_id,
                ..
            } => classify_status(*status, message_id.as_deref(), extended),
            Self::Decode { .. } => ErrorClass::Protocol,
            Self::Unsupported { .. } => ErrorClass::Unsupported,
            Self::Refused { .. } | Self::TaskFailed { .. } => ErrorClass::Rejected,
            Self::NoFence
            | Self::Config { .. }
            | Self::AmbiguousSystem { .. }
            | Self::SystemNotFound { .. } => ErrorClass::Client,
        }
    }

    /// Whether a durable retry may succeed.
    pub fn is_retryable(&self) -> bool {
        self.class().is_retryable()
    }

    /// The HTTP status, when the BMC answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The Redfish message id, when the BMC sent one.
    pub fn message_id(&self) -> Option<&str> {
        match self {
            Self::Status { message_id, .. } => message_id.as_deref(),
            _ => None,
        }
    }

    /// Whether any extended-info entry has a MessageId ending in `suffix`.
    pub fn has_message(&self, suffix: &str) -> bool {
        match self {
            Self::Status {
                extended, message_id, ..
            } => {
                extended.iter().any(|e| e.suffix() == suffix)
                    || message_id.as_deref().is_some_and(|m| message_suffix(m) == suffix)
            }
            _ => false,
        }
    }

    /// The extended-info entries (empty unless the BMC sent an error body).
    pub fn extended_info(&self) -> &[ExtendedInfo] {
        match self {
            Self::Status { extended, .. } => extended,
            _ => &[],
        }
    }

    /// Whether the BMC rejected a property *value* (the Once → Continuous fallback signal).
    pub(crate) fn is_value_rejected(&self, property: &str) -> bool {
        if self.status() != Some(400) {
            return false;
        }
        let names_property = |e: &ExtendedInfo| {
            e.related_properties.iter().any(|p| p.ends_with(property))
                || e.message_args
                    .iter()
                    .any(|a| a.as_str().is_some_and(|s| s.contains(property)))
                || e.message.as_deref().is_some_and(|m| m.contains(property))
        };
        self.extended_info().iter().any(|e| match e.suffix() {
            "PropertyValueNotInList" | "PropertyValueNotSupported" | "PropertyValueIncorrect" => true,
            "GeneralError" => names_property(e),
            _ => false,
        })
    }

    /// The parameter a BMC reported missing. DMTF `ActionParameterMissing` has the
    /// arguments (action, parameter) and `PropertyMissing` (property), so the last
    /// argument names it in both.
    pub(crate) fn missing_parameter(&self) -> Option<String> {
        self.extended_info().iter().find_map(|e| match e.suffix() {
            "ActionParameterMissing" | "PropertyMissing" => last_arg(e),
            _ => None,
        })
    }

    /// The parameter or property a BMC reported unknown, unsupported or not writable.
    /// `ActionParameterUnknown` is (action, parameter); `ActionParameterNotSupported` is
    /// (parameter, action); the `Property*` ones are (property).
    pub(crate) fn unwanted_parameter(&self) -> Option<String> {
        self.extended_info().iter().find_map(|e| {
            let from_args = match e.suffix() {
                "ActionParameterUnknown" => last_arg(e),
                "ActionParameterNotSupported" | "PropertyUnknown" | "PropertyNotWritable" => {
                    e.message_args.first().and_then(|a| a.as_str()).map(str::to_owned)
                }
                _ => return None,
            };
            from_args.or_else(|| {
                e.related_properties
                    .first()
                    .map(|p| p.rsplit('/').next().unwrap_or(p).to_owned())
            })
        })
    }

    /// Whether the error means "this path/action does not exist or is not allowed here",
    /// which moves a fallback chain (action → OEM action → PATCH) to its next link.
    pub(crate) fn means_not_here(&self) -> bool {
        matches!(self.status(), Some(404 | 405 | 501))
            || self.has_message("ActionNotSupported")
            || self.has_message("ResourceNotFound")
            || matches!(self, Self::Unsupported { .. })
    }
}

fn last_arg(e: &ExtendedInfo) -> Option<String> {
    e.message_args
        .iter()
        .rev()
        .find_map(|a| a.as_str())
        .map(str::to_owned)
}

fn classify_status(status: u16, message_id: Option<&str>, extended: &[ExtendedInfo]) -> ErrorClass {
    // Conditions that pass with time: sessions exhausted (RAC0218), an internal media error
    // (SYS446), the image server not reachable yet (RAC0904), iLO refusing changes while the
    // server is in POST (Ironic retries 6 × 5 s).
    const BUSY_IDS: &[&str] = &[
        "RAC0218",
        "SYS446",
        "RAC0904",
        "UnableToModifyDuringSystemPOST",
        "ServiceTemporarilyUnavailable",
        "ServiceInUnknownState",
    ];
    let busy = |id: &str| BUSY_IDS.contains(&message_suffix(id));
    if extended.iter().any(|e| busy(&e.message_id)) || message_id.is_some_and(busy) {
        return ErrorClass::Busy;
    }
    match status {
        401 | 403 => ErrorClass::Auth,
        404 | 405 | 501 => ErrorClass::Unsupported,
        408 | 409 | 425 | 429 => ErrorClass::Busy,
        500..=599 => ErrorClass::Busy,
        400..=499 => ErrorClass::Rejected,
        _ => ErrorClass::Protocol,
    }
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorBody,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    code: Option<String>,
    #[serde(rename = "@Message.ExtendedInfo", default)]
    extended: Vec<ExtendedInfo>,
}

/// Parses a DMTF error body into (message id, extended info). Bodies that are not JSON
/// (a reverse proxy's HTML page) give `(None, [])`.
pub(crate) fn parse_error_body(body: &[u8]) -> (Option<String>, Vec<ExtendedInfo>) {
    let Ok(env) = serde_json::from_slice::<ErrorEnvelope>(body) else {
        return (None, Vec::new());
    };
    let id = env
        .error
        .extended
        .iter()
        .map(|e| e.message_id.clone())
        .find(|m| !m.is_empty())
        .or(env.error.code);
    (id, env.error.extended)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_error(status: u16, body: &str) -> Error {
        let (message_id, extended) = parse_error_body(body.as_bytes());
        Error::Status {
            method: "POST".into(),
            path: "/redfish/v1/x".into(),
            status,
            message_id,
            extended,
            retry_after: None,
        }
    }

    const RAC0218: &str = r##"{"error":{"code":"Base.1.8.GeneralError","message":"x",
        "@Message.ExtendedInfo":[{"MessageId":"IDRAC.2.4.RAC0218","Message":"The maximum number of user sessions is reached.","MessageArgs":[],"Severity":"Critical"}]}}"##;

    #[test]
    fn parses_message_id_from_extended_info_before_code() {
        let e = status_error(503, RAC0218);
        assert_eq!(e.message_id(), Some("IDRAC.2.4.RAC0218"));
        assert!(e.has_message("RAC0218"));
        assert_eq!(e.status(), Some(503));
        assert_eq!(e.class(), ErrorClass::Busy);
        assert!(e.is_retryable());
        assert_eq!(e.to_string(), "POST /redfish/v1/x: HTTP 503 (IDRAC.2.4.RAC0218)");
    }

    #[test]
    fn rac0218_is_busy_even_on_a_4xx() {
        assert_eq!(status_error(400, RAC0218).class(), ErrorClass::Busy);
    }

    #[test]
    fn busy_ids_count_in_the_error_code_too() {
        let e = status_error(
            400,
            r##"{"error":{"code":"iLO.2.14.UnableToModifyDuringSystemPOST","message":"in POST"}}"##,
        );
        assert_eq!(e.class(), ErrorClass::Busy);
    }

    #[test]
    fn falls_back_to_code_and_tolerates_non_json() {
        let e = status_error(
            400,
            r##"{"error":{"code":"iLO.0.10.ExtendedInfo","message":"see"}}"##,
        );
        assert_eq!(e.message_id(), Some("iLO.0.10.ExtendedInfo"));
        let e = status_error(502, "<html>bad gateway</html>");
        assert_eq!(e.message_id(), None);
        assert_eq!(e.class(), ErrorClass::Busy);
    }

    #[test]
    fn classifies_statuses() {
        let cases = [
            (400, ErrorClass::Rejected, false),
            (401, ErrorClass::Auth, false),
            (403, ErrorClass::Auth, false),
            (404, ErrorClass::Unsupported, false),
            (405, ErrorClass::Unsupported, false),
            (409, ErrorClass::Busy, true),
            (412, ErrorClass::Rejected, false),
            (429, ErrorClass::Busy, true),
            (500, ErrorClass::Busy, true),
            (501, ErrorClass::Unsupported, false),
            (503, ErrorClass::Busy, true),
        ];
        for (status, class, retryable) in cases {
            let e = status_error(status, "{}");
            assert_eq!(e.class(), class, "{status}");
            assert_eq!(e.is_retryable(), retryable, "{status}");
        }
    }

    #[test]
    fn conflict_after_power_off_is_retryable() {
        let e = status_error(
            409,
            r##"{"error":{"@Message.ExtendedInfo":[{"MessageId":"Base.1.12.ActionParameterValueConflict","MessageArgs":["ResetType","On"]}]}}"##,
        );
        assert!(e.is_retryable());
        assert!(e.has_message("ActionParameterValueConflict"));
    }

    #[test]
    fn value_rejection_and_missing_parameters() {
        let e = status_error(
            400,
            r##"{"error":{"@Message.ExtendedInfo":[{"MessageId":"Base.1.8.PropertyValueNotInList","MessageArgs":["Once","BootSourceOverrideEnabled"],"RelatedProperties":["#/Boot/BootSourceOverrideEnabled"]}]}}"##,
        );
        assert!(e.is_value_rejected("BootSourceOverrideEnabled"));
        assert!(!e.is_retryable());
        let general = status_error(
            400,
            r##"{"error":{"@Message.ExtendedInfo":[{"MessageId":"Base.1.8.GeneralError","Message":"BootSourceOverrideEnabled cannot be Once"}]}}"##,
        );
        assert!(general.is_value_rejected("BootSourceOverrideEnabled"));
        assert!(!general.is_value_rejected("UefiTargetBootSourceOverride"));
        let missing = status_error(
            400,
            r##"{"error":{"@Message.ExtendedInfo":[{"MessageId":"Base.1.8.ActionParameterMissing","MessageArgs":["InsertMedia","TransferProtocolType"]}]}}"##,
        );
        assert_eq!(
            missing.missing_parameter().as_deref(),
            Some("TransferProtocolType")
        );
        let unknown = status_error(
            400,
            r##"{"error":{"@Message.ExtendedInfo":[{"MessageId":"Base.1.8.PropertyUnknown","MessageArgs":["WriteProtected"]}]}}"##,
        );
        assert_eq!(unknown.unwanted_parameter().as_deref(), Some("WriteProtected"));
    }

    #[test]
    fn other_variants_classify() {
        assert_eq!(
            Error::Deadline {
                operation: "reset",
                deadline: Duration::from_secs(2)
            }
            .class(),
            ErrorClass::Deadline
        );
        assert!(!Error::NoFence.is_retryable());
        assert!(!Error::Unsupported { what: "x".into() }.is_retryable());
        assert_eq!(message_suffix("Base.1.8.GeneralError"), "GeneralError");
        assert_eq!(message_suffix("NoDots"), "NoDots");
    }
}

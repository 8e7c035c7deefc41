//! The Incus response envelope, for the endpoints IncusOS itself calls (registration, updates): IncusOS parses
//! every answer of its manager as an Incus `api.Response` and accepts it only when `type` is `sync` and
//! `status_code` is 200; anything else is a failure, whose `error` it logs. The operator API keeps its own
//! error shape ([`crate::error::ErrorBody`]); these endpoints answer in this one, errors included.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A synchronous answer: `{"type": "sync", "status": "Success", "status_code": 200, "operation": "",
/// "error_code": 0, "error": "", "metadata": …}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IncusResponse<T> {
    /// `sync` for answers, `error` for failures.
    #[serde(rename = "type")]
    #[schema(example = "sync")]
    pub kind: String,
    #[schema(example = "Success")]
    pub status: String,
    #[schema(example = 200)]
    pub status_code: u16,
    /// Always empty: nothing here is asynchronous.
    pub operation: String,
    pub error_code: u16,
    pub error: String,
    pub metadata: T,
}

impl<T> IncusResponse<T> {
    pub fn sync(metadata: T) -> IncusResponse<T> {
        IncusResponse {
            kind: "sync".to_owned(),
            status: "Success".to_owned(),
            status_code: 200,
            operation: String::new(),
            error_code: 0,
            error: String::new(),
            metadata,
        }
    }
}

impl<T: Serialize> IntoResponse for IncusResponse<T> {
    fn into_response(self) -> Response {
        (StatusCode::OK, Json(self)).into_response()
    }
}

/// A 422 of an endpoint whose body is IncusOS's: a NUL in the path or query is refused before routing, in the
/// operator API's shape; a body value the database could not keep (`number_too_large`) is refused by the
/// handler, in the envelope. The document says both, so a client can read either.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum EnvelopeUnprocessable {
    Path(crate::error::ErrorBody),
    Body(IncusErrorBody),
}

/// A failure as answered: `{"type": "error", "status": "", "status_code": 0, "operation": "", "error_code": 403,
/// "error": "…", "metadata": null}`, with `error_code` as the HTTP status.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IncusErrorBody {
    #[serde(rename = "type")]
    #[schema(example = "error")]
    pub kind: String,
    pub status: String,
    pub status_code: u16,
    pub operation: String,
    #[schema(example = 403)]
    pub error_code: u16,
    #[schema(example = "not authorized")]
    pub error: String,
    /// racklift's reason code and the field it concerns, where there is one.
    pub metadata: Option<IncusErrorDetail>,
}

/// The machine-readable side of a refusal: a stable `code` and the `field` (query parameter or body key) it
/// concerns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IncusErrorDetail {
    #[schema(example = "replay")]
    pub code: String,
    #[schema(example = "token")]
    pub field: String,
}

/// A failure of an endpoint IncusOS calls; answered as an [`IncusErrorBody`].
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status}: {message}")]
pub struct IncusError {
    pub status: StatusCode,
    pub message: String,
    pub detail: Option<IncusErrorDetail>,
}

impl IncusError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> IncusError {
        IncusError {
            status,
            message: message.into(),
            detail: None,
        }
    }

    /// With racklift's reason `code` and the `field` it concerns.
    pub fn with_detail(mut self, code: &str, field: &str) -> IncusError {
        self.detail = Some(IncusErrorDetail {
            code: code.to_owned(),
            field: field.to_owned(),
        });
        self
    }

    pub fn forbidden() -> IncusError {
        IncusError::new(
            StatusCode::FORBIDDEN,
            "not authorized: present the client certificate this server registered with, or an API token",
        )
    }

    pub fn not_found(what: &str) -> IncusError {
        IncusError::new(StatusCode::NOT_FOUND, format!("{what} not found"))
    }

    pub fn internal() -> IncusError {
        IncusError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error; see the server log",
        )
    }

    /// The envelope this error is answered with.
    pub fn body(&self) -> IncusErrorBody {
        IncusErrorBody {
            kind: "error".to_owned(),
            status: String::new(),
            status_code: 0,
            operation: String::new(),
            error_code: self.status.as_u16(),
            error: self.message.clone(),
            metadata: self.detail.clone(),
        }
    }
}

impl IntoResponse for IncusError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

impl From<racklift_store::StoreError> for IncusError {
    fn from(e: racklift_store::StoreError) -> IncusError {
        tracing::error!(error = ?e, "store call failed");
        IncusError::internal()
    }
}

/// A request racklift's extractors refused (a malformed query or body), answered in the envelope with the same
/// code and field the operator API would name.
impl From<crate::error::ApiError> for IncusError {
    fn from(e: crate::error::ApiError) -> IncusError {
        let field = e.field.clone().unwrap_or_else(|| "body".to_owned());
        IncusError::new(e.status, e.message).with_detail(e.code, &field)
    }
}

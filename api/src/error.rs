//! One error shape for every failure, so clients (and the dashboard) branch on a stable `code` and can point
//! at the offending `field`, instead of parsing messages.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use racklift_store::StoreError;
use serde::de::DeserializeOwned;
use serde_json::json;

/// An error as answered: status, machine-readable code, human message, offending field.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
}

/// Why [`crate::serve`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("HTTP server")]
    Io(#[source] std::io::Error),
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn field(mut self, field: impl Into<String>) -> ApiError {
        self.field = Some(field.into());
        self
    }

    /// 400 `invalid_field`: a value in the request is malformed.
    pub fn invalid(field: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_field", message).field(field)
    }

    /// 422 with a specific code: the request is well-formed but cannot be carried out.
    pub fn unprocessable(code: &'static str, field: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message).field(field)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message, "field": self.field } });
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        // The client's input (a NUL in a JSON string, say), answered 400 rather than 500.
        if e.is_invalid_text() {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_text",
                "a text value holds a NUL or another character that cannot be stored",
            );
        }
        match &e {
            StoreError::NotFound { .. } => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            StoreError::Conflict { .. } => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            StoreError::Stale { .. } => ApiError::new(StatusCode::CONFLICT, "stale", e.to_string()),
            _ => {
                // The detail (SQL, connection) is for the log, not for the client.
                tracing::error!(error = ?e, "store call failed");
                ApiError::internal("internal error; see the server log")
            }
        }
    }
}

/// JSON body extractor whose rejections use the error shape: 400 `invalid_body`, 413 `body_too_large`.
pub struct Body<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Body(v)),
            Err(rejection) => Err(body_rejection(rejection)),
        }
    }
}

fn body_rejection(r: JsonRejection) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", r.body_text());
    }
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", r.body_text())
}

/// Unknown paths.
pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
}

/// Refuses a request whose path or query holds a NUL (`%00`; a raw one is not valid in a URI) before it is routed:
/// no name, secret or filter can contain one, and it must not reach the database as text.
pub async fn reject_nul(request: Request, next: axum::middleware::Next) -> Response {
    let uri = request.uri();
    let field = if uri.path().contains("%00") {
        Some("path")
    } else if uri.query().is_some_and(|q| q.contains("%00")) {
        Some("query")
    } else {
        None
    };
    match field {
        Some(field) => {
            ApiError::invalid(field, format!("the {field} holds a NUL character (%00)")).into_response()
        }
        None => next.run(request).await,
    }
}

/// Rewrites error responses produced outside the handlers (405 from the router, 413 from the body limit,
/// path and query rejections) into the error shape, so no client ever sees a plain-text error.
pub async fn json_errors(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    // JSON is already the shape; HTML is the dashboard's own error page (`/ui`), meant for a browser.
    let shaped = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    if shaped {
        return response;
    }
    let code = match status {
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::RANGE_NOT_SATISFIABLE => "range_not_satisfiable",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024).await.unwrap_or_default();
    let message = match String::from_utf8_lossy(&text).trim() {
        "" => status.canonical_reason().unwrap_or("error").to_owned(),
        t => t.to_owned(),
    };
    let rebuilt = ApiError::new(status, code, message).into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, rebuilt.into_body())
}

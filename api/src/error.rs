//! One error shape for every failure, so clients (and the dashboard) branch on a stable `code` and can point
//! at the offending `field`, instead of parsing messages.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use racklift_store::StoreError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;

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
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
                field: self.field,
            },
        };
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        // The client's input (a NUL in a JSON string, say), answered 400 rather than 500.
        if e.is_invalid_text() {
            return ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_text",
                "a text value holds a NUL or another character that cannot be stored",
            )
            .field("body");
        }
        match &e {
            StoreError::NotFound { .. } => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            StoreError::Conflict { .. } => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            StoreError::Stale { .. } => ApiError::new(StatusCode::CONFLICT, "stale", e.to_string()),
            _ if e.is_unavailable() => {
                tracing::warn!(error = ?e, "database unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "database_unavailable",
                    "the database cannot be reached or is not taking writes right now; retry shortly",
                )
            }
            _ => {
                // The detail (SQL, connection) is for the log, not for the client.
                tracing::error!(error = ?e, "store call failed");
                ApiError::internal("internal error; see the server log")
            }
        }
    }
}

/// The error shape every 4xx and 5xx carries.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable and machine-readable: clients branch on it.
    #[schema(example = "invalid_field")]
    pub code: String,
    /// For people; wording may change.
    pub message: String,
    /// The offending field of the body (a dotted path), the path, the query or a header, when one is to blame.
    #[schema(example = "bmc_address")]
    pub field: Option<String>,
}

/// JSON body extractor whose rejections use the error shape and name the field: 400 `invalid_body` (with the
/// dotted path of the value that did not fit or of a key given twice, or `body` when the JSON itself is broken), 413 `body_too_large`,
/// 415 `unsupported_media_type` naming `Content-Type`.
pub struct Body<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                let v = v.trim();
                v.eq_ignore_ascii_case("application/json")
                    || (v.len() > 5 && v[v.len() - 5..].eq_ignore_ascii_case("+json"))
            });
        if !json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be JSON (Content-Type: application/json)",
            )
            .field("Content-Type"));
        }
        let bytes = read_body(req, state).await?;
        parse_json(&bytes).map(Body)
    }
}

/// The body of an action endpoint (`…:deploy`, `…/{id}:retry`, …): JSON when present, and an empty body means
/// `{}` (every field of an action is optional), so no `Content-Type` is required.
pub struct ActionBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ActionBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req, state).await?;
        let body: &[u8] = match std::str::from_utf8(&bytes).map(str::trim) {
            Ok("" | "null") => b"{}",
            _ => &bytes,
        };
        parse_json(body).map(ActionBody)
    }
}

/// Typed query parameters whose rejection names the parameter: 400 `invalid_field`.
pub struct Params<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de).map(Params).map_err(|e| {
            let message = e.inner().to_string();
            let field = field_of(&e.path().to_string(), &message);
            let field = if field == "body" {
                "query".to_owned()
            } else {
                field
            };
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_field", message).field(field)
        })
    }
}

async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", r.body_text()).field("body")
        } else {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", r.body_text()).field("body")
        }
    })
}

/// Deserialises `bytes`, naming the failing value's path in `field`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut value = crate::unique_keys::parse(bytes).map_err(|refused| {
        let e = refused.error;
        let field = if e.is_syntax() || e.is_eof() || e.is_io() {
            "body".to_owned()
        } else {
            // A key given twice: the enclosing object's path and the key.
            field_of(&refused.path, &e.to_string())
        };
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()).field(field)
    })?;
    if let Some(path) = huge_number(&value, "") {
        let field = if path.is_empty() { "body".to_owned() } else { path };
        // Well-formed JSON the database cannot keep faithfully, like a NUL in a text: 422, as `invalid_text`.
        return Err(ApiError::unprocessable(
            "number_too_large",
            &field,
            "numbers must be smaller than 1e300 in magnitude",
        ));
    }
    integral_floats_as_integers(&mut value);
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.inner();
        let message = inner.to_string();
        let field = if inner.is_syntax() || inner.is_eof() || inner.is_io() {
            "body".to_owned()
        } else {
            field_of(&e.path().to_string(), &message)
        };
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", message).field(field)
    })
}

/// The dotted path of a number too large to come back out of the database: PostgreSQL keeps JSON numbers as
/// exact decimals, and near the end of f64's range one written out in full no longer reads back as a float.
fn huge_number(v: &serde_json::Value, path: &str) -> Option<String> {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match v {
        serde_json::Value::Number(n) => n.as_f64().filter(|f| f.abs() >= 1e300).map(|_| path.to_owned()),
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| huge_number(item, &join(&i.to_string()))),
        serde_json::Value::Object(map) => map.iter().find_map(|(k, item)| huge_number(item, &join(k))),
        _ => None,
    }
}

/// JSON does not tell `3` from `3.0`, and JSON Schema calls both integers: a client (or a generator) may send
/// either where the API takes an integer.
fn integral_floats_as_integers(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                *v = serde_json::Value::from(f as i64);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        serde_json::Value::Object(map) => map.values_mut().for_each(integral_floats_as_integers),
        _ => {}
    }
}

/// The dotted path of the value serde could not take: for an unknown or missing field, serde's path stops at
/// the enclosing object and the field's own name is in the message (`unknown field `x``).
fn field_of(path: &str, message: &str) -> String {
    let named = ["unknown field `", "missing field `", "duplicate field `"]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
        .and_then(|rest| rest.split('`').next());
    let parent = if path == "." { "" } else { path };
    match (named, parent) {
        // Some formats track the key itself already.
        (Some(name), parent) if parent == name || parent.ends_with(&format!(".{name}")) => parent.to_owned(),
        (Some(name), "") => name.to_owned(),
        (Some(name), parent) => format!("{parent}.{name}"),
        (None, "") => "body".to_owned(),
        (None, parent) => parent.to_owned(),
    }
}

/// Unknown paths.
pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such resource").field("path")
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
        Some(field) => ApiError::unprocessable(
            "invalid_text",
            field,
            format!("the {field} holds a NUL character (%00), which no name, secret or filter can contain"),
        )
        .into_response(),
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
    let (code, field) = match status {
        StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", Some("method")),
        StatusCode::PAYLOAD_TOO_LARGE => ("body_too_large", Some("body")),
        StatusCode::NOT_FOUND => ("not_found", Some("path")),
        StatusCode::RANGE_NOT_SATISFIABLE => ("range_not_satisfiable", Some("Range")),
        StatusCode::REQUEST_TIMEOUT => ("request_timeout", Some("body")),
        s if s.is_server_error() => ("internal", None),
        _ => ("bad_request", Some("path")),
    };
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024).await.unwrap_or_default();
    let message = match String::from_utf8_lossy(&text).trim() {
        "" => status.canonical_reason().unwrap_or("error").to_owned(),
        t => t.to_owned(),
    };
    let mut error = ApiError::new(status, code, message);
    error.field = field.map(str::to_owned);
    let rebuilt = error.into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, rebuilt.into_body())
}

//! Response helpers: JSON bodies with the Redfish headers, and the DMTF error shape.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

/// Base message registry prefix of the simulator's error ids.
pub const BASE: &str = "Base.1.8";

/// What a Redfish answer says about caching: a resource's state is live, so a client must revalidate.
const CACHE_CONTROL: &str = "no-cache";

/// A JSON response with `OData-Version` and `Cache-Control`.
pub fn json(status: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    h.insert("odata-version", HeaderValue::from_static("4.0"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(CACHE_CONTROL));
    if let Some(link) = described_by(body).and_then(|l| HeaderValue::from_str(&l).ok()) {
        h.insert(header::LINK, link);
    }
    resp
}

/// The `Link: <schema>; rel=describedby` of a resource (Redfish specification, "Link" response header): the
/// DMTF-published JSON Schema of its `@odata.type`, versioned as the type is (`ComputerSystem.v1_20_0.json`) or
/// unversioned for collections (`ComputerSystemCollection.json`).
fn described_by(body: &Value) -> Option<String> {
    let odata_type = body.get("@odata.type")?.as_str()?.trim_start_matches('#');
    let mut parts = odata_type.split('.');
    let namespace = parts.next()?;
    let schema = match (parts.next(), parts.next()) {
        (Some(version), Some(_)) if version.starts_with('v') => format!("{namespace}.{version}"),
        _ => namespace.to_owned(),
    };
    Some(format!(
        "<https://redfish.dmtf.org/schemas/v1/{schema}.json>; rel=describedby"
    ))
}

pub fn ok(body: &Value) -> Response {
    json(StatusCode::OK, body)
}

pub fn status(status: StatusCode) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert("odata-version", HeaderValue::from_static("4.0"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(CACHE_CONTROL));
    resp
}

pub fn no_content() -> Response {
    status(StatusCode::NO_CONTENT)
}

/// 201 with `Location`.
pub fn created(location: &str, body: &Value) -> Response {
    let mut resp = json(StatusCode::CREATED, body);
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

/// 202 with a task monitor `Location` and `Retry-After`.
pub fn accepted(monitor: &str, task: &Value) -> Response {
    let mut resp = json(StatusCode::ACCEPTED, task);
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(monitor) {
        h.insert(header::LOCATION, v);
    }
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// The DMTF error body. `message_id` is a full id (`Base.1.8.X`, `IDRAC.2.8.RAC0218`).
pub fn error_with(status: StatusCode, message_id: &str, message: &str, related: &[&str]) -> Response {
    let code = if message_id.starts_with(BASE) {
        message_id.to_owned()
    } else {
        format!("{BASE}.GeneralError")
    };
    let body = json!({"error": {
        "code": code,
        "message": message,
        "@Message.ExtendedInfo": [{
            "@odata.type": "#Message.v1_1_1.Message",
            "MessageId": message_id,
            "Message": message,
            "MessageArgs": [],
            "Severity": "Warning",
            "Resolution": "See the message.",
            "RelatedProperties": related,
        }],
    }});
    json(status, &body)
}

/// A `Base` registry error.
pub fn error(status: StatusCode, id: &str, message: &str, related: &[&str]) -> Response {
    error_with(status, &format!("{BASE}.{id}"), message, related)
}

pub fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "ResourceMissingAtURI",
        "The resource at the URI was not found.",
        &[],
    )
}

pub fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "OperationNotAllowed",
        "The operation is not allowed on this resource.",
        &[],
    )
}

pub fn bad_json() -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "MalformedJSON",
        "The request body is not valid JSON.",
        &[],
    )
}

/// 403: authenticated, but the account's role lacks the privilege.
pub fn forbidden(privilege: &str) -> Response {
    error(
        StatusCode::FORBIDDEN,
        "InsufficientPrivilege",
        &format!("The operation needs the {privilege} privilege, which the account's role lacks."),
        &[],
    )
}

/// 412: the `If-Match` tag is not the resource's current one; nothing was changed.
pub fn precondition_failed() -> Response {
    error(
        StatusCode::PRECONDITION_FAILED,
        "PreconditionFailed",
        "The ETag supplied did not match the ETag required to change this resource.",
        &[],
    )
}

pub fn unauthorized() -> Response {
    let mut resp = error(
        StatusCode::UNAUTHORIZED,
        "InsufficientPrivilege",
        "Authentication required.",
        &[],
    );
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"racklift-bmc-sim\""),
    );
    resp
}

/// The iDRAC session-exhaustion answer.
pub fn busy_rac0218() -> Response {
    error_with(
        StatusCode::SERVICE_UNAVAILABLE,
        "IDRAC.2.8.RAC0218",
        "The maximum number of user sessions is reached.",
        &[],
    )
}

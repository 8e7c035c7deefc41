//! The OpenAPI document, derived from the handlers: every route is registered through [`crate::routes`] with the
//! `#[utoipa::path]` of its handler, so the router and the document are built from one list and cannot drift.
//! The committed `api/openapi.json` is this document; a test fails when they differ.
//!
//! Action routes are spelled `{name}:deploy` (spec 000) but routed as `{name}/_action/deploy`, because a route
//! segment cannot mix a capture with literal text: [`action_rewrite`] maps the first to the second before
//! routing, and [`document`] names the public spelling.

use axum::Json;
use axum::extract::Request;
use axum::http::Uri;
use utoipa::openapi::schema::{AdditionalProperties, ArrayItems, KnownFormat, Schema, SchemaFormat};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, Paths, RefOr};
use utoipa::{IntoResponses, Modify, OpenApi};

use crate::error::ErrorBody;

/// The internal segment an action is routed under.
pub const ACTION_SEGMENT: &str = "/_action/";

/// The routed path of `PUT /1.0/provisioning/servers/:self`, as [`action_rewrite`] maps it.
const SELF_ACTION: &str = "/_action/self";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "racklift API",
        description = "Deploys IncusOS onto bare-metal servers through their BMCs. Every mutating request becomes \
            durable jobs; errors carry a stable `code` and the offending `field`."
    ),
    modifiers(&BearerAuth),
    components(schemas(crate::views::BmcActionAccepted, crate::triage::Status, crate::triage::StateName)),
    tags(
        (name = "servers", description = "The server catalog"),
        (name = "catalog", description = "Provisioning tokens, seeds, BIOS profiles, images, settings"),
        (name = "provisioning", description = "Deployments, ad-hoc BMC actions and registration"),
        (name = "triage", description = "Dead letters and stuck work"),
        (name = "service", description = "Metrics, install media and this document"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API token (`racklift token create`). The scopes of an operation's requirement name \
                         the least role it needs: viewer < operator < admin.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "incus_client_certificate",
            SecurityScheme::MutualTls {
                description: Some(
                    "The TLS client certificate a server registered with (IncusOS's Incus client certificate), \
                     recognised by its SHA-256 fingerprint. Operations that accept it answer every refusal with 403 \
                     in the Incus error envelope, since IncusOS has no API token to offer."
                        .to_owned(),
                ),
                extensions: None,
            },
        );
    }
}

/// The answers every viewer-level operation can give besides its own.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum ViewerErrors {
    /// Missing, malformed or unknown API token.
    #[response(status = 401)]
    Unauthenticated(ErrorBody),
    /// A parameter or the body is malformed; `field` names it.
    #[response(status = 400)]
    Invalid(ErrorBody),
    /// Well-formed, but what it names cannot be carried out (a text holding a character the database cannot
    /// store, a value naming nothing known); `code` says which, `field` names it.
    #[response(status = 422)]
    Unprocessable(ErrorBody),
}

/// The answers every operator-level operation can give besides its own.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum OperatorErrors {
    /// Missing, malformed or unknown API token.
    #[response(status = 401)]
    Unauthenticated(ErrorBody),
    /// The token's role is below operator.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// A parameter or the body is malformed; `field` names it.
    #[response(status = 400)]
    Invalid(ErrorBody),
    /// Well-formed, but what it names cannot be carried out (a text holding a character the database cannot
    /// store, a value naming nothing known); `code` says which, `field` names it.
    #[response(status = 422)]
    Unprocessable(ErrorBody),
}

/// The answers every admin-level operation can give besides its own.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum AdminErrors {
    /// Missing, malformed or unknown API token.
    #[response(status = 401)]
    Unauthenticated(ErrorBody),
    /// The token's role is below admin.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// A parameter or the body is malformed; `field` names it.
    #[response(status = 400)]
    Invalid(ErrorBody),
    /// The body is not JSON.
    #[response(status = 415)]
    UnsupportedMediaType(ErrorBody),
    /// Well-formed, but what it names cannot be carried out (a text holding a character the database cannot
    /// store, a value naming nothing known); `code` says which, `field` names it.
    #[response(status = 422)]
    Unprocessable(ErrorBody),
}

/// Renames the routed action paths (`…/{name}/_action/deploy`) to their public spelling (`…/{name}:deploy`), and
/// a routed rest-of-path parameter (`{*filename}`, which takes slashes) to OpenAPI's `{filename}`.
pub fn publish(mut doc: Document) -> Document {
    let mut paths = Paths::new();
    for (path, item) in std::mem::take(&mut doc.paths.paths) {
        // An action on a collection itself is a segment of its own where IncusOS calls it: `…/servers/:self`.
        let public = match path.strip_suffix(SELF_ACTION) {
            Some(collection) => format!("{collection}/:self"),
            None => path.replace(ACTION_SEGMENT, ":").replace("{*", "{"),
        };
        paths.paths.insert(public, item);
    }
    doc.paths = paths;
    integer_ranges(doc)
}

/// Gives every `int32` / `int64` schema the range of its Rust type where it states none: `format` alone is not a
/// bound to a generator, which then sends 2^63 and gets the 400 the handler's integer type answers.
fn integer_ranges(mut doc: Document) -> Document {
    use utoipa::openapi::path::Operation;
    fn content(c: &mut utoipa::openapi::Content) {
        if let Some(s) = &mut c.schema {
            ranged(s);
        }
    }
    fn operation(op: &mut Operation) {
        for p in op.parameters.iter_mut().flatten() {
            if let Some(s) = &mut p.schema {
                ranged(s);
            }
        }
        for c in op.request_body.iter_mut().flat_map(|b| b.content.values_mut()) {
            content(c);
        }
        for r in op.responses.responses.values_mut() {
            if let RefOr::T(r) = r {
                r.content.values_mut().for_each(content);
            }
        }
    }
    for item in doc.paths.paths.values_mut() {
        let ops = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ];
        ops.into_iter().flatten().for_each(operation);
    }
    for s in doc.components.iter_mut().flat_map(|c| c.schemas.values_mut()) {
        ranged(s);
    }
    doc
}

/// [`integer_ranges`] for one schema and everything inside it.
fn ranged(schema: &mut RefOr<Schema>) {
    let RefOr::T(schema) = schema else { return };
    match schema {
        Schema::Object(o) => {
            let range = match &o.format {
                Some(SchemaFormat::KnownFormat(KnownFormat::Int32)) => {
                    Some((i64::from(i32::MIN), i64::from(i32::MAX)))
                }
                Some(SchemaFormat::KnownFormat(KnownFormat::Int64)) => Some((i64::MIN, i64::MAX)),
                _ => None,
            };
            if let Some((min, max)) = range {
                // `isize` is 64 bits wide on every target racklift builds for.
                o.minimum.get_or_insert(utoipa::Number::Int(min as isize));
                o.maximum.get_or_insert(utoipa::Number::Int(max as isize));
            }
            o.properties.values_mut().for_each(ranged);
            if let Some(extra) = o.additional_properties.as_deref_mut()
                && let AdditionalProperties::RefOr(s) = extra
            {
                ranged(s);
            }
        }
        Schema::Array(a) => {
            if let ArrayItems::RefOrSchema(items) = &mut a.items {
                ranged(items);
            }
        }
        Schema::OneOf(one) => one.items.iter_mut().for_each(ranged),
        Schema::AnyOf(any) => any.items.iter_mut().for_each(ranged),
        Schema::AllOf(all) => all.items.iter_mut().for_each(ranged),
        _ => {}
    }
}

/// Maps an action's public path to the routed one before routing: `…/s1:deploy` and the spec's other spelling
/// `…/s1/:deploy` both become `…/s1/_action/deploy`, and `/1.0/deadletters:bulk-retry`
/// `/1.0/deadletters/_action/bulk-retry`. Only the last segment is looked at; other paths pass unchanged.
pub fn action_rewrite(mut request: Request) -> Request {
    let uri = request.uri();
    let path = uri.path();
    // Only the API has action paths; the dashboard and the media server keep theirs as sent.
    if !path.starts_with("/1.0/") {
        return request;
    }
    let Some(slash) = path.rfind('/') else {
        return request;
    };
    let (head, last) = path.split_at(slash + 1);
    let Some(colon) = last.find(':') else {
        return request;
    };
    let (target, action) = (&last[..colon], &last[colon + 1..]);
    if action.is_empty() {
        return request;
    }
    let routed = if target.is_empty() {
        format!("{}{ACTION_SEGMENT}{action}", head.trim_end_matches('/'))
    } else {
        format!("{head}{target}{ACTION_SEGMENT}{action}")
    };
    let with_query = match uri.query() {
        Some(q) => format!("{routed}?{q}"),
        None => routed,
    };
    if let Ok(rewritten) = with_query.parse::<Uri>() {
        let mut parts = uri.clone().into_parts();
        parts.path_and_query = rewritten.path_and_query().cloned();
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    request
}

/// The document as served and committed.
pub fn document() -> Document {
    crate::routes::split().2
}

/// `GET /1.0/openapi.json`. Public: a client needs the document before it has a token.
#[utoipa::path(get, path = "/1.0/openapi.json", tag = "service",
    responses((status = 200, description = "This document (OpenAPI 3.1)", content_type = "application/json",
        body = Object)))]
pub async fn serve_document() -> Json<Document> {
    Json(document())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_paths_are_routed_under_the_action_segment() {
        for (public, routed) in [
            (
                "/1.0/provisioning/servers/s1:deploy",
                "/1.0/provisioning/servers/s1/_action/deploy",
            ),
            (
                "/1.0/provisioning/servers/s1/:power?x=1",
                "/1.0/provisioning/servers/s1/_action/power?x=1",
            ),
            (
                "/1.0/deadletters:bulk-retry",
                "/1.0/deadletters/_action/bulk-retry",
            ),
            ("/1.0/deadletters/12:retry", "/1.0/deadletters/12/_action/retry"),
            ("/1.0/servers/s1", "/1.0/servers/s1"),
            ("/1.0/servers/s1:", "/1.0/servers/s1:"),
            ("/media/a:b/c", "/media/a:b/c"),
        ] {
            let request = Request::builder()
                .uri(public)
                .body(axum::body::Body::empty())
                .unwrap();
            assert_eq!(action_rewrite(request).uri().to_string(), routed, "{public}");
        }
    }
}

//! `GET /1.0/openapi.json`: an OpenAPI 3.1 description, hand-maintained as JSON rather than derived: the
//! handlers answer `serde_json::Value` views (passwords reduced to "set"), which derive macros would not
//! describe faithfully anyway. Keep [`PATHS`] in step with `router` in lib.rs.

use axum::Json;
use serde_json::{Value, json};

/// One operation: method, the role it needs, summary.
type Operation = (&'static str, &'static str, &'static str);

/// Every path the router serves, with its operations and the role each needs.
pub const PATHS: &[(&str, &[Operation])] = &[
    (
        "/1.0/servers",
        &[
            ("get", "viewer", "List servers"),
            ("post", "admin", "Create a server"),
        ],
    ),
    (
        "/1.0/servers/{name}",
        &[
            (
                "get",
                "viewer",
                "Show a server with its status and newest deployment",
            ),
            ("patch", "admin", "Update a server's BMC settings"),
            ("delete", "admin", "Delete a server without a running deployment"),
        ],
    ),
    (
        "/1.0/servers/{name}/events",
        &[("get", "viewer", "A server's events after ?after=ID")],
    ),
    (
        "/1.0/tokens",
        &[
            ("get", "viewer", "List provisioning tokens"),
            ("post", "admin", "Create a provisioning token"),
        ],
    ),
    (
        "/1.0/tokens/{token}",
        &[
            ("get", "viewer", "Show a provisioning token"),
            ("delete", "admin", "Delete a provisioning token"),
        ],
    ),
    (
        "/1.0/tokens/{token}/seeds",
        &[
            ("get", "viewer", "List a token's seeds"),
            ("post", "admin", "Create a token seed"),
        ],
    ),
    (
        "/1.0/bios-profiles",
        &[
            ("get", "viewer", "List BIOS profiles"),
            ("post", "admin", "Create or replace a BIOS profile"),
        ],
    ),
    (
        "/1.0/bios-profiles/{name}",
        &[("delete", "admin", "Delete a BIOS profile")],
    ),
    (
        "/1.0/images",
        &[
            ("get", "viewer", "List images"),
            ("post", "admin", "Register an image"),
        ],
    ),
    (
        "/1.0/settings/public-address",
        &[
            ("get", "viewer", "The public address media URLs are built from"),
            ("put", "admin", "Set the public address"),
        ],
    ),
    (
        "/1.0/provisioning/servers",
        &[(
            "post",
            "provisioning token",
            "Registration callback of the installed OS (?token=UUID)",
        )],
    ),
    (
        "/1.0/provisioning/servers/{name}:deploy",
        &[(
            "post",
            "operator",
            "Request a deployment after the pre-flight checks (Idempotency-Key honoured)",
        )],
    ),
    (
        "/1.0/provisioning/servers/{name}:cancel-deploy",
        &[("post", "operator", "Cancel the running deployment")],
    ),
    (
        "/1.0/provisioning/servers/{name}:power",
        &[(
            "post",
            "operator",
            "Enqueue a power action (on, off, cycle) as a fenced job",
        )],
    ),
    (
        "/1.0/provisioning/servers/{name}:media",
        &[(
            "post",
            "operator",
            "Enqueue a virtual media action (insert with image_url, eject) as a fenced job",
        )],
    ),
    (
        "/1.0/provisioning/servers/{name}/{action}",
        &[(
            "post",
            "operator",
            "The same actions spelled /:deploy, /:cancel-deploy, /:power, /:media",
        )],
    ),
    ("/1.0/openapi.json", &[("get", "none", "This document")]),
    (
        "/media/{secret}/{file}",
        &[
            ("get", "media secret", "The installation image (HTTP Range)"),
            ("head", "media secret", "Image headers"),
        ],
    ),
];

fn parameters(path: &str) -> Value {
    let names: Vec<&str> = path
        .split('{')
        .skip(1)
        .filter_map(|s| s.split('}').next())
        .collect();
    Value::Array(
        names
            .into_iter()
            .map(|n| json!({ "name": n, "in": "path", "required": true, "schema": { "type": "string" } }))
            .collect(),
    )
}

pub fn spec() -> Value {
    let error = json!({
        "type": "object",
        "required": ["error"],
        "properties": { "error": {
            "type": "object",
            "required": ["code", "message", "field"],
            "properties": {
                "code": { "type": "string" },
                "message": { "type": "string" },
                "field": { "type": ["string", "null"] }
            }
        }}
    });
    let mut paths = serde_json::Map::new();
    for (path, ops) in PATHS {
        let mut item = serde_json::Map::new();
        for (method, role, summary) in *ops {
            item.insert(
                (*method).to_owned(),
                json!({
                    "summary": summary,
                    "description": format!("Requires: {role}."),
                    "parameters": parameters(path),
                    "responses": {
                        "2XX": { "description": "Success", "content": { "application/json": {} } },
                        "default": { "description": "Error", "content": { "application/json": {
                            "schema": { "$ref": "#/components/schemas/Error" } } } }
                    }
                }),
            );
        }
        paths.insert((*path).to_owned(), Value::Object(item));
    }
    json!({
        "openapi": "3.1.0",
        "info": { "title": "racklift API", "version": env!("CARGO_PKG_VERSION") },
        "paths": paths,
        "components": {
            "schemas": { "Error": error },
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } }
        },
        "security": [{ "bearer": [] }]
    })
}

/// Public: a client needs the document before it has a token.
pub async fn document() -> Json<Value> {
    Json(spec())
}

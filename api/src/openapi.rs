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
        &[(
            "post",
            "operator",
            "Cancel the running deployment; optional body {skip_cleanup, reason}, the reason kept in the event log",
        )],
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
    (
        "/1.0/deadletters",
        &[(
            "get",
            "viewer",
            "Dead letters, newest first: {items: [DeadLetter], next_cursor}",
        )],
    ),
    (
        "/1.0/deadletters/groups",
        &[(
            "get",
            "viewer",
            "Dead letter counts per (operation, error_class, message_id, vendor, state): {groups, total}",
        )],
    ),
    (
        "/1.0/deadletters/{id}",
        &[(
            "get",
            "viewer",
            "One dead letter: {dead_letter, deployment, timeline, live_job, actions}",
        )],
    ),
    (
        "/1.0/deadletters/{id}:retry",
        &[(
            "post",
            "operator",
            "Retry: a failed deployment resumes in from_state (default: where it failed) with a fresh budget; a BMC action is enqueued again",
        )],
    ),
    (
        "/1.0/deadletters/{id}:discard",
        &[("post", "operator", "Mark a dead letter discarded, with a note")],
    ),
    (
        "/1.0/deadletters/{id}:cancel",
        &[(
            "post",
            "operator",
            "Cancel the dead letter's deployment, with the eject / power-off clean up or without",
        )],
    ),
    (
        "/1.0/deadletters:bulk-retry",
        &[(
            "post",
            "operator",
            "Retry the open dead letters a filter matches: {bulk_id, matched, retried, skipped, skipped_items, more}",
        )],
    ),
    (
        "/1.0/stuck",
        &[(
            "get",
            "viewer",
            "Live deployments past their state's budget (?all=true: every live one): {items}",
        )],
    ),
    (
        "/1.0/stats/state-durations",
        &[(
            "get",
            "viewer",
            "p50 / p95 / max seconds per state and vendor over deployments started in ?window_hours= (default 168), \
             with each state's budget: {window_hours, items}",
        )],
    ),
    ("/1.0/openapi.json", &[("get", "none", "This document")]),
    (
        "/metrics",
        &[(
            "get",
            "none",
            "Prometheus metrics (also the liveness and readiness probe)",
        )],
    ),
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
    triage_details(&mut paths);
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

/// Query parameters and request bodies of the triage operations, which the generic entries above do not carry.
fn triage_details(paths: &mut serde_json::Map<String, Value>) {
    let q = |name: &str, ty: &str, description: &str| json!({ "name": name, "in": "query", "required": false, "schema": { "type": ty }, "description": description });
    let filters = || {
        vec![
            q(
                "operation",
                "string",
                "deployment, bmc_action, rolling_reboot, rolling_update",
            ),
            q("error_class", "string", "the error class the work died with"),
            q("message_id", "string", "Redfish MessageId of the last BMC error"),
            q("vendor", "string", "the server's vendor_hint"),
            q("state", "string", "the deployment state the work failed in"),
            q("server", "string", "server name"),
            q("min_age_secs", "integer", "dead for at least this long"),
            q(
                "status",
                "string",
                "open (default), retried, discarded, resolved, canceled",
            ),
        ]
    };
    let mut list = filters();
    list.push(q("limit", "integer", "page size, 1 to 500 (default 50)"));
    list.push(q("cursor", "string", "next_cursor of the previous page"));
    let mut groups = filters();
    groups.push(q(
        "limit",
        "integer",
        "at most this many groups, 1 to 1000 (default 1000)",
    ));
    let reason =
        json!({ "type": "string", "description": "why; recorded with the caller's token name and role" });
    let filter = json!({ "type": "object", "additionalProperties": false, "properties": {
        "operation": { "type": "string" }, "error_class": { "type": "string" }, "message_id": { "type": "string" },
        "vendor": { "type": "string" }, "state": { "type": "string" }, "server": { "type": "string" },
        "min_age_secs": { "type": "integer", "minimum": 0 } } });
    let body = |required: &[&str], properties: Value| {
        json!({ "required": true, "content": { "application/json": { "schema": {
            "type": "object", "additionalProperties": false, "required": required, "properties": properties } } } })
    };
    let details = [
        ("/1.0/deadletters", "get", "parameters", Value::Array(list)),
        (
            "/1.0/deadletters/groups",
            "get",
            "parameters",
            Value::Array(groups),
        ),
        (
            "/1.0/stuck",
            "get",
            "parameters",
            json!([q("all", "boolean", "include live deployments on track")]),
        ),
        (
            "/1.0/stats/state-durations",
            "get",
            "parameters",
            json!([q(
                "window_hours",
                "integer",
                "deployments started this many hours back (1 to 8784)"
            )]),
        ),
        (
            "/1.0/deadletters/{id}:retry",
            "post",
            "requestBody",
            body(
                &["reason"],
                json!({ "reason": reason, "from_state": { "type": "string",
                    "description": "the failed state or an earlier trigger; deployments only" } }),
            ),
        ),
        (
            "/1.0/deadletters/{id}:discard",
            "post",
            "requestBody",
            body(&["note"], json!({ "note": reason })),
        ),
        (
            "/1.0/deadletters/{id}:cancel",
            "post",
            "requestBody",
            body(
                &["reason"],
                json!({ "reason": reason, "skip_cleanup": { "type": "boolean", "default": false } }),
            ),
        ),
        (
            "/1.0/deadletters:bulk-retry",
            "post",
            "requestBody",
            body(
                &["reason", "filter"],
                json!({ "reason": reason, "filter": filter,
                        "limit": { "type": "integer", "minimum": 1, "maximum": 1000, "default": 100 } }),
            ),
        ),
    ];
    for (path, method, key, value) in details {
        let Some(op) = paths.get_mut(path).and_then(|p| p.get_mut(method)) else {
            continue;
        };
        match (key, op.get_mut(key)) {
            ("parameters", Some(Value::Array(existing))) => {
                existing.extend(value.as_array().cloned().unwrap_or_default());
            }
            _ => op[key] = value,
        }
    }
}

//! Every operation of the API document (which the router is built from, so a new route cannot escape this test)
//! called with no token, a garbage token, and a viewer's, an operator's and an admin's: 401 without a valid token,
//! 403 below the operation's role, neither at or above it, and never a 5xx.

mod common;

use common::{ADMIN, Api, OPERATOR, VIEWER};
use reqwest::Method;
use serde_json::Value;

const CALLERS: &[(&str, Option<&str>, u8)] = &[
    ("no token", None, 0),
    ("garbage token", Some("not-a-token"), 0),
    ("viewer", Some(VIEWER), 1),
    ("operator", Some(OPERATOR), 2),
    ("admin", Some(ADMIN), 3),
];

fn rank(role: &str) -> u8 {
    match role {
        "viewer" => 1,
        "operator" => 2,
        "admin" => 3,
        other => panic!("unknown role {other:?} in the document"),
    }
}

/// A concrete path for a templated one.
fn concrete(template: &str) -> String {
    template
        .replace("{name}", "s1")
        .replace("{token}", "00000000-0000-4000-8000-000000000000")
        .replace("{id}", "1")
        .replace("{secret}", "nope")
        .replace("{file}", "incusos.img")
}

#[tokio::test]
async fn every_operation_refuses_callers_below_its_role() {
    let api = Api::start().await;
    let doc = racklift_api::openapi::document();
    let doc: Value = serde_json::to_value(&doc).expect("document");
    let mut cells = 0;
    let mut protected = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let method: Method = method.to_uppercase().parse().expect("method");
            let role = op["security"]
                .as_array()
                .and_then(|s| s.first())
                .and_then(|r| r["bearer"].as_array())
                .and_then(|scopes| scopes.first())
                .and_then(Value::as_str);
            if role.is_some() {
                protected += 1;
            }
            for (who, secret, caller_rank) in CALLERS {
                let mut request = api
                    .http
                    .request(method.clone(), format!("{}{}", api.base, concrete(path)));
                if let Some(secret) = secret {
                    request = request.bearer_auth(secret);
                }
                if method == Method::POST || method == Method::PUT || method == Method::PATCH {
                    request = request.header("content-type", "application/json").body("{}");
                }
                let status = request.send().await.expect("request").status().as_u16();
                cells += 1;
                let label = format!("{method} {path} as {who}: {status}");
                assert!(status < 500, "{label}");
                match role {
                    None => assert!(status != 401, "{label}: a public operation asked for a token"),
                    Some(_) if *caller_rank == 0 => assert_eq!(status, 401, "{label}"),
                    Some(role) if *caller_rank < rank(role) => {
                        assert_eq!(status, 403, "{label} (needs {role})")
                    }
                    Some(role) => assert!(status != 401 && status != 403, "{label} (needs {role})"),
                }
            }
        }
    }
    // The figure the matrix is quoted by.
    println!("auth matrix: {cells} cells, {protected} protected operations");
    assert!(protected >= 30, "the document lost operations: {protected}");
}

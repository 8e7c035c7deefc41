//! Every operation of the API document (which the router is built from, so a new route cannot escape this test)
//! called with no token, a garbage token, and a viewer's, an operator's and an admin's: 401 without a valid token,
//! 403 below the operation's role, neither at or above it, and never a 5xx. The dashboard's pages and forms (from
//! the table its router is built from) likewise, with a session opened by each token, and each CSRF-checked
//! form once more without its CSRF token.

mod common;
#[path = "ui/client.rs"]
#[allow(dead_code)] // Shared with the dashboard tests; this file uses part of it.
mod ui_client;

use common::{ADMIN, Api, OPERATOR, VIEWER};
use racklift_api::{UiAccess, ui_pages};
use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION};
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
        .replace("{uuid}", "00000000-0000-4000-8000-000000000000")
        .replace("{filename}", "incus.raw.gz")
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
            // An empty requirement (`{}`) lets anyone in: the update catalog IncusOS reads before it has a client
            // certificate, which a registered server's certificate only narrows (never refuses).
            let anonymous = op["security"]
                .as_array()
                .is_some_and(|s| s.iter().any(|r| r.as_object().is_some_and(|r| r.is_empty())));
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
                    None if anonymous => assert!(
                        status != 401 && status != 403,
                        "{label}: an operation open to anyone refused a caller"
                    ),
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

/// The `Cookie` header of a fresh session opened with `secret`, and its CSRF token; `None` for the callers
/// without a valid token (a garbage cookie for the garbage token).
async fn session(api: &Api, secret: Option<&str>, caller_rank: u8) -> (Option<String>, String) {
    match secret {
        Some(secret) if caller_rank > 0 => {
            let cookie = ui_client::login(api, secret).await;
            let (status, html) = ui_client::page(api, "/ui", &cookie).await;
            assert_eq!(status, 200, "the dashboard with a fresh session");
            (Some(cookie), ui_client::csrf(&html))
        }
        Some(_) => (Some("racklift_session=not-a-session".into()), "00".repeat(32)),
        None => (None, String::new()),
    }
}

#[tokio::test]
async fn every_dashboard_route_refuses_sessions_below_its_role() {
    let api = Api::start().await;
    let client = ui_client::client();
    let mut cells = 0;
    for page in ui_pages() {
        let path = format!(
            "/ui{}",
            page.path.replace("{id}", "1").replace("{action}", "retry")
        );
        let path = path.trim_end_matches('/').to_owned();
        let csrf_checked = matches!(page.access, UiAccess::Operator | UiAccess::Viewer { csrf: true });
        for (who, secret, caller_rank) in CALLERS {
            // Each CSRF-checked form is also sent by an operator's session without its CSRF token.
            let variants: &[bool] = if csrf_checked && *who == "operator" {
                &[true, false]
            } else {
                &[true]
            };
            for &with_csrf in variants {
                let (cookie, csrf) = session(&api, *secret, *caller_rank).await;
                let mut request = client.request(page.method.clone(), format!("{}{path}", api.base));
                if let Some(c) = &cookie {
                    request = request.header(COOKIE, c);
                }
                if page.method == Method::POST {
                    let mut form = vec![("reason", "auth matrix"), ("operation", "deployment")];
                    match page.access {
                        UiAccess::Login => form.push(("token", secret.unwrap_or_default())),
                        _ if with_csrf => form.push(("csrf", &csrf)),
                        _ => {}
                    }
                    request = request
                        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                        .body(ui_client::urlencode(&form));
                }
                let resp = request.send().await.expect("request");
                let status = resp.status().as_u16();
                let to_login = resp
                    .headers()
                    .get(LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .is_some_and(|l| l.starts_with("/ui/login"));
                // A page without a session goes to the login form; a form or the live fragment gets 401.
                let refused = status == 401 || (page.method == Method::GET && status == 303 && to_login);
                cells += 1;
                let label = format!(
                    "{} {path} as {who}{}: {status}",
                    page.method,
                    if with_csrf { "" } else { " without CSRF" }
                );
                assert!(status < 500, "{label}");
                match page.access {
                    UiAccess::Public => assert!(status < 400, "{label}: a public page refused"),
                    UiAccess::Login if *caller_rank == 0 => assert_eq!(status, 401, "{label}"),
                    UiAccess::Login => assert_eq!(status, 303, "{label}"),
                    _ if *caller_rank == 0 => assert!(refused, "{label}"),
                    UiAccess::Operator if *caller_rank < 2 => assert_eq!(status, 403, "{label}"),
                    _ if !with_csrf => assert_eq!(status, 403, "{label}"),
                    _ => assert!(!refused && status != 403, "{label}"),
                }
            }
        }
    }
    println!("dashboard auth matrix: {cells} cells");
    assert!(cells >= 55, "the dashboard lost routes: {cells} cells");
}

//! What a malformed request gets: the role is checked before the body, unknown fields are refused, and every
//! 4xx names the field to blame.

mod common;

use common::{ADMIN, Api, VIEWER, code, field};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn a_viewer_is_refused_before_its_body_is_read() {
    let api = Api::start().await;
    for (method, path) in [
        (Method::POST, "/1.0/servers"),
        (Method::POST, "/1.0/images"),
        (Method::POST, "/1.0/provisioning/servers/s1:deploy"),
        (Method::POST, "/1.0/deadletters:bulk-retry"),
    ] {
        for body in [json!({}), json!({ "nonsense": 1 }), json!([1, 2])] {
            let (s, v) = api.call(method.clone(), path, VIEWER, Some(body.clone())).await;
            assert_eq!((s, code(&v)), (403, "forbidden"), "{method} {path} {body}: {v}");
        }
    }
}

#[tokio::test]
async fn every_rejected_body_names_its_field() {
    let api = Api::start().await;
    let server = |extra: serde_json::Value| {
        let mut base = json!({ "name": "s1", "bmc_address": "https://10.0.0.1", "bmc_username": "root",
                               "bmc_password_ref": "env:RACKLIFT_SECRET_S1" });
        base.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        base
    };
    let cases = [
        // A password in the clear under a plausible name is refused, not stored without it.
        (server(json!({ "bmc_password": "hunter2" })), "bmc_password"),
        (server(json!({ "bmc_insecure": "yes" })), "bmc_insecure"),
        (json!({ "bmc_address": "https://10.0.0.1" }), "name"),
        (json!([]), "body"),
    ];
    for (body, expected) in cases {
        let (s, v) = api
            .call(Method::POST, "/1.0/servers", ADMIN, Some(body.clone()))
            .await;
        assert_eq!((s, field(&v)), (400, Some(expected)), "{body}: {v}");
    }
    // Nested paths are named in full.
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/deadletters:bulk-retry",
            ADMIN,
            Some(json!({ "reason": "r", "filter": { "vendr": "dell" } })),
        )
        .await;
    assert_eq!((s, field(&v)), (400, Some("filter.vendr")), "{v}");
    // Broken JSON and a body that is not JSON at all.
    let r = api
        .req(Method::POST, "/1.0/servers", Some(ADMIN))
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    let (s, v) = common::read(r).await;
    assert_eq!((s, field(&v)), (400, Some("body")), "{v}");
    let r = api
        .req(Method::POST, "/1.0/servers", Some(ADMIN))
        .body("name=s1")
        .send()
        .await
        .unwrap();
    let (s, v) = common::read(r).await;
    assert_eq!((s, field(&v)), (415, Some("Content-Type")), "{v}");
    // Query parameters: unknown, malformed, out of range.
    for (path, expected) in [
        ("/1.0/servers/s1/events?aftr=1", "aftr"),
        ("/1.0/deadletters?limit=ten", "limit"),
        ("/1.0/deadletters?limit=100000", "limit"),
        ("/1.0/stuck?all=maybe", "all"),
        ("/1.0/stats/state-durations?window_hours=0", "window_hours"),
    ] {
        let (s, v) = api.call(Method::GET, path, ADMIN, None).await;
        assert!(s == 400 || s == 404, "{path}: {s} {v}");
        if s == 400 {
            assert_eq!(field(&v), Some(expected), "{path}: {v}");
        }
    }
    // Errors outside the handlers name theirs too.
    let (s, v) = api.call(Method::PUT, "/1.0/servers", ADMIN, None).await;
    assert_eq!((s, field(&v)), (405, Some("method")), "{v}");
    let (s, v) = api.call(Method::GET, "/1.0/nothing-here", ADMIN, None).await;
    assert_eq!((s, field(&v)), (404, Some("path")), "{v}");
}

/// A number the database would keep but could not give back (near the end of f64's range) is refused naming its
/// path, so no stored row can turn every later read of it into a 500.
#[tokio::test]
async fn a_number_that_would_not_come_back_out_is_refused() {
    let api = Api::start().await;
    let (s, t) = api
        .call(
            Method::POST,
            "/1.0/tokens",
            ADMIN,
            Some(json!({ "uses_remaining": 1, "expires_at": "2099-01-01T00:00:00Z" })),
        )
        .await;
    assert_eq!(s, 201, "{t}");
    let seeds = format!("/1.0/tokens/{}/seeds", t["token"].as_str().unwrap());
    let body = json!({ "name": "s", "install_config": { "network": { "a": [1, 1.7976931348623157e308] } } });
    let (s, v) = api.call(Method::POST, &seeds, ADMIN, Some(body)).await;
    assert_eq!(
        (s, code(&v), field(&v)),
        (422, "number_too_large", Some("install_config.network.a.1")),
        "{v}"
    );
    let body = json!({ "name": "s", "install_config": { "network": { "a": 3.4e16 } } });
    let (s, v) = api.call(Method::POST, &seeds, ADMIN, Some(body)).await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = api.call(Method::GET, &seeds, ADMIN, None).await;
    assert_eq!(
        (s, v[0]["install_config"]["network"]["a"].as_i64()),
        (200, Some(34_000_000_000_000_000)),
        "{v}"
    );
}

/// A key given twice in one object is refused naming it (with its object's path), at the top and nested, in a
/// plain body and an action's: serde_json alone would keep the last one and carry out a request other readers of
/// the same bytes would not see.
#[tokio::test]
async fn a_key_given_twice_is_refused_naming_it() {
    let api = Api::start().await;
    let raw = |method: Method, path: &'static str, body: &'static str| {
        let api = &api;
        async move {
            let r = api
                .req(method, path, Some(ADMIN))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            common::read(r).await
        }
    };
    for (path, body, expected) in [
        (
            "/1.0/servers",
            r#"{"name": "s1", "bmc_address": "https://10.0.0.1", "bmc_username": "root",
                "bmc_password_ref": "env:RACKLIFT_SECRET_S1", "name": "s2"}"#,
            "name",
        ),
        (
            "/1.0/deadletters:bulk-retry",
            r#"{"reason": "r", "filter": {"server": "a", "vendor": "dell", "server": "b"}}"#,
            "filter.server",
        ),
        (
            "/1.0/tokens",
            r#"{"uses_remaining": 1, "expires_at": "2099-01-01T00:00:00Z", "uses_remaining": 2}"#,
            "uses_remaining",
        ),
    ] {
        let (s, v) = raw(Method::POST, path, body).await;
        assert_eq!(
            (s, code(&v), field(&v)),
            (400, "invalid_body", Some(expected)),
            "{path} {body}: {v}"
        );
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("duplicate field"),
            "{v}"
        );
    }
    // The same key in two objects, or a value repeated in an array, is no duplicate.
    let (s, v) = raw(
        Method::POST,
        "/1.0/tokens",
        r#"{"description": "d", "uses_remaining": 1, "expires_at": "2099-01-01T00:00:00Z"}"#,
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let seeds = format!("/1.0/tokens/{}/seeds", v["token"].as_str().unwrap());
    let body = json!({ "name": "s", "install_config": { "network": { "network": { "network": [1, 1] } } } });
    let (s, v) = api.call(Method::POST, &seeds, ADMIN, Some(body)).await;
    assert_eq!(s, 201, "{v}");
}

/// A timestamp the API takes is an RFC 3339 date-time whose year RFC 3339 can write: one in the year 262142 was
/// stored, and then every `GET /1.0/tokens` broke its own document's `date-time`.
#[tokio::test]
async fn a_timestamp_rfc3339_cannot_write_is_refused_naming_it() {
    let api = Api::start().await;
    for expires_at in [
        "+262142-01-01T00:00:00Z",
        "10000-01-01T00:00:00Z",
        "9999-12-31T23:59:59-01:00",
        "2099-01-01 00:00:00Z",
        "2099-01-01T00:00:00",
    ] {
        let body = json!({ "uses_remaining": 1, "expires_at": expires_at });
        let (s, v) = api.call(Method::POST, "/1.0/tokens", ADMIN, Some(body)).await;
        assert_eq!(
            (s, code(&v), field(&v)),
            (400, "invalid_body", Some("expires_at")),
            "{expires_at}: {v}"
        );
    }
    let body = json!({ "uses_remaining": 1, "expires_at": "9999-12-31T23:59:59Z" });
    let (s, v) = api.call(Method::POST, "/1.0/tokens", ADMIN, Some(body)).await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = api.call(Method::GET, "/1.0/tokens", ADMIN, None).await;
    assert_eq!(
        (s, v[0]["expires_at"].as_str()),
        (200, Some("9999-12-31T23:59:59Z")),
        "{v}"
    );
    // The rolling runs' `not_before` follows the same rule, before the cluster is looked up.
    for path in [
        "/1.0/provisioning/clusters/c1:update",
        "/1.0/provisioning/clusters/c1:reboot",
    ] {
        let body = json!({ "not_before": "+262142-01-01T00:00:00Z" });
        let (s, v) = api.call(Method::POST, path, ADMIN, Some(body)).await;
        assert_eq!((s, field(&v)), (400, Some("not_before")), "{path}: {v}");
    }
}

//! Auth by role, the catalog round trip with validation errors, registration, and the error shape.

mod common;

use common::{ADMIN, Api, OPERATOR, VIEWER, code, field};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn auth_is_checked_by_role() {
    let api = Api::start().await;
    let (s, v) = common::read(api.req(Method::GET, "/1.0/servers", None).send().await.unwrap()).await;
    assert_eq!((s, code(&v)), (401, "unauthenticated"));
    let (s, v) = api.call(Method::GET, "/1.0/servers", "wrong", None).await;
    assert_eq!((s, code(&v)), (401, "unauthenticated"));
    let (s, _) = api.call(Method::GET, "/1.0/servers", VIEWER, None).await;
    assert_eq!(s, 200);
    let new = json!({ "name": "rack1-a" });
    let (s, v) = api
        .call(Method::POST, "/1.0/servers", VIEWER, Some(new.clone()))
        .await;
    assert_eq!((s, code(&v)), (403, "forbidden"));
    let (s, v) = api
        .call(Method::POST, "/1.0/servers", OPERATOR, Some(new.clone()))
        .await;
    assert_eq!((s, code(&v)), (403, "forbidden"));
    let (s, _) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(new)).await;
    assert_eq!(s, 201);
    // Actions need operator: a viewer may not deploy.
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/provisioning/servers/rack1-a:deploy",
            VIEWER,
            Some(json!({})),
        )
        .await;
    assert_eq!((s, code(&v)), (403, "forbidden"));
    // The OpenAPI document is public and lists the deploy action.
    let (s, v) = common::read(
        api.req(Method::GET, "/1.0/openapi.json", None)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200);
    assert!(v["paths"]["/1.0/provisioning/servers/{name}:deploy"]["post"].is_object());
    api.stop().await;
}

#[tokio::test]
async fn errors_have_one_shape() {
    let api = Api::start().await;
    let r = api
        .req(Method::POST, "/1.0/servers", Some(ADMIN))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    let (s, v) = common::read(r).await;
    assert_eq!((s, code(&v)), (400, "invalid_body"));
    assert!(v["error"].as_object().unwrap().contains_key("field"));
    let big = "x".repeat(2 * 1024 * 1024);
    let r = api
        .req(Method::POST, "/1.0/servers", Some(ADMIN))
        .header("content-type", "application/json")
        .body(format!("{{\"name\": \"{big}\"}}"))
        .send()
        .await
        .unwrap();
    let (s, v) = common::read(r).await;
    assert_eq!((s, code(&v)), (413, "body_too_large"));
    let (s, v) = api.call(Method::GET, "/1.0/nope", VIEWER, None).await;
    assert_eq!((s, code(&v)), (404, "not_found"));
    let (s, v) = api
        .call(Method::PUT, "/1.0/servers", ADMIN, Some(json!({})))
        .await;
    assert_eq!((s, code(&v)), (405, "method_not_allowed"));
    no_input_reaches_a_500(&api).await;
    api.stop().await;
}

/// A NUL where PostgreSQL stores text (422 `invalid_text`), and numbers past what an interval holds (400), are the
/// client's mistakes, answered naming where they were, never 500.
async fn no_input_reaches_a_500(api: &Api) {
    for (path, secret, where_) in [
        ("/media/%00/x", None, "path"),
        ("/1.0/servers/%00", None, "path"),
        ("/1.0/servers/a%00b", Some(VIEWER), "path"),
        ("/1.0/servers/s1/events?after=%00", Some(VIEWER), "query"),
        ("/1.0/deadletters?server=a%00", Some(VIEWER), "query"),
    ] {
        let (s, v) = common::read(api.req(Method::GET, path, secret).send().await.unwrap()).await;
        assert_eq!((s, field(&v)), (422, Some(where_)), "{path}: {v}");
    }
    let huge = "/1.0/deadletters?min_age_secs=9223372036854775807";
    let (s, v) = api.call(Method::GET, huge, VIEWER, None).await;
    assert_eq!((s, field(&v)), (400, Some("min_age_secs")), "{v}");
    let (s, v) = api
        .call(
            Method::GET,
            "/1.0/deadletters/groups?min_age_secs=9223372036854775807",
            VIEWER,
            None,
        )
        .await;
    assert_eq!(s, 400, "{v}");
    let nul = json!({ "name": "nul1", "bmc_username": "ro\u{0}ot" });
    let (s, v) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(nul)).await;
    assert_eq!((s, code(&v)), (422, "invalid_text"), "{v}");
}

#[tokio::test]
async fn catalog_round_trip_and_validation() {
    let api = Api::start().await;
    // Servers.
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/servers",
            ADMIN,
            Some(json!({ "name": "Bad Name" })),
        )
        .await;
    assert_eq!((s, code(&v), field(&v)), (400, "invalid_field", Some("name")));
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/servers",
            ADMIN,
            Some(json!({ "name": "s1", "bmc_address": "ftp://x" })),
        )
        .await;
    assert_eq!((s, field(&v)), (400, Some("bmc_address")));
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/servers",
            ADMIN,
            Some(json!({ "name": "s1", "bmc_password_ref": "hunter2" })),
        )
        .await;
    assert_eq!(
        (s, code(&v), field(&v)),
        (422, "bad_password_ref", Some("bmc_password_ref")),
        "{v}"
    );
    assert!(
        !v.to_string().contains("hunter2"),
        "a refusal repeats the password: {v}"
    );
    let new = json!({ "name": "s1", "bmc_address": "https://10.0.0.1", "bmc_username": "root",
                      "bmc_password_ref": "env:RACKLIFT_SECRET_S1_PASSWORD", "vendor_hint": "dell" });
    let (s, v) = api
        .call(Method::POST, "/1.0/servers", ADMIN, Some(new.clone()))
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["bmc_password_ref"], "set");
    let (s, v) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(new)).await;
    assert_eq!((s, code(&v)), (409, "server_exists"));
    let (s, v) = api
        .call(
            Method::PATCH,
            "/1.0/servers/s1",
            ADMIN,
            Some(json!({ "bmc_username": "admin" })),
        )
        .await;
    assert_eq!((s, v["bmc_username"].as_str()), (200, Some("admin")));
    plain_http_needs_explicit_consent(&api).await;
    let (s, v) = api.call(Method::GET, "/1.0/servers/s1", VIEWER, None).await;
    assert_eq!(s, 200);
    assert_eq!(v["status"], "unregistered");
    assert!(v["deployment"].is_null());
    assert!(
        !v.to_string().contains("S1_PASSWORD"),
        "the password reference never leaves the API"
    );
    let (s, v) = api.call(Method::GET, "/1.0/servers", VIEWER, None).await;
    assert_eq!((s, v.as_array().map(Vec::len)), (200, Some(1)));
    let (s, v) = api
        .call(Method::GET, "/1.0/servers/s1/events?after=0", VIEWER, None)
        .await;
    assert_eq!((s, v.as_array().map(Vec::len)), (200, Some(0)));
    let (s, _) = api.call(Method::DELETE, "/1.0/servers/s1", ADMIN, None).await;
    assert_eq!(s, 204);
    let (s, v) = api.call(Method::GET, "/1.0/servers/s1", VIEWER, None).await;
    assert_eq!((s, code(&v)), (404, "server_not_found"));

    // Tokens and seeds.
    let expires = (chrono::Utc::now() + chrono::TimeDelta::days(1)).to_rfc3339();
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/tokens",
            ADMIN,
            Some(json!({ "uses_remaining": -1, "expires_at": expires })),
        )
        .await;
    assert_eq!((s, field(&v)), (400, Some("uses_remaining")));
    let (s, t) = api
        .call(
            Method::POST,
            "/1.0/tokens",
            ADMIN,
            Some(json!({ "uses_remaining": 3, "expires_at": expires })),
        )
        .await;
    assert_eq!(s, 201);
    let token = t["token"].as_str().unwrap().to_owned();
    // The token is a credential: viewers see that it exists, operators and admins what it is.
    let (s, _) = api
        .call(Method::GET, &format!("/1.0/tokens/{token}"), VIEWER, None)
        .await;
    assert_eq!(s, 403);
    let (s, _) = api
        .call(Method::GET, &format!("/1.0/tokens/{token}"), OPERATOR, None)
        .await;
    assert_eq!(s, 200);
    for (secret, shown) in [
        (VIEWER, None),
        (OPERATOR, Some(token.as_str())),
        (ADMIN, Some(token.as_str())),
    ] {
        let (s, list) = api.call(Method::GET, "/1.0/tokens", secret, None).await;
        assert_eq!(s, 200);
        assert_eq!(list[0]["token"].as_str(), shown, "{list}");
        assert_eq!(list[0]["uses_remaining"], 3);
    }
    let seeds = format!("/1.0/tokens/{token}/seeds");
    let (s, v) = api
        .call(
            Method::POST,
            &seeds,
            ADMIN,
            Some(json!({ "name": "web", "install_config": { "force_reboot": "yes" } })),
        )
        .await;
    assert_eq!((s, field(&v)), (400, Some("install_config.force_reboot")));
    let (s, _) = api
        .call(
            Method::POST,
            &seeds,
            ADMIN,
            Some(json!({ "name": "web", "public": true, "install_config": { "force_reboot": true } })),
        )
        .await;
    assert_eq!(s, 201);
    let (s, v) = api.call(Method::GET, &seeds, OPERATOR, None).await;
    assert_eq!((s, v.as_array().map(Vec::len)), (200, Some(1)));
    let (s, _) = api.call(Method::GET, &seeds, VIEWER, None).await;
    assert_eq!(s, 403, "the path names the token");

    // BIOS profiles.
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/bios-profiles",
            ADMIN,
            Some(json!({ "name": "p", "attributes": { "A": [1] } })),
        )
        .await;
    assert_eq!((s, field(&v)), (400, Some("attributes.A")));
    // A match key this version does not know is refused, naming it; so is a rule that could match nothing.
    for (rules, want, at) in [
        (
            json!({ "vendor": "dell", "colour": "red" }),
            "unknown_match_key",
            "match_rules.colour",
        ),
        (
            json!({ "Manufacturer": "Dell Inc." }),
            "unknown_match_key",
            "match_rules.Manufacturer",
        ),
        (
            json!({ "manufacturer": "" }),
            "invalid_field",
            "match_rules.manufacturer",
        ),
        (json!({ "sku": 7 }), "invalid_field", "match_rules.sku"),
    ] {
        let (s, v) = api
            .call(
                Method::POST,
                "/1.0/bios-profiles",
                ADMIN,
                Some(json!({ "name": "p", "match_rules": rules })),
            )
            .await;
        assert_eq!((s, code(&v), field(&v)), (400, want, Some(at)), "{v}");
    }
    let (s, v) = api.call(Method::GET, "/1.0/bios-profiles", VIEWER, None).await;
    assert_eq!(
        (s, v.as_array().map(Vec::len)),
        (200, Some(0)),
        "nothing refused was stored"
    );
    // Every key on what the BMC reports is taken, stored as given.
    let bmc_rules = json!({ "manufacturer": "Dell Inc.", "model": "PowerEdge R7", "sku": "F54P1G3",
                            "attribute_registry": "BiosAttributeRegistry" });
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/bios-profiles",
            ADMIN,
            Some(json!({ "name": "r750", "match_rules": bmc_rules })),
        )
        .await;
    assert_eq!((s, &v["match_rules"]), (200, &bmc_rules), "{v}");
    let (s, _) = api
        .call(Method::DELETE, "/1.0/bios-profiles/r750", ADMIN, None)
        .await;
    assert_eq!(s, 204);
    let (s, _) = api
        .call(Method::POST, "/1.0/bios-profiles", ADMIN, Some(json!({ "name": "p", "match_rules": { "vendor": "dell" },
              "attributes": { "SriovGlobalEnable": "Enabled", "Cores": 8 }, "secure_boot": { "db": ["ab"] } })))
        .await;
    assert_eq!(s, 200);
    let (s, v) = api.call(Method::GET, "/1.0/bios-profiles", VIEWER, None).await;
    assert_eq!((s, v.as_array().map(Vec::len)), (200, Some(1)));
    let (s, _) = api
        .call(Method::DELETE, "/1.0/bios-profiles/p", ADMIN, None)
        .await;
    assert_eq!(s, 204);

    // Images and settings. A path is absolute or relative to the images directory, and stored under its
    // canonical path.
    let file = std::fs::canonicalize(api.seedable_image(common::IMAGE_MIN)).unwrap();
    let relative = file.file_name().unwrap().to_str().unwrap();
    let image = json!({ "type": "iso", "architecture": "x86_64", "channel": "stable", "path": relative,
                        "size_bytes": common::IMAGE_MIN, "sha256": "XYZ" });
    let (s, v) = api
        .call(Method::POST, "/1.0/images", ADMIN, Some(image.clone()))
        .await;
    assert_eq!((s, code(&v), field(&v)), (400, "invalid_field", Some("sha256")));
    let mut image = image;
    image["sha256"] = json!(racklift_store::sha256_hex(&std::fs::read(&file).unwrap()));
    let (s, v) = api.call(Method::POST, "/1.0/images", ADMIN, Some(image)).await;
    assert_eq!((s, v["path"].as_str()), (201, file.to_str()), "{v}");
    let (s, v) = api
        .call(
            Method::PUT,
            "/1.0/settings/public-address",
            ADMIN,
            Some(json!({ "address": "not a url" })),
        )
        .await;
    assert_eq!((s, field(&v)), (400, Some("address")));
    let (s, _) = api
        .call(
            Method::PUT,
            "/1.0/settings/public-address",
            ADMIN,
            Some(json!({ "address": "http://10.0.0.2:8443/" })),
        )
        .await;
    assert_eq!(s, 200);
    let (_, v) = api
        .call(Method::GET, "/1.0/settings/public-address", VIEWER, None)
        .await;
    assert_eq!(v["address"], "http://10.0.0.2:8443");
    let (s, _) = api
        .call(Method::DELETE, &format!("/1.0/tokens/{token}"), ADMIN, None)
        .await;
    assert_eq!(s, 204);
    api.stop().await;
}

/// A plain `http://` BMC address would carry the password in the clear: refused naming `bmc_address` unless the
/// server sets `allow_plain_http`, on create and on every change that would make it plain.
async fn plain_http_needs_explicit_consent(api: &Api) {
    let plain = json!({ "name": "plain1", "bmc_address": "http://10.0.0.2", "bmc_username": "root",
                        "bmc_password_ref": "env:RACKLIFT_SECRET_S1_PASSWORD" });
    let (s, v) = api
        .call(Method::POST, "/1.0/servers", ADMIN, Some(plain.clone()))
        .await;
    assert_eq!(
        (s, code(&v), field(&v)),
        (422, "plain_http_bmc", Some("bmc_address")),
        "{v}"
    );
    let (s, _) = api.call(Method::GET, "/1.0/servers/plain1", VIEWER, None).await;
    assert_eq!(s, 404, "a refused server is not stored");

    let mut allowed = plain;
    allowed["allow_plain_http"] = json!(true);
    let (s, v) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(allowed)).await;
    assert_eq!((s, v["allow_plain_http"].as_bool()), (201, Some(true)), "{v}");
    // Withdrawing the consent while the address is still plain is refused too.
    let (s, v) = api
        .call(
            Method::PATCH,
            "/1.0/servers/plain1",
            ADMIN,
            Some(json!({ "allow_plain_http": false })),
        )
        .await;
    assert_eq!((s, field(&v)), (422, Some("bmc_address")), "{v}");
    // Moving a server without consent to http:// is refused; to https:// it is fine.
    let (s, v) = api
        .call(
            Method::PATCH,
            "/1.0/servers/s1",
            ADMIN,
            Some(json!({ "bmc_address": "HTTP://10.0.0.1" })),
        )
        .await;
    assert_eq!(
        (s, code(&v), field(&v)),
        (422, "plain_http_bmc", Some("bmc_address")),
        "{v}"
    );
    let (s, v) = api
        .call(
            Method::PATCH,
            "/1.0/servers/plain1",
            ADMIN,
            Some(json!({ "bmc_address": "https://10.0.0.2", "allow_plain_http": false })),
        )
        .await;
    assert_eq!((s, v["allow_plain_http"].as_bool()), (200, Some(false)), "{v}");
    let (s, _) = api.call(Method::DELETE, "/1.0/servers/plain1", ADMIN, None).await;
    assert_eq!(s, 204);
}

//! `racklift token …` as an operator runs it: the built binary writes tokens straight into the database of a rack
//! whose API runs in this test process, and the API accepts them with their roles at once, refuses them from the
//! request after a revoke, and from their expiry on. Secrets are printed once and never listed.

use std::process::Output;
use std::time::Duration;

use chrono::{DateTime, Utc};
use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_tests::cli::{command, describe, empty_home, json_out, racklift, stderr, stdout};
use racklift_tests::rack::Rack;
use reqwest::Method;
use serde_json::{Value, json};

async fn start() -> Rack {
    Rack::start(1, PersonalityChoice::Single(Personality::Generic), 0.01).await
}

/// `racklift token ARGS` against the rack's database.
async fn token(rack: &Rack, args: &[&str]) -> Output {
    let mut all = vec!["token"];
    all.extend_from_slice(args);
    racklift(&all, &[("DATABASE_URL", rack.db.url.as_str())]).await
}

/// Creates a token with `--json` and returns its secret, checking the fields printed beside it.
async fn create(rack: &Rack, name: &str, role: &str) -> String {
    let created = json_out(&token(rack, &["create", "--name", name, "--role", role, "--json"]).await);
    assert_eq!(created["name"], name, "{created}");
    assert_eq!(created["role"], role, "{created}");
    assert_eq!(created["expires_at"], Value::Null, "{created}");
    created["token"].as_str().expect("the secret").to_owned()
}

/// The HTTP status of one API request made with `secret`.
async fn status(rack: &Rack, method: Method, path: &str, secret: &str, body: Option<Value>) -> u16 {
    let mut request = rack
        .http
        .request(method, format!("{}/1.0{path}", rack.api_url))
        .bearer_auth(secret);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.expect("API request").status().as_u16()
}

async fn list_servers(rack: &Rack, secret: &str) -> u16 {
    status(rack, Method::GET, "/servers", secret, None).await
}

/// An operator's action: the role check comes before the lookup, so a missing dead letter answers 404 to an
/// operator or admin and 403 to a viewer.
async fn discard_missing_dead_letter(rack: &Rack, secret: &str) -> u16 {
    let body = json!({ "note": "checking the role" });
    status(
        rack,
        Method::POST,
        "/deadletters/999999999:discard",
        secret,
        Some(body),
    )
    .await
}

/// An admin's action: creating a provisioning token.
async fn create_provisioning_token(rack: &Rack, secret: &str) -> u16 {
    let body = json!({
        "description": "role check",
        "uses_remaining": 1,
        "expires_at": Utc::now() + chrono::TimeDelta::hours(1),
    });
    status(rack, Method::POST, "/tokens", secret, Some(body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn created_tokens_work_with_their_roles_and_are_shown_once() {
    let rack = start().await;

    // The text form: the secret alone on stdout, the warning that it cannot be shown again on stderr.
    let out = token(&rack, &["create", "--name", "ops-admin", "--role", "admin"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    let admin = stdout(&out).trim_end().to_owned();
    assert_eq!(stdout(&out), format!("{admin}\n"), "{}", describe(&out));
    assert_eq!(admin.len(), 64, "{}", describe(&out));
    assert!(
        stderr(&out).contains("cannot be shown again") && !stderr(&out).contains(&admin),
        "{}",
        describe(&out)
    );
    let operator = create(&rack, "ops", "operator").await;
    let viewer = create(&rack, "dashboard", "viewer").await;

    for (who, secret, read, operate, administer) in [
        ("admin", &admin, 200, 404, 201),
        ("operator", &operator, 200, 404, 403),
        ("viewer", &viewer, 200, 403, 403),
    ] {
        assert_eq!(list_servers(&rack, secret).await, read, "{who}: GET /servers");
        assert_eq!(
            discard_missing_dead_letter(&rack, secret).await,
            operate,
            "{who}: POST a dead letter action"
        );
        assert_eq!(
            create_provisioning_token(&rack, secret).await,
            administer,
            "{who}: POST /tokens"
        );
    }

    // The listings show names, roles and times, and no secret.
    let out = token(&rack, &["list"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    let table = stdout(&out);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "ROLE", "CREATED", "EXPIRES"], "{table}");
    for (name, role) in [
        ("admin", "admin"),
        ("ops-admin", "admin"),
        ("ops", "operator"),
        ("dashboard", "viewer"),
    ] {
        assert!(
            table.lines().any(|l| {
                let cells: Vec<&str> = l.split_whitespace().collect();
                cells.len() == 4 && cells[0] == name && cells[1] == role && cells[3] == "never"
            }),
            "{name} ({role}) missing:\n{table}"
        );
    }
    let listed = json_out(&token(&rack, &["list", "--json"]).await);
    let names: Vec<&str> = listed
        .as_array()
        .expect("an array")
        .iter()
        .map(|t| t["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(names, ["admin", "ops-admin", "ops", "dashboard"], "{listed}");
    for t in listed.as_array().unwrap() {
        let keys: Vec<&str> = t.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 4, "{t}");
        for key in ["name", "role", "created_at", "expires_at"] {
            assert!(keys.contains(&key), "{key} missing: {t}");
        }
    }
    for shown in [table, listed.to_string()] {
        for secret in [&admin, &operator, &viewer, &rack.catalog.admin_token] {
            assert!(!shown.contains(secret.as_str()), "a secret is listed:\n{shown}");
        }
    }

    rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_token_is_refused_on_the_next_request() {
    let rack = start().await;
    let secret = create(&rack, "script", "operator").await;
    assert_eq!(list_servers(&rack, &secret).await, 200);

    let out = token(&rack, &["revoke", "script"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    assert!(stdout(&out).contains("revoked"), "{}", describe(&out));
    assert_eq!(list_servers(&rack, &secret).await, 401, "the very next request");
    assert_eq!(discard_missing_dead_letter(&rack, &secret).await, 401);
    // Other tokens are untouched.
    assert_eq!(list_servers(&rack, &rack.catalog.admin_token).await, 200);

    let listed = json_out(&token(&rack, &["list", "--json"]).await);
    assert!(
        !listed.as_array().unwrap().iter().any(|t| t["name"] == "script"),
        "{listed}"
    );

    // Revoking again, or a name that never existed, is an error that names it.
    for name in ["script", "no-such-token"] {
        let out = token(&rack, &["revoke", name]).await;
        assert!(!out.status.success(), "{}", describe(&out));
        assert!(
            stderr(&out).contains(&format!("no API token is named \"{name}\"")),
            "{}",
            describe(&out)
        );
    }

    // The name is free again.
    let again = create(&rack, "script", "viewer").await;
    assert_ne!(again, secret);
    assert_eq!(list_servers(&rack, &again).await, 200);

    rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_stops_working_at_its_expiry() {
    let rack = start().await;
    let created = json_out(
        &token(
            &rack,
            &[
                "create",
                "--name",
                "brief",
                "--role",
                "viewer",
                "--expires-in",
                "3s",
                "--json",
            ],
        )
        .await,
    );
    let secret = created["token"].as_str().expect("the secret").to_owned();
    let expires_at: DateTime<Utc> = created["expires_at"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("expires_at: {created}"));
    let left = expires_at - Utc::now();
    assert!(
        left > chrono::TimeDelta::zero() && left <= chrono::TimeDelta::seconds(3),
        "{created}"
    );
    assert_eq!(list_servers(&rack, &secret).await, 200, "before its expiry");

    let out = token(&rack, &["list"]).await;
    let line = stdout(&out)
        .lines()
        .find(|l| l.starts_with("brief "))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("{}", describe(&out)));
    assert!(line.contains("(in "), "{line}");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let code = list_servers(&rack, &secret).await;
        if code == 401 {
            break;
        }
        assert_eq!(code, 200, "while still valid");
        assert!(
            tokio::time::Instant::now() < deadline,
            "still accepted at {}, past its expiry {expires_at}",
            Utc::now()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The test and the database share a clock: refused at the expiry, not before (a little slack for rounding).
    assert!(
        Utc::now() >= expires_at - chrono::TimeDelta::milliseconds(50),
        "refused at {} before its expiry {expires_at}",
        Utc::now()
    );

    // Still listed, marked, so an operator sees why a script stopped working; revoking clears it.
    let out = token(&rack, &["list"]).await;
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("brief ") && l.ends_with("(expired)")),
        "{}",
        describe(&out)
    );
    let out = token(&rack, &["revoke", "brief"]).await;
    assert!(out.status.success(), "{}", describe(&out));

    rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mistakes_fail_with_messages_that_name_them() {
    let rack = start().await;
    let first = create(&rack, "ci", "operator").await;

    // A taken name is refused, and the first token keeps its role and secret.
    for taken in ["ci", "admin"] {
        let out = token(&rack, &["create", "--name", taken, "--role", "admin"]).await;
        assert!(!out.status.success(), "{}", describe(&out));
        assert!(
            stderr(&out).contains(&format!(
                "a token named \"{taken}\" exists already; revoke it first"
            )),
            "{}",
            describe(&out)
        );
        assert!(stdout(&out).is_empty(), "{}", describe(&out));
    }
    assert_eq!(discard_missing_dead_letter(&rack, &first).await, 404);
    assert_eq!(create_provisioning_token(&rack, &first).await, 403);
    assert_eq!(list_servers(&rack, &rack.catalog.admin_token).await, 200);

    let out = token(&rack, &["create", "--name", "x", "--role", "superuser"]).await;
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        stderr(&out).contains("\"superuser\" is not a role")
            && stderr(&out).contains("viewer, operator or admin"),
        "{}",
        describe(&out)
    );

    for (expires_in, says) in [("0s", "longer than zero"), ("soon", "is not a duration")] {
        let out = token(
            &rack,
            &[
                "create",
                "--name",
                "x",
                "--role",
                "viewer",
                "--expires-in",
                expires_in,
            ],
        )
        .await;
        assert!(!out.status.success(), "{}", describe(&out));
        assert!(
            stderr(&out).contains(&format!("\"{expires_in}\"")) && stderr(&out).contains(says),
            "{}",
            describe(&out)
        );
    }

    let out = token(&rack, &["create", "--name", "two words", "--role", "viewer"]).await;
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        stderr(&out).contains("token name \"two words\" is not valid"),
        "{}",
        describe(&out)
    );

    // Nothing was made by the failed attempts.
    let listed = json_out(&token(&rack, &["list", "--json"]).await);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["admin", "ci"], "{listed}");

    // Without DATABASE_URL the command names what to set (the wording is the database module's).
    let home = empty_home();
    let out = command(&["token", "list"], &[], &home)
        .env_remove("DATABASE_URL")
        .output()
        .await
        .expect("run racklift");
    let _ = std::fs::remove_dir_all(&home);
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(stderr(&out).contains("DATABASE_URL"), "{}", describe(&out));

    rack.stop().await;
}

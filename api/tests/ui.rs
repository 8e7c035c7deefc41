//! The operator dashboard over HTTP, as a browser would use it: log in with a pasted token (cookie), see the
//! seeded dead letter in the list and its timeline in the detail, and act on it through forms guarded by a CSRF
//! token and the operator role. Sessions and headers are in `ui_session.rs`; the browser itself is exercised by
//! `tests/tests/ui_browser.rs`.

mod common;
#[path = "triage/seed.rs"]
#[allow(dead_code)] // Shared with the triage tests; this file uses part of it.
mod seed;
#[path = "ui/client.rs"]
#[allow(dead_code)] // Shared with ui_session.rs; this file uses part of it.
mod ui_client;

use common::{Api, OPERATOR, VIEWER};
use racklift_deploy::State;
use reqwest::header::{LOCATION, SET_COOKIE};
use seed::Seed;
use ui_client::{csrf, login, page, post_form};

fn listed(html: &str, id: i64) -> bool {
    html.contains(&format!(r#"data-id="{id}""#))
}

#[tokio::test]
async fn login_opens_an_opaque_session_in_a_strict_secure_cookie_and_refuses_unknown_tokens() {
    let api = Api::start().await;
    let resp = post_form(&api, "/ui/login", None, &[("token", OPERATOR)]).await;
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()[LOCATION], "/ui");
    let cookies: Vec<&str> = resp
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let session = cookies
        .iter()
        .find(|c| c.starts_with("racklift_session="))
        .expect("session cookie");
    for attr in [
        "Secure",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/ui",
        "Max-Age=43200",
    ] {
        assert!(session.split("; ").any(|a| a == attr), "{attr}: {session}");
    }
    // The cookie holds a random session id, not the token; the database keeps only the id's digest.
    let id = session
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("racklift_session=");
    assert!(
        id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    assert!(!session.contains(OPERATOR), "{session}");
    let (role, hours, token): (String, f64, String) = sqlx::query_as(
        "SELECT s.role, extract(epoch FROM s.expires_at - now())::float8 / 3600, t.name \
         FROM ui_sessions s JOIN api_tokens t ON t.id = s.api_token_id WHERE s.id_sha256 = decode($1, 'hex')",
    )
    .bind(racklift_store::sha256_hex(id.as_bytes()))
    .fetch_one(&api.db.pool)
    .await
    .expect("the session row, found by the cookie's digest");
    assert_eq!((role.as_str(), token.as_str()), ("operator", "operator"));
    assert!((11.9..=12.0).contains(&hours), "{hours} h");
    let flash = cookies
        .iter()
        .find(|c| c.starts_with("racklift_flash="))
        .expect("flash cookie");
    assert!(
        flash.contains("; Secure; HttpOnly; SameSite=Strict; Path=/ui"),
        "{flash}"
    );

    let bad = post_form(&api, "/ui/login", None, &[("token", "nope")]).await;
    assert_eq!(bad.status(), 401);
    assert!(bad.headers().get(SET_COOKIE).is_none());
    // Without a session a page goes to the login form, and the live fragment answers 401.
    let (s, _) = page(&api, "/ui", "racklift_session=nope").await;
    assert_eq!(s, 303);
    let (s, _) = page(&api, "/ui/fragments/deadletters", "").await;
    assert_eq!(s, 401);
    api.stop().await;
}

#[tokio::test]
async fn list_and_detail_render_the_dead_letter_without_secrets() {
    let api = Api::start().await;
    let seed = Seed::new(&api).await;
    seed.server(&api, "node1", "dell").await;
    let failed = seed
        .failed_deployment(
            &api,
            "node1",
            State::AttachMedia,
            "rejected_value",
            "Base.1.8.PropertyValueNotInList",
        )
        .await;
    let cookie = login(&api, VIEWER).await;

    let (s, html) = page(&api, "/ui", &cookie).await;
    assert_eq!(s, 200, "{html}");
    assert!(listed(&html, failed.dead_letter_id), "{html}");
    for text in [
        "node1",
        "AttachMedia",
        "rejected_value",
        "Base.1.8.PropertyValueNotInList",
        "Stuck work",
    ] {
        assert!(html.contains(text), "{text} missing: {html}");
    }
    // The filter is applied, and the fragment the page polls renders the same rows.
    let (_, other) = page(&api, "/ui?error_class=transport", &cookie).await;
    assert!(!listed(&other, failed.dead_letter_id));
    let (s, fragment) = page(&api, "/ui/fragments/deadletters?vendor=dell", &cookie).await;
    assert_eq!(s, 200);
    assert!(listed(&fragment, failed.dead_letter_id), "{fragment}");
    // A viewer sees no action forms.
    assert!(!html.contains("bulk-retry"));

    let (s, detail) = page(
        &api,
        &format!("/ui/deadletters/{}", failed.dead_letter_id),
        &cookie,
    )
    .await;
    assert_eq!(s, 200, "{detail}");
    for text in [
        "Timeline",
        "attach_media: Retryable",
        "812",
        "RefreshBMCData → AttachMedia",
        "Failed (RetriesExhausted)",
    ] {
        assert!(detail.contains(text), "{text} missing: {detail}");
    }
    assert!(detail.contains(" of 1048576 bytes ("), "media progress: {detail}");
    assert!(!detail.contains(r#"id="retry""#), "a viewer gets no retry form");
    for html in [&html, &detail] {
        assert!(
            !html.contains("hunter2") && !html.contains(&failed.media_secret),
            "secret leaked: {html}"
        );
        assert!(!html.contains("token=t"), "a token leaked: {html}");
    }
    let (s, _) = page(&api, "/ui/deadletters/999999", &cookie).await;
    assert_eq!(s, 404);
    api.stop().await;
}

#[tokio::test]
async fn actions_need_the_csrf_token_and_the_operator_role() {
    let api = Api::start().await;
    let seed = Seed::new(&api).await;
    seed.server(&api, "node1", "dell").await;
    let failed = seed
        .failed_deployment(
            &api,
            "node1",
            State::AttachMedia,
            "rejected_value",
            "Base.1.8.PropertyValueNotInList",
        )
        .await;
    let id = failed.dead_letter_id;
    let retry = format!("/ui/deadletters/{id}/retry");

    let operator = login(&api, OPERATOR).await;
    let (_, detail) = page(&api, &format!("/ui/deadletters/{id}"), &operator).await;
    assert!(detail.contains(r#"id="retry""#), "an operator gets the forms");
    let token = csrf(&detail);
    // No CSRF token, or another session's, is refused before anything else.
    let resp = post_form(&api, &retry, Some(&operator), &[("reason", "go")]).await;
    assert_eq!(resp.status(), 403);
    let viewer = login(&api, VIEWER).await;
    let (_, viewer_page) = page(&api, "/ui", &viewer).await;
    let viewer_csrf = csrf(&viewer_page);
    let resp = post_form(
        &api,
        &retry,
        Some(&operator),
        &[("reason", "go"), ("csrf", &viewer_csrf)],
    )
    .await;
    assert_eq!(resp.status(), 403);
    // A viewer with its own valid token is refused by role.
    let resp = post_form(
        &api,
        &retry,
        Some(&viewer),
        &[("reason", "go"), ("csrf", &viewer_csrf)],
    )
    .await;
    assert_eq!(resp.status(), 403);
    assert!(resp.text().await.unwrap().contains("needs operator"));
    // A missing reason does nothing and says so.
    let resp = post_form(&api, &retry, Some(&operator), &[("csrf", &token)]).await;
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()[LOCATION], format!("/ui/deadletters/{id}").as_str());
    let (_, list) = page(&api, "/ui", &operator).await;
    assert!(listed(&list, id));

    let resp = post_form(
        &api,
        &retry,
        Some(&operator),
        &[
            ("csrf", &token),
            ("reason", "BMC firmware updated"),
            ("from_state", "AttachMedia"),
        ],
    )
    .await;
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()[LOCATION], "/ui");
    let flash = resp
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("racklift_flash="))
        .expect("a flash message")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let (_, list) = page(&api, "/ui", &format!("{operator}; {flash}")).await;
    assert!(!listed(&list, id), "the retried item left the open list: {list}");
    assert!(list.contains(&format!("dead letter {id} retried")), "{list}");
    let (_, retried) = page(&api, "/ui?status=retried", &operator).await;
    assert!(
        listed(&retried, id) && retried.contains("retried by operator"),
        "{retried}"
    );
    let d = api
        .store
        .deployment(failed.deployment_id)
        .await
        .expect("deployment");
    assert_eq!(d.deployment.machine.state, State::AttachMedia);
    // The audit names who and why.
    let (_, detail) = page(&api, &format!("/ui/deadletters/{id}"), &operator).await;
    assert!(
        detail.contains("BMC firmware updated") && detail.contains("operator (operator)"),
        "{detail}"
    );
    // Acting again is refused by the store, shown as a flash on the detail page.
    let resp = post_form(
        &api,
        &retry,
        Some(&operator),
        &[("csrf", &token), ("reason", "again")],
    )
    .await;
    assert_eq!(resp.headers()[LOCATION], format!("/ui/deadletters/{id}").as_str());
    api.stop().await;
}

#[tokio::test]
async fn bulk_retry_needs_a_filter_and_retries_the_group() {
    let api = Api::start().await;
    let seed = Seed::new(&api).await;
    for name in ["node1", "node2"] {
        seed.server(&api, name, "dell").await;
    }
    let msg = "Base.1.8.PropertyValueNotInList";
    let a = seed
        .failed_deployment(&api, "node1", State::AttachMedia, "rejected_value", msg)
        .await;
    let b = seed
        .failed_deployment(&api, "node2", State::WaitInstall, "deadline", msg)
        .await;
    let operator = login(&api, OPERATOR).await;
    let (_, html) = page(&api, "/ui?error_class=rejected_value", &operator).await;
    assert!(
        html.contains(r#"id="bulk-retry""#),
        "a filtered list offers the bulk retry"
    );
    let token = csrf(&html);
    let resp = post_form(
        &api,
        "/ui/deadletters/bulk-retry",
        Some(&operator),
        &[("csrf", &token), ("reason", "x")],
    )
    .await;
    assert_eq!(resp.status(), 303, "no filter: nothing done");
    let (_, list) = page(&api, "/ui", &operator).await;
    assert!(listed(&list, a.dead_letter_id) && listed(&list, b.dead_letter_id));
    let resp = post_form(
        &api,
        "/ui/deadletters/bulk-retry",
        Some(&operator),
        &[
            ("csrf", &token),
            ("reason", "cooldown over"),
            ("error_class", "rejected_value"),
        ],
    )
    .await;
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()[LOCATION], "/ui?error_class=rejected_value");
    let (_, list) = page(&api, "/ui", &operator).await;
    assert!(
        !listed(&list, a.dead_letter_id) && listed(&list, b.dead_letter_id),
        "{list}"
    );
    api.stop().await;
}

/// A three-member cluster whose rolling reboot restarted the first server, then failed evacuating the second
/// (seeded in the store: no worker runs here).
async fn failed_cluster_run(api: &Api, seed: &Seed) -> i64 {
    use racklift_deploy::rolling_run::{MemberFacts, MemberStatus, RollingRun, RunKind};
    use racklift_store::{NewCluster, OperationStatus, RunUpdate};
    let names = ["node1", "node2", "node3"];
    for n in names {
        seed.server(api, n, "dell").await;
    }
    api.store
        .create_cluster(&NewCluster {
            name: "rack1".into(),
            members: names.iter().map(|n| n.to_string()).collect(),
            post_restore_delay_secs: Some(0),
            restore_mode: racklift_store::RestoreMode::Default,
        })
        .await
        .expect("the cluster");
    let facts: Vec<(String, MemberFacts)> = names
        .iter()
        .map(|n| {
            let f = MemberFacts {
                reachable: true,
                status: Some(MemberStatus::Online),
                ..MemberFacts::default()
            };
            (n.to_string(), f)
        })
        .collect();
    let mut run = RollingRun::launch(RunKind::Reboot, &facts).expect("a run");
    run.servers[0].done = true;
    run.servers[0].update.reboot_pending = false;
    let failing = &mut run.servers[1].update;
    failing.step = Some(racklift_deploy::rolling::RollingStep::Evacuate);
    failing.retries = 2;
    failing.first_error = Some("evacuate failed: instance <b>pinned</b>".into());
    failing.last_error = Some("evacuate stalled and ran out of attempts".into());
    let (op, created) = api
        .store
        .start_cluster_operation(&seed.queue, "rack1", &run, None, "admin")
        .await
        .expect("the operation");
    assert!(created);
    api.store
        .save_cluster_run(
            &op,
            &RunUpdate {
                run: &run,
                status: OperationStatus::Failed,
                reason: Some("evacuate stalled and ran out of attempts"),
                failed_server: Some("node2"),
                failed_step: Some("evacuate"),
            },
            async |_| Ok(()),
        )
        .await
        .expect("the failed run");
    // The worker that ended the run would have finished its job with it.
    sqlx::query("DELETE FROM jobs WHERE resource_key = 'cluster/rack1'")
        .execute(&api.db.pool)
        .await
        .expect("the run's job finished");
    op.id
}

#[tokio::test]
async fn the_clusters_pages_show_a_failed_run_and_its_forms_need_csrf_the_operator_role_and_a_reason() {
    let api = Api::start().await;
    let seed = Seed::new(&api).await;
    let failed = failed_cluster_run(&api, &seed).await;

    // A viewer sees the list and the cluster, with the failed server and step, but no form.
    let viewer = login(&api, VIEWER).await;
    let (status, list) = page(&api, "/ui/clusters", &viewer).await;
    assert_eq!(status, 200);
    assert!(list.contains(r#"data-name="rack1""#), "{list}");
    assert!(
        list.contains("node2: evacuate") && list.contains("[1/3]") && list.contains("failed"),
        "{list}"
    );
    assert!(
        list.contains("&#60;b&#62;pinned") && !list.contains("<b>pinned"),
        "escaped: {list}"
    );
    assert!(
        list.contains(r#"href="/ui?operation=rolling_reboot&#38;server=node2""#),
        "{list}"
    );
    assert!(list.contains(r#"id="nav-clusters""#), "{list}");
    let (_, fragment) = page(&api, "/ui/fragments/clusters", &viewer).await;
    assert!(fragment.contains(r#"data-name="rack1""#) && !fragment.contains("<html"));
    let (status, detail) = page(&api, "/ui/clusters/rack1", &viewer).await;
    assert_eq!(status, 200);
    assert!(
        detail.contains(r#"<tr class="server" data-name="node1">"#) && detail.contains("ran out of attempts"),
        "{detail}"
    );
    assert!(!detail.contains(r#"id="retry""#), "no form for a viewer");
    let (status, _) = page(&api, "/ui/clusters/nope", &viewer).await;
    assert_eq!(status, 404);
    let viewer_csrf = csrf(&detail);
    let retry = "/ui/clusters/rack1/retry";
    let resp = post_form(
        &api,
        retry,
        Some(&viewer),
        &[("reason", "go"), ("csrf", &viewer_csrf)],
    )
    .await;
    assert_eq!(resp.status(), 403);
    assert!(resp.text().await.unwrap().contains("needs operator"));

    // An operator gets the retry form (and no controls of a live operation).
    let operator = login(&api, OPERATOR).await;
    let (_, detail) = page(&api, "/ui/clusters/rack1", &operator).await;
    assert!(detail.contains(r#"id="retry""#), "{detail}");
    assert!(!detail.contains(r#"id="pause""#) && !detail.contains(r#"id="cancel-operation""#));
    let token = csrf(&detail);
    let resp = post_form(&api, retry, Some(&operator), &[("reason", "go")]).await;
    assert_eq!(resp.status(), 403, "no CSRF token");
    let resp = post_form(&api, retry, Some(&operator), &[("csrf", &token)]).await;
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()[LOCATION], "/ui/clusters/rack1");
    let latest = api
        .store
        .latest_cluster_operation("rack1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.id, failed, "no reason, nothing done");

    // Retry: a new operation in which the server already restarted stays done and the others start over.
    let form = [("csrf", token.as_str()), ("reason", "evacuation fixed")];
    let resp = post_form(&api, retry, Some(&operator), &form).await;
    assert_eq!(resp.status(), 303);
    let retried = api
        .store
        .latest_cluster_operation("rack1")
        .await
        .unwrap()
        .unwrap();
    assert_ne!(retried.id, failed);
    assert_eq!(retried.requested_by, "operator");
    assert_eq!(retried.run.progress(), (1, 3));
    assert!(retried.run.servers[0].done);
    assert!(
        retried.run.servers[1].update.step.is_none() && retried.run.servers[1].update.first_error.is_none()
    );
    // Again: the run is no longer failed, so nothing more starts.
    post_form(&api, retry, Some(&operator), &form).await;
    let latest = api
        .store
        .latest_cluster_operation("rack1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.id, retried.id);

    // The live operation's controls: pause, then cancel.
    let (_, detail) = page(&api, "/ui/clusters/rack1", &operator).await;
    assert!(detail.contains(r#"id="pause""#) && detail.contains(r#"id="cancel-operation""#));
    assert!(!detail.contains(r#"id="retry""#));
    for action in ["pause", "cancel-operation"] {
        let resp = post_form(
            &api,
            &format!("/ui/clusters/rack1/{action}"),
            Some(&operator),
            &[("csrf", &token), ("reason", "maintenance window moved")],
        )
        .await;
        assert_eq!(resp.status(), 303, "{action}");
    }
    let controlled = api.store.cluster_operation(retried.id).await.unwrap();
    assert!(controlled.pause_requested && controlled.cancel_requested);
    let resp = post_form(
        &api,
        "/ui/clusters/rack1/explode",
        Some(&operator),
        &[("csrf", &token), ("reason", "x")],
    )
    .await;
    assert_eq!(resp.status(), 404);
    api.stop().await;
}

//! The bulk forms of `racklift server` as an operator runs them: deployments started with `deploy --all` and
//! filters, and canceled with `cancel --all --reason`, the reason landing in each server's event log.

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_tests::cli::{as_admin as admin, assert_refused, describe, json_out, stdout};
use racklift_tests::rack::Rack;
use serde_json::Value;

/// The server's events of `kind`, through the API as an operator reads them.
async fn events_of(rack: &Rack, name: &str, kind: &str) -> Vec<Value> {
    let events: Value = rack
        .admin(reqwest::Method::GET, format!("/1.0/servers/{name}/events"))
        .send()
        .await
        .expect("events request")
        .json()
        .await
        .expect("events JSON");
    events
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == kind)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deployments_are_started_and_canceled_in_bulk() {
    // No worker pool: the deployments stay where the API left them, so the cancels find them running.
    let rack = Rack::start_with(3, PersonalityChoice::Single(Personality::Generic), 0.01, false).await;
    let (a, b, c) = (rack.sim.name(0), rack.sim.name(1), rack.sim.name(2));
    let token = rack.catalog.token.to_string();
    let (name_a, name_b) = (format!("name={a}"), format!("name={b}"));
    let deploy = [
        "server",
        "deploy",
        "--all",
        "--filter",
        &name_a,
        "--filter",
        &name_b,
        "--filter",
        "vendor=generic",
        "--filter",
        "state=none",
        "--token",
        &token,
        "--seed",
        &rack.catalog.seed,
    ];

    // Not on a terminal and not confirmed: nothing happens.
    assert_refused(&admin(&rack, &deploy).await, "without --yes");
    for name in [a, b, c] {
        assert!(rack.store.latest_deployment(name).await.unwrap().is_none());
    }
    let mut confirmed = deploy.to_vec();
    confirmed.push("--yes");
    let out = admin(&rack, &confirmed).await;
    assert!(out.status.success(), "{}", describe(&out));
    let lines = stdout(&out);
    for name in [a, b] {
        assert!(
            lines
                .lines()
                .any(|l| l.starts_with(&format!("{name}: deployment ")) && l.contains("accepted")),
            "{name}\n{}",
            describe(&out)
        );
        assert!(
            rack.store.latest_deployment(name).await.unwrap().is_some(),
            "{name} has no deployment"
        );
    }
    assert!(!lines.contains(c), "{}", describe(&out));
    assert!(rack.store.latest_deployment(c).await.unwrap().is_none());

    // Again: both are running now, the API refuses each, and the run fails with one line per server.
    let again = [
        "server",
        "deploy",
        "--all",
        "--filter",
        &name_a,
        "--filter",
        &name_b,
        "--token",
        &token,
        "--seed",
        &rack.catalog.seed,
        "--yes",
    ];
    let out = admin(&rack, &again).await;
    assert_refused(&out, "2 of 2 servers failed");
    for name in [a, b] {
        assert!(
            stdout(&out)
                .lines()
                .any(|l| l.starts_with(&format!("{name}: failed: deployment_running"))),
            "{name}\n{}",
            describe(&out)
        );
    }

    // A bulk cancel must say why; the refusal comes before any call.
    let out = admin(&rack, &["server", "cancel", "--all"]).await;
    assert_refused(&out, "--reason");
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert_refused(
        &admin(&rack, &["server", "cancel", "--all", "--reason", " "]).await,
        "--reason is empty",
    );
    for name in [a, b] {
        assert!(events_of(&rack, name, "cancel_requested").await.is_empty());
    }

    let out = admin(
        &rack,
        &[
            "server",
            "cancel",
            "--all",
            "--filter",
            "status=deploying",
            "--reason",
            "rack 7 is being moved",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", describe(&out));
    for name in [a, b] {
        assert!(
            stdout(&out)
                .lines()
                .any(|l| l.starts_with(&format!("{name}: cancel requested for deployment "))),
            "{name}\n{}",
            describe(&out)
        );
        let events = events_of(&rack, name, "cancel_requested").await;
        assert_eq!(events.len(), 1, "{name}: {events:?}");
        assert_eq!(events[0]["detail"]["reason"], "rack 7 is being moved");
        assert_eq!(events[0]["detail"]["by"], "admin");
        assert_eq!(events[0]["detail"]["skip_cleanup"], false);
    }

    // Without a filter, the server that never deployed is left alone rather than failed.
    let out = admin(
        &rack,
        &["server", "cancel", "--all", "--reason", "again", "--json"],
    )
    .await;
    let answers = json_out(&out);
    let servers: Vec<&str> = answers
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["server"].as_str())
        .collect();
    assert_eq!(servers, [a, b], "{answers}");
    assert!(
        answers
            .as_array()
            .is_some_and(|a| a.iter().all(|v| v["response"]["cancel"].is_object())),
        "{answers}"
    );

    // A single cancel takes a reason too; one where nothing runs is the API's conflict.
    let out = admin(&rack, &["server", "cancel", a, "--reason", "one more"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    let reasons: Vec<Value> = events_of(&rack, a, "cancel_requested")
        .await
        .into_iter()
        .map(|e| e["detail"]["reason"].clone())
        .collect();
    assert_eq!(
        reasons,
        ["rack 7 is being moved", "again", "one more"],
        "{reasons:?}"
    );
    assert_refused(
        &admin(&rack, &["server", "cancel", c, "--reason", "nothing runs"]).await,
        "no_running_deployment",
    );
    let out = admin(
        &rack,
        &[
            "server",
            "cancel",
            "--all",
            "--filter",
            &format!("name={c}"),
            "--reason",
            "x",
        ],
    )
    .await;
    assert_refused(&out, "nothing to cancel");

    // The API itself: a blank reason is refused naming the field, and a body without one (an older client's)
    // is still accepted, its event carrying no reason.
    let cancel = |body: Value| {
        rack.admin(
            reqwest::Method::POST,
            format!("/1.0/provisioning/servers/{b}:cancel-deploy"),
        )
        .json(&body)
        .send()
    };
    let refused = cancel(serde_json::json!({ "reason": "  " }))
        .await
        .expect("cancel");
    assert_eq!(refused.status(), 400);
    let refused: Value = refused.json().await.expect("error JSON");
    assert_eq!(refused["error"]["field"], "reason", "{refused}");
    let accepted = cancel(serde_json::json!({ "skip_cleanup": false }))
        .await
        .expect("cancel");
    assert_eq!(accepted.status(), 202);
    let events = events_of(&rack, b, "cancel_requested").await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(events[2]["detail"].get("reason").is_none(), "{events:?}");

    // With no BIOS profile left, a bulk deploy is refused for each server until it says they need none.
    let removed = admin(&rack, &["bios-profile", "remove", "incusos-baseline"]).await;
    assert!(removed.status.success(), "{}", describe(&removed));
    let name_c = format!("name={c}");
    let mut only_c = vec![
        "server",
        "deploy",
        "--all",
        "--filter",
        &name_c,
        "--token",
        &token,
        "--seed",
        &rack.catalog.seed,
        "--yes",
    ];
    let out = admin(&rack, &only_c).await;
    assert_refused(&out, "1 of 1 servers failed");
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with(&format!("{c}: failed: no_bios_profile"))),
        "{}",
        describe(&out)
    );
    assert!(rack.store.latest_deployment(c).await.unwrap().is_none());
    only_c.push("--no-bios-settings");
    let out = admin(&rack, &only_c).await;
    assert!(out.status.success(), "{}", describe(&out));
    let deployment = rack
        .store
        .latest_deployment(c)
        .await
        .unwrap()
        .expect("c's deployment");
    assert!(deployment.deployment.plan.no_bios_settings);
    assert!(deployment.deployment.plan.bios_profiles.is_empty());
    rack.stop().await;
}

//! Cancelling a running deployment (with and without clean up) and a deployment whose BMC keeps failing: each
//! ends in the state the simulator's truth implies, and the failure lands in `dead_letters` with its context.

use std::time::Duration;

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_deploy::State;
use racklift_tests::rack::Rack;
use serde_json::{Value, json};

async fn cancel(rack: &Rack, name: &str, skip_cleanup: bool) {
    let response = rack
        .admin(
            reqwest::Method::POST,
            format!("/1.0/provisioning/servers/{name}:cancel-deploy"),
        )
        .json(&json!({ "skip_cleanup": skip_cleanup }))
        .send()
        .await
        .expect("cancel request");
    assert_eq!(
        response.status(),
        202,
        "{}",
        response.text().await.unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_mid_install_cleans_up_unless_told_not_to() {
    let rack = Rack::start(2, PersonalityChoice::Single(Personality::Generic), 0.01).await;
    for i in 0..2 {
        let response = rack.deploy(rack.sim.name(i), json!({})).await;
        assert_eq!(response.status(), 202);
    }
    for (i, skip_cleanup) in [(0, false), (1, true)] {
        let name = rack.sim.name(i).to_owned();
        rack.wait_state(&name, State::WaitInstall, Duration::from_secs(120))
            .await;
        cancel(&rack, &name, skip_cleanup).await;
        let d = rack.wait_finished(&name, Duration::from_secs(60)).await;
        assert_eq!(
            d.deployment.machine.state,
            State::Canceled,
            "{name}: {:?}",
            d.deployment.machine
        );
        let truth = rack.sim.truth(i);
        let inserted = truth["media"]
            .as_array()
            .is_some_and(|m| m.iter().any(|s| s["inserted"] == json!(true)));
        if skip_cleanup {
            assert!(
                inserted,
                "{name}: skip_cleanup leaves the media attached: {truth}"
            );
        } else {
            assert!(!inserted, "{name}: clean up ejects the media: {truth}");
            assert_eq!(
                truth["power"],
                json!("Off"),
                "{name}: clean up powers off: {truth}"
            );
        }
        let audit = rack.sim.audit(i);
        assert!(
            audit.stale_mutations.is_empty() && audit.max_concurrent <= 1,
            "{name}: {audit:?}"
        );
    }
    rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retries_exhausted_fail_the_deployment_into_a_dead_letter() {
    let rack = Rack::start(1, PersonalityChoice::Single(Personality::Generic), 0.01).await;
    let name = rack.sim.name(0).to_owned();
    let d = rack.deploy_into_failure(0).await;
    let machine = &d.deployment.machine;
    let failure = machine.failure.as_ref().expect("a failure is recorded");
    // The simulated server starts powered off, so "ensure off" needs no request; staging BIOS is the first write.
    assert_eq!(failure.state, State::ApplyBIOS, "{failure:?}");
    assert!(
        machine.first_error.as_deref().is_some_and(|e| e.contains("500")),
        "{machine:?}"
    );

    let (reason, context): (String, Value) =
        sqlx::query_as("SELECT reason, context FROM dead_letters WHERE kind = 'deployment.step'")
            .fetch_one(&rack.db.pool)
            .await
            .expect("one dead letter for the failed deployment");
    assert_eq!(reason, "deployment_failed");
    assert_eq!(context["server"], json!(name));
    assert_eq!(context["state"], json!("ApplyBIOS"));
    assert_eq!(context["last_error"]["bmc_status"], json!(500), "{context}");
    // Every attempt read the BMC before its call failed: the sentence says what was seen last.
    assert!(context["last_facts"]["power"].is_string(), "{context}");
    let sentence = context["sentence"].as_str().expect("a failure sentence");
    assert!(
        sentence.contains("Last seen: power ") && !sentence.contains("nothing observed yet"),
        "{sentence}"
    );
    let server: Value = rack
        .admin(reqwest::Method::GET, format!("/1.0/servers/{name}"))
        .send()
        .await
        .expect("show server")
        .json()
        .await
        .expect("server JSON");
    assert_eq!(server["status"], json!("failed"), "{server}");
    rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn power_and_media_actions_run_as_fenced_jobs() {
    let rack = Rack::start(1, PersonalityChoice::Single(Personality::Generic), 0.01).await;
    let name = rack.sim.name(0).to_owned();
    let post = |path: String, body: Value, key: Option<&'static str>| {
        let mut request = rack
            .admin(reqwest::Method::POST, format!("/1.0/provisioning/servers/{path}"))
            .json(&body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send()
    };
    let bad = post(format!("{name}:power"), json!({ "action": "sideways" }), None)
        .await
        .expect("power");
    assert_eq!(bad.status(), 400);
    let error: Value = bad.json().await.expect("error JSON");
    assert_eq!(error["error"]["field"], json!("action"), "{error}");

    // The spec's spelling, `{name}/:power`, and a retried request with the same key.
    let first = post(format!("{name}/:power"), json!({ "action": "on" }), Some("k1"))
        .await
        .expect("power");
    assert_eq!(first.status(), 202);
    let job: Value = first.json().await.expect("job JSON");
    racklift_testdb::wait_for(Duration::from_secs(30), "the server to power on", || async {
        rack.sim.truth(0)["power"] == json!("On")
    })
    .await;
    let image = format!("{}/media/none/x.img", rack.api_url);
    let insert = post(
        format!("{name}:media"),
        json!({ "action": "insert", "image_url": image }),
        None,
    )
    .await
    .expect("media");
    assert_eq!(insert.status(), 202, "{job}");
    racklift_testdb::wait_for(Duration::from_secs(30), "the media to be inserted", || async {
        rack.sim.truth(0)["media"]
            .as_array()
            .is_some_and(|m| m.iter().any(|s| s["inserted"] == json!(true)))
    })
    .await;
    let audit = rack.sim.audit(0);
    assert!(
        audit.unfenced_mutations == 0 && audit.stale_mutations.is_empty(),
        "{audit:?}"
    );
    rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_api_restart_mid_install_loses_no_progress_and_the_deployment_completes() {
    // Lenovo-like BMCs stream the media through the whole install, so the restart lands among its reads.
    let mut rack = Rack::start(1, PersonalityChoice::Single(Personality::Lenovo), 0.01).await;
    let name = rack.sim.name(0).to_owned();
    assert_eq!(rack.deploy(&name, json!({})).await.status(), 202);
    rack.wait_state(&name, State::WaitInstall, Duration::from_secs(120))
        .await;
    racklift_testdb::wait_for(Duration::from_secs(60), "media reads to be recorded", || async {
        sqlx::query_scalar::<_, i64>("SELECT coalesce(sum(bytes_read), 0)::bigint FROM media_reads")
            .fetch_one(&rack.db.pool)
            .await
            .is_ok_and(|b| b > 0)
    })
    .await;
    rack.restart_api().await;
    let d = rack.wait_finished(&name, Duration::from_secs(120)).await;
    assert_eq!(
        d.deployment.machine.state,
        State::Completed,
        "{:?}",
        d.deployment.machine.failure
    );
    assert_eq!(rack.sim.truth(0)["registered"], json!(true));
    rack.stop().await;
}

//! Fault injection and the concurrency / fence audits.

use std::time::Duration;

use racklift_bmc_sim::Faults;
use reqwest::StatusCode;
use serde_json::json;

use crate::common::{self, Client, wait_for};

#[tokio::test]
async fn stale_mutation_is_reported_with_method_path_token_and_highest() {
    let sim = common::start(2, "generic").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let link = sys["@odata.id"].as_str().unwrap();
    let boot = json!({"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}});
    for fence in [Some(5), Some(7), None, Some(7)] {
        let (status, _, _) = c
            .send(reqwest::Method::PATCH, link, Some(boot.clone()), fence)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    assert!(sim.audit(0).stale_mutations.is_empty());
    let (status, _, _) = c.send(reqwest::Method::PATCH, link, Some(boot), Some(6)).await;
    assert_eq!(
        status,
        StatusCode::NO_CONTENT,
        "a real BMC executes it; the audit reports it"
    );
    let audit = sim.audit(0);
    assert_eq!(audit.stale_mutations.len(), 1);
    let stale = &audit.stale_mutations[0];
    assert_eq!(
        (stale.method.as_str(), stale.token, stale.highest_seen),
        ("PATCH", 6, 7)
    );
    assert_eq!(stale.path, link);
    assert_eq!(audit.unfenced_mutations, 1);
    assert_eq!(audit.fenced_mutations, 4);
    assert_eq!(audit.highest_fence, Some(7));
    // Per BMC: the other one saw nothing.
    assert_eq!(sim.audit(1).mutations, 0);
    let over_http = common::control_get(&sim, &format!("/servers/{}/audit", sim.name(0))).await;
    assert_eq!(over_http["stale_mutations"][0]["token"], 6);
    let fleet = common::control_get(&sim, "/audit").await;
    assert_eq!(fleet["stale_mutations"][0]["server"], sim.name(0));
}

#[tokio::test]
async fn concurrency_audit_counts_the_highest_number_in_flight() {
    let sim = common::start(2, "generic").await;
    sim.set_faults(
        0,
        Faults {
            slow_ms: 300,
            ..Faults::default()
        },
    );
    let c = Client::new(&sim);
    let url = format!("{}/redfish/v1/Systems", sim.bmc_url(0));
    let reqs = (0..5).map(|_| c.send(reqwest::Method::GET, &url, None, None));
    let results = futures::future::join_all(reqs).await;
    assert!(results.iter().all(|(s, _, _)| *s == StatusCode::OK));
    let audit = sim.audit(0);
    assert_eq!(audit.max_concurrent, 5);
    assert_eq!(audit.in_flight, 0);
    assert_eq!(sim.audit(1).max_concurrent, 0);
}

#[tokio::test]
async fn busy_and_5xx_faults_clear_after_the_remaining_count() {
    let sim = common::start(1, "dell").await;
    let c = Client::new(&sim);
    let url = format!("{}/redfish/v1/Systems", sim.bmc_url(0));
    sim.set_faults(
        0,
        Faults {
            busy: true,
            remaining: Some(1),
            ..Faults::default()
        },
    );
    let (status, _, body) = c.send(reqwest::Method::GET, &url, None, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        body["error"]["@Message.ExtendedInfo"][0]["MessageId"],
        "IDRAC.2.8.RAC0218"
    );
    assert_eq!(
        c.send(reqwest::Method::GET, &url, None, None).await.0,
        StatusCode::OK
    );

    // Set through the control endpoint this time.
    let http = reqwest::Client::new();
    let faults = format!("{}/servers/{}/faults", sim.control_url(), sim.name(0));
    let r = http
        .put(&faults)
        .json(&json!({"status": 500, "remaining": 2, "only_gets": true}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert_eq!(
        c.send(reqwest::Method::GET, &url, None, None).await.0,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(
        c.send(reqwest::Method::GET, &url, None, None).await.0,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(
        c.send(reqwest::Method::GET, &url, None, None).await.0,
        StatusCode::OK
    );
    let bad = http
        .put(&faults)
        .json(&json!({"no_such_fault": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn hang_and_reset_faults_fail_the_request_at_the_transport() {
    let sim = common::start(1, "generic").await;
    let url = format!("{}/redfish/v1/Systems", sim.bmc_url(0));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    sim.set_faults(
        0,
        Faults {
            hang: true,
            ..Faults::default()
        },
    );
    let err = http
        .get(&url)
        .basic_auth("admin", Some("password"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    sim.set_faults(
        0,
        Faults {
            reset_connection: true,
            ..Faults::default()
        },
    );
    let err = http
        .get(&url)
        .basic_auth("admin", Some("password"))
        .send()
        .await
        .unwrap_err();
    assert!(!err.is_timeout(), "closed, not timed out: {err}");
    sim.set_faults(0, Faults::default());
    let ok = http
        .get(&url)
        .basic_auth("admin", Some("password"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
}

#[tokio::test]
async fn ignored_power_off_is_accepted_and_not_acted_on() {
    let sim = common::start(1, "generic").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let link = sys["@odata.id"].as_str().unwrap();
    c.reset(&sys, "On").await;
    wait_for("On", Duration::from_secs(10), || async {
        (c.get(link).await["PowerState"] == "On").then_some(())
    })
    .await;
    sim.set_faults(
        0,
        Faults {
            ignore_power_off: true,
            ..Faults::default()
        },
    );
    assert_eq!(c.reset(&sys, "ForceOff").await, StatusCode::NO_CONTENT);
    // Power-off takes 2 ms at this scale; 100 ms later it must still be on.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(c.get(link).await["PowerState"], "On");
    sim.set_faults(
        0,
        Faults {
            power_on_conflict: true,
            ..Faults::default()
        },
    );
    assert_eq!(c.reset(&sys, "ForceOff").await, StatusCode::NO_CONTENT);
    wait_for("Off", Duration::from_secs(10), || async {
        (c.get(link).await["PowerState"] == "Off").then_some(())
    })
    .await;
    assert_eq!(
        c.reset(&sys, "On").await,
        StatusCode::CONFLICT,
        "iDRAC10-like 409 right after a power-off"
    );
}

#[tokio::test]
async fn ignore_next_power_offs_drops_that_many_power_offs_of_a_running_server_then_acts() {
    let sim = common::start(1, "generic").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let link = sys["@odata.id"].as_str().unwrap();
    let faults_path = format!("/servers/{}/faults", sim.name(0));
    sim.set_faults(
        0,
        Faults {
            ignore_next_power_offs: 1,
            ..Faults::default()
        },
    );
    // A power-off of a server that is off already has nothing to drop, so it does not spend the fault.
    assert_eq!(c.reset(&sys, "ForceOff").await, StatusCode::NO_CONTENT);
    assert_eq!(
        common::control_get(&sim, &faults_path).await["ignore_next_power_offs"],
        1,
        "a power-off of an off server leaves the count"
    );
    c.reset(&sys, "On").await;
    wait_for("On", Duration::from_secs(10), || async {
        (c.get(link).await["PowerState"] == "On").then_some(())
    })
    .await;
    // A power-off starts at once (`PoweringOff`), so "still On" right after the answer means dropped.
    assert_eq!(c.reset(&sys, "ForceOff").await, StatusCode::NO_CONTENT);
    assert_eq!(
        c.get(link).await["PowerState"],
        "On",
        "the first power-off is dropped"
    );
    assert_eq!(
        common::control_get(&sim, &faults_path).await["ignore_next_power_offs"],
        0,
        "the dropped power-off spends the fault"
    );
    assert_eq!(c.reset(&sys, "ForceOff").await, StatusCode::NO_CONTENT);
    wait_for("Off", Duration::from_secs(10), || async {
        (c.get(link).await["PowerState"] == "Off").then_some(())
    })
    .await;
    assert_eq!(sim.truth(0)["counters"]["power_off_requests"], 3);
}

#[tokio::test]
async fn insert_error_fault_answers_the_idrac_message() {
    let sim = common::start(1, "dell").await;
    let c = Client::new(&sim);
    sim.set_faults(
        0,
        Faults {
            insert_error: Some("RAC0904".into()),
            ..Faults::default()
        },
    );
    let slot = common::cd_slot(&c, &sim.bmc_url(0)).await;
    let target = slot["Actions"]["#VirtualMedia.InsertMedia"]["target"]
        .as_str()
        .unwrap();
    let (status, _, body) = c.post(target, json!({"Image": "http://127.0.0.1:1/x.iso"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"]["@Message.ExtendedInfo"][0]["MessageId"],
        "IDRAC.2.8.RAC0904"
    );
}

#[tokio::test]
async fn reject_if_match_fault_answers_412_unless_the_etag_is_a_wildcard() {
    let sim = common::start(1, "generic").await;
    let c = Client::new(&sim);
    sim.set_faults(
        0,
        Faults {
            reject_if_match: true,
            ..Faults::default()
        },
    );
    let sys = c.system(&sim.bmc_url(0)).await;
    let url = c.url(sys["@odata.id"].as_str().unwrap());
    let body = json!({"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}});
    let patch = |etag: &'static str| {
        c.http
            .patch(&url)
            .basic_auth("admin", Some("password"))
            .header("If-Match", etag)
            .json(&body)
            .send()
    };
    assert_eq!(
        patch("W/\"1\"").await.unwrap().status(),
        StatusCode::PRECONDITION_FAILED
    );
    assert_eq!(patch("*").await.unwrap().status(), StatusCode::NO_CONTENT);
}

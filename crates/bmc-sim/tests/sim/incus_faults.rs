//! The Incus faults: request faults on a server's own listener, and the behaviour faults of cluster operations,
//! reboots and a member's network.

use std::time::Duration;

use racklift_bmc_sim::Faults;
use reqwest::StatusCode;
use serde_json::json;

use crate::cluster::act;
use crate::common::wait_for;
use crate::incus::{LONG, TestClient, get, installed_fleet, post};

#[tokio::test]
async fn incus_request_faults_hit_the_next_requests_only_and_leave_redfish_alone() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(1, &operator).await;
    let http = operator.client(&sim, 0);
    sim.set_faults(
        0,
        Faults {
            incus_status: Some(503),
            incus_remaining: Some(1),
            ..Faults::default()
        },
    );
    let redfish = crate::common::Client::new(&sim);
    redfish
        .get(&format!("{}/redfish/v1/Systems", sim.bmc_url(0)))
        .await;
    let (status, body) = get(&http, &sim, 0, "/1.0").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error_code"], 503);
    assert_eq!(get(&http, &sim, 0, "/1.0").await.0, StatusCode::OK, "spent");

    sim.set_faults(
        0,
        Faults {
            incus_reset: true,
            incus_remaining: Some(1),
            ..Faults::default()
        },
    );
    let url = sim.incus_url(0).unwrap();
    assert!(
        http.get(format!("{url}/1.0")).send().await.is_err(),
        "closed without an answer"
    );
    assert_eq!(get(&http, &sim, 0, "/1.0").await.0, StatusCode::OK);

    sim.set_faults(
        0,
        Faults {
            incus_hang: true,
            ..Faults::default()
        },
    );
    let hung = tokio::time::timeout(Duration::from_millis(300), http.get(format!("{url}/1.0")).send()).await;
    assert!(hung.is_err(), "no answer");
    sim.set_faults(0, Faults::default());
    assert_eq!(get(&http, &sim, 0, "/1.0").await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_failed_evacuation_leaves_the_member_online_and_a_failed_restore_leaves_it_evacuated() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(2, &operator).await;
    sim.form_cluster("c1", &[0, 1]).unwrap();
    let http = operator.client(&sim, 0);
    sim.set_faults(
        1,
        Faults {
            evacuate_fails: true,
            restore_fails: true,
            ..Faults::default()
        },
    );
    let done = act(&http, &sim, 0, "node-1", "evacuate", Some(1)).await;
    assert_eq!(done["status"], "Failure");
    assert_eq!(done["status_code"], 400);
    assert!(
        done["err"]
            .as_str()
            .unwrap()
            .starts_with("Failed to evacuate instances"),
        "{done}"
    );
    let (_, member) = get(&http, &sim, 0, "/1.0/cluster/members/node-1").await;
    assert_eq!(member["metadata"]["status"], "Online");

    sim.set_faults(1, Faults::default());
    assert_eq!(
        act(&http, &sim, 0, "node-1", "evacuate", Some(2)).await["status"],
        "Success"
    );
    sim.set_faults(
        1,
        Faults {
            restore_fails: true,
            ..Faults::default()
        },
    );
    let done = act(&http, &sim, 0, "node-1", "restore", Some(3)).await;
    assert_eq!(done["status"], "Failure");
    assert!(!done["err"].as_str().unwrap().is_empty());
    let (_, member) = get(&http, &sim, 0, "/1.0/cluster/members/node-1").await;
    assert_eq!(member["metadata"]["status"], "Evacuated");
}

#[tokio::test]
async fn a_hanging_evacuation_runs_until_a_restore_and_the_wait_is_bounded_by_its_timeout() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(2, &operator).await;
    sim.form_cluster("c1", &[0, 1]).unwrap();
    let http = operator.client(&sim, 0);
    sim.set_faults(
        1,
        Faults {
            evacuate_hangs: true,
            ..Faults::default()
        },
    );
    let (status, body) = post(
        &http,
        &sim,
        0,
        "/1.0/cluster/members/node-1/state",
        json!({"action": "evacuate"}),
        Some(1),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let op = body["operation"].as_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    let wait = format!("{op}/wait?timeout=1");
    let (a, b, c) = futures::join!(
        get(&http, &sim, 0, &wait),
        get(&http, &sim, 0, &wait),
        get(&http, &sim, 0, &wait)
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    for (_, waited) in [a, b, c] {
        assert_eq!(waited["metadata"]["status"], "Running");
        assert_eq!(waited["metadata"]["status_code"], 103);
    }
    // Three requests in flight at once on member 0's API.
    assert!(sim.incus_audit(0).max_concurrent >= 3, "{:?}", sim.incus_audit(0));
    // Seen from the member itself too: the operation belongs to it.
    let (_, own) = get(&operator.client(&sim, 1), &sim, 1, &op).await;
    assert_eq!(own["metadata"]["status"], "Running");
    assert_eq!(
        sim.cluster_audit("c1").unwrap().evacuated_now,
        vec!["node-1".to_owned()]
    );

    assert_eq!(
        act(&http, &sim, 0, "node-1", "restore", Some(2)).await["status"],
        "Success"
    );
    let (_, ended) = get(&http, &sim, 0, &op).await;
    assert_eq!(ended["metadata"]["status"], "Failure");
    let (_, member) = get(&http, &sim, 0, "/1.0/cluster/members/node-1").await;
    assert_eq!(member["metadata"]["status"], "Online");
}

#[tokio::test]
async fn a_reboot_that_never_returns_halts_in_firmware() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(1, &operator).await;
    sim.set_faults(
        0,
        Faults {
            reboot_never_returns: true,
            ..Faults::default()
        },
    );
    let http = operator.client(&sim, 0);
    let boots = sim.truth(0)["boot_count"].as_u64().unwrap();
    let (status, _) = post(&http, &sim, 0, "/os/1.0/system/:reboot", json!({}), Some(1)).await;
    assert_eq!(status, StatusCode::OK);
    wait_for("the end of POST", LONG, || async {
        let t = sim.truth(0);
        (t["boot_count"].as_u64().unwrap() > boots
            && t["boot_progress"] == "SystemHardwareInitializationComplete")
            .then_some(())
    })
    .await;
    // Well past the time a boot takes, it is still there, and the Incus port refuses.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = sim.truth(0);
    assert_eq!(t["phase"]["phase"], "down", "{t}");
    assert_eq!(t["boot_progress"], "SystemHardwareInitializationComplete");
    let url = sim.incus_url(0).unwrap();
    assert!(
        operator
            .client(&sim, 0)
            .get(format!("{url}/1.0"))
            .send()
            .await
            .is_err()
    );
}

#[tokio::test]
async fn an_offline_member_is_offline_for_every_member_and_refuses_connections() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(2, &operator).await;
    sim.form_cluster("c1", &[0, 1]).unwrap();
    let http = operator.client(&sim, 0);
    sim.set_faults(
        1,
        Faults {
            member_offline: true,
            ..Faults::default()
        },
    );
    let (_, members) = get(&http, &sim, 0, "/1.0/cluster/members?recursion=1").await;
    assert_eq!(members["metadata"][1]["status"], "Offline");
    assert_eq!(members["metadata"][0]["status"], "Online");
    let url = sim.incus_url(1).unwrap();
    assert!(
        operator
            .client(&sim, 1)
            .get(format!("{url}/1.0"))
            .send()
            .await
            .is_err()
    );
    assert_eq!(
        sim.truth(1)["phase"]["phase"],
        "os_running",
        "the machine keeps running"
    );
    let (status, body) = post(
        &http,
        &sim,
        0,
        "/1.0/cluster/members/node-1/state",
        json!({"action": "evacuate"}),
        Some(1),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    sim.set_faults(1, Faults::default());
    let (status, _) = get(&operator.client(&sim, 1), &sim, 1, "/1.0").await;
    assert_eq!(status, StatusCode::OK);
}

//! Rolling reboots of a 5-member cluster end to end (rolling updates are in `cluster_updates.rs`): deployed
//! simulated servers formed into one Incus cluster, the API launching, the worker pool driving the run over each
//! member's mutual-TLS Incus API, and the simulator's cluster audit checking what no run may do (two members out
//! at once, a stale or unfenced Incus mutation, a member rebooted twice).

use std::time::Duration;

use racklift_bmc_sim::Faults;
use racklift_tests::cluster::{CLUSTER, ClusterRack, assert_rolled_once_each, op_status, short_budgets};
use serde_json::{Value, json};

const MEMBERS: usize = 5;
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// As [`assert_rolled_once_each`] for a cluster of `members`, fences not checked.
fn assert_rolled_once_each_of(c: &ClusterRack, members: usize) {
    let audit = c.rack.sim.cluster_audit(CLUSTER).expect("the cluster's audit");
    assert_eq!(audit.max_evacuated_at_once, 1, "{audit:#?}");
    for i in 0..members {
        let counts = &audit.members[&c.hostname(i)];
        assert_eq!(
            (counts.evacuations, counts.reboots, counts.restores),
            (1, 1, 1),
            "{}: {audit:#?}",
            c.names[i]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_reboot_reboots_each_member_once_one_at_a_time() {
    let c = ClusterRack::start(MEMBERS).await;
    let (status, started) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(started["operation"]["operation"], "rolling_reboot", "{started}");
    assert_eq!(started["operation"]["total"], MEMBERS, "{started}");

    // One cluster-wide operation at a time: a second request names the running one.
    let (status, second) = c.action("update", json!({})).await;
    assert_eq!(status, 409, "{second}");
    assert_eq!(second["error"]["code"], "operation_running", "{second}");
    let id = started["operation"]["id"].as_i64().unwrap();
    assert!(
        second["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("operation {id}"))),
        "{second}"
    );

    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");
    assert_eq!(
        view["operation"]["progress"],
        format!("[{MEMBERS}/{MEMBERS}]"),
        "{view:#}"
    );
    assert_eq!(view["operation"]["pending_reboot"], json!([]), "{view:#}");
    assert_rolled_once_each(&c, &[]);
    for i in 0..MEMBERS {
        assert_eq!(c.rack.sim.truth(i)["os"]["member"], "Online", "{}", c.names[i]);
    }
    c.rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_evacuated_before_the_run_is_rebooted_and_left_evacuated() {
    let c = ClusterRack::start(MEMBERS).await;
    evacuate_by_hand(&c, 2).await;
    c.rack.sim.reset_cluster_audit(CLUSTER);
    let (status, started) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202, "{started}");
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");
    assert_eq!(
        view["operation"]["servers"][2]["kept_evacuated"], true,
        "{view:#}"
    );
    assert_rolled_once_each(&c, &[2]);
    assert_eq!(c.rack.sim.truth(2)["os"]["member"], "Evacuated");
    c.rack.stop().await;
}

/// Evacuates member `i` through its own Incus API with racklift's client identity, as an operator would with
/// `incus cluster evacuate`, and waits until it is Evacuated.
async fn evacuate_by_hand(c: &ClusterRack, i: usize) {
    let identity = c.rack.store.client_identity().await.unwrap();
    let url = c.rack.sim.incus_url(i).expect("an installed server's Incus API");
    let config = racklift_incus::IncusConfig::new(
        c.names[i].clone(),
        url,
        racklift_incus::ClientIdentity::from_pem(identity.certificate_pem, identity.key_pem),
        racklift_incus::ServerTrust::FirstUse,
    );
    let client = racklift_incus::IncusClient::new(config).unwrap();
    client.evacuate(&c.hostname(i)).await.expect("evacuate");
    racklift_tests::wait_for(
        Duration::from_secs(30),
        "the member evacuated by hand",
        || async { c.rack.sim.truth(i)["os"]["member"] == "Evacuated" },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_mid_run_restores_the_member_being_worked_on_and_leaves_the_rest() {
    let c = ClusterRack::start(MEMBERS).await;
    let (status, _) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202);
    // Cancel while the second member is being worked on.
    c.wait_for("the second member's evacuation", RUN_LIMIT, |op| {
        op["servers"][1]["step"].is_string()
    })
    .await;
    let (status, canceled) = c
        .action("cancel-operation", json!({"reason": "maintenance moved"}))
        .await;
    assert_eq!(status, 202, "{canceled}");
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "canceled", "{view:#}");
    let audit = c.rack.sim.cluster_audit(CLUSTER).unwrap();
    assert!(audit.evacuated_now.is_empty(), "{audit:#?}");
    assert_eq!(audit.max_evacuated_at_once, 1, "{audit:#?}");
    // The members after the one being worked on were not touched.
    for i in 2..MEMBERS {
        let counts = audit.members.get(&c.hostname(i)).cloned().unwrap_or_default();
        assert_eq!(
            (counts.evacuations, counts.reboots),
            (0, 0),
            "{}: {audit:#?}",
            c.names[i]
        );
    }
    // Nothing runs now: a new operation may start.
    let (status, again) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202, "{again}");
    c.rack.stop().await;
}

/// The run's dead letter, as triage lists it.
async fn dead_letter(c: &ClusterRack, operation: &str) -> Value {
    let r = c
        .rack
        .http
        .get(format!(
            "{}/1.0/deadletters?operation={operation}",
            c.rack.api_url
        ))
        .bearer_auth(&c.rack.catalog.admin_token)
        .send()
        .await
        .unwrap();
    let page: Value = r.json().await.unwrap();
    page["items"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_that_never_comes_back_from_its_reboot_ends_the_run_naming_it() {
    let c = ClusterRack::start_with(MEMBERS, short_budgets()).await;
    c.rack.sim.set_faults(
        1,
        Faults {
            reboot_never_returns: true,
            ..Faults::default()
        },
    );
    let (status, _) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202);
    let view = c.wait_ended(RUN_LIMIT).await;
    let op = &view["operation"];
    assert_eq!(op_status(&view), "failed", "{view:#}");
    assert_eq!(op["failed_server"], c.names[1], "{view:#}");
    assert_eq!(op["failed_step"], "reboot", "{view:#}");
    // The reboot has no trigger to fall back to: it was asked once.
    let audit = c.rack.sim.cluster_audit(CLUSTER).unwrap();
    assert_eq!(audit.members[&c.hostname(1)].reboots, 1, "{audit:#?}");
    assert!(!audit.members.contains_key(&c.hostname(2)), "{audit:#?}");
    let dl = dead_letter(&c, "rolling_reboot").await;
    assert_eq!(dl["server"], c.names[1], "{dl}");
    assert_eq!(dl["state"], "reboot", "{dl}");
    c.rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_evacuation_that_keeps_failing_is_retried_within_its_attempts_then_ends_the_run() {
    let c = ClusterRack::start_with(MEMBERS, short_budgets()).await;
    c.rack.sim.set_faults(
        0,
        Faults {
            evacuate_fails: true,
            ..Faults::default()
        },
    );
    let (status, _) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202);
    let view = c.wait_ended(RUN_LIMIT).await;
    let op = &view["operation"];
    assert_eq!(op_status(&view), "failed", "{view:#}");
    assert_eq!(op["failed_server"], c.names[0], "{view:#}");
    assert_eq!(op["failed_step"], "evacuate", "{view:#}");
    assert!(
        op["first_error"]
            .as_str()
            .is_some_and(|e| e.starts_with("evacuate failed")),
        "{view:#}"
    );
    // The first attempt and two retries; the failure came back each time, so the run re-triggered at once.
    let audit = c.rack.sim.cluster_audit(CLUSTER).unwrap();
    assert_eq!(audit.members[&c.hostname(0)].evacuations, 3, "{audit:#?}");
    assert_eq!(audit.members[&c.hostname(0)].reboots, 0, "{audit:#?}");
    let dl = dead_letter(&c, "rolling_reboot").await;
    assert_eq!(dl["server"], c.names[0], "{dl}");
    c.rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_going_offline_pauses_the_run_before_the_next_evacuation_and_resume_finishes_it() {
    let c = ClusterRack::start_with(MEMBERS, short_budgets()).await;
    let (status, _) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202);
    c.wait_for("the first member done", RUN_LIMIT, |op| {
        op["done"].as_u64() >= Some(1)
    })
    .await;
    c.rack.sim.set_faults(
        3,
        Faults {
            member_offline: true,
            ..Faults::default()
        },
    );
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "paused", "{view:#}");
    let reason = view["operation"]["status_reason"].as_str().unwrap_or_default();
    assert!(reason.contains(&c.names[3]), "{view:#}");
    // No second member was taken out while the cluster was degraded.
    let audit = c.rack.sim.cluster_audit(CLUSTER).unwrap();
    assert_eq!(audit.max_evacuated_at_once, 1, "{audit:#?}");

    c.rack.sim.set_faults(3, Faults::default());
    let (status, resumed) = c.action("resume", json!({"reason": "member 3 is back"})).await;
    assert_eq!(status, 202, "{resumed}");
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");
    assert_rolled_once_each(&c, &[]);
    c.rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn launches_are_idempotent_and_refused_for_busy_clusters_with_the_reason() {
    let c = ClusterRack::start(3.min(MEMBERS)).await;
    let key = "reboot-2026-12-02";
    let request = |key: &'static str| {
        c.rack
            .http
            .post(format!(
                "{}/1.0/provisioning/clusters/{CLUSTER}:reboot",
                c.rack.api_url
            ))
            .bearer_auth(&c.rack.catalog.admin_token)
            .header("Idempotency-Key", key)
            .json(&json!({}))
            .send()
    };
    let first = request(key).await.unwrap();
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.unwrap();
    let again = request(key).await.unwrap();
    assert_eq!(again.status(), 200);
    let again: Value = again.json().await.unwrap();
    assert_eq!(first["operation"]["id"], again["operation"]["id"]);
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");

    // A member busy evacuating: a rolling reboot is refused at launch, naming it.
    c.rack.sim.set_faults(
        1,
        Faults {
            evacuate_hangs: true,
            ..Faults::default()
        },
    );
    let identity = c.rack.store.client_identity().await.unwrap();
    let config = racklift_incus::IncusConfig::new(
        c.names[1].clone(),
        c.rack.sim.incus_url(1).unwrap(),
        racklift_incus::ClientIdentity::from_pem(identity.certificate_pem, identity.key_pem),
        racklift_incus::ServerTrust::FirstUse,
    );
    let client = racklift_incus::IncusClient::new(config).unwrap();
    client.evacuate(&c.hostname(1)).await.expect("evacuate");
    let (status, refused) = c.action("reboot", json!({})).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "server_busy", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&c.names[1])),
        "{refused}"
    );
    c.rack.stop().await;
}

/// Starts a rolling reboot with `faults` on member `i` and waits for its end.
async fn reboot_with_fault(c: &ClusterRack, i: usize, faults: Faults) -> Value {
    c.rack.sim.set_faults(i, faults);
    let (status, started) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202, "{started}");
    c.wait_ended(RUN_LIMIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restore_that_keeps_failing_ends_the_run_naming_the_restore() {
    let c = ClusterRack::start_with(3, short_budgets()).await;
    let faults = Faults {
        restore_fails: true,
        ..Faults::default()
    };
    let view = reboot_with_fault(&c, 0, faults).await;
    let op = &view["operation"];
    assert_eq!(op_status(&view), "failed", "{view:#}");
    assert_eq!(op["failed_server"], c.names[0], "{view:#}");
    assert_eq!(op["failed_step"], "restore", "{view:#}");
    let audit = c.rack.sim.cluster_audit(CLUSTER).unwrap();
    assert_eq!(audit.members[&c.hostname(0)].restores, 3, "{audit:#?}");
    assert_eq!(audit.members[&c.hostname(0)].reboots, 1, "{audit:#?}");
    assert!(!audit.members.contains_key(&c.hostname(1)), "{audit:#?}");

    // The member restores again: a new rolling reboot brings it back first, rather than taking the run's own
    // evacuation for an operator's and evacuating a second member beside it.
    c.rack.sim.set_faults(0, Faults::default());
    c.rack.sim.reset_cluster_audit(CLUSTER);
    let (status, body) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["operation"]["servers"][0]["name"], c.names[0], "{body:#}");
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");
    let audit = c.rack.sim.cluster_audit(CLUSTER).unwrap();
    assert_eq!(audit.max_evacuated_at_once, 1, "{audit:#?}");
    for i in 0..3 {
        assert_eq!(
            audit.members[&c.hostname(i)].restores,
            1,
            "{}: {audit:#?}",
            c.names[i]
        );
    }
    assert_eq!(audit.members[&c.hostname(0)].evacuations, 0, "{audit:#?}");
    c.rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_evacuation_that_hangs_is_given_its_time_then_ends_the_run() {
    let c = ClusterRack::start_with(3, short_budgets()).await;
    let faults = Faults {
        evacuate_hangs: true,
        ..Faults::default()
    };
    let view = reboot_with_fault(&c, 1, faults).await;
    let op = &view["operation"];
    assert_eq!(op_status(&view), "failed", "{view:#}");
    assert_eq!(op["failed_server"], c.names[1], "{view:#}");
    assert_eq!(op["failed_step"], "evacuate", "{view:#}");
    // A member still evacuating is never rebooted.
    let audit = c.rack.sim.cluster_audit(CLUSTER).unwrap();
    assert_eq!(audit.members[&c.hostname(1)].reboots, 0, "{audit:#?}");
    assert_eq!(audit.max_evacuated_at_once, 1, "{audit:#?}");
    c.rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn incus_errors_and_resets_for_a_while_are_ridden_through() {
    let c = ClusterRack::start(3).await;
    // A launch that cannot read a member says so rather than guessing.
    c.rack.sim.set_faults(
        2,
        Faults {
            incus_reset: true,
            ..Faults::default()
        },
    );
    let (status, refused) = c.action("reboot", json!({})).await;
    assert_eq!(status, 502, "{refused}");
    assert_eq!(refused["error"]["code"], "incus_unreachable", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&c.names[2])),
        "{refused}"
    );
    c.rack.sim.set_faults(2, Faults::default());

    let (status, _) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202);
    c.wait_for("the first member done", RUN_LIMIT, |op| {
        op["done"].as_u64() >= Some(1)
    })
    .await;
    for (i, faults) in [
        (
            1,
            Faults {
                incus_status: Some(503),
                incus_remaining: Some(4),
                ..Faults::default()
            },
        ),
        (
            2,
            Faults {
                incus_reset: true,
                incus_remaining: Some(4),
                ..Faults::default()
            },
        ),
    ] {
        c.rack.sim.set_faults(i, faults);
    }
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");
    let audit = c.rack.sim.cluster_audit(CLUSTER).unwrap();
    assert_eq!(audit.max_evacuated_at_once, 1, "{audit:#?}");
    for i in 0..3 {
        assert_eq!(
            audit.members[&c.hostname(i)].reboots,
            1,
            "{}: {audit:#?}",
            c.names[i]
        );
    }
    c.rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_waits_for_its_not_before_time_and_refuses_an_unreadable_window() {
    let c = ClusterRack::start(2).await;
    let (status, refused) = c
        .action(
            "reboot",
            json!({"window": {"start_utc": "25:00", "duration_secs": 3600}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["field"], "window.start_utc", "{refused}");

    let not_before = chrono::Utc::now() + chrono::TimeDelta::seconds(4);
    let (status, started) = c
        .action("reboot", json!({"not_before": not_before.to_rfc3339()}))
        .await;
    assert_eq!(status, 202, "{started}");
    let waiting = c
        .wait_for("the schedule shown", RUN_LIMIT, |op| op["next_start"].is_string())
        .await;
    assert!(
        waiting["operation"]["status_description"]
            .as_str()
            .is_some_and(|d| d.contains("Waiting for the maintenance window")),
        "{waiting:#}"
    );
    // Before the time, no member was asked anything.
    let audit = c.rack.sim.cluster_audit(CLUSTER).unwrap();
    if chrono::Utc::now() < not_before {
        assert!(audit.members.is_empty(), "{audit:#?}");
    }
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");
    assert_rolled_once_each_of(&c, 2);
    c.rack.stop().await;
}

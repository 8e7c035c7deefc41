//! Incus clusters of simulated servers: every member's view, evacuate and restore through any member, the state
//! across a reboot, and the cluster audit.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::control_get;
use crate::incus::{TestClient, get, installed_fleet, post, wait_for_incus};

/// Evacuate or restore `member` through server `via`'s API; the operation's final description.
pub async fn act(
    http: &reqwest::Client,
    sim: &racklift_bmc_sim::SimHandle,
    via: usize,
    member: &str,
    action: &str,
    fence: Option<u64>,
) -> Value {
    let (status, body) = post(
        http,
        sim,
        via,
        &format!("/1.0/cluster/members/{member}/state"),
        json!({"action": action, "mode": ""}),
        fence,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["type"], "async");
    let op = body["operation"].as_str().expect("operation").to_owned();
    assert!(op.starts_with("/1.0/operations/"), "{op}");
    let (status, done) = get(http, sim, via, &format!("{op}/wait?timeout=30")).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    done["metadata"].clone()
}

async fn status_of(
    http: &reqwest::Client,
    sim: &racklift_bmc_sim::SimHandle,
    via: usize,
    member: &str,
) -> Value {
    let (status, body) = get(http, sim, via, &format!("/1.0/cluster/members/{member}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["metadata"]["status"].clone()
}

#[tokio::test]
async fn every_member_sees_the_cluster_and_an_unclustered_server_says_so() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(3, &operator).await;
    sim.form_cluster("c1", &[0, 1]).unwrap();
    for i in [0, 1] {
        let http = operator.client(&sim, i);
        let (_, cluster) = get(&http, &sim, i, "/1.0/cluster").await;
        assert_eq!(cluster["metadata"]["server_name"], format!("node-{i}"));
        assert_eq!(cluster["metadata"]["enabled"], true);
        let (_, urls) = get(&http, &sim, i, "/1.0/cluster/members").await;
        assert_eq!(
            urls["metadata"],
            json!(["/1.0/cluster/members/node-0", "/1.0/cluster/members/node-1"])
        );
        let (_, members) = get(&http, &sim, i, "/1.0/cluster/members?recursion=1").await;
        let members = members["metadata"].as_array().unwrap().clone();
        assert_eq!(members.len(), 2);
        for (n, m) in members.iter().enumerate() {
            assert_eq!(m["server_name"], format!("node-{n}"));
            assert_eq!(m["status"], "Online");
            assert_eq!(m["message"], "Fully operational");
            assert_eq!(m["url"], json!(sim.incus_url(n).unwrap()));
            assert!(m["roles"].is_array());
        }
        let (status, missing) = get(&http, &sim, i, "/1.0/cluster/members/node-9").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(missing["type"], "error");
    }
    let http = operator.client(&sim, 2);
    let (_, cluster) = get(&http, &sim, 2, "/1.0/cluster").await;
    assert_eq!(
        cluster["metadata"],
        json!({"server_name": "", "enabled": false, "member_config": []})
    );
    assert_eq!(
        control_get(&sim, "/clusters").await,
        json!({"c1": [sim.name(0), sim.name(1)]})
    );
}

#[tokio::test]
async fn an_evacuated_member_stays_evacuated_across_its_reboot_until_restored() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(3, &operator).await;
    sim.form_cluster("c1", &[0, 1, 2]).unwrap();
    let h0 = operator.client(&sim, 0);
    let h1 = operator.client(&sim, 1);

    // Through member 0's API, for member 1.
    let done = act(&h0, &sim, 0, "node-1", "evacuate", Some(7)).await;
    assert_eq!(done["status"], "Success", "{done}");
    assert_eq!(done["status_code"], 200);
    assert_eq!(status_of(&h0, &sim, 0, "node-1").await, "Evacuated");
    assert_eq!(status_of(&h1, &sim, 1, "node-1").await, "Evacuated");
    // Evacuating it again is refused, as Incus refuses it.
    let (status, body) = post(
        &h0,
        &sim,
        0,
        "/1.0/cluster/members/node-1/state",
        json!({"action": "evacuate"}),
        Some(8),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "Cluster member is already evacuated");

    // The member reboots through its own API: the others see it Offline, then Evacuated again.
    let (status, _) = post(&h1, &sim, 1, "/os/1.0/system/:reboot", json!({}), Some(9)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(status_of(&h0, &sim, 0, "node-1").await, "Offline");
    wait_for_incus(&sim, 1).await;
    assert_eq!(status_of(&h0, &sim, 0, "node-1").await, "Evacuated");

    let done = act(&operator.client(&sim, 1), &sim, 1, "node-1", "restore", Some(10)).await;
    assert_eq!(done["status"], "Success", "{done}");
    assert_eq!(status_of(&h0, &sim, 0, "node-1").await, "Online");
    let (status, body) = post(
        &h0,
        &sim,
        0,
        "/1.0/cluster/members/node-1/state",
        json!({"action": "restore"}),
        Some(11),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "Cluster member is already restored");

    let audit = sim.cluster_audit("c1").unwrap();
    assert_eq!(audit.max_evacuated_at_once, 1);
    assert!(audit.evacuated_now.is_empty());
    assert_eq!(audit.members["node-1"].evacuations, 2);
    assert_eq!(audit.members["node-1"].restores, 2);
    assert_eq!(audit.members["node-1"].reboots, 1);
    assert_eq!(audit.unfenced_mutations, 0);
    assert!(audit.stale_mutations.is_empty(), "{audit:?}");
    assert_eq!(sim.incus_audit(0).mutations, 3);
    assert!(sim.incus_audit(0).max_concurrent >= 1);
}

#[tokio::test]
async fn the_audit_counts_members_out_at_once_from_its_reset_and_flags_unfenced_and_stale_mutations() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(3, &operator).await;
    sim.form_cluster("c1", &[0, 1, 2]).unwrap();
    let http = operator.client(&sim, 0);
    // One member evacuated by hand before the run, then the audit reset.
    act(&http, &sim, 0, "node-2", "evacuate", None).await;
    sim.reset_cluster_audit("c1");
    let audit = sim.cluster_audit("c1").unwrap();
    assert_eq!(audit.evacuated_at_reset, vec!["node-2".to_owned()]);
    assert_eq!(audit.max_evacuated_at_once, 1);
    assert_eq!(audit.unfenced_mutations, 0, "the reset forgets earlier mutations");

    act(&http, &sim, 0, "node-0", "evacuate", Some(5)).await;
    act(&operator.client(&sim, 1), &sim, 1, "node-0", "restore", Some(4)).await;
    act(&http, &sim, 0, "node-1", "evacuate", None).await;
    let audit = sim.cluster_audit("c1").unwrap();
    assert_eq!(audit.max_evacuated_at_once, 2, "{audit:?}");
    assert_eq!(
        audit.evacuated_now,
        vec!["node-1".to_owned(), "node-2".to_owned()]
    );
    assert_eq!(audit.unfenced_mutations, 1);
    assert_eq!(audit.stale_mutations.len(), 1);
    assert_eq!(audit.stale_mutations[0].member, "node-0");
    assert_eq!(audit.stale_mutations[0].token, 4);
    assert_eq!(audit.stale_mutations[0].highest_seen, 5);

    let over_http = control_get(&sim, "/clusters/c1/audit").await;
    assert_eq!(over_http["max_evacuated_at_once"], 2);
    let reset = reqwest::Client::new()
        .delete(format!("{}/clusters/c1/audit", sim.control_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        control_get(&sim, "/clusters/c1/audit").await["evacuated_at_reset"],
        json!(["node-1", "node-2"])
    );
}

#[tokio::test]
async fn a_cluster_is_formed_through_the_control_api() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(2, &operator).await;
    let control = reqwest::Client::new();
    let put = |body: Value| {
        control
            .put(format!("{}/clusters/c2", sim.control_url()))
            .json(&body)
            .send()
    };
    assert_eq!(
        put(json!({"members": ["nope"]})).await.unwrap().status(),
        StatusCode::BAD_REQUEST
    );
    let members = json!({"members": [sim.name(0), sim.name(1)]});
    assert_eq!(put(members).await.unwrap().status(), StatusCode::NO_CONTENT);
    let view = control_get(&sim, "/clusters/c2").await;
    assert_eq!(view["status"], json!({"node-0": "Online", "node-1": "Online"}));
    let (_, cluster) = get(&operator.client(&sim, 1), &sim, 1, "/1.0/cluster").await;
    assert_eq!(cluster["metadata"]["enabled"], true);
}

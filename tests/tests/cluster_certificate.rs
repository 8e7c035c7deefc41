//! The certificate racklift trusts a cluster's members by, learned from the members: once formed, every member
//! serves the cluster's certificate (not the one it registered with), racklift records it when the cluster is
//! created and keeps answering through a rolling run; members that disagree are refused; a repin makes racklift
//! record it again.

use std::time::Duration;

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_deploy::{Config, State};
use racklift_incus::CertPin;
use racklift_tests::cluster::{CLUSTER, ClusterRack, op_status};
use racklift_tests::rack::Rack;
use serde_json::json;

const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The fingerprint of the certificate the simulated cluster serves.
fn served_cluster_certificate(c: &ClusterRack) -> String {
    let pem = c
        .rack
        .sim
        .cluster_certificate_pem(CLUSTER)
        .expect("the formed cluster has a certificate");
    CertPin::of_pem(pem.as_bytes())
        .expect("a PEM certificate")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_created_cluster_is_pinned_to_the_certificate_its_members_serve_and_rolls_through_it() {
    let c = ClusterRack::start(3).await;
    let expected = served_cluster_certificate(&c);
    let recorded = c
        .rack
        .store
        .cluster_certificate(CLUSTER)
        .await
        .expect("the cluster");
    assert_eq!(recorded.as_deref(), Some(expected.as_str()));
    for name in &c.names {
        let registered = c.rack.stored_client_certificate(name).await;
        assert!(registered.is_some(), "{name} registered a certificate");
        assert_ne!(registered.as_deref(), Some(expected.as_str()), "{name}");
        let log = c.rack.event_log(name).await;
        assert!(
            log.lines()
                .any(|l| l.contains("cluster_certificate_pinned") && l.contains(&expected)),
            "{name}:\n{log}"
        );
    }

    let (status, started) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202, "{started}");
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_repin_is_audited_and_the_certificate_is_recorded_again_at_the_next_launch() {
    let c = ClusterRack::start(2).await;
    let expected = served_cluster_certificate(&c);

    let (status, refused) = c
        .post(
            &format!("/1.0/provisioning/clusters/{CLUSTER}:repin"),
            json!({"reason": " "}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    let (status, missing) = c
        .post(
            "/1.0/provisioning/clusters/nope:repin",
            json!({"reason": "rotated"}),
        )
        .await;
    assert_eq!(status, 404, "{missing}");
    assert_eq!(missing["error"]["code"], "cluster_not_found", "{missing}");

    let (status, accepted) = c
        .post(
            &format!("/1.0/provisioning/clusters/{CLUSTER}:repin"),
            json!({"reason": "cluster certificate rotated"}),
        )
        .await;
    assert_eq!(status, 200, "{accepted}");
    assert_eq!(accepted, json!({"cluster": CLUSTER, "repin_pending": true}));
    assert_eq!(
        c.rack
            .store
            .cluster_certificate(CLUSTER)
            .await
            .expect("the cluster"),
        None
    );
    for name in &c.names {
        let log = c.rack.event_log(name).await;
        assert!(
            log.lines().any(|l| l.contains("cluster_certificate_repin")
                && l.contains("cluster certificate rotated")
                && l.contains(&expected)),
            "{name}:\n{log}"
        );
    }

    let (status, started) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202, "{started}");
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");
    assert_eq!(
        c.rack
            .store
            .cluster_certificate(CLUSTER)
            .await
            .expect("the cluster")
            .as_deref(),
        Some(expected.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn servers_of_two_incus_clusters_are_refused_naming_what_each_serves() {
    let rack = Rack::start_with_config(
        2,
        PersonalityChoice::Single(Personality::Generic),
        0.002,
        Config::for_simulation(0.002),
    )
    .await;
    rack.deploy_all().await;
    let mut names = Vec::new();
    for i in 0..2 {
        let name = rack.sim.name(i).to_owned();
        let d = rack.wait_finished(&name, RUN_LIMIT).await;
        assert_eq!(d.deployment.machine.state, State::Completed, "{name}");
        names.push(name);
    }
    rack.sim.form_cluster("one", &[0]).expect("a cluster of server 0");
    rack.sim.form_cluster("two", &[1]).expect("a cluster of server 1");
    let r = rack
        .admin(reqwest::Method::POST, "/1.0/provisioning/clusters")
        .json(&json!({"name": CLUSTER, "servers": names}))
        .send()
        .await
        .expect("the API answers");
    assert_eq!(r.status().as_u16(), 422);
    let body: serde_json::Value = r.json().await.expect("an error body");
    assert_eq!(body["error"]["code"], "cluster_certificate_refused", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    let second = CertPin::of_pem(
        rack.sim
            .cluster_certificate_pem("two")
            .expect("cluster two")
            .as_bytes(),
    )
    .expect("a PEM certificate")
    .to_string();
    assert!(
        message.contains(&names[1]) && message.contains(&second),
        "{message}"
    );
}

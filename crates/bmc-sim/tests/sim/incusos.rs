//! The installed IncusOS against a provider written after Operations Center's handlers (`registration`): the
//! first-boot order of `cmd/incus-osd/main.go`, the registration body, `PUT :self`, and the cluster certificate.

use std::time::Duration;

use racklift_bmc_sim::SimHandle;
use reqwest::{Method, StatusCode};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};

use crate::common::{self, control_get, media_server, wait_for};
use crate::incus::{TestClient, get, installed_fleet, installed_seed, post, wait_for_incus};
use crate::registration::{self, MANAGER_CERT, RUNNING_VERSION, RegistrationServer, update};
use crate::seed::install;
use crate::seeded::{full_seed, provider_json, seeded_image};

const LONG: Duration = Duration::from_secs(30);
const SIZE: u64 = 2 << 20;
const LISTING: &str = "/1.0/provisioning/updates?recursion=1";

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap().to_vec()
}

/// Install server 0 from media whose seed names `oc` as provider and `web-1` as hostname.
async fn install_from(sim: &SimHandle, oc: &RegistrationServer) {
    let mut seed = full_seed(true, provider_json(&oc.url, "tok-1", Some(&oc.cert_pem)));
    seed.push((
        "network.yaml",
        "version: \"1\"\ndns:\n  hostname: web-1\n".to_owned(),
    ));
    install(sim, &media_server(seeded_image(SIZE, &seed)).await).await;
}

async fn registered(sim: &SimHandle) -> Value {
    wait_for("registered", LONG, || async {
        let t = sim.truth(0);
        (t["registered"] == true).then_some(t)
    })
    .await
}

#[tokio::test]
async fn first_boot_checks_for_updates_anonymously_installs_incus_then_registers_with_the_whole_server_post()
{
    let sim = common::start_with_tls(1, "generic", true).await;
    let oc = registration::start(false, Vec::new()).await;
    install_from(&sim, &oc).await;
    let truth = registered(&sim).await;
    let log = oc.log();
    // `system-is-ready` may follow at once: the first four requests are the start-up's.
    let targets: Vec<(Method, &str)> = log
        .iter()
        .take(4)
        .map(|l| (l.method.clone(), l.target.as_str()))
        .collect();
    let uuid = update(RUNNING_VERSION, true, false).uuid;
    assert_eq!(
        targets,
        vec![
            (Method::GET, LISTING),
            (
                Method::GET,
                format!("/1.0/provisioning/updates/{uuid}/files").as_str()
            ),
            (
                Method::GET,
                format!("/1.0/provisioning/updates/{uuid}/files/x86_64/incus.raw.gz").as_str()
            ),
            (Method::POST, "/1.0/provisioning/servers?token=tok-1"),
        ][..],
        "the update check, Incus's download (x86_64 only), then the registration; {log:?}"
    );
    assert!(
        log[..3].iter().all(|l| l.client_cert.is_none()),
        "no client certificate before Incus exists"
    );
    assert_eq!(log[2].user_agent.as_deref(), Some("IncusOS/202611010000"));
    assert_eq!(
        truth["os"]["applications"],
        json!([{"name": "incus", "version": RUNNING_VERSION, "staged_version": null}])
    );

    let r = &oc.received()[0];
    let server_crt = truth["os"]["client_certificate"].as_str().unwrap();
    assert_eq!(
        r.client_cert.as_deref(),
        Some(der(server_crt).as_slice()),
        "Incus's server.crt"
    );
    assert_eq!(r.content_type, None, "IncusOS sets no header");
    let machine_id = truth["os"]["machine_id"].as_str().unwrap();
    assert!(
        machine_id.len() == 32 && machine_id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{machine_id}"
    );
    let summary = control_get(&sim, &format!("/servers/{}", sim.name(0))).await;
    // Operations Center's `ServerPost` with `ServerPut` flattened, as Go's encoding/json marshals IncusOS's value
    // (oc v0.8.1 shared/api/provisioning_server.go:562-588, 702-755): every key, empty ones included.
    let fixture = json!({
        "public_connection_url": "",
        "channel": "",
        "description": "",
        "properties": null,
        "bmc_config": {
            "api_type": "",
            "endpoint": "",
            "certificate": "",
            "auto_pin_certificate": false,
            "username": "",
            "password": ""
        },
        "name": "web-1",
        "connection_url": sim.incus_url(0).unwrap(),
        "system_uuid": summary["uuid"],
        "machine_id": machine_id,
    });
    assert_eq!(r.body, fixture);
    assert_eq!(truth["os"]["trusted_certificates"], json!([MANAGER_CERT]));

    // Ready: `system-is-ready` with server.crt, from a registered server only.
    wait_for("system-is-ready", LONG, || async {
        (sim.truth(0)["counters"]["self_updates"]["system-is-ready"] == 1).then_some(())
    })
    .await;
    let updates = oc.self_updates();
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(updates[0].0, "system-is-ready");
    assert_eq!(updates[0].1, sim.incus_url(0).unwrap());
    assert_eq!(updates[0].2.as_deref(), Some(der(server_crt).as_slice()));
    assert_eq!(sim.truth(0)["os"]["system_is_ready"], true);
}

#[tokio::test]
async fn without_incus_in_the_update_nothing_registers_and_the_daemon_starts_again_until_it_is_published() {
    let sim = common::start(1, "generic").await;
    let oc = registration::start(false, Vec::new()).await;
    oc.publish(vec![update(RUNNING_VERSION, false, true)]);
    install_from(&sim, &oc).await;
    let truth = wait_for("three daemon runs", LONG, || async {
        let t = sim.truth(0);
        (t["counters"]["daemon_starts"].as_u64().unwrap() >= 3).then_some(t)
    })
    .await;
    assert_eq!(truth["registered"], false);
    assert_eq!(truth["phase"]["phase"], "os_failed", "{truth}");
    assert_eq!(
        truth["os"]["client_certificate"],
        Value::Null,
        "no Incus, no certificate"
    );
    assert_eq!(truth["os"]["applications"], json!([]));
    assert!(
        truth["os"]["registration_error"]
            .as_str()
            .unwrap()
            .contains("No client certificate provided"),
        "{truth}"
    );
    let received = oc.received();
    assert!(received.len() >= 2, "registered at every run");
    assert!(received.iter().all(|r| r.client_cert.is_none()));
    let listings = oc.log().iter().filter(|l| l.target == LISTING).count();
    assert!(
        listings >= received.len(),
        "the update check runs again at every start"
    );

    oc.publish(vec![update(RUNNING_VERSION, true, false)]);
    let truth = registered(&sim).await;
    assert_eq!(truth["phase"]["phase"], "os_running");
    let last = oc.received().last().cloned().unwrap();
    assert_eq!(
        last.client_cert.as_deref(),
        Some(der(truth["os"]["client_certificate"].as_str().unwrap()).as_slice())
    );
}

#[tokio::test]
async fn a_newer_os_in_the_channel_is_applied_and_rebooted_into_before_registering() {
    let sim = common::start(1, "generic").await;
    let oc = registration::start(false, Vec::new()).await;
    let newer = "202612010000";
    // Newest first, as Operations Center lists; the testing-only one is not in the server's channel.
    let mut testing = update("202701010000", true, true);
    testing.channels = vec!["testing".to_owned()];
    oc.publish(vec![testing, update(newer, true, true)]);
    install_from(&sim, &oc).await;
    let truth = registered(&sim).await;
    assert_eq!(truth["os"]["running_version"], newer);
    assert_eq!(
        truth["counters"]["startup_update_checks"], 2,
        "one check per boot"
    );
    assert_eq!(
        truth["os"]["applications"][0]["version"], newer,
        "Incus installed from the update before the reboot"
    );
    let log = oc.log();
    let register_at = log.iter().position(|l| l.method == Method::POST).unwrap();
    let listings_before = log[..register_at].iter().filter(|l| l.target == LISTING).count();
    assert_eq!(listings_before, 2, "the reboot came before the registration");
    let os_downloads: Vec<&str> = log[..register_at]
        .iter()
        .map(|l| l.target.as_str())
        .filter(|t| t.contains("/files/x86_64/IncusOS_"))
        .collect();
    assert_eq!(os_downloads.len(), 4, "the four OS files, once: {os_downloads:?}");
    assert_eq!(oc.received().len(), 1);
    assert!(oc.self_updates().is_empty() || oc.self_updates()[0].0 == "system-is-ready");
}

#[tokio::test]
async fn a_registered_server_reports_its_network_readiness_reboot_and_power_off() {
    let operator = TestClient::new("operator");
    let oc = registration::start(false, Vec::new()).await;
    let sim = common::start(1, "generic").await;
    let seed = installed_seed(
        "node-0",
        &operator,
        &[provider_json(&oc.url, "t", Some(&oc.cert_pem))],
    );
    sim.boot_installed(0, &seed).unwrap();
    wait_for_incus(&sim, 0).await;
    let causes = || oc.self_updates().into_iter().map(|u| u.0).collect::<Vec<_>>();
    wait_for("ready", LONG, || async { (causes().len() == 2).then_some(()) }).await;
    assert_eq!(causes(), ["network-config-changed", "system-is-ready"]);

    let http = operator.client(&sim, 0);
    let (status, os) = get(&http, &sim, 0, "/os/1.0").await;
    assert_eq!(status, StatusCode::OK);
    let env = &os["metadata"]["environment"];
    assert_eq!(env["hostname"], "node-0");
    assert_eq!(env["system_is_ready"], true);
    assert_eq!(env["machine_id"], sim.truth(0)["os"]["machine_id"]);
    // `uptime` is whole seconds on the wall clock, whatever the time scale.
    // A fresh connection each time: the server's own are closed by a reboot.
    let uptime = || async {
        let (_, os) = get(&operator.client(&sim, 0), &sim, 0, "/os/1.0").await;
        os["metadata"]["environment"]["uptime"].as_u64().unwrap()
    };
    let first = uptime().await;
    wait_for("uptime to grow by a second", LONG, || async {
        (uptime().await > first).then_some(())
    })
    .await;

    let resp = http
        .put(format!("{}/os/1.0/system/network", sim.incus_url(0).unwrap()))
        .json(&json!({"config": {"dns": {"hostname": "node-0"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    wait_for("network-config-changed", LONG, || async {
        (causes().len() == 3).then_some(())
    })
    .await;

    let before_reboot = std::time::Instant::now();
    let (status, _) = post(&http, &sim, 0, "/os/1.0/system/:reboot", json!({}), None).await;
    assert_eq!(status, StatusCode::OK);
    wait_for("back up and ready", LONG, || async {
        (causes().len() == 6).then_some(())
    })
    .await;
    // Counted from the reset: no longer than since the reboot was asked for.
    let after = uptime().await;
    assert!(
        after <= before_reboot.elapsed().as_secs(),
        "uptime {after} s counts from the reboot"
    );
    let (status, _) = post(
        &operator.client(&sim, 0),
        &sim,
        0,
        "/os/1.0/system/:poweroff",
        json!({}),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    wait_for("off", LONG, || async {
        (sim.truth(0)["power"] == "Off").then_some(())
    })
    .await;
    wait_for("the shutdown notice", LONG, || async {
        (causes().len() == 7).then_some(())
    })
    .await;
    assert_eq!(
        causes(),
        [
            "network-config-changed",
            "system-is-ready",
            "network-config-changed",
            "system-reboot-triggered",
            "network-config-changed",
            "system-is-ready",
            "system-shutdown-triggered",
        ]
    );
    // The server counts an update once the provider's answer is in, after the provider has logged it.
    wait_for("the accepted updates counted by cause", LONG, || async {
        (sim.truth(0)["counters"]["self_updates"]
            == json!({"network-config-changed": 3, "system-is-ready": 2,
                      "system-reboot-triggered": 1, "system-shutdown-triggered": 1}))
        .then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_unregistered_server_tells_its_provider_nothing() {
    let operator = TestClient::new("operator");
    let oc = registration::start(false, Vec::new()).await;
    let sim = common::start(1, "generic").await;
    // No provider seed: the `images` provider, which does not register.
    sim.boot_installed(0, &installed_seed("node-0", &operator, &[]))
        .unwrap();
    wait_for_incus(&sim, 0).await;
    let (status, _) = post(
        &operator.client(&sim, 0),
        &sim,
        0,
        "/os/1.0/system/:reboot",
        json!({}),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    wait_for_incus(&sim, 0).await;
    let truth = sim.truth(0);
    assert_eq!(truth["counters"]["self_update_attempts"], 0);
    assert!(oc.log().is_empty());
}

#[tokio::test]
async fn once_clustered_every_member_serves_the_cluster_certificate_and_still_presents_its_own() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(3, &operator).await;
    let own: Vec<String> = (0..3).map(|i| sim.incus_certificate_pem(i).unwrap()).collect();
    let before = operator.client(&sim, 0);
    sim.form_cluster("c1", &[0, 1]).unwrap();
    let cluster = sim.cluster_certificate_pem("c1").expect("made at bootstrap");
    for i in [0, 1] {
        assert_eq!(sim.incus_certificate_pem(i).unwrap(), cluster);
        assert_ne!(cluster, own[i]);
        assert_eq!(
            sim.truth(i)["os"]["client_certificate"].as_str().unwrap(),
            own[i],
            "server.crt stays the client certificate"
        );
        // A client pinned to the cluster certificate gets through: it is what the listener serves.
        let (status, body) = get(&operator.client(&sim, i), &sim, i, "/1.0/cluster").await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert!(
        before
            .get(format!("{}/1.0", sim.incus_url(0).unwrap()))
            .send()
            .await
            .is_err(),
        "the server's own certificate is no longer served"
    );
    assert_eq!(sim.incus_certificate_pem(2).unwrap(), own[2], "not a member");
    let view = control_get(&sim, "/clusters/c1").await;
    assert_eq!(view["certificate"], json!(cluster));
    // Forming it again keeps the certificate (the cluster exists).
    sim.form_cluster("c1", &[0, 1, 2]).unwrap();
    assert_eq!(sim.cluster_certificate_pem("c1").unwrap(), cluster);
    assert_eq!(sim.incus_certificate_pem(2).unwrap(), cluster);
}

#[tokio::test]
async fn an_update_check_that_stages_the_os_and_incus_reports_both() {
    let operator = TestClient::new("operator");
    let oc = registration::start(false, Vec::new()).await;
    let sim = common::start(1, "generic").await;
    let seed = installed_seed(
        "node-0",
        &operator,
        &[provider_json(&oc.url, "t", Some(&oc.cert_pem))],
    );
    sim.boot_installed(0, &seed).unwrap();
    wait_for_incus(&sim, 0).await;
    let causes = || oc.self_updates().into_iter().map(|u| u.0).collect::<Vec<_>>();
    wait_for("ready", LONG, || async {
        causes().contains(&"system-is-ready".to_owned()).then_some(())
    })
    .await;
    oc.publish(vec![update("202612010000", true, true)]);
    let (status, body) = post(
        &operator.client(&sim, 0),
        &sim,
        0,
        "/os/1.0/system/update/:check",
        json!({}),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    wait_for("both updates reported", LONG, || async {
        let c = causes();
        (c.contains(&"os-update-applied".to_owned()) && c.contains(&"application-update-applied".to_owned()))
            .then_some(())
    })
    .await;
    assert_eq!(sim.truth(0)["os"]["staged_version"], "202612010000");
}

/// A requested check is the start-up check: the application is updated at once, then an OS file that is not gzip
/// fails the check (every download is gunzipped) and nothing is staged; the same OS, gzip, is staged without a
/// reboot, and checking again finds it already staged.
#[tokio::test]
async fn a_requested_check_gunzips_every_file_updates_applications_at_once_and_stages_the_os() {
    let operator = TestClient::new("operator");
    let oc = registration::start(false, Vec::new()).await;
    let sim = common::start(1, "generic").await;
    let seed = installed_seed(
        "node-0",
        &operator,
        &[provider_json(&oc.url, "t", Some(&oc.cert_pem))],
    );
    sim.boot_installed(0, &seed).unwrap();
    wait_for_incus(&sim, 0).await;
    let http = operator.client(&sim, 0);
    let check = || async { post(&http, &sim, 0, "/os/1.0/system/update/:check", json!({}), None).await };
    let state =
        || async { get(&http, &sim, 0, "/os/1.0/system/update").await.1["metadata"]["state"].clone() };
    let incus = |truth: &Value| {
        truth["os"]["applications"]
            .as_array()
            .and_then(|apps| apps.iter().find(|a| a["name"] == "incus"))
            .map(|a| a["version"].clone())
    };
    let reboots = sim.truth(0)["counters"]["daemon_starts"].clone();

    let version = "202612010000";
    let mut plain = update(version, true, true);
    let efi = plain.files.iter_mut().find(|f| f.kind == "update-efi").unwrap();
    efi.bytes = b"not gzip".to_vec();
    oc.publish(vec![plain]);
    let (status, body) = check().await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    let s = state().await;
    assert!(s["status"].as_str().unwrap().contains("not gzip"), "{s}");
    assert_eq!(s["needs_reboot"], false, "{s}");
    let truth = sim.truth(0);
    assert_eq!(incus(&truth), Some(json!(version)), "{truth}");
    assert!(truth["os"]["staged_version"].is_null(), "{truth}");

    oc.publish(vec![update(version, true, true)]);
    let (status, body) = check().await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let s = state().await;
    assert_eq!(
        (s["status"].as_str(), &s["needs_reboot"]),
        (
            Some(format!("IncusOS has been updated to version {version}").as_str()),
            &json!(true)
        ),
        "{s}"
    );
    let truth = sim.truth(0);
    assert_eq!(truth["os"]["staged_version"], version, "{truth}");
    assert_eq!(truth["os"]["running_version"], RUNNING_VERSION, "{truth}");
    assert_eq!(truth["counters"]["daemon_starts"], reboots, "no reboot: {truth}");

    let (status, body) = check().await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(state().await["status"], "Update check completed");
}

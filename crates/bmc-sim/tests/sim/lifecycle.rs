//! The machine lifecycle: power, POST, install from media over Range, reboot, registration.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{self, Client, cd_slot, control_get, media_server, wait_for};
use crate::incus;
use crate::registration::{self, MANAGER_CERT};
use crate::seeded::{full_seed, install_yaml, provider_json, seeded_image};

const LONG: Duration = Duration::from_secs(30);

/// Insert `image` into `slot` by whatever the slot offers: action, OEM action or PATCH.
pub async fn insert(c: &Client, slot: &Value, image: &str) {
    let body = json!({"Image": image, "Inserted": true, "WriteProtected": true});
    let status = if let Some(t) = slot["Actions"]["#VirtualMedia.InsertMedia"]["target"].as_str() {
        c.post(t, body).await.0
    } else {
        c.patch(slot["@odata.id"].as_str().unwrap(), body).await.0
    };
    assert!(status.is_success(), "insert: {status}");
}

pub async fn eject(c: &Client, slot: &Value) {
    let status = match slot["Actions"]["#VirtualMedia.EjectMedia"]["target"].as_str() {
        Some(t) => c.post(t, json!({})).await.0,
        None => {
            c.patch(
                slot["@odata.id"].as_str().unwrap(),
                json!({"Image": null, "Inserted": false}),
            )
            .await
            .0
        }
    };
    assert!(status.is_success(), "eject: {status}");
}

#[tokio::test]
async fn power_on_walks_boot_progress_in_order_to_os_boot_started() {
    let sim = common::start(1, "generic").await;
    let c = Client::new(&sim);
    let base = sim.bmc_url(0);
    let sys = c.system(&base).await;
    assert_eq!(sys["PowerState"], "Off");
    assert_eq!(c.reset(&sys, "On").await, StatusCode::NO_CONTENT);
    let sys_link = sys["@odata.id"].as_str().unwrap().to_owned();
    let mut seen: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + LONG;
    while seen.last().map(String::as_str) != Some("OSBootStarted") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no OSBootStarted: {seen:?}"
        );
        let s = c.get(&sys_link).await;
        let state = s["BootProgress"]["LastState"].as_str().unwrap_or("").to_owned();
        if seen.last() != Some(&state) {
            seen.push(state);
        }
    }
    let order = [
        "None",
        "PrimaryProcessorInitializationStarted",
        "BusInitializationStarted",
        "MemoryInitializationStarted",
        "SecondaryProcessorInitializationStarted",
        "PCIResourceConfigStarted",
        "SystemHardwareInitializationComplete",
        "OSBootStarted",
    ];
    let ranks: Vec<usize> = seen
        .iter()
        .map(|s| order.iter().position(|o| o == s).expect("known state"))
        .collect();
    assert!(
        ranks.windows(2).all(|w| w[0] < w[1]),
        "states out of order: {seen:?}"
    );
    let sys = c.get(&sys_link).await;
    assert_eq!(sys["PowerState"], "On");
    let first_reset = sys["LastResetTime"].as_str().expect("LastResetTime").to_owned();
    // Nothing to boot: it stays at the end of POST, no OS.
    assert_eq!(sim.truth(0)["phase"]["phase"], "no_boot_device");

    // A restart moves LastResetTime forward.
    assert_eq!(c.reset(&sys, "ForceRestart").await, StatusCode::NO_CONTENT);
    wait_for("a later LastResetTime", LONG, || async {
        let s = c.get(&sys_link).await;
        (s["LastResetTime"].as_str().unwrap() > first_reset.as_str()).then_some(())
    })
    .await;
    assert_eq!(c.reset(&sys, "ForceOff").await, StatusCode::NO_CONTENT);
    wait_for("Off", LONG, || async {
        (c.get(&sys_link).await["PowerState"] == "Off").then_some(())
    })
    .await;
    assert!(sim.truth(0)["boot_count"].as_u64().unwrap() >= 2);
}

/// Full deployment on one personality: insert, Once override, power on, install reading the
/// media over Range, reboot, eject, registration with the seed's token.
async fn deploy(personality: &str) {
    let sim = common::start(1, personality).await;
    let c = Client::new(&sim);
    let base = sim.bmc_url(0);
    let oc = registration::start(false, Vec::new()).await;
    let seed = full_seed(true, provider_json(&oc.url, "tok-1", Some(&oc.cert_pem)));
    let media = media_server(seeded_image(3 << 20, &seed)).await;

    let slot = cd_slot(&c, &base).await;
    insert(&c, &slot, &media.url()).await;
    let slot = c.get(slot["@odata.id"].as_str().unwrap()).await;
    assert_eq!(slot["Inserted"], true);
    assert_eq!(slot["Image"], media.url());
    let sys = c.system(&base).await;
    let (status, _, body) = c
        .patch(
            sys["@odata.id"].as_str().unwrap(),
            json!({"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(c.reset(&sys, "On").await, StatusCode::NO_CONTENT);

    // Stage 1 ends with a reboot; the BMC then still has the media: eject it promptly.
    wait_for("installed", LONG, || async {
        (sim.truth(0)["installed"] == true).then_some(())
    })
    .await;
    eject(&c, &c.get(slot["@odata.id"].as_str().unwrap()).await).await;
    // The callback's receiver sees the request before the simulated OS has read the answer and recorded itself
    // registered: wait for both.
    wait_for("registration", LONG, || async {
        (sim.truth(0)["registered"] == true).then_some(())
    })
    .await;
    let received = oc.received();
    assert_eq!(received.len(), 1, "one registration");
    assert_eq!(received[0].token.as_deref(), Some("tok-1"));
    // Without a network seed IncusOS names itself after the SMBIOS product UUID, the System UUID.
    let summary = control_get(&sim, &format!("/servers/{}", sim.name(0))).await;
    assert_eq!(received[0].body["name"], summary["uuid"]);
    assert_eq!(
        received[0].body["connection_url"],
        sim.incus_url(0).expect("Incus runs")
    );
    let truth = sim.truth(0);
    assert_eq!(truth["os"]["trusted_certificates"], json!([MANAGER_CERT]));
    assert_eq!(truth["registered"], true);
    assert_eq!(truth["phase"]["phase"], "os_running");
    assert!(truth["boot_count"].as_u64().unwrap() >= 2, "{truth}");
    assert!(media.reads.lock().unwrap().iter().all(|(a, b)| a <= b));
    assert!(
        media.bytes_served() >= media.size,
        "whole image read: {}",
        media.bytes_served()
    );
    assert_eq!(truth["media_bytes_read"].as_u64().unwrap(), media.bytes_served());
    assert_eq!(
        truth["boot_override"]["enabled"], "Disabled",
        "Once is spent on the install boot"
    );
}

#[tokio::test]
async fn generic_deploys_over_range_reads_and_registers() {
    deploy("generic").await;
}

#[tokio::test]
async fn dell_deploys_from_the_image_cached_at_insert() {
    deploy("dell").await;
}

#[tokio::test]
async fn hpe_deploys() {
    deploy("hpe").await;
}

#[tokio::test]
async fn lenovo_deploys_through_patch_only_slots() {
    deploy("lenovo").await;
}

#[tokio::test]
async fn supermicro_deploys() {
    deploy("supermicro").await;
}

#[tokio::test]
async fn dell_reads_the_whole_image_at_insert_and_nothing_during_install() {
    let sim = common::start(1, "dell").await;
    let c = Client::new(&sim);
    let media = media_server(seeded_image(2 << 20, &[install_yaml(true)])).await;
    let slot = cd_slot(&c, &sim.bmc_url(0)).await;
    // iDRAC 9 reports no TransferMethod, yet copies the image at insert.
    assert_eq!(slot["TransferMethod"], serde_json::Value::Null);
    insert(&c, &slot, &media.url()).await;
    let slot = c.get(slot["@odata.id"].as_str().unwrap()).await;
    assert_eq!(
        slot["TransferMethod"],
        serde_json::Value::Null,
        "null with media in too"
    );
    let after_insert = media.bytes_served();
    assert!(after_insert >= media.size, "copied at insert: {after_insert}");
    let sys = c.system(&sim.bmc_url(0)).await;
    c.reset(&sys, "On").await;
    wait_for("installed", LONG, || async {
        (sim.truth(0)["installed"] == true).then_some(())
    })
    .await;
    assert_eq!(media.bytes_served(), after_insert, "no reads during the install");
}

#[tokio::test]
async fn lenovo_streams_until_the_end_of_stage_one_and_generic_goes_idle_early() {
    for (personality, spread) in [("lenovo", true), ("generic", false)] {
        let sim = common::start(1, personality).await;
        let c = Client::new(&sim);
        let media = media_server(seeded_image(8 << 20, &[install_yaml(true)])).await;
        let slot = cd_slot(&c, &sim.bmc_url(0)).await;
        insert(&c, &slot, &media.url()).await;
        let sys = c.system(&sim.bmc_url(0)).await;
        c.reset(&sys, "On").await;
        wait_for("installing", LONG, || async {
            (sim.truth(0)["phase"]["phase"] == "installing").then_some(())
        })
        .await;
        let start = tokio::time::Instant::now();
        let mut last_read = start;
        let mut seen = 0;
        wait_for("installed", LONG, || {
            let n = media.reads.lock().unwrap().len();
            if n != seen {
                seen = n;
                last_read = tokio::time::Instant::now();
            }
            let done = sim.truth(0)["installed"] == true;
            async move { done.then_some(()) }
        })
        .await;
        let total = start.elapsed().as_secs_f64();
        let last = (last_read - start).as_secs_f64();
        if spread {
            assert!(
                last > total * 0.6,
                "{personality}: last read at {last:.2}s of {total:.2}s"
            );
        } else {
            assert!(
                last < total * 0.6,
                "{personality}: last read at {last:.2}s of {total:.2}s"
            );
        }
    }
}

#[tokio::test]
async fn seed_without_force_reboot_waits_for_the_ejection() {
    let sim = common::start(1, "generic").await;
    let c = Client::new(&sim);
    let media = media_server(seeded_image(1 << 20, &[install_yaml(false)])).await;
    let slot = cd_slot(&c, &sim.bmc_url(0)).await;
    insert(&c, &slot, &media.url()).await;
    let sys = c.system(&sim.bmc_url(0)).await;
    c.reset(&sys, "On").await;
    wait_for("waiting for eject", LONG, || async {
        (sim.truth(0)["phase"]["phase"] == "waiting_for_eject").then_some(())
    })
    .await;
    let boots = sim.truth(0)["boot_count"].as_u64().unwrap();
    eject(&c, &slot).await;
    wait_for("OS running", LONG, || async {
        (sim.truth(0)["phase"]["phase"] == "os_running").then_some(())
    })
    .await;
    assert_eq!(sim.truth(0)["boot_count"].as_u64().unwrap(), boots + 1);
}

#[tokio::test]
async fn media_left_in_after_the_install_boots_the_installer_again() {
    let sim = common::start(1, "generic").await;
    let c = Client::new(&sim);
    let media = media_server(seeded_image(1 << 20, &[install_yaml(true)])).await;
    let slot = cd_slot(&c, &sim.bmc_url(0)).await;
    insert(&c, &slot, &media.url()).await;
    let sys = c.system(&sim.bmc_url(0)).await;
    c.reset(&sys, "On").await;
    wait_for("installer finds no target", LONG, || async {
        (sim.truth(0)["phase"]["phase"] == "installer_no_target").then_some(())
    })
    .await;
    assert_eq!(sim.truth(0)["registered"], false);
    assert_eq!(sim.truth(0)["counters"]["installer_runs"], 2);
}

#[tokio::test]
async fn incus_api_answers_once_the_os_runs() {
    let sim = common::start(1, "generic").await;
    let c = Client::new(&sim);
    let me = incus::TestClient::new("operator");
    let mut seed = vec![install_yaml(false)];
    seed.push(incus::trusting(&me.identity.cert_pem));
    let media = media_server(seeded_image(1 << 20, &seed)).await;
    assert_eq!(sim.incus_url(0), None, "no Incus before the OS has run");
    let slot = cd_slot(&c, &sim.bmc_url(0)).await;
    insert(&c, &slot, &media.url()).await;
    let sys = c.system(&sim.bmc_url(0)).await;
    c.reset(&sys, "On").await;
    wait_for("waiting for eject", LONG, || async {
        (sim.truth(0)["phase"]["phase"] == "waiting_for_eject").then_some(())
    })
    .await;
    eject(&c, &slot).await;
    wait_for("OS running", LONG, || async {
        (sim.truth(0)["phase"]["phase"] == "os_running").then_some(())
    })
    .await;
    let incus = incus::wait_for_incus(&sim, 0).await;
    let http = me.client(&sim, 0);
    let servers = control_get(&sim, "/servers").await;
    assert_eq!(servers[0]["incus_url"], json!(incus));

    // Without an update provider (the seed's provider.yaml) there is nothing to check: nothing is staged. The
    // provider path itself (racklift's update catalog, verified downloads) is held by the API's update tests.
    let checked = http
        .post(format!("{incus}/os/1.0/system/update/:check"))
        .send()
        .await
        .unwrap();
    assert_eq!(checked.status(), StatusCode::BAD_REQUEST);
    let u: Value = http
        .get(format!("{incus}/os/1.0/system/update"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(u["metadata"]["state"]["needs_reboot"], false, "{u}");
    assert_eq!(
        u["metadata"]["state"]["status"], "No update provider configured",
        "{u}"
    );
}

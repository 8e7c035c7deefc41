//! Each personality's quirks, as seen by a client discovering through links.

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{self, Client, cd_slot, media_server};
use crate::lifecycle::insert;
use crate::seeded::plain_image;

#[tokio::test]
async fn mix_assigns_personalities_round_robin() {
    let sim = common::start(10, "mix").await;
    let names: Vec<&str> = (0..10).map(|i| sim.personality(i).as_str()).collect();
    assert_eq!(names[..5], ["generic", "dell", "hpe", "lenovo", "supermicro"]);
    assert_eq!(names[5..], names[..5]);
    let list = common::control_get(&sim, "/servers").await;
    assert_eq!(list.as_array().unwrap().len(), 10);
    assert_eq!(list[3]["personality"], "lenovo");
}

#[tokio::test]
async fn generic_has_inline_reset_types_both_boot_signals_and_key_databases() {
    let sim = common::start(1, "generic").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let reset = &sys["Actions"]["#ComputerSystem.Reset"];
    assert!(
        reset["ResetType@Redfish.AllowableValues"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "ForceOff")
    );
    assert!(sys.get("BootProgress").is_some());
    c.reset(&sys, "On").await;
    common::wait_for("LastResetTime", std::time::Duration::from_secs(10), || async {
        c.get(sys["@odata.id"].as_str().unwrap())
            .await
            .get("LastResetTime")
            .map(|_| ())
    })
    .await;
    let sb = c.get(sys["SecureBoot"]["@odata.id"].as_str().unwrap()).await;
    assert!(sb.get("SecureBootDatabases").is_some());
    assert!(
        sys["VirtualMedia"]["@odata.id"]
            .as_str()
            .unwrap()
            .contains("/Systems/")
    );
}

#[tokio::test]
async fn dell_has_media_on_system_and_manager_and_no_boot_progress() {
    let sim = common::start(1, "dell").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    assert_eq!(sys["Id"], "System.Embedded.1");
    assert!(sys.get("BootProgress").is_none());
    let reset = &sys["Actions"]["#ComputerSystem.Reset"]["ResetType@Redfish.AllowableValues"];
    assert!(reset.as_array().unwrap().iter().any(|v| v == "PowerCycle"));
    let sys_media = c.get(sys["VirtualMedia"]["@odata.id"].as_str().unwrap()).await;
    assert_eq!(sys_media["Members"].as_array().unwrap().len(), 2);
    let mgr = c
        .get(sys["Links"]["ManagedBy"][0]["@odata.id"].as_str().unwrap())
        .await;
    let mgr_media = c.get(mgr["VirtualMedia"]["@odata.id"].as_str().unwrap()).await;
    assert!(
        mgr_media["Members"][0]["@odata.id"]
            .as_str()
            .unwrap()
            .ends_with("/VirtualMedia/CD")
    );
    let bios = c.get(sys["Bios"]["@odata.id"].as_str().unwrap()).await;
    assert!(
        bios["@Redfish.Settings"]["SupportedApplyTimes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "OnReset")
    );
    let sb = c.get(sys["SecureBoot"]["@odata.id"].as_str().unwrap()).await;
    assert_eq!(sb["SecureBootMode"], "DeployedMode");
}

#[tokio::test]
async fn dell_keeps_reporting_inserted_for_a_while_after_eject() {
    let mut config =
        racklift_bmc_sim::SimConfig::new(1, "dell".parse().unwrap()).with_time_scale(common::SCALE);
    config.timings.stale_inserted_after_eject = std::time::Duration::from_secs(300);
    let sim = racklift_bmc_sim::Sim::start(config).await.unwrap();
    let c = Client::new(&sim);
    let media = media_server(plain_image(1 << 16)).await;
    let slot = cd_slot(&c, &sim.bmc_url(0)).await;
    insert(&c, &slot, &media.url()).await;
    let eject = slot["Actions"]["#VirtualMedia.EjectMedia"]["target"]
        .as_str()
        .unwrap();
    assert_eq!(c.post(eject, json!({})).await.0, StatusCode::NO_CONTENT);
    let link = slot["@odata.id"].as_str().unwrap();
    assert_eq!(c.get(link).await["Inserted"], true, "stale right after the eject");
    common::wait_for("slot empty", std::time::Duration::from_secs(10), || async {
        (c.get(link).await["Inserted"] == false).then_some(())
    })
    .await;
}

#[tokio::test]
async fn hpe_has_media_under_the_manager_only_blank_images_unlisted_targets_and_refuses_override_in_post() {
    let sim = common::start(1, "hpe").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    assert!(sys.get("VirtualMedia").is_none());
    assert!(sys.get("LastResetTime").is_none());
    // iLO 5 checks the override target but publishes no list of them.
    assert!(
        sys["Boot"]
            .get("BootSourceOverrideTarget@Redfish.AllowableValues")
            .is_none()
    );
    assert!(sys["Boot"]["BootSourceOverrideEnabled@Redfish.AllowableValues"].is_array());
    // iLO's URIs are case-insensitive; the simulator publishes the cased form the schema's URI templates name.
    let bios_link = sys["Bios"]["@odata.id"].as_str().unwrap();
    assert!(bios_link.ends_with("/redfish/v1/Systems/1/Bios"), "{bios_link}");
    let bios = c.get(bios_link).await;
    assert!(
        bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"]
            .as_str()
            .unwrap()
            .ends_with("/redfish/v1/Systems/1/Bios/Settings")
    );
    let slot = cd_slot(&c, &sim.bmc_url(0)).await;
    assert!(
        slot["@odata.id"]
            .as_str()
            .unwrap()
            .contains("/Managers/1/VirtualMedia/")
    );
    // Nothing inserted reads as an empty string, not null.
    assert_eq!((&slot["Image"], &slot["ImageName"]), (&json!(""), &json!("")));
    // Where iLO puts its media actions: the resource's `Oem.Hpe.Actions`, not `Actions.Oem`.
    assert!(slot["Oem"]["Hpe"]["Actions"]["#HpeiLOVirtualMedia.InsertVirtualMedia"]["target"].is_string());
    assert!(slot["Actions"].get("Oem").is_none());
    let sb = c.get(sys["SecureBoot"]["@odata.id"].as_str().unwrap()).await;
    assert!(sb.get("SecureBootDatabases").is_none());

    c.reset(&sys, "On").await;
    let link = sys["@odata.id"].as_str().unwrap();
    common::wait_for("POST", std::time::Duration::from_secs(10), || async {
        (c.get(link).await["BootProgress"]["LastState"] == "BusInitializationStarted").then_some(())
    })
    .await;
    let (status, _, body) = c
        .patch(
            link,
            json!({"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["@Message.ExtendedInfo"][0]["MessageId"]
            .as_str()
            .unwrap()
            .contains("DuringSystemPOST")
    );
}

#[tokio::test]
async fn lenovo_has_ten_patch_only_slots_and_rejects_continuous() {
    let sim = common::start(1, "lenovo").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    assert_eq!(
        sys["Boot"]["BootSourceOverrideEnabled@Redfish.AllowableValues"],
        json!(["Once", "Disabled"])
    );
    let (status, _, body) = c
        .patch(
            sys["@odata.id"].as_str().unwrap(),
            json!({"Boot": {"BootSourceOverrideEnabled": "Continuous", "BootSourceOverrideTarget": "Cd"}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"]["@Message.ExtendedInfo"][0]["MessageId"],
        "Base.1.8.PropertyValueNotInList"
    );
    let mgr = c
        .get(sys["Links"]["ManagedBy"][0]["@odata.id"].as_str().unwrap())
        .await;
    let media = c.get(mgr["VirtualMedia"]["@odata.id"].as_str().unwrap()).await;
    assert_eq!(media["Members"].as_array().unwrap().len(), 10);
    let slot = c.get(media["Members"][0]["@odata.id"].as_str().unwrap()).await;
    assert!(slot.get("Actions").is_none());
    let bios = c.get(sys["Bios"]["@odata.id"].as_str().unwrap()).await;
    assert!(
        bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"]
            .as_str()
            .unwrap()
            .ends_with("/Bios/Pending")
    );
}

#[tokio::test]
async fn supermicro_publishes_reset_types_only_via_action_info_and_hides_eject_when_empty() {
    let sim = common::start(1, "supermicro").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let reset = &sys["Actions"]["#ComputerSystem.Reset"];
    assert!(reset.get("ResetType@Redfish.AllowableValues").is_none());
    let info = c.get(reset["@Redfish.ActionInfo"].as_str().unwrap()).await;
    assert!(
        info["Parameters"][0]["AllowableValues"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "ForceOff")
    );
    assert!(sys.get("BootProgress").is_none());
    assert!(
        sys["VirtualMedia"]["@odata.id"]
            .as_str()
            .unwrap()
            .ends_with("/Managers/1/VirtualMedia")
    );
    let slot = cd_slot(&c, &sim.bmc_url(0)).await;
    assert!(slot["Actions"].get("#VirtualMedia.EjectMedia").is_none());
    assert!(slot["Actions"]["#VirtualMedia.InsertMedia"]["@Redfish.ActionInfo"].is_string());
    let media = media_server(plain_image(1 << 16)).await;
    insert(&c, &slot, &media.url()).await;
    let slot = c.get(slot["@odata.id"].as_str().unwrap()).await;
    assert!(slot["Actions"]["#VirtualMedia.EjectMedia"]["target"].is_string());
    let bios = c.get(sys["Bios"]["@odata.id"].as_str().unwrap()).await;
    assert!(
        bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"]
            .as_str()
            .unwrap()
            .ends_with("/Bios/SD")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_bmcs_from_one_process_answer_concurrent_gets() {
    let sim = common::start(1_000, "mix").await;
    let c = std::sync::Arc::new(Client::new(&sim));
    let urls: Vec<String> = (0..sim.len())
        .map(|i| format!("{}/redfish/v1/Systems", sim.bmc_url(i)))
        .collect();
    let started = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..32 {
        let c = c.clone();
        let urls = urls.clone();
        tasks.spawn(async move {
            let mut ok = 0;
            for url in urls.iter().skip(worker).step_by(32).cycle().take(100) {
                let (status, _, body) = c.send(reqwest::Method::GET, url, None, None).await;
                assert_eq!(status, StatusCode::OK, "{url}");
                assert_eq!(body["Members@odata.count"], 1);
                ok += 1;
            }
            ok
        });
    }
    let mut total = 0;
    while let Some(r) = tasks.join_next().await {
        total += r.unwrap();
    }
    assert_eq!(total, 3_200);
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{total} GETs over 1000 BMCs in {secs:.2}s ({:.0}/s, debug build, shared machine)",
        f64::from(total) / secs
    );
    let spread: u64 = (0..sim.len()).map(|i| sim.audit(i).requests).sum();
    assert_eq!(spread, 3_200);
}

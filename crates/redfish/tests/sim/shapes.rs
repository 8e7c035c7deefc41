//! The client against the shapes real BMCs send, as the personalities reproduce them: XCC's slots under the
//! System and the Manager, iDRAC 9's null `TransferMethod`, Supermicro's power cycle without a power button,
//! iLO 5's `Image: ""` and unlisted override targets, and BIOS writes checked against a registry of hundreds of
//! attributes.

use std::time::Duration;

use racklift_bmc_sim::Personality;
use racklift_redfish::{
    AttributeProblem, BootSourceOverrideEnabled as Enabled, BootSourceOverrideTarget as Target, InsertMethod,
    PowerState, ResetType, SlotOwner, SlotRef, rejected_attributes,
};
use serde_json::{Map, Value, json};

use crate::common::{client, eventually, fleet, image_server};

#[tokio::test]
async fn xcc_slot_inserted_through_the_system_reads_back_through_both_uris() {
    let sim = fleet(1, "lenovo").await;
    let images = image_server().await;
    let c = client(&sim, 0);
    let all = c.list_virtual_media().await.expect("list");
    assert_eq!(all.len(), 20, "ten slots, each under the System and the Manager");
    let chosen = c.select_cd_slot().await.expect("cd slot");
    assert_eq!(chosen.slot.to_string(), "system:EXT1");
    assert!(chosen.media.odata_id.ends_with("/Systems/1/VirtualMedia/EXT1"));

    let image = format!("{images}/xcc.iso");
    let inserted = c.insert_media(&chosen.slot, &image).await.expect("insert");
    assert_eq!(inserted.method, InsertMethod::Patch);
    let twin = SlotRef {
        owner: SlotOwner::Manager,
        id: "EXT1".into(),
    };
    for slot in [&chosen.slot, &twin] {
        assert!(c.read_media(slot).await.expect("read").holds(&image), "{slot}");
    }
    // The same device: already holding the image through the other URI too.
    let again = c.insert_media(&twin, &image).await.expect("insert via manager");
    assert_eq!(again.method, InsertMethod::AlreadyInserted);
    c.eject_media(&twin).await.expect("eject via manager");
    assert!(!c.read_media(&chosen.slot).await.expect("read").has_media());
}

#[tokio::test]
async fn idrac_null_transfer_method_reads_as_unknown_with_media_held() {
    let sim = fleet(1, "dell").await;
    let images = image_server().await;
    let c = client(&sim, 0);
    let chosen = c.select_cd_slot().await.expect("cd slot");
    assert_eq!(chosen.slot.to_string(), "system:1");
    assert_eq!(chosen.media.transfer_method, None);
    let image = format!("{images}/idrac.iso");
    c.insert_media(&chosen.slot, &image).await.expect("insert");
    let media = c.read_media(&chosen.slot).await.expect("read");
    assert!(media.holds(&image));
    assert_eq!(
        media.transfer_method, None,
        "null even though the image was copied"
    );
    assert!(
        sim.truth(0)["media"][0]["cached_bytes"].as_u64().unwrap() > 0,
        "the BMC copied the image at insert"
    );
}

#[tokio::test]
async fn supermicro_resets_without_a_power_button() {
    let sim = fleet(1, "supermicro").await;
    let c = client(&sim, 0);
    let allowed = c
        .allowed_reset_types()
        .await
        .expect("reset types")
        .expect("advertised in the ActionInfo");
    assert!(allowed.contains(&ResetType::PowerCycle), "{allowed:?}");
    assert!(!allowed.contains(&ResetType::PushPowerButton), "{allowed:?}");
    c.power_on().await.expect("on");
    let on = || async { c.read_system().await.expect("sys").power_state == Some(PowerState::On) };
    eventually("on", Duration::from_secs(10), on).await;
    let restarted = c.force_restart().await.expect("restart");
    assert_eq!(restarted.reset_type, ResetType::ForceRestart);
    let cycled = c.reset(ResetType::PowerCycle).await.expect("power cycle");
    assert_eq!(cycled.reset_type, ResetType::PowerCycle);
    let refused = c
        .reset(ResetType::PushPowerButton)
        .await
        .expect_err("not advertised");
    assert_eq!(
        refused.status(),
        None,
        "refused before anything is sent: {refused:?}"
    );
    c.power_off().await.expect("off");
    eventually("off", Duration::from_secs(10), || async {
        c.read_system().await.expect("sys").power_state == Some(PowerState::Off)
    })
    .await;
}

#[tokio::test]
async fn ilo_blank_image_is_empty_and_unlisted_targets_are_left_to_the_bmc() {
    let sim = fleet(1, "hpe").await;
    let images = image_server().await;
    let c = client(&sim, 0);
    let chosen = c.select_cd_slot().await.expect("cd slot");
    assert_eq!(chosen.media.image.as_deref(), Some(""));
    assert!(!chosen.media.has_media());
    let image = format!("{images}/ilo.iso");
    c.insert_media(&chosen.slot, &image).await.expect("insert");
    assert!(c.read_media(&chosen.slot).await.expect("read").holds(&image));
    c.eject_media(&chosen.slot).await.expect("eject");
    let empty = c.read_media(&chosen.slot).await.expect("read");
    assert_eq!(empty.image.as_deref(), Some(""));
    assert!(!empty.has_media());

    let boot = c.read_boot().await.expect("boot");
    assert_eq!(boot.allowed_targets, None);
    let set = c.set_boot_override(Target::Cd, None).await.expect("override");
    assert_eq!(set.accepted, Enabled::Once);
    c.clear_boot_override(Target::Cd).await.expect("clear");
    let patches = || {
        sim.audit(0)
            .mutation_log
            .iter()
            .filter(|m| m.method == "PATCH")
            .count()
    };
    let before = patches();
    let err = c
        .set_boot_override(Target::UefiTarget, None)
        .await
        .expect_err("the BMC refuses the target");
    assert_eq!(err.status(), Some(400), "{err:?}");
    assert_eq!(
        patches() - before,
        1,
        "a refused target is not retried as Continuous"
    );
}

#[tokio::test]
async fn bios_writes_are_checked_against_each_registry_and_unknown_attributes_are_named() {
    let sim = fleet(5, "mix").await;
    for i in 0..sim.len() {
        let personality = sim.personality(i);
        let c = client(&sim, i);
        let registry = c.read_attribute_registry().await.expect("registry");
        let size = match personality {
            Personality::Generic => 32,
            Personality::Dell => 455,
            Personality::Hpe => 277,
            Personality::Lenovo => 400,
            Personality::Supermicro => 300,
        };
        assert_eq!(registry.attributes().len(), size, "{personality:?}");
        let bios = c.read_bios().await.expect("bios");
        assert_eq!(bios.attribute_registry.as_deref(), Some(registry.id.as_str()));

        let attrs = |v: Value| -> Map<String, Value> { serde_json::from_value(v).expect("attributes") };
        let wanted = attrs(json!({"ProcVirtualization": "Disabled", "IommuSupport": "Enabled"}));
        assert!(registry.check(&wanted).is_empty(), "{personality:?}");
        let with_unknown = attrs(json!({"ProcVirtualization": "Disabled", "NoSuchKnob": "Enabled"}));
        assert_eq!(
            registry.check(&with_unknown),
            vec![AttributeProblem::Unknown("NoSuchKnob".into())]
        );

        // Sent anyway, the BMC refuses it and names it; nothing is staged.
        let err = c.stage_bios_attributes(with_unknown).await.expect_err("refused");
        assert_eq!(err.status(), Some(400), "{personality:?}");
        assert_eq!(
            rejected_attributes(&err),
            vec!["NoSuchKnob".to_owned()],
            "{personality:?}"
        );
        let bad_value = attrs(json!({"ProcVirtualization": "Sometimes"}));
        let err = c.stage_bios_attributes(bad_value).await.expect_err("refused");
        assert_eq!(rejected_attributes(&err), vec!["ProcVirtualization".to_owned()]);
        assert!(c.pending_bios_attributes().await.expect("pending").is_empty());

        c.stage_bios_attributes(wanted).await.expect("stage");
        c.power_off().await.expect("off");
        eventually("off", Duration::from_secs(10), || async {
            c.read_system().await.expect("sys").power_state == Some(PowerState::Off)
        })
        .await;
        c.power_on().await.expect("on");
        eventually("applied", Duration::from_secs(10), || async {
            let bios = c.read_bios().await.expect("bios");
            bios.attributes.get("ProcVirtualization") == Some(&json!("Disabled"))
                && bios.attributes.get("IommuSupport") == Some(&json!("Enabled"))
        })
        .await;
    }
}

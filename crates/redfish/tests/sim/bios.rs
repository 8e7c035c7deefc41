//! BIOS on every personality: settings object discovered from `@Redfish.Settings`, apply
//! time only where advertised, pending values, task monitors (202, then 404 once consumed),
//! and the values taking effect at the next reset.

use std::time::Duration;

use racklift_bmc_sim::{Faults, Personality};
use racklift_redfish::{PowerState, TaskPoll};
use serde_json::{Map, json};

use crate::common::{client, eventually, fleet};

#[tokio::test]
async fn stage_and_apply_on_every_personality() {
    let sim = fleet(5, "mix").await;
    for i in 0..sim.len() {
        let personality = sim.personality(i);
        let c = client(&sim, i);
        let bios = c.read_bios().await.expect("bios");
        assert_eq!(
            bios.attributes.get("ProcTurboMode"),
            Some(&json!("Enabled")),
            "{personality:?}"
        );
        let settings = bios.settings.clone().expect("@Redfish.Settings");
        let object = settings.settings_object.expect("SettingsObject").odata_id;
        let suffix = match personality {
            Personality::Generic | Personality::Dell | Personality::Hpe => "/Bios/Settings",
            Personality::Lenovo => "/Bios/Pending",
            Personality::Supermicro => "/Bios/SD",
        };
        assert!(object.ends_with(suffix), "{personality:?}: {object}");

        let mut wanted = Map::new();
        wanted.insert("ProcTurboMode".into(), json!("Disabled"));
        let staged = c.stage_bios_attributes(wanted).await.expect("stage");
        assert_eq!(staged.written_to, object);
        let on_reset = matches!(personality, Personality::Dell | Personality::Lenovo);
        assert_eq!(staged.apply_time_on_reset, on_reset, "{personality:?}");
        assert_eq!(
            staged.task.is_some(),
            personality == Personality::Dell,
            "{personality:?}"
        );
        let pending = c.pending_bios_attributes().await.expect("pending");
        assert_eq!(
            pending.get("ProcTurboMode"),
            Some(&json!("Disabled")),
            "{personality:?}"
        );

        // Values take effect at the next reset.
        c.power_off().await.expect("off");
        eventually("off", Duration::from_secs(10), || async {
            c.read_system().await.expect("sys").power_state == Some(PowerState::Off)
        })
        .await;
        c.power_on().await.expect("on");
        eventually("BIOS applied", Duration::from_secs(10), || async {
            let bios = c.read_bios().await.expect("bios");
            bios.attributes.get("ProcTurboMode") == Some(&json!("Disabled"))
        })
        .await;
        assert!(
            c.pending_bios_attributes().await.expect("pending").is_empty(),
            "{personality:?}"
        );

        if let Some(task) = staged.task {
            // The monitor answers until its final answer is read, then 404s.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let first_final = loop {
                match c.poll_task(&task).await.expect("poll") {
                    TaskPoll::Running { .. } => {
                        assert!(std::time::Instant::now() < deadline, "task still running");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    other => break other,
                }
            };
            assert!(matches!(first_final, TaskPoll::Done { .. }), "{first_final:?}");
            assert_eq!(c.poll_task(&task).await.expect("poll"), TaskPoll::Gone);
        }
    }
}

#[tokio::test]
async fn forgotten_task_monitors_read_as_gone() {
    let sim = fleet(1, "dell").await;
    let c = client(&sim, 0);
    sim.set_faults(
        0,
        Faults {
            forget_task_monitors: true,
            ..Default::default()
        },
    );
    let mut wanted = Map::new();
    wanted.insert("ProcVirtualization".into(), json!("Disabled"));
    let staged = c.stage_bios_attributes(wanted).await.expect("stage");
    let task = staged.task.expect("202 + Location");
    assert_eq!(c.poll_task(&task).await.expect("poll"), TaskPoll::Gone);
}

#[tokio::test]
async fn a_bmc_reset_forgets_task_monitors() {
    let sim = fleet(1, "dell").await;
    let c = client(&sim, 0);
    let mut wanted = Map::new();
    wanted.insert("IommuSupport".into(), json!("Enabled"));
    let task = c
        .stage_bios_attributes(wanted)
        .await
        .expect("stage")
        .task
        .expect("task");
    assert!(matches!(
        c.poll_task(&task).await.expect("poll"),
        TaskPoll::Running { .. } | TaskPoll::Done { .. }
    ));
    let reset = reqwest::Client::new()
        .post(format!("{}/servers/{}/bmc-reset", sim.control_url(), sim.name(0)))
        .send()
        .await
        .expect("control");
    assert!(reset.status().is_success(), "{}", reset.status());
    assert_eq!(c.poll_task(&task).await.expect("poll"), TaskPoll::Gone);
}

#[tokio::test]
async fn an_attribute_whose_prerequisite_was_only_staged_reports_settings_failed() {
    let sim = fleet(1, "generic").await;
    let c = client(&sim, 0);
    let mut wanted = Map::new();
    wanted.insert("IommuSupport".into(), json!("Enabled"));
    wanted.insert("SriovGlobalEnable".into(), json!("Enabled"));
    c.stage_bios_attributes(wanted).await.expect("stage");
    c.force_restart().await.expect("reset applies the staged values");
    eventually("apply reported", Duration::from_secs(10), || async {
        let bios = c.read_bios().await.expect("bios");
        bios.attributes.get("IommuSupport") == Some(&json!("Enabled"))
    })
    .await;
    let bios = c.read_bios().await.expect("bios");
    assert_eq!(bios.failed_attributes(), vec!["SriovGlobalEnable".to_owned()]);
}

//! A missed eject, end to end: the eject that has to land within the POST of the reboot ending install stage 1
//! lands after it (the simulator's `late_eject` fault), the server boots its installer a second time and sits
//! there, and the deployment power-cycles it once, media out, into the installed system.

use std::time::Duration;

use racklift_bmc_sim::{Faults, Personality, PersonalityChoice};
use racklift_deploy::{Cause, State};
use racklift_tests::cluster::{CLUSTER, form_cluster, start_reboot};
use racklift_tests::rack::Rack;
use serde_json::{Value, json};

const SCALE: f64 = 0.01;

/// One server of every personality, then a generic one that hides its boot progress (reset time only).
const SERVERS: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_eject_on_every_personality_is_repaired_by_one_power_cycle() {
    let rack = Rack::start(SERVERS, PersonalityChoice::Mix, SCALE).await;
    for i in 0..SERVERS {
        rack.sim.set_faults(
            i,
            Faults {
                late_eject: true,
                no_boot_progress: i == SERVERS - 1,
                ..Faults::default()
            },
        );
    }
    rack.deploy_all().await;
    for i in 0..SERVERS {
        let name = rack.sim.name(i).to_owned();
        let d = rack.wait_finished(&name, Duration::from_secs(240)).await;
        let truth = rack.sim.truth(i);
        let log = rack.event_log(&name).await;
        assert_eq!(
            d.deployment.machine.state,
            State::Completed,
            "{name}: {:?}\ntruth: {truth}\nevents:\n{log}",
            d.deployment.machine.failure
        );
        // The fault took: the installer booted a second time before the eject landed.
        assert_eq!(truth["counters"]["installer_runs"], json!(2), "{name}: {truth}");
        assert_eq!(truth["registered"], json!(true), "{name}: {truth}");
        let repairs: Vec<_> = rack
            .transitions(&name)
            .await
            .into_iter()
            .filter(|t| t.to == State::PowerOffMissedEject)
            .collect();
        assert_eq!(repairs.len(), 1, "{name}: one power cycle\nevents:\n{log}");
        // Without boot progress only the grace can tell; with it, a poll may have caught the boot with the
        // media in, or (when the eject landed between two polls) the grace tells as well.
        let progress = i != SERVERS - 1
            && Personality::ALL[i % Personality::ALL.len()] != Personality::Dell
            && Personality::ALL[i % Personality::ALL.len()] != Personality::Supermicro;
        let allowed: &[Cause] = if progress {
            &[Cause::InstallerBootedAgain, Cause::NoRegistrationAfterEject]
        } else {
            &[Cause::NoRegistrationAfterEject]
        };
        assert!(
            allowed.contains(&repairs[0].cause),
            "{name}: {:?}",
            repairs[0].cause
        );
        let audit = rack.sim.audit(i);
        assert!(
            audit.stale_mutations.is_empty() && audit.max_concurrent <= 1,
            "{name}: {audit:?}"
        );
    }

    // Repaired, each is an ordinary member: a rolling reboot of all six takes each down and back up once.
    form_cluster(&rack, SERVERS, Duration::from_secs(10), None).await;
    start_reboot(&rack).await;
    let view = || async {
        rack.admin(
            reqwest::Method::GET,
            format!("/1.0/provisioning/clusters/{CLUSTER}"),
        )
        .send()
        .await
        .expect("the API answers")
        .json::<Value>()
        .await
        .expect("a cluster view")
    };
    racklift_tests::wait_for(Duration::from_secs(240), "the rolling reboot to end", || async {
        view().await["operation"]["status"] != "running"
    })
    .await;
    let view = view().await;
    let truths: Vec<Value> = (0..SERVERS).map(|i| rack.sim.truth(i)).collect();
    assert_eq!(
        view["operation"]["status"], "completed",
        "{view:#}\ntruths: {truths:#?}"
    );
    rack.stop().await;
}

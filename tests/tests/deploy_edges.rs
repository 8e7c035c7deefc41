//! Edges of a deployment the happy path never takes, end to end: install stage 1 ended by the media going idle
//! (a seed without `force_reboot`, deployed with `force`), and a wait that times out once, falls back to its
//! trigger, and still completes.

use std::time::Duration;

use racklift_bmc_sim::{Faults, Personality, PersonalityChoice, SimConfig};
use racklift_deploy::{Cause, Config, State, Transition};
use racklift_tests::rack::Rack;
use serde_json::{Value, json};

/// Generic (a streaming BMC) reads the image in the first 30 % of the simulated install and then works from memory,
/// so the media idle signal ends stage 1 while the installer finishes; the eject that follows is what it waits for
/// before rebooting (the seed has no `force_reboot`).
const FORCE_SCALE: f64 = 0.01;

/// A seed whose install config leaves `force_reboot` out: the installer waits for the media to be ejected.
const NO_REBOOT_SEED: &str = "no-reboot";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_force_seed_ends_install_stage_1_when_the_media_goes_idle() {
    let rack = Rack::start(1, PersonalityChoice::Single(Personality::Generic), FORCE_SCALE).await;
    let name = rack.sim.name(0).to_owned();
    let config = Config::for_simulation(FORCE_SCALE);
    assert!(
        rack.catalog.image.size_bytes as u64 >= config.media_min_bytes_read,
        "{name}: the image ({} bytes) must be at least media_min_bytes_read ({} bytes) for the idle signal to count",
        rack.catalog.image.size_bytes,
        config.media_min_bytes_read
    );

    let created = rack
        .admin(
            reqwest::Method::POST,
            format!("/1.0/tokens/{}/seeds", rack.catalog.token),
        )
        .json(&json!({ "name": NO_REBOOT_SEED, "public": true, "install_config": {} }))
        .send()
        .await
        .expect("create the seed");
    assert_eq!(
        created.status(),
        201,
        "seed {NO_REBOOT_SEED}: {}",
        created.text().await.unwrap_or_default()
    );

    // Without `force` the pre-flight refuses: nothing could tell the end of stage 1 but the media reads.
    let refused = rack.deploy(&name, json!({ "seed": NO_REBOOT_SEED })).await;
    assert_eq!(refused.status(), 422, "{name}: deploy without force");
    let error: Value = refused.json().await.expect("error JSON");
    assert_eq!(
        error["error"]["code"],
        json!("seed_needs_force_reboot"),
        "{name}: {error}"
    );

    let response = rack
        .deploy(&name, json!({ "seed": NO_REBOOT_SEED, "force": true }))
        .await;
    assert_eq!(
        response.status(),
        202,
        "{name}: deploy with force: {}",
        response.text().await.unwrap_or_default()
    );
    let d = rack.wait_finished(&name, Duration::from_secs(100)).await;
    let transitions = rack.transitions(&name).await;
    let log = rack.event_log(&name).await;
    assert_eq!(
        d.deployment.machine.state,
        State::Completed,
        "{name} ended {:?}: {:?}\ntruth: {}\nevents:\n{log}",
        d.deployment.machine.state,
        d.deployment.machine.failure,
        rack.sim.truth(0)
    );
    let plan = &d.deployment.plan;
    assert!(plan.force, "{name}: the plan carries force: {plan:?}");
    // The installer learnt it from the seed in the media it streamed, not from the URL.
    assert!(!plan.image_url.contains('?'), "{name}: {}", plan.image_url);
    assert_eq!(
        rack.sim.truth(0)["install_seed"]["force_reboot"],
        serde_json::json!(false),
        "{name}: the installer is told not to reboot by itself: {}",
        rack.sim.truth(0)
    );

    let install_end: Vec<&Transition> = transitions
        .iter()
        .filter(|t| t.from == State::WaitInstall)
        .collect();
    assert_eq!(
        install_end,
        [&Transition {
            from: State::WaitInstall,
            to: State::DetachMedia,
            cause: Cause::MediaReadOut,
        }],
        "{name}: WaitInstall ends once, by the media read out and idle\nevents:\n{log}"
    );

    // Had the idle signal come before the installer was done, the eject would have broken the install and the
    // server would never have registered.
    let truth = rack.sim.truth(0);
    assert_eq!(
        truth["registered"],
        json!(true),
        "{name}: registered after the eject: {truth}"
    );
    assert_eq!(
        truth["phase"]["phase"],
        json!("os_running"),
        "{name}: the installed OS runs: {truth}"
    );
    assert_eq!(
        truth["counters"]["installer_runs"],
        json!(1),
        "{name}: the installer ran once: {truth}"
    );
    let bytes_read = truth["media_bytes_read"].as_u64().unwrap_or(0);
    assert!(
        bytes_read >= config.media_min_bytes_read,
        "{name}: the installer read {bytes_read} bytes of media: {truth}"
    );
    let audit = rack.sim.audit(0);
    assert!(
        audit.stale_mutations.is_empty() && audit.max_concurrent <= 1,
        "{name}: {audit:?}"
    );
    rack.stop().await;
}

const TIMEOUT_SCALE: f64 = 0.002;

/// Well under the 30 s floor of `Config::for_simulation`, yet several polls (1 s) longer than any step wait
/// takes on the simulator at this scale, so only the dropped power-off times out.
const STEP_TIMEOUT_SECS: u64 = 6;

/// The waits that follow a power-off trigger.
const POWER_OFF_WAITS: [State; 4] = [
    State::WaitPowerOffBIOS,
    State::WaitPowerOffBIOSDeferred,
    State::WaitPowerOffSecureBoot,
    State::WaitPowerOffSecureBootSettled,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wait_that_times_out_falls_back_to_its_trigger_and_the_deployment_completes() {
    let config = Config {
        step_timeout_secs: STEP_TIMEOUT_SECS,
        ..Config::for_simulation(TIMEOUT_SCALE)
    };
    let rack = Rack::start_with_config(
        1,
        PersonalityChoice::Single(Personality::Generic),
        TIMEOUT_SCALE,
        config,
    )
    .await;
    let name = rack.sim.name(0).to_owned();
    // The server starts off, so the first power-off that finds it running is the one after the first BIOS
    // pass; the BMC answers 204 and does nothing, once.
    rack.sim.set_faults(
        0,
        Faults {
            ignore_next_power_offs: 1,
            ..Faults::default()
        },
    );
    let response = rack.deploy(&name, json!({})).await;
    assert_eq!(
        response.status(),
        202,
        "{name}: {}",
        response.text().await.unwrap_or_default()
    );
    let d = rack.wait_finished(&name, Duration::from_secs(100)).await;
    let transitions = rack.transitions(&name).await;
    let log = rack.event_log(&name).await;
    assert_eq!(
        d.deployment.machine.state,
        State::Completed,
        "{name} ended {:?}: {:?}\ntruth: {}\nevents:\n{log}",
        d.deployment.machine.state,
        d.deployment.machine.failure,
        rack.sim.truth(0)
    );

    let timeouts: Vec<(usize, &Transition)> = transitions
        .iter()
        .enumerate()
        .filter(|(_, t)| t.cause == Cause::WaitTimeout)
        .collect();
    assert_eq!(
        timeouts.len(),
        1,
        "{name}: exactly one wait times out\nevents:\n{log}"
    );
    let (at, timeout) = timeouts[0];
    let (wait, trigger) = (timeout.from, timeout.to);
    assert!(
        POWER_OFF_WAITS.contains(&wait),
        "{name}: the wait after the dropped power-off times out, not {wait:?}\nevents:\n{log}"
    );
    assert_eq!(
        wait.def().fallback,
        Some(trigger),
        "{name}: {wait:?} falls back to its trigger\nevents:\n{log}"
    );
    assert_eq!(
        trigger.next(),
        Some(wait),
        "{name}: {trigger:?} is the power-off {wait:?} waits for"
    );
    // The trigger is issued again and succeeds, and this time the wait sees the server off.
    assert_eq!(
        transitions.get(at + 1),
        Some(&Transition {
            from: trigger,
            to: wait,
            cause: Cause::ActionSucceeded,
        }),
        "{name}: {trigger:?} re-issued after the timeout\nevents:\n{log}"
    );
    let after = transitions.get(at + 2);
    assert!(
        after.is_some_and(|t| t.from == wait && t.to != trigger && t.cause != Cause::WaitTimeout),
        "{name}: {wait:?} met the second time, got {after:?}\nevents:\n{log}"
    );
    assert_eq!(
        transitions.last().map(|t| t.to),
        Some(State::Completed),
        "{name}: the deployment completes after the fallback\nevents:\n{log}"
    );

    let faults: Value = rack
        .http
        .get(format!("{}/servers/{name}/faults", rack.sim.control_url()))
        .send()
        .await
        .expect("read the faults")
        .json()
        .await
        .expect("faults JSON");
    assert_eq!(
        faults["ignore_next_power_offs"],
        json!(0),
        "{name}: the dropped power-off spent the fault: {faults}"
    );
    let truth = rack.sim.truth(0);
    assert_eq!(
        truth["registered"],
        json!(true),
        "{name}: the simulator says {truth}"
    );
    let audit = rack.sim.audit(0);
    assert!(
        audit.stale_mutations.is_empty() && audit.max_concurrent <= 1,
        "{name}: {audit:?}"
    );
    rack.stop().await;
}

/// Generic, Dell and Supermicro firmware resets itself during the POST after key enrolment, here a second after
/// the server comes on (two POST stages), and the server takes 0.3 s to come on. With polls 2 s apart, a wait that
/// took its snapshot at its next regular poll would take it after that reset, never see it and sit out the whole
/// settle duration (60 s here). Watching the power-on closely puts the snapshot before the reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_settle_wait_sees_the_firmware_reset_itself_after_key_enrolment() {
    const SCALE: f64 = 0.002;
    let mut sim = SimConfig::for_deployments(5, PersonalityChoice::Mix, SCALE);
    sim.timings.power_on = Duration::from_secs_f64(0.3 / SCALE);
    let config = Config {
        poll_interval_secs: 2,
        secure_boot_settle_secs: 60,
        ..Config::for_simulation(SCALE)
    };
    let rack = Rack::start_with_sim(sim, config).await;
    rack.deploy_all().await;
    let mut settled = Vec::new();
    for i in 0..rack.sim.len() {
        let name = rack.sim.name(i).to_owned();
        let d = rack.wait_finished(&name, Duration::from_secs(150)).await;
        let log = rack.event_log(&name).await;
        assert_eq!(
            d.deployment.machine.state,
            State::Completed,
            "{name}\nevents:\n{log}"
        );
        for t in rack.transitions(&name).await {
            if t.from == State::WaitSecureBootSettled {
                assert_eq!(t.cause, Cause::RebootDetected, "{name}: {t:?}\nevents:\n{log}");
                settled.push(rack.sim.personality(i));
            }
        }
    }
    assert_eq!(
        settled,
        [Personality::Generic, Personality::Dell, Personality::Supermicro],
        "the personalities that enrol keys and reset"
    );
    rack.stop().await;
}

//! Seeds IncusOS cannot use, end to end: the simulated server reads them out of the media exactly as IncusOS
//! would and gets stuck exactly where IncusOS would, and the deployment fails in that wait naming what it saw,
//! never completing. One seed names a target disk the machine does not have (the installer stops: `WaitInstall`);
//! one has a network file the installed OS cannot parse (the daemon stops before registering:
//! `WaitRegistration`).

use std::time::Duration;

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_deploy::{Cause, Config, State};
use racklift_tests::rack::Rack;
use serde_json::{Value, json};

const SCALE: f64 = 0.01;

async fn add_seed(rack: &Rack, name: &str, install_config: Value) {
    let r = rack
        .admin(
            reqwest::Method::POST,
            format!("/1.0/tokens/{}/seeds", rack.catalog.token),
        )
        .json(&json!({ "name": name, "public": true, "install_config": install_config }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_seed_incusos_cannot_use_fails_its_wait_naming_why() {
    let config = Config {
        install_timeout_secs: 25,
        registration_timeout_secs: 25,
        ..Config::for_simulation(SCALE)
    };
    let rack =
        Rack::start_with_config(2, PersonalityChoice::Single(Personality::Generic), SCALE, config).await;
    add_seed(
        &rack,
        "no-such-disk",
        json!({ "force_reboot": true, "target": { "id": "nvme-no-such-disk" } }),
    )
    .await;
    add_seed(
        &rack,
        "bad-network",
        json!({ "force_reboot": true, "network": { "dns": { "hostname": ["a", "b"] } } }),
    )
    .await;

    let cases = [
        (
            0,
            "no-such-disk",
            State::WaitInstall,
            "the installer did not finish",
        ),
        (1, "bad-network", State::WaitRegistration, "did not register"),
    ];
    for (i, seed, _, _) in cases {
        let r = rack.deploy(rack.sim.name(i), json!({ "seed": seed })).await;
        assert_eq!(r.status(), 202, "{}", r.text().await.unwrap_or_default());
    }
    for (i, seed, state, why) in cases {
        let name = rack.sim.name(i).to_owned();
        let d = rack.wait_finished(&name, Duration::from_secs(120)).await;
        let truth = rack.sim.truth(i);
        let failure = d.deployment.machine.failure.clone();
        assert_eq!(
            d.deployment.machine.state,
            State::Failed,
            "{seed}: {failure:?}\n{truth}"
        );
        let failure = failure.expect("a failure");
        assert_eq!(
            (failure.state, failure.cause),
            (state, Cause::WaitTimeout),
            "{seed}: {failure:?}"
        );
        let error = failure.error.unwrap_or_default();
        assert!(error.contains(why), "{seed}: {error}");
        assert_eq!(truth["registered"], false, "{seed}: {truth}");
    }
    // What the simulated IncusOS made of each seed, read from the media it streamed.
    let installer = rack.sim.truth(0);
    assert!(
        installer
            .to_string()
            .contains("unable to determine target device"),
        "{installer}"
    );
    let os = rack.sim.truth(1);
    assert_eq!(os["os"]["installed"], true, "{os}");
    assert!(
        os.to_string().contains("network"),
        "the daemon's failure names the network file: {os}"
    );
    rack.stop().await;
}

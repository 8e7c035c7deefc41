//! Deployments end to end: API, worker pool, media server and the simulated rack over real sockets.

use std::time::Duration;

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_deploy::State;
use racklift_tests::rack::Rack;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_personality_deploys_to_completed() {
    let rack = Rack::start(5, PersonalityChoice::Mix, 0.002).await;
    rack.deploy_all().await;
    for i in 0..rack.sim.len() {
        let name = rack.sim.name(i).to_owned();
        let d = rack.wait_finished(&name, Duration::from_secs(90)).await;
        assert_eq!(
            d.deployment.machine.state,
            State::Completed,
            "{name} ({:?}) ended {:?}: {:?}\ntruth: {}\nevents:\n{}",
            rack.sim.personality(i),
            d.deployment.machine.state,
            d.deployment.machine.failure,
            rack.sim.truth(i),
            rack.event_log(&name).await
        );
        let truth = rack.sim.truth(i);
        assert_eq!(
            truth["registered"],
            json!(true),
            "{name}: the simulator says {truth}"
        );
        // It registered over TLS presenting its Incus client certificate, which racklift now knows it by.
        assert_eq!(
            rack.stored_client_certificate(&name).await,
            rack.sim.client_certificate_sha256(i),
            "{name}"
        );
        let audit = rack.sim.audit(i);
        assert_eq!(audit.stale_mutations.len(), 0, "{name}: {audit:?}");
        assert!(audit.max_concurrent <= 1, "{name}: {audit:?}");
    }
    assert!(matches!(rack.sim.personality(1), Personality::Dell));
    rack.stop().await;
}

//! A freshly installed IncusOS's first boot against racklift, end to end over the wire as IncusOS's own start-up
//! runs it (`cmd/incus-osd/main.go`): the update check before anything else, with no client certificate, installs
//! Incus from racklift's public update catalog; only then does the server register, with Operations Center's
//! whole `ServerPost` and Incus's certificate; and once ready it tells racklift so through `PUT :self`.

use std::time::{Duration, Instant};

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_tests::rack::Rack;
use serde_json::{Value, json};

const SCALE: f64 = 0.002;
const LIMIT: Duration = Duration::from_secs(120);

/// The server's events of `kind`, each one's detail.
async fn events_of(rack: &Rack, name: &str, kind: &str) -> Vec<Value> {
    rack.store
        .events(name, 0, 1000)
        .await
        .expect("the server's events")
        .into_iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.detail)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_first_boot_fetches_incus_anonymously_registers_with_its_certificate_and_reports_ready() {
    let rack = Rack::start(1, PersonalityChoice::Single(Personality::Generic), SCALE).await;
    let name = rack.sim.name(0).to_owned();
    assert_eq!(rack.deploy(&name, json!({})).await.status(), 202);
    rack.wait_completed(&name, LIMIT).await;

    // Incus came from the catalog's update (the only place a simulated IncusOS can get it), and its certificate is
    // the one the server registered with.
    let truth = rack.sim.truth(0);
    let apps: Vec<&str> = truth["os"]["applications"]
        .as_array()
        .expect("the installed applications")
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert!(apps.contains(&"incus"), "{truth:#}");
    let served = rack.sim.incus_certificate_pem(0).expect("Incus's certificate");
    let served_sha256 = racklift_deploy::certificates::fingerprint_pem(&served).0;
    assert_eq!(
        rack.stored_client_certificate(&name).await.as_deref(),
        Some(served_sha256.as_str()),
        "the registration's TLS client certificate is Incus's server.crt"
    );

    // The registration carried IncusOS's identity fallbacks, stored beside the certificate.
    let registered = events_of(&rack, &name, "registered").await;
    assert_eq!(registered.len(), 1, "{registered:#?}");
    assert_eq!(
        registered[0]["machine_id"], truth["os"]["machine_id"],
        "{registered:#?}"
    );
    let machine_id = rack
        .store
        .registered_machine_id(&name)
        .await
        .expect("the stored registration");
    assert_eq!(machine_id.as_deref(), truth["os"]["machine_id"].as_str());

    // Ready: `PUT :self` with cause system-is-ready, authenticated by that certificate, recorded as an event.
    let deadline = Instant::now() + LIMIT;
    loop {
        let updates = events_of(&rack, &name, "self_update").await;
        if updates.iter().any(|u| u["cause"] == "system-is-ready") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no system-is-ready self update: {}",
            rack.event_log(&name).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        rack.sim.truth(0)["counters"]["self_updates"]["system-is-ready"]
            .as_u64()
            .is_some_and(|n| n >= 1)
    );
    rack.stop().await;
}

//! The site-wide BMC access policy against a simulated BMC over real TLS: a server without a pin of its own is
//! verified against racklift.toml's CA bundle when one is set, and against the public roots otherwise (which a
//! BMC's own certificate does not chain to).

use std::time::Duration;

use racklift_bmc_access::secrets::DEFAULT_ENV_PREFIX;
use racklift_bmc_access::{AccessPolicy, client_for};
use racklift_bmc_sim::{Personality, PersonalityChoice, Sim, SimConfig};
use racklift_store::Server;

mod common;

fn server(address: String, username: &str) -> Server {
    common::server("tls1", address, username)
}

#[tokio::test]
async fn a_configured_ca_bundle_verifies_bmcs_without_a_pin() {
    let sim = Sim::start(
        SimConfig::new(1, PersonalityChoice::Single(Personality::Generic))
            .with_time_scale(0.001)
            .with_tls(true),
    )
    .await
    .expect("simulator starts");
    let dir = std::env::temp_dir().join(format!("racklift-ca-policy-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let password = dir.join("bmc-password");
    std::fs::write(&password, sim.credentials().1).unwrap();
    let ca = dir.join("bmc-ca.pem");
    std::fs::write(&ca, sim.cert_pem().expect("a TLS simulator has a certificate")).unwrap();
    let server = server(sim.bmc_url(0), sim.credentials().0);

    let trusted = AccessPolicy::load(Some(&ca), &dir, DEFAULT_ENV_PREFIX).expect("load the policy");
    let client = client_for(&server, Duration::from_secs(10), &trusted)
        .await
        .expect("client");
    let system = client
        .read_system()
        .await
        .expect("the BMC's certificate chains to the configured CA");
    assert!(
        system.odata_id.contains("/redfish/v1/Systems/"),
        "{}",
        system.odata_id
    );

    let public_roots = AccessPolicy::load(None, &dir, DEFAULT_ENV_PREFIX).expect("load the policy");
    let client = client_for(&server, Duration::from_secs(10), &public_roots)
        .await
        .expect("client");
    let err = client
        .read_system()
        .await
        .expect_err("a self-signed BMC does not chain to the public roots");
    assert!(
        format!("{err:#}").to_lowercase().contains("certificate"),
        "{err:#}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

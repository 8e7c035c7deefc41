//! A BMC without a Bios resource (as on some of DMTF's mockups and sushy-tools' fake driver), end to end: while
//! a BIOS profile sets attributes for the server the deploy request is refused before anything is touched; with
//! none, it is refused until the request says the server needs no BIOS settings, and then the deployment passes
//! the BIOS by, says why, and completes.

use std::time::Duration;

use racklift_bmc_sim::{Faults, Personality, PersonalityChoice};
use racklift_deploy::{Cause, State};
use racklift_tests::rack::Rack;
use serde_json::{Value, json};

const SCALE: f64 = 0.01;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bmc_without_bios_is_refused_with_attributes_and_deploys_without() {
    let rack = Rack::start(1, PersonalityChoice::Single(Personality::Generic), SCALE).await;
    rack.sim.set_faults(
        0,
        Faults {
            no_bios: true,
            ..Faults::default()
        },
    );
    let name = rack.sim.name(0).to_owned();

    let refused = rack.deploy(&name, json!({})).await;
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.expect("an error body");
    assert_eq!(body["error"]["code"], "bios_absent", "{body}");
    assert!(
        rack.store.latest_deployment(&name).await.expect("read").is_none(),
        "nothing was started"
    );

    let r = rack
        .admin(reqwest::Method::DELETE, "/1.0/bios-profiles/incusos-baseline")
        .send()
        .await
        .expect("the API answers");
    assert!(r.status().is_success(), "{}", r.status());
    // No profile is left for it: refused until the request says the server needs no BIOS settings.
    let refused = rack.deploy(&name, json!({})).await;
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.expect("an error body");
    assert_eq!(body["error"]["code"], "no_bios_profile", "{body}");
    assert!(
        rack.store.latest_deployment(&name).await.expect("read").is_none(),
        "nothing was started"
    );
    let accepted = rack.deploy(&name, json!({ "no_bios_settings": true })).await;
    assert_eq!(accepted.status(), 202);
    let body: Value = accepted.json().await.expect("the deployment");
    assert_eq!(body["no_bios_settings"], true, "{body}");
    assert_eq!(body["bios_profiles"], json!([]), "{body}");
    assert_eq!(
        body["bios_matched_on"]["attribute_registry"],
        Value::Null,
        "{body}"
    );
    rack.wait_completed(&name, Duration::from_secs(120)).await;
    let passed_by: Vec<_> = rack
        .transitions(&name)
        .await
        .into_iter()
        .filter(|t| t.from == State::CheckBIOS)
        .collect();
    assert_eq!(passed_by.len(), 1, "{passed_by:?}");
    assert_eq!(
        (passed_by[0].to, passed_by[0].cause),
        (State::PowerOffSecureBoot, Cause::BiosAbsent)
    );
    assert_eq!(rack.sim.truth(0)["counters"]["bios_applies"], 0);
    rack.stop().await;
}

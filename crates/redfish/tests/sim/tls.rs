//! TLS modes against the simulator's self-signed certificate: pinned (certificate or public
//! key) accepted, any other pin rejected, default verification rejected, opt-out accepted.

use racklift_bmc_sim::{PersonalityChoice, Sim, SimConfig};
use racklift_redfish::{BmcClient, ErrorClass, Pin, TlsMode};

use crate::common::{TIME_SCALE, config};

#[tokio::test]
async fn pinning_and_verification_against_a_self_signed_bmc() {
    let sim = Sim::start(
        SimConfig::new(1, PersonalityChoice::Single(racklift_bmc_sim::Personality::Dell))
            .with_time_scale(TIME_SCALE)
            .with_tls(true),
    )
    .await
    .expect("sim");
    assert!(sim.bmc_url(0).starts_with("https://"));
    let der = sim.cert_der().expect("certificate").to_vec();
    let with_mode = |tls: TlsMode| {
        let mut c = config(&sim, 0);
        c.tls = tls;
        BmcClient::new(c).expect("client")
    };

    let cert_pin = Pin::cert_of(&der);
    let spki_pin = Pin::spki_of(&der).expect("spki");
    for pin in [cert_pin, spki_pin] {
        let system = with_mode(TlsMode::Pinned(vec![pin]))
            .read_system()
            .await
            .expect("pinned");
        assert!(system.power_state.is_some());
    }

    let other_key = rcgen::KeyPair::generate().expect("key");
    let other = rcgen::CertificateParams::new(vec!["other".into()])
        .expect("params")
        .self_signed(&other_key)
        .expect("cert");
    let wrong = Pin::cert_of(other.der());
    let err = with_mode(TlsMode::Pinned(vec![wrong]))
        .read_system()
        .await
        .expect_err("wrong pin");
    assert_eq!(err.class(), ErrorClass::Tls, "{err:?}");
    assert!(!err.is_retryable());

    let err = with_mode(TlsMode::WebPkiRoots)
        .read_system()
        .await
        .expect_err("unknown issuer");
    assert_eq!(err.class(), ErrorClass::Tls, "{err:?}");

    with_mode(TlsMode::InsecureNoVerify)
        .read_system()
        .await
        .expect("explicit opt-out");
}

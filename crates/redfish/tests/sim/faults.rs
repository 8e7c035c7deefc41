//! Fault injection: each failure lands in its error class, with status and message id, and
//! polite retries hide single transient failures of idempotent calls.

use std::time::Duration;

use racklift_bmc_sim::Faults;
use racklift_redfish::{BmcClient, Credentials, Error, ErrorClass, PowerState};

use crate::common::{client, config, eventually, fleet};

#[tokio::test]
async fn a_single_5xx_is_retried_politely_and_a_persistent_one_is_busy() {
    let sim = fleet(1, "generic").await;
    let c = client(&sim, 0);
    sim.set_faults(
        0,
        Faults {
            status: Some(500),
            remaining: Some(1),
            ..Default::default()
        },
    );
    c.read_system()
        .await
        .expect("one 500 is absorbed by the polite retry");

    sim.set_faults(
        0,
        Faults {
            status: Some(500),
            ..Default::default()
        },
    );
    let err = c.read_system().await.expect_err("persistent 500");
    assert_eq!((err.class(), err.status()), (ErrorClass::Busy, Some(500)));
    assert!(err.has_message("GeneralError"), "{err:?}");
    assert!(err.is_retryable());
    let before = sim.audit(0).requests;
    // A restart is not idempotent: exactly one attempt.
    let err = c.force_restart().await.expect_err("500 on reset");
    assert!(err.is_retryable());
    assert_eq!(
        sim.audit(0).requests - before,
        3,
        "one GET, retried twice, no POST retry: {err:?}"
    );
}

#[tokio::test]
async fn busy_bmc_is_retryable_with_its_message_id() {
    let sim = fleet(1, "dell").await;
    sim.set_faults(
        0,
        Faults {
            busy: true,
            ..Default::default()
        },
    );
    let err = client(&sim, 0).read_system().await.expect_err("busy");
    assert_eq!(err.status(), Some(503));
    assert!(
        err.message_id().is_some_and(|m| m.ends_with("RAC0218")),
        "{err:?}"
    );
    assert_eq!(err.class(), ErrorClass::Busy);
    assert!(err.to_string().contains("RAC0218"));
}

#[tokio::test]
async fn a_hanging_bmc_hits_the_call_deadline() {
    let sim = fleet(1, "generic").await;
    sim.set_faults(
        0,
        Faults {
            hang: true,
            ..Default::default()
        },
    );
    let c = client(&sim, 0).with_deadline(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let err = c.read_system().await.expect_err("hang");
    assert!(
        matches!(
            err,
            Error::Deadline {
                operation: "read_system",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert!(started.elapsed() < Duration::from_secs(3));
    // The permit was released: once the BMC answers again, the same client works.
    sim.set_faults(0, Faults::default());
    client(&sim, 0).read_system().await.expect("recovered");
}

#[tokio::test]
async fn dropped_connections_are_transport_errors() {
    let sim = fleet(1, "generic").await;
    sim.set_faults(
        0,
        Faults {
            reset_connection: true,
            ..Default::default()
        },
    );
    let err = client(&sim, 0).read_system().await.expect_err("reset");
    assert_eq!(err.class(), ErrorClass::Transport, "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(err.status(), None);
}

#[tokio::test]
async fn conflict_right_after_power_off_is_retryable() {
    let sim = fleet(1, "dell").await;
    let c = client(&sim, 0);
    sim.set_faults(
        0,
        Faults {
            power_on_conflict: true,
            ..Default::default()
        },
    );
    c.power_on().await.expect("on");
    eventually("on", Duration::from_secs(10), || async {
        c.read_system().await.expect("sys").power_state == Some(PowerState::On)
    })
    .await;
    c.power_off().await.expect("off");
    eventually("off", Duration::from_secs(10), || async {
        c.read_system().await.expect("sys").power_state == Some(PowerState::Off)
    })
    .await;
    let err = c.power_on().await.expect_err("409 right after power-off");
    assert_eq!(err.status(), Some(409));
    assert!(err.has_message("ActionParameterValueConflict"), "{err:?}");
    assert!(err.is_retryable());
    // After the window (60 s nominal, 0.6 s here) the durable retry succeeds.
    eventually("power on accepted", Duration::from_secs(10), || async {
        c.power_on().await.is_ok()
    })
    .await;
}

#[tokio::test]
async fn wrong_credentials_are_auth_errors_and_never_printed() {
    let sim = fleet(1, "generic").await;
    let mut cfg = config(&sim, 0);
    cfg.credentials = Credentials::new("admin", "not-the-password-xyzzy");
    let c = BmcClient::new(cfg).expect("client");
    let err = c.read_system().await.expect_err("401");
    assert_eq!((err.class(), err.status()), (ErrorClass::Auth, Some(401)));
    let shown = format!("{err} {err:?} {c:?}");
    assert!(!shown.contains("xyzzy"), "{shown}");
}

#[tokio::test]
async fn every_operation_is_timed_by_vendor_and_failures_are_counted_by_class() {
    let sim = fleet(1, "generic").await;
    let mut cfg = config(&sim, 0);
    cfg.vendor = Some(" Metrics-Probe ".into());
    let c = BmcClient::new(cfg).expect("client");
    assert_eq!(c.vendor(), "metrics-probe");
    let m = racklift_metrics::global();
    let calls = || {
        m.bmc_call_duration
            .with_label_values(&["metrics-probe", "read_system"])
            .get_sample_count()
    };
    let busy = || {
        m.bmc_call_errors
            .with_label_values(&["metrics-probe", "busy"])
            .get()
    };
    c.read_system().await.expect("read");
    assert_eq!((calls(), busy()), (1, 0));
    sim.set_faults(
        0,
        Faults {
            status: Some(500),
            ..Default::default()
        },
    );
    // One operation, however many polite retries it made.
    c.read_system().await.expect_err("persistent 500");
    assert_eq!((calls(), busy()), (2, 1));
}

//! Power and reset on every personality, reboot-detection signals, the fence header and the
//! per-BMC limiter.

use std::time::Duration;

use racklift_bmc_sim::Personality;
use racklift_redfish::{BmcClient, Error, Fence, HostLimiter, PowerOutcome, PowerState, ResetType};

use crate::common::{client, config, eventually, fleet};

async fn wait_power(c: &BmcClient, want: PowerState) {
    eventually(
        &format!("{} to reach {want}", c.server()),
        Duration::from_secs(10),
        || async { c.read_system().await.expect("read system").power_state == Some(want.clone()) },
    )
    .await;
}

#[tokio::test]
async fn power_cycle_on_every_personality() {
    let sim = fleet(5, "mix").await;
    for i in 0..sim.len() {
        let personality = sim.personality(i);
        let c = client(&sim, i);
        let allowed = c
            .allowed_reset_types()
            .await
            .expect("reset types")
            .expect("advertised");
        assert!(
            allowed.contains(&ResetType::On) && allowed.contains(&ResetType::ForceOff),
            "{personality:?}: {allowed:?}"
        );
        if personality == Personality::Dell {
            assert!(allowed.contains(&ResetType::PowerCycle));
        }

        let outcome = c.power_off().await.expect("power off");
        if let PowerOutcome::Sent(sent) = &outcome {
            assert_eq!(sent.reset_type, ResetType::ForceOff);
        }
        wait_power(&c, PowerState::Off).await;
        assert_eq!(
            c.power_off().await.expect("again"),
            PowerOutcome::AlreadyThere,
            "{personality:?}"
        );

        let before = c.read_system().await.expect("system").last_reset_time;
        match c.power_on().await.expect("power on") {
            PowerOutcome::Sent(sent) => assert_eq!(sent.reset_type, ResetType::On, "{personality:?}"),
            other => panic!("{personality:?}: expected a power-on, got {other:?}"),
        }
        wait_power(&c, PowerState::On).await;
        let restart = c.force_restart().await.expect("restart");
        assert_eq!(restart.reset_type, ResetType::ForceRestart);

        let system = c.read_system().await.expect("system");
        let has_progress = !matches!(personality, Personality::Dell | Personality::Supermicro);
        let has_reset_time = personality != Personality::Hpe;
        assert_eq!(
            system.boot_progress.is_some(),
            has_progress,
            "{personality:?} BootProgress"
        );
        assert_eq!(
            system.last_reset_time.is_some(),
            has_reset_time,
            "{personality:?} LastResetTime"
        );
        if has_reset_time {
            assert!(
                system.last_reset_time > before,
                "{personality:?}: LastResetTime advances"
            );
        }

        let audit = sim.audit(i);
        assert_eq!(audit.unfenced_mutations, 0, "{personality:?}");
        assert!(audit.stale_mutations.is_empty(), "{personality:?}");
        // At least power-on and restart (power-off is skipped when the machine starts off).
        assert!(audit.fenced_mutations >= 2, "{personality:?}: {audit:?}");
        assert_eq!(audit.fenced_mutations, audit.mutations);
        assert_eq!(audit.max_concurrent, 1, "{personality:?}");
    }
}

#[tokio::test]
async fn mutations_carry_the_fence_and_stale_tokens_show_in_the_audit() {
    let sim = fleet(1, "generic").await;
    let base = BmcClient::new(config(&sim, 0)).expect("client");
    assert!(matches!(
        base.power_on().await,
        Err(Error::NoFence) | Ok(PowerOutcome::AlreadyThere)
    ));
    base.with_fence(Fence(5))
        .force_restart()
        .await
        .expect("fenced restart");
    base.with_fence(Fence(3))
        .force_restart()
        .await
        .expect("stale restart still executes");
    let audit = sim.audit(0);
    assert_eq!(audit.unfenced_mutations, 0);
    assert_eq!(audit.highest_fence, Some(5));
    assert_eq!(audit.stale_mutations.len(), 1, "{audit:?}");
    assert_eq!(audit.stale_mutations[0].token, 3);
}

#[tokio::test]
async fn one_call_in_flight_per_bmc_across_clients() {
    let sim = fleet(1, "generic").await;
    // Slow answers make overlapping requests certain if the limiter let them through.
    sim.set_faults(
        0,
        racklift_bmc_sim::Faults {
            slow_ms: 20,
            ..Default::default()
        },
    );
    let limiter = HostLimiter::new(1);
    let clients: Vec<BmcClient> = (0..4)
        .map(|_| {
            let mut c = config(&sim, 0);
            c.limiter = limiter.clone();
            BmcClient::new(c).expect("client")
        })
        .collect();
    let calls = clients.iter().cycle().take(12).map(|c| c.read_system());
    for result in futures::future::join_all(calls).await {
        result.expect("read");
    }
    assert_eq!(sim.audit(0).max_concurrent, 1);
    assert_eq!(limiter.live_hosts(), 1);

    // Control: a limiter allowing four proves the audit sees overlap when it happens.
    let wide = HostLimiter::new(4);
    let mut c = config(&sim, 0);
    c.limiter = wide;
    let wide_client = BmcClient::new(c).expect("client");
    let calls = (0..8).map(|_| wide_client.read_system());
    for result in futures::future::join_all(calls).await {
        result.expect("read");
    }
    assert!(sim.audit(0).max_concurrent > 1);
}

#[tokio::test]
async fn reset_types_not_advertised_are_refused_before_sending() {
    let sim = fleet(5, "mix").await;
    let every = [
        ResetType::Nmi,
        ResetType::Suspend,
        ResetType::Pause,
        ResetType::Resume,
        ResetType::FullPowerCycle,
    ];
    for i in 0..sim.len() {
        let c = client(&sim, i);
        let allowed = c.allowed_reset_types().await.expect("types").expect("advertised");
        let missing = every
            .iter()
            .find(|t| !allowed.contains(t))
            .expect("some type is not advertised")
            .clone();
        let before = sim.audit(i).mutations;
        let err = c.reset(missing.clone()).await.expect_err("not advertised");
        assert_eq!(
            err.class(),
            racklift_redfish::ErrorClass::Unsupported,
            "{missing}: {err:?}"
        );
        assert_eq!(sim.audit(i).mutations, before, "nothing sent for {missing}");
    }
}

//! The rolling restart / reboot table and the per-server decision.

mod common;

use common::t;
use racklift_deploy::rolling::{
    EndReason, KeptEvacuated, RollingConfig, RollingDecision, RollingKind, RollingState as RS, RollingStep,
    STATES, ServerUpdate, decide_server,
};

fn cfg() -> RollingConfig {
    RollingConfig::default()
}

#[test]
fn table_is_in_enum_order_and_waits_name_their_step() {
    for (i, d) in STATES.iter().enumerate() {
        assert_eq!(d.state as usize, i, "{} out of order", d.state);
        if matches!(d.kind, RollingKind::Trigger | RollingKind::Wait) {
            assert!(d.step.is_some(), "{} has no step", d.state);
        }
    }
    // The reboot is the one wait that cannot fall back to its trigger.
    let no_retrigger: Vec<RS> = STATES
        .iter()
        .filter(|d| d.kind == RollingKind::Wait && !d.retrigger)
        .map(|d| d.state)
        .collect();
    assert_eq!(no_retrigger, vec![RS::InMaintenanceRebooting]);
    assert_eq!(
        RS::InMaintenanceRestorePending.def().kept_evacuated,
        KeptEvacuated::Done
    );
}

#[test]
fn a_rolling_reboot_takes_seven_steps_per_server() {
    // Entered at evacuation pending: evacuate (trigger, wait), reboot (trigger, wait),
    // restore (trigger, wait), post restore.
    let path = [
        RS::EvacuationPending,
        RS::Evacuating,
        RS::InMaintenanceRebootPending,
        RS::InMaintenanceRebooting,
        RS::InMaintenanceRestorePending,
        RS::InMaintenanceRestoring,
        RS::InMaintenancePostRestore,
    ];
    let mut rec = ServerUpdate {
        reboot_pending: true,
        ..ServerUpdate::default()
    };
    let mut now = 0;
    for (i, state) in path.iter().enumerate() {
        let (next, decision) = decide_server(&rec, *state, t(now), &cfg(), Some(20));
        match state.def().kind {
            RollingKind::Trigger => assert!(
                matches!(decision, RollingDecision::Trigger(_)),
                "{i}: {decision:?}"
            ),
            RollingKind::Wait | RollingKind::Settle => {
                assert!(
                    matches!(decision, RollingDecision::Wait { .. }),
                    "{i}: {decision:?}"
                )
            }
            other => panic!("{other:?}"),
        }
        rec = next;
        now += 10;
    }
    assert!(!rec.reboot_pending, "the reboot was triggered");
    let (_, done) = decide_server(&rec, RS::InMaintenancePostRestore, t(now + 20), &cfg(), Some(20));
    assert_eq!(done, RollingDecision::Done);
    assert_eq!(
        decide_server(&rec, RS::UpToDate, t(now), &cfg(), None).1,
        RollingDecision::Done
    );
}

fn triggered(step: RollingStep, at: i64, retries: u32) -> ServerUpdate {
    ServerUpdate {
        step: Some(step),
        step_triggered_at: Some(t(at)),
        retries,
        ..ServerUpdate::default()
    }
}

#[test]
fn stalled_waits_retrigger_counted_until_the_budget_is_spent() {
    let evac = cfg().evacuate_timeout_secs as i64;
    let (rec, d) = decide_server(
        &triggered(RollingStep::Evacuate, 0, 0),
        RS::Evacuating,
        t(evac),
        &cfg(),
        None,
    );
    assert_eq!(d, RollingDecision::Trigger(RollingStep::Evacuate));
    assert_eq!((rec.retries, rec.step_triggered_at), (1, Some(t(evac))));
    let (_, d) = decide_server(
        &triggered(RollingStep::Evacuate, 0, 3),
        RS::Evacuating,
        t(evac),
        &cfg(),
        None,
    );
    assert_eq!(
        d,
        RollingDecision::EndRun(EndReason::AttemptsExhausted(RollingStep::Evacuate))
    );
}

#[test]
fn a_reboot_that_does_not_come_back_ends_the_run() {
    let reboot = cfg().reboot_timeout_secs as i64;
    let rec = triggered(RollingStep::Reboot, 0, 0);
    let (_, d) = decide_server(&rec, RS::InMaintenanceRebooting, t(reboot - 1), &cfg(), None);
    assert!(matches!(d, RollingDecision::Wait { .. }));
    let (_, d) = decide_server(&rec, RS::InMaintenanceRebooting, t(reboot), &cfg(), None);
    assert_eq!(
        d,
        RollingDecision::EndRun(EndReason::NoFallback(RollingStep::Reboot))
    );
}

#[test]
fn a_wait_with_no_outstanding_attempt_ends_the_run() {
    let (_, d) = decide_server(
        &ServerUpdate::default(),
        RS::InMaintenanceRestoring,
        t(0),
        &cfg(),
        None,
    );
    assert_eq!(
        d,
        RollingDecision::EndRun(EndReason::NoOutstandingAttempt(RollingStep::Restore))
    );
}

#[test]
fn unsupported_states_end_the_run_wherever_observed() {
    for s in [
        RS::Undefined,
        RS::Updating,
        RS::UpdatePending,
        RS::RebootPending,
        RS::Rebooting,
    ] {
        let (_, d) = decide_server(&ServerUpdate::default(), s, t(0), &cfg(), None);
        assert_eq!(d, RollingDecision::EndRun(EndReason::Unsupported(s)), "{s}");
    }
}

#[test]
fn a_trigger_already_issued_waits_for_the_observed_state_to_catch_up() {
    let (rec, d) = decide_server(
        &triggered(RollingStep::Restore, 0, 0),
        RS::InMaintenanceRestorePending,
        t(5),
        &cfg(),
        None,
    );
    assert!(matches!(d, RollingDecision::Wait { .. }));
    assert_eq!(rec.retries, 0);
}

#[test]
fn kept_evacuated_servers_skip_the_restore() {
    let rec = ServerUpdate {
        keep_evacuated: true,
        ..triggered(RollingStep::Reboot, 0, 0)
    };
    let (_, d) = decide_server(&rec, RS::InMaintenanceRestorePending, t(5), &cfg(), None);
    assert_eq!(d, RollingDecision::Done);
}

#[test]
fn cluster_post_restore_delay_overrides_the_default() {
    let rec = ServerUpdate {
        post_restore_since: Some(t(0)),
        ..ServerUpdate::default()
    };
    assert_eq!(
        decide_server(&rec, RS::InMaintenancePostRestore, t(20), &cfg(), Some(20)).1,
        RollingDecision::Done
    );
    assert!(matches!(
        decide_server(&rec, RS::InMaintenancePostRestore, t(20), &cfg(), None).1,
        RollingDecision::Wait { .. }
    ));
}

//! The BIOS apply task monitor: recorded from the outcome, carried into its wait only.

mod common;

use common::*;
use racklift_deploy::facts::{CancelRequest, PowerState, TaskState};
use racklift_deploy::table::{Kind, STATES};
use racklift_deploy::{Facts, Jitter, Outcome, State, apply_outcome, decide};

const MONITOR: &str = "/redfish/v1/TaskService/TaskMonitors/7";

/// The task monitor of a BIOS apply is recorded from the outcome, follows its apply through the
/// power on into the wait, and is dropped on every other transition.
#[test]
fn bios_task_monitor_follows_its_apply_into_the_wait_only() {
    enum In {
        Outcome(Outcome),
        Facts(Facts),
    }
    let accepted = || {
        In::Outcome(Outcome::Accepted {
            task_monitor: MONITOR.into(),
        })
    };
    let task = |state, p| {
        In::Facts(Facts {
            bios_task: Some(state),
            ..power(p)
        })
    };
    let cancel = In::Facts(Facts {
        cancel: Some(CancelRequest::default()),
        ..on()
    });
    use PowerState::{Off, On};
    use State as S;
    // (name, state, monitor held before, seconds in the state, input, state after, monitor kept)
    let cases = [
        (
            "apply accepted as a task",
            S::ApplyBIOS,
            false,
            1,
            accepted(),
            S::PowerOnBIOS,
            true,
        ),
        (
            "deferred apply accepted as a task",
            S::ApplyBIOSDeferred,
            false,
            1,
            accepted(),
            S::PowerOnBIOSDeferred,
            true,
        ),
        (
            "apply answered at once",
            S::ApplyBIOS,
            false,
            1,
            In::Outcome(Outcome::Succeeded),
            S::PowerOnBIOS,
            false,
        ),
        (
            "power on carries it into the wait",
            S::PowerOnBIOS,
            true,
            1,
            In::Outcome(Outcome::Succeeded),
            S::WaitBIOSApplied,
            true,
        ),
        (
            "a power on retry keeps it",
            S::PowerOnBIOSDeferred,
            true,
            1,
            In::Outcome(Outcome::Retryable { error: "503".into() }),
            S::PowerOnBIOSDeferred,
            true,
        ),
        (
            "still running: kept while waiting",
            S::WaitBIOSApplied,
            true,
            5,
            task(TaskState::Running, On),
            S::WaitBIOSApplied,
            true,
        ),
        (
            "completed: dropped on to the verification",
            S::WaitBIOSApplied,
            true,
            5,
            task(TaskState::Completed, On),
            S::VerifyBIOS,
            false,
        ),
        (
            "gone after the settle delay: dropped",
            S::WaitBIOSAppliedDeferred,
            true,
            60,
            task(TaskState::Unavailable, On),
            S::VerifyBIOSDeferred,
            false,
        ),
        (
            "wait timeout: the next round gets its own",
            S::WaitBIOSApplied,
            true,
            600,
            task(TaskState::Running, Off),
            S::PowerOffBIOS,
            false,
        ),
        (
            "canceled: dropped",
            S::WaitBIOSAppliedDeferred,
            true,
            5,
            cancel,
            S::Cancel,
            false,
        ),
        (
            "a task of another action is not kept",
            S::PowerOffSecureBoot,
            false,
            1,
            accepted(),
            S::WaitPowerOffSecureBoot,
            false,
        ),
    ];
    for (name, from, held, after, input, to, kept) in cases {
        let mut d = at_state(from, 100);
        d.machine.bios_task_monitor = held.then(|| MONITOR.to_owned());
        let now = t(100 + after);
        let step = match &input {
            In::Outcome(o) => apply_outcome(&d, o, now, &cfg(), Jitter::NONE),
            In::Facts(f) => decide(&d, f, now, &cfg()),
        };
        assert_eq!(step.machine.state, to, "{name}");
        assert_eq!(
            step.machine.bios_task_monitor.as_deref(),
            kept.then_some(MONITOR),
            "{name}"
        );
        assert_eq!(step.changed, step.machine != d.machine, "{name}");
    }
}

/// `Accepted` is a success everywhere else: it advances a trigger and records no error.
#[test]
fn an_accepted_task_is_a_success() {
    let accepted = Outcome::Accepted {
        task_monitor: MONITOR.into(),
    };
    assert!(accepted.is_success() && Outcome::Succeeded.is_success());
    assert!(!Outcome::DeadlineExpired.is_success());
    for def in STATES.iter().filter(|d| d.kind == Kind::Trigger) {
        let d = at_state(def.state, 100);
        let succeeded = apply_outcome(&d, &Outcome::Succeeded, t(101), &cfg(), Jitter::NONE);
        let step = apply_outcome(&d, &accepted, t(101), &cfg(), Jitter::NONE);
        assert_eq!(step.transition, succeeded.transition, "{}", def.state);
        assert_eq!(step.machine.last_error, None, "{}", def.state);
    }
    // An action issued inside a wait (powering a halted install on) stays in the wait.
    let d = at_state(State::WaitInstall, 100);
    let step = apply_outcome(&d, &accepted, t(101), &cfg(), Jitter::NONE);
    assert_eq!((step.machine.state, step.changed), (State::WaitInstall, false));
}

/// Deployments stored before the profile names and the task monitor were recorded still load.
#[test]
fn stored_deployments_without_the_new_fields_deserialize() {
    let mut d = at_state(State::WaitBIOSApplied, 100);
    d.machine.bios_task_monitor = Some(MONITOR.to_owned());
    let mut old = serde_json::to_value(&d).unwrap();
    assert_eq!(old["plan"]["bios_profiles"], serde_json::json!(["sriov"]));
    assert_eq!(old["machine"]["bios_task_monitor"], MONITOR);
    old["plan"].as_object_mut().unwrap().remove("bios_profiles");
    old["machine"]
        .as_object_mut()
        .unwrap()
        .remove("bios_task_monitor");
    let loaded: racklift_deploy::Deployment = serde_json::from_value(old).unwrap();
    assert!(loaded.plan.bios_profiles.is_empty());
    assert_eq!(loaded.machine.bios_task_monitor, None);
    assert_eq!(loaded.plan.bios, d.plan.bios);
}

//! The triage rewrites: which states a failed deployment may be resumed in, what a resumed machine looks like,
//! and when a live one counts as overdue.

mod common;

use common::*;
use racklift_deploy::decision::{Cause, Failure};
use racklift_deploy::reboot::RebootWatch;
use racklift_deploy::table::Kind;
use racklift_deploy::triage::{Overdue, cancel_failed, progress, resume_cancel, resume_states, state_budget};
use racklift_deploy::{Machine, ResumeError, State, resume_at};

/// A machine that failed in `state` at t(500) after spending its budget there.
fn failed_in(state: State) -> Machine {
    let mut m = at_state(state, 100).machine;
    m.seq = 17;
    m.retries = 4;
    m.bios_fallbacks = 2;
    m.retry_at = Some(t(400));
    m.first_error = Some("first".into());
    m.last_error = Some("last".into());
    m.bios_task_monitor = Some("/redfish/v1/TaskService/Tasks/1".into());
    m.secure_boot_written = true;
    m.install_watch = Some(RebootWatch::anchor(&Default::default(), t(300)));
    m.settle_watch = Some(RebootWatch::anchor(&Default::default(), t(200)));
    m.failure = Some(Failure {
        state,
        cause: Cause::RetriesExhausted,
        error: Some("last".into()),
    });
    m.state = State::Failed;
    m.finished_at = Some(t(500));
    m
}

#[test]
fn resume_accepts_the_failed_state_or_an_earlier_trigger_only() {
    use State as S;
    struct Case {
        failed: State,
        to: State,
        want: Result<(), ResumeError>,
    }
    let ok = |failed, to| Case {
        failed,
        to,
        want: Ok(()),
    };
    let err = |failed, to, want| Case {
        failed,
        to,
        want: Err(want),
    };
    let cases = [
        ok(S::AttachMedia, S::AttachMedia),
        // A wait may be resumed where it failed: its timeout starts over.
        ok(S::WaitInstall, S::WaitInstall),
        ok(S::WaitReboot, S::WaitReboot),
        ok(S::WaitInstall, S::AttachMedia),
        ok(S::WaitInstall, S::PowerOnInstall),
        ok(S::VerifyBIOSDeferred, S::CheckBIOS),
        ok(S::SecureBoot, S::RefreshBMCData),
        ok(S::Cleanup, S::ClearMedia),
        ok(S::Cancel, S::Cancel),
        ok(S::WaitCancel, S::WaitCancel),
        err(
            S::WaitInstall,
            S::WaitMediaAttached,
            ResumeError::NotTrigger {
                requested: S::WaitMediaAttached,
                failed: S::WaitInstall,
            },
        ),
        err(
            S::AttachMedia,
            S::PowerOnInstall,
            ResumeError::NotEarlier {
                requested: S::PowerOnInstall,
                failed: S::AttachMedia,
            },
        ),
        err(
            S::AttachMedia,
            S::Completed,
            ResumeError::NotTrigger {
                requested: S::Completed,
                failed: S::AttachMedia,
            },
        ),
        err(
            S::WaitRegistration,
            S::Cancel,
            ResumeError::NotTrigger {
                requested: S::Cancel,
                failed: S::WaitRegistration,
            },
        ),
        err(
            S::WaitCancel,
            S::AttachMedia,
            ResumeError::InCancelCleanup {
                requested: S::AttachMedia,
                failed: S::WaitCancel,
            },
        ),
    ];
    for c in cases {
        let m = failed_in(c.failed);
        let got = resume_at(&m, c.to, t(1000)).map(|_| ());
        assert_eq!(got, c.want, "failed in {} resumed at {}", c.failed, c.to);
        assert_eq!(
            resume_states(&m).contains(&c.to),
            c.want.is_ok(),
            "resume_states of {} disagrees about {}",
            c.failed,
            c.to
        );
    }
}

#[test]
fn only_failed_machines_with_a_recorded_failure_resume() {
    let live = at_state(State::AttachMedia, 100).machine;
    assert_eq!(
        resume_at(&live, State::AttachMedia, t(1000)),
        Err(ResumeError::NotFailed {
            state: State::AttachMedia
        })
    );
    assert!(resume_states(&live).is_empty());
    let mut old = failed_in(State::AttachMedia);
    old.failure = None;
    assert_eq!(
        resume_at(&old, State::AttachMedia, t(1000)),
        Err(ResumeError::NoFailure)
    );
    assert_eq!(
        resume_cancel(&live, t(1000)),
        Err(ResumeError::NotFailed {
            state: State::AttachMedia
        })
    );
    assert_eq!(
        cancel_failed(&live, t(1000)),
        Err(ResumeError::NotFailed {
            state: State::AttachMedia
        })
    );
}

#[test]
fn a_resumed_machine_has_a_fresh_budget_and_a_new_seq() {
    let m = failed_in(State::WaitInstall);
    let r = resume_at(&m, State::WaitInstall, t(1000)).unwrap();
    assert_eq!(r.state, State::WaitInstall);
    assert_eq!(
        r.seq, 18,
        "a new seq gives the new step job a fresh idempotency key"
    );
    assert_eq!((r.retries, r.bios_fallbacks), (0, 0));
    assert_eq!((r.started_at, r.state_entered_at), (t(1000), t(1000)));
    assert_eq!((r.retry_at, r.failure.clone(), r.finished_at), (None, None, None));
    assert_eq!((r.first_error.clone(), r.last_error.clone()), (None, None));
    assert_eq!(r.bios_task_monitor, None);
    // Entering the install wait afresh takes a new reboot snapshot; what came before stays.
    assert_eq!(r.install_watch, None);
    assert!(r.secure_boot_written && r.settle_watch.is_some());

    let later = resume_at(&failed_in(State::WaitReboot), State::WaitReboot, t(1000)).unwrap();
    assert!(
        later.install_watch.is_some(),
        "the reboot wait needs the install wait's snapshot"
    );

    let early = resume_at(&m, State::SecureBoot, t(1000)).unwrap();
    assert!(!early.secure_boot_written);
    assert_eq!((early.settle_watch, early.install_watch), (None, None));
}

#[test]
fn cancel_of_a_failed_machine_runs_the_clean_up_or_skips_it() {
    let m = failed_in(State::AttachMedia);
    let cleanup = resume_cancel(&m, t(1000)).unwrap();
    assert_eq!(
        (cleanup.state, cleanup.seq, cleanup.retries),
        (State::Cancel, 18, 0)
    );
    assert_eq!((cleanup.finished_at, cleanup.started_at), (None, t(1000)));
    let skipped = cancel_failed(&m, t(1000)).unwrap();
    assert_eq!((skipped.state, skipped.seq), (State::Canceled, 18));
    assert_eq!(skipped.finished_at, Some(t(1000)));
}

#[test]
fn progress_flags_a_wait_past_its_timeout_and_a_trigger_past_its_attempts() {
    let c = cfg();
    struct Case {
        state: State,
        in_state: i64,
        want: Vec<Overdue>,
    }
    let budget = |s: State| state_budget(s, &c).num_seconds();
    let cases = [
        // A wait is overdue only once its timeout plus one poll and one call have passed.
        Case {
            state: State::WaitMediaAttached,
            in_state: 300,
            want: vec![],
        },
        Case {
            state: State::WaitMediaAttached,
            in_state: budget(State::WaitMediaAttached) + 1,
            want: vec![Overdue::State],
        },
        // Four attempts of two minutes and the backoffs between them.
        Case {
            state: State::PowerOffBIOS,
            in_state: 4 * 120 + 5 + 10 + 20,
            want: vec![],
        },
        Case {
            state: State::PowerOffBIOS,
            in_state: budget(State::PowerOffBIOS) + 1,
            want: vec![Overdue::State],
        },
        Case {
            state: State::WaitInstall,
            in_state: 45 * 60 + 10,
            want: vec![],
        },
        Case {
            state: State::WaitRegistration,
            in_state: 2 * 3600 + 200,
            want: vec![Overdue::State, Overdue::Deadline],
        },
    ];
    assert_eq!(budget(State::PowerOffBIOS), 4 * 120 + 5 + 10 + 20 + 10 + 120);
    for case in cases {
        let mut m = at_state(case.state, 0).machine;
        m.retries = 2;
        let p = progress(&m, t(case.in_state), &c);
        assert_eq!(p.overdue, case.want, "{} after {} s", case.state, case.in_state);
        assert_eq!(p.time_in_state_secs, case.in_state);
        // Waits without a fallback never retry; the rest share the step budget.
        let retry_budget = if case.state.def().fallback.is_some() || case.state.kind() != Kind::Wait {
            c.step_retries
        } else {
            0
        };
        assert_eq!((p.retries, p.retry_budget), (2, retry_budget));
    }
    let p = progress(&at_state(State::WaitInstall, 0).machine, t(10), &c);
    assert_eq!(p.state_timeout_secs, Some(45 * 60));
    let p = progress(&at_state(State::AttachMedia, 0).machine, t(10), &c);
    assert_eq!(p.state_timeout_secs, None);
}

//! The dispatcher rules, one test (or table) per rule.

mod common;

use common::*;
use racklift_deploy::facts::{CancelRequest, KeyDb, PowerState, TaskState};
use racklift_deploy::table::{Kind, STATES};
use racklift_deploy::{
    Action, Cause, Decision, Facts, Jitter, Outcome, State, Terminal, apply_outcome, decide,
    run_until_blocked,
};

#[test]
fn trigger_retries_with_exponential_backoff_then_fails() {
    let mut d = at_state(State::PowerOffBIOS, 100);
    let err = Outcome::Retryable { error: "503".into() };
    let mut now = t(100);
    for (n, wait) in [(1, 5), (2, 10), (3, 20)] {
        let step = apply_outcome(&d, &err, now, &cfg(), Jitter::NONE);
        assert_eq!(
            step.decision,
            Decision::Retry {
                at: now + chrono::TimeDelta::seconds(wait)
            },
            "retry {n}"
        );
        assert_eq!(step.machine.retries, n);
        assert_eq!(step.machine.state, State::PowerOffBIOS);
        d.machine = step.machine;
        // Before the backoff expires the trigger is not issued again.
        let early = decide(&d, &on(), now + chrono::TimeDelta::seconds(wait - 1), &cfg());
        assert!(matches!(early.decision, Decision::Retry { .. }));
        assert!(!early.changed);
        now += chrono::TimeDelta::seconds(wait);
        let again = decide(&d, &on(), now, &cfg());
        assert!(matches!(
            again.decision,
            Decision::Act {
                action: Action::PowerOff,
                ..
            }
        ));
    }
    let step = apply_outcome(&d, &err, now, &cfg(), Jitter::NONE);
    assert_eq!(step.decision, Decision::Finished(Terminal::Failed));
    let failure = step.machine.failure.unwrap();
    assert_eq!(
        (failure.state, failure.cause),
        (State::PowerOffBIOS, Cause::RetriesExhausted)
    );
    assert_eq!(step.machine.first_error.as_deref(), Some("503"));
}

#[test]
fn jitter_scales_the_wait() {
    let d = at_state(State::AttachMedia, 100);
    let err = Outcome::Retryable { error: "busy".into() };
    let half = apply_outcome(&d, &err, t(100), &cfg(), Jitter::new(0.5));
    assert_eq!(
        half.decision,
        Decision::Retry {
            at: t(100) + chrono::TimeDelta::milliseconds(2500)
        }
    );
    let none = apply_outcome(&d, &err, t(100), &cfg(), Jitter::new(f64::NAN));
    assert_eq!(none.decision, Decision::Retry { at: t(105) });
}

#[test]
fn non_retryable_fails_at_once_and_deadline_expiry_is_retryable() {
    let d = at_state(State::ApplyBIOS, 100);
    let fatal = apply_outcome(
        &d,
        &Outcome::Fatal {
            error: "PropertyValueNotInList".into(),
        },
        t(101),
        &cfg(),
        Jitter::NONE,
    );
    assert_eq!(fatal.machine.state, State::Failed);
    assert_eq!(
        fatal.machine.failure.as_ref().map(|f| f.cause),
        Some(Cause::NonRetryable)
    );
    let expired = apply_outcome(&d, &Outcome::DeadlineExpired, t(101), &cfg(), Jitter::NONE);
    assert_eq!(expired.machine.state, State::ApplyBIOS);
    assert!(matches!(expired.decision, Decision::Retry { .. }));
}

#[test]
fn call_deadlines_come_with_the_action() {
    let cases = [
        (State::AttachMedia, 20 * 60),
        (State::PowerOnInstall, 120),
        (State::RefreshBMCData, 120),
    ];
    for (state, secs) in cases {
        let step = decide(&at_state(state, 100), &on(), t(100), &cfg());
        match step.decision {
            Decision::Act {
                call_deadline_secs, ..
            } => assert_eq!(call_deadline_secs, secs, "{state}"),
            other => panic!("{state}: {other:?}"),
        }
    }
    let step = decide(&at_state(State::SecureBoot, 100), &on(), t(100), &cfg());
    assert!(matches!(
        step.decision,
        Decision::Act {
            action: Action::EnrollSecureBoot { .. },
            call_deadline_secs: 900
        }
    ));
}

#[test]
fn wait_met_resets_the_counter() {
    let mut d = at_state(State::WaitPowerOffBIOS, 100);
    d.machine.retries = 2;
    let step = decide(&d, &off(), t(110), &cfg());
    assert_eq!(step.machine.state, State::ApplyBIOS);
    assert_eq!(step.machine.retries, 0);
}

#[test]
fn trigger_success_keeps_the_counter_for_its_wait() {
    let mut d = at_state(State::ClearMedia, 100);
    d.machine.retries = 2;
    let step = apply_outcome(&d, &Outcome::Succeeded, t(101), &cfg(), Jitter::NONE);
    assert_eq!(
        (step.machine.state, step.machine.retries),
        (State::WaitMediaCleared, 2)
    );
}

#[test]
fn wait_pending_snoozes_until_poll_or_timeout() {
    let d = at_state(State::WaitMediaAttached, 100);
    let step = decide(&d, &media(false, None), t(110), &cfg());
    assert_eq!(step.decision, Decision::Snooze { until: t(120) });
    let near = decide(&d, &media(false, None), t(100 + 295), &cfg());
    assert_eq!(
        near.decision,
        Decision::Snooze { until: t(400) },
        "never sleeps past the timeout"
    );
}

#[test]
fn wait_timeout_falls_back_counted_then_fails() {
    let mut d = at_state(State::WaitMediaDetached, 100);
    let step = decide(&d, &media(true, Some(IMAGE)), t(400), &cfg());
    assert_eq!(
        (step.machine.state, step.machine.retries),
        (State::DetachMedia, 1)
    );
    d.machine.retries = 3;
    let step = decide(&d, &media(true, Some(IMAGE)), t(400), &cfg());
    assert_eq!(step.machine.state, State::Failed);
    assert_eq!(step.machine.failure.unwrap().cause, Cause::RetriesExhausted);
}

#[test]
fn waits_without_fallback_fail_on_timeout() {
    for (state, timeout) in [
        (State::WaitInstall, 45 * 60),
        (State::WaitReboot, 15 * 60),
        (State::WaitRegistration, 30 * 60),
    ] {
        // Powering on: neither met nor (in the reboot wait) off, so nothing else decides.
        let d = at_state(state, 100);
        let booting = power(PowerState::PoweringOn);
        let before = decide(&d, &booting, t(100 + timeout - 1), &cfg());
        assert_ne!(before.machine.state, State::Failed, "{state}");
        let step = decide(&d, &booting, t(100 + timeout), &cfg());
        let failure = step.machine.failure.unwrap();
        assert_eq!((failure.state, failure.cause), (state, Cause::WaitTimeout));
    }
}

#[test]
fn bios_rounds_share_one_fallback_budget() {
    // Verification mismatch and BIOS wait timeouts of both passes all count against it.
    let mut d = at_state(State::VerifyBIOS, 100);
    let s1 = decide(&d, &bios(Some(false), None), t(100), &cfg());
    assert_eq!(
        (s1.machine.state, s1.machine.bios_fallbacks),
        (State::PowerOffBIOS, 1)
    );
    d = at_state(State::WaitBIOSAppliedDeferred, 100);
    d.machine.bios_fallbacks = 1;
    let s2 = decide(&d, &off(), t(100 + 600), &cfg());
    assert_eq!(
        (s2.machine.state, s2.machine.bios_fallbacks),
        (State::PowerOffBIOSDeferred, 2)
    );
    d = at_state(State::VerifyBIOSDeferred, 100);
    d.machine.bios_fallbacks = 3;
    let s3 = decide(&d, &bios(Some(true), Some(false)), t(100), &cfg());
    assert_eq!(s3.machine.state, State::Failed);
    assert_eq!(s3.machine.failure.unwrap().cause, Cause::BiosFallbacksExhausted);
    // The power off the verification returns to resets the per-state counter, not this one.
    let mut d = at_state(State::WaitPowerOffBIOS, 100);
    d.machine.bios_fallbacks = 2;
    assert_eq!(decide(&d, &off(), t(101), &cfg()).machine.bios_fallbacks, 2);
}

#[test]
fn unreadable_bios_counts_as_a_retry() {
    let d = at_state(State::CheckBIOS, 100);
    let step = decide(&d, &on(), t(100), &cfg());
    assert_eq!(step.machine.retries, 1);
    assert!(matches!(step.decision, Decision::Retry { .. }));
}

#[test]
fn overall_timeout_is_checked_first() {
    let deadline = 2 * 60 * 60;
    let met = Facts {
        registered: true,
        cancel: Some(CancelRequest::default()),
        ..on()
    };
    for def in STATES.iter().filter(|d| d.kind != Kind::Terminal) {
        let d = at_state(def.state, deadline - 10);
        let step = decide(&d, &met, t(deadline), &cfg());
        let failure = step
            .machine
            .failure
            .unwrap_or_else(|| panic!("{} did not fail", def.state));
        assert_eq!(
            (failure.state, failure.cause),
            (def.state, Cause::DeploymentTimeout)
        );
    }
}

#[test]
fn cancel_preempts_every_state_but_its_own_cleanup() {
    for def in STATES.iter().filter(|d| d.kind != Kind::Terminal) {
        for skip in [false, true] {
            let d = at_state(def.state, 100);
            let facts = Facts {
                cancel: Some(CancelRequest { skip_cleanup: skip }),
                ..on()
            };
            let step = decide(&d, &facts, t(101), &cfg());
            if def.state.is_cancel_cleanup() {
                let cause = step.transition.map(|tr| tr.cause);
                assert!(
                    !matches!(cause, Some(Cause::CancelRequested | Cause::CancelSkipCleanup)),
                    "{}",
                    def.state
                );
                continue;
            }
            let want = if skip { State::Canceled } else { State::Cancel };
            assert_eq!(step.machine.state, want, "{} skip={skip}", def.state);
            if skip {
                // Nothing to trigger: the server is left untouched.
                assert_eq!(step.decision, Decision::Finished(Terminal::Canceled));
            }
        }
    }
}

#[test]
fn cancel_cleans_up_then_waits_for_power_off() {
    let d = at_state(State::Cancel, 100);
    let step = decide(&d, &on(), t(100), &cfg());
    assert!(matches!(
        step.decision,
        Decision::Act {
            action: Action::CancelCleanup,
            ..
        }
    ));
}

#[test]
fn terminal_states_stay_and_failed_does_nothing() {
    for state in [State::Completed, State::Failed, State::Canceled] {
        let d = at_state(state, 100);
        let facts = Facts {
            cancel: Some(CancelRequest::default()),
            ..off()
        };
        let step = decide(&d, &facts, t(99_999), &cfg());
        assert!(matches!(step.decision, Decision::Finished(_)), "{state}");
        assert!(!step.changed && step.transition.is_none(), "{state}");
    }
}

#[test]
fn check_bios_keeps_an_unreported_attribute_pending() {
    let d = at_state(State::CheckBIOS, 100);
    let step = decide(&d, &bios(None, Some(true)), t(100), &cfg());
    assert_eq!(step.machine.state, State::PowerOffBIOS);
    assert!(step.machine.bios.first);
    let step = decide(&d, &bios(Some(true), None), t(100), &cfg());
    assert_eq!(step.machine.state, State::PowerOffBIOSDeferred);
    assert!(step.machine.bios.deferred);
}

#[test]
fn verification_overwrites_the_deferred_estimate() {
    let mut d = at_state(State::VerifyBIOS, 100);
    d.machine.bios.first = true;
    d.machine.bios.deferred = true;
    let step = decide(&d, &bios(Some(true), Some(true)), t(100), &cfg());
    assert_eq!(step.machine.state, State::PowerOffSecureBoot);
    assert!(!step.machine.bios.deferred && !step.machine.bios.first);
    d.machine.bios.deferred = false;
    let step = decide(&d, &bios(Some(true), Some(false)), t(100), &cfg());
    assert_eq!(step.machine.state, State::PowerOffBIOSDeferred);
    assert!(step.machine.bios.deferred);
}

#[test]
fn apply_stages_only_what_is_missing_and_skips_when_nothing_is() {
    let d = at_state(State::ApplyBIOS, 100);
    let step = decide(&d, &bios(Some(false), None), t(100), &cfg());
    match step.decision {
        Decision::Act {
            action:
                Action::ApplyBios {
                    deferred: false,
                    attributes,
                },
            ..
        } => {
            assert_eq!(attributes.len(), 1)
        }
        other => panic!("{other:?}"),
    }
    let mut staged = bios(Some(false), None);
    staged.bios.as_mut().unwrap().pending = d.plan.bios.attributes.clone();
    let step = decide(&d, &staged, t(100), &cfg());
    assert_eq!(
        step.transition.map(|tr| (tr.to, tr.cause)),
        Some((State::PowerOnBIOS, Cause::NothingToStage))
    );
}

#[test]
fn bios_applied_waits_for_power_on_and_the_task() {
    let cases = [
        (
            "task running",
            Some(TaskState::Running),
            PowerState::On,
            600 - 1,
            false,
        ),
        (
            "task completed but still off",
            Some(TaskState::Completed),
            PowerState::Off,
            30,
            false,
        ),
        (
            "task gone before settle delay",
            Some(TaskState::Unavailable),
            PowerState::On,
            59,
            false,
        ),
        ("no monitor, after settle delay", None, PowerState::On, 60, true),
        (
            "task failed: verification decides",
            Some(TaskState::Failed),
            PowerState::On,
            1,
            true,
        ),
    ];
    for (name, task, p, after, met) in cases {
        let d = at_state(State::WaitBIOSApplied, 100);
        let facts = Facts {
            bios_task: task,
            ..power(p)
        };
        let step = decide(&d, &facts, t(100 + after), &cfg());
        assert_eq!(step.machine.state == State::VerifyBIOS, met, "{name}");
    }
}

#[test]
fn secure_boot_writes_only_wrong_databases_and_marks_it_first() {
    let d = at_state(State::SecureBoot, 100);
    let correct = Facts {
        key_dbs: correct_key_dbs(),
        ..off()
    };
    let step = decide(&d, &correct, t(100), &cfg());
    assert_eq!(
        step.transition.map(|tr| (tr.to, tr.cause)),
        Some((State::ClearMedia, Cause::CertificatesCorrect))
    );
    assert!(!step.machine.secure_boot_written);

    let mut one_wrong = correct.clone();
    one_wrong.key_dbs.insert(KeyDb::Dbx, vec![fp("unknown")]);
    one_wrong.key_dbs.remove(&KeyDb::KEK);
    let step = decide(&d, &one_wrong, t(100), &cfg());
    assert!(step.machine.secure_boot_written && step.changed);
    match step.decision {
        Decision::Act {
            action: Action::EnrollSecureBoot { enrollment },
            ..
        } => {
            let names: Vec<KeyDb> = enrollment.dbs().iter().map(|(db, _)| *db).collect();
            assert_eq!(
                names,
                vec![KeyDb::KEK, KeyDb::Dbx],
                "unreadable KEK and wrong dbx only"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A plan snapshot without IncusOS certificates for PK, KEK or db (stored before they were
/// shipped, or written past the API) fails the deployment in the secure boot state without an
/// action: whatever the BMC holds, nothing is asked of it. An empty dbx set is fine.
#[test]
fn secure_boot_refuses_a_plan_without_incusos_certificates_before_any_bmc_call() {
    let facts_cases = [
        ("correct databases", correct_key_dbs()),
        ("unreadable databases", Default::default()),
    ];
    for missing in [KeyDb::PK, KeyDb::KEK, KeyDb::Db] {
        for (facts_name, key_dbs) in &facts_cases {
            let mut d = at_state(State::SecureBoot, 100);
            d.plan.secure_boot.incusos.remove(&missing);
            let facts = Facts {
                key_dbs: key_dbs.clone(),
                ..off()
            };
            let step = decide(&d, &facts, t(100), &cfg());
            let case = format!("{missing:?} missing, {facts_name}");
            assert_eq!(step.decision, Decision::Finished(Terminal::Failed), "{case}");
            assert!(!step.machine.secure_boot_written, "{case}");
            let failure = step.machine.failure.expect("a failure");
            assert_eq!(
                (failure.state, failure.cause),
                (State::SecureBoot, Cause::NonRetryable),
                "{case}"
            );
            assert!(
                failure
                    .error
                    .as_deref()
                    .is_some_and(|e| e.contains(&format!("{missing:?}"))),
                "{case}: {failure:?}"
            );
        }
    }
    // Deliberately empty dbx: planned like any other database, no failure.
    let mut d = at_state(State::SecureBoot, 100);
    d.plan.secure_boot.incusos.insert(KeyDb::Dbx, Default::default());
    let facts = Facts {
        key_dbs: correct_key_dbs(),
        ..off()
    };
    let step = decide(&d, &facts, t(100), &cfg());
    assert_eq!(
        step.transition.map(|tr| (tr.to, tr.cause)),
        Some((State::ClearMedia, Cause::CertificatesCorrect))
    );
}

#[test]
fn in_wait_action_errors_are_recorded_not_counted() {
    let d = at_state(State::WaitReboot, 100);
    let step = apply_outcome(
        &d,
        &Outcome::Retryable {
            error: "timeout".into(),
        },
        t(110),
        &cfg(),
        Jitter::NONE,
    );
    assert_eq!(step.machine.state, State::WaitReboot);
    assert_eq!(step.machine.retries, 0);
    assert_eq!(step.machine.last_error.as_deref(), Some("timeout"));
    assert_eq!(step.decision, Decision::Snooze { until: t(120) });
}

#[test]
fn run_until_blocked_chains_and_stops_at_the_bmc() {
    let d = at_state(State::CheckBIOS, 100);
    let (d, transitions, decision) = run_until_blocked(&d, &bios(Some(true), Some(true)), t(100), &cfg());
    assert_eq!(transitions.len(), 1);
    assert_eq!(d.machine.state, State::PowerOffSecureBoot);
    assert!(matches!(
        decision,
        Decision::Act {
            action: Action::PowerOff,
            ..
        }
    ));
}

#[test]
fn records_facts_and_steps_round_trip_through_json() {
    use racklift_deploy::facts::BootProgress;
    use racklift_deploy::{Deployment, Step};
    let mut d = at_state(State::WaitInstall, 100);
    let facts = Facts {
        key_dbs: correct_key_dbs(),
        ..boot(Some(5), Some(BootProgress::OSRunning))
    };
    let step = decide(&d, &facts, t(200), &cfg());
    assert!(step.machine.install_watch.is_some());
    d.machine = step.machine.clone();
    let back: Deployment = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
    assert_eq!(back, d);
    let back: Facts = serde_json::from_str(&serde_json::to_string(&facts).unwrap()).unwrap();
    assert_eq!(back, facts);
    let back: Step = serde_json::from_str(&serde_json::to_string(&step).unwrap()).unwrap();
    assert_eq!(back, step);
    // Facts a worker could not read are simply absent.
    assert_eq!(serde_json::from_str::<Facts>("{}").unwrap(), Facts::default());
}

#[test]
fn a_bmc_without_a_bios_resource_is_passed_by_or_failed_never_retried() {
    // (what, BIOS facts, attributes planned, the state it goes to, the failure's cause)
    let absent = Facts {
        bios_absent: true,
        ..on()
    };
    let unreadable = on();
    let cases = [
        (
            "absent, nothing planned",
            &absent,
            false,
            State::PowerOffSecureBoot,
            None,
        ),
        (
            "absent, attributes planned",
            &absent,
            true,
            State::Failed,
            Some(Cause::BiosAbsent),
        ),
        ("unreadable: retried", &unreadable, true, State::CheckBIOS, None),
    ];
    for (what, facts, planned, to, cause) in cases {
        let mut d = at_state(State::CheckBIOS, 100);
        if !planned {
            d.plan.bios.attributes.clear();
            d.plan.bios.deferred_attributes.clear();
        }
        let step = decide(&d, facts, t(100), &cfg());
        assert_eq!(step.machine.state, to, "{what}");
        let failure = step.machine.failure.as_ref();
        assert_eq!(failure.map(|f| f.cause), cause, "{what}");
        if let Some(f) = failure {
            let error = f.error.as_deref().unwrap_or_default();
            assert!(
                error.contains("no Bios resource") && error.contains("2 attribute"),
                "{what}: {error}"
            );
        }
        if to == State::CheckBIOS {
            assert_eq!(step.machine.retries, 1, "{what}: a failed read counts a retry");
        }
    }
}

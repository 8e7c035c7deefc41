use super::*;

// ---------------------------------------------------------------------------------------------------------------
// Ends of the run
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn undefined_state_ends_the_run_naming_it() {
    // (label, the current server's status, whether its evacuation was triggered already, the step named)
    let rows: [(&str, Option<MS>, bool, Option<St>); 6] = [
        ("Offline while reachable", Some(MS::Offline), false, None),
        ("Blocked", Some(MS::Other("Blocked".into())), false, None),
        ("no status while reachable", None, false, None),
        (
            "Offline while reachable, mid-evacuation",
            Some(MS::Offline),
            true,
            Some(St::Evacuate),
        ),
        (
            "Blocked, mid-evacuation",
            Some(MS::Other("Blocked".into())),
            true,
            Some(St::Evacuate),
        ),
        ("no status, mid-evacuation", None, true, Some(St::Evacuate)),
    ];
    for (label, status, evacuating, step) in rows {
        let list = three_online();
        let mut run = launch(RunKind::Reboot, &list);
        let mut facts: BTreeMap<String, MemberFacts> = list.into_iter().collect();
        let mut now = 0;
        if evacuating {
            let (next, d) = decide_run(&run, &facts, t(now), &cfg(), &settings(None));
            assert_eq!(
                d,
                RunDecision::Trigger {
                    server: "s1".into(),
                    step: St::Evacuate
                },
                "{label}"
            );
            run = next;
            now = 5;
        }
        facts.get_mut("s1").unwrap().status = status;
        let (next, d) = decide_run(&run, &facts, t(now), &cfg(), &settings(None));
        let RunDecision::Fail {
            server: failed,
            step: failed_step,
            state,
            reason,
        } = d
        else {
            panic!("{label}: {d:?}");
        };
        assert_eq!(
            (failed.as_str(), failed_step, state),
            ("s1", step, RS::Undefined),
            "{label}"
        );
        assert!(reason.contains("undefined"), "{label}: {reason}");
        assert_eq!(
            server(&next, "s1").update.last_error.as_deref(),
            Some(reason.as_str()),
            "{label}"
        );
    }
}

#[test]
fn reboot_that_never_comes_back_ends_the_run_at_the_reboot_timeout() {
    let cfg = cfg();
    let rows = [
        ("stays down", Misbehave::Hangs),
        ("answers but never went down", Misbehave::Ignored),
    ];
    for (label, how) in rows {
        let list = three_online();
        let run = launch(RunKind::Reboot, &list);
        let cluster = Cluster::new(&RunKind::Reboot, &list).misbehaving("s1", St::Reboot, how);
        let trace = drive(run, cluster, &cfg, &settings(None));
        let reboots = trace.trigger_times("s1", St::Reboot);
        assert_eq!(reboots.len(), 1, "{label}: no re-trigger");
        let RunDecision::Fail {
            server,
            step,
            state,
            reason,
        } = &trace.end
        else {
            panic!("{label}: {:?}", trace.end);
        };
        assert_eq!(
            (server.as_str(), *step, *state),
            ("s1", Some(St::Reboot), RS::InMaintenanceRebooting),
            "{label}"
        );
        assert!(reason.contains("reboot"), "{label}: {reason}");
        assert_eq!(
            trace.now,
            reboots[0] + cfg.reboot_timeout_secs as i64,
            "{label}: at the timeout"
        );
        assert!(
            trace.triggers().iter().all(|(s, _)| s == "s1"),
            "{label}: nothing else touched"
        );
    }
}

#[test]
fn a_reboot_whose_worker_stopped_before_the_call_is_triggered_again_once_the_call_is_over() {
    // The trigger was recorded, then the worker stopped (killed, or its lease lost) before the server saw the
    // call: no answer recorded, and the server stays up. Unlike a reboot that was answered and never came back
    // (which ends the run at the reboot timeout), it is owed again once the call's time is over.
    let cfg = cfg();
    let list = three_online();
    let run = launch(RunKind::Reboot, &list);
    let cluster = Cluster::new(&RunKind::Reboot, &list).misbehaving("s2", St::Reboot, Misbehave::Ignored);
    let mut lost = false;
    let trace = drive_with(run, cluster, 0, &cfg, &settings(None), |_, run, cluster| {
        let s = run.servers.iter_mut().find(|s| s.name == "s2").unwrap();
        if !lost && s.update.step == Some(St::Reboot) && s.update.step_triggered_at.is_some() {
            // The call never reached the server, and no answer was recorded.
            s.reboot_unconfirmed = true;
            cluster.misbehave = None;
            lost = true;
        }
    });
    assert_eq!(trace.end, RunDecision::Completed);
    let reboots = trace.trigger_times("s2", St::Reboot);
    assert_eq!(reboots.len(), 2, "{reboots:?}");
    assert!(
        reboots[1] >= reboots[0] + cfg.incus_call_timeout_secs as i64,
        "not before the call could have been answered: {reboots:?}"
    );
    assert!(
        reboots[1] < reboots[0] + cfg.reboot_timeout_secs as i64,
        "well before the reboot timeout: {reboots:?}"
    );
    assert_eq!(trace.run.progress(), (3, 3));
}

#[test]
fn a_reboot_the_server_refused_is_triggered_again_within_its_attempts() {
    // The worker records a refused (or unanswered, never seen going down) reboot call as failed: the server is
    // still up, so the reboot is owed again rather than waited for as one that does not come back.
    let cfg = cfg();
    for (refusals, completes) in [(1, true), (cfg.step_retries, true), (cfg.step_retries + 1, false)] {
        let list = three_online();
        let run = launch(RunKind::Reboot, &list);
        let cluster = Cluster::new(&RunKind::Reboot, &list).misbehaving("s2", St::Reboot, Misbehave::Ignored);
        let mut left = refusals;
        let trace = drive_with(run, cluster, 0, &cfg, &settings(None), |_, run, cluster| {
            let s = run.servers.iter_mut().find(|s| s.name == "s2").unwrap();
            if left > 0 && s.update.step == Some(St::Reboot) && s.update.step_triggered_at.is_some() {
                s.trigger_failed("POST /os/1.0/system/:reboot: HTTP 503", t(0), &cfg);
                assert!(s.update.reboot_pending, "{refusals}: the reboot is owed again");
                left -= 1;
                if left == 0 {
                    cluster.misbehave = None;
                }
            }
        });
        let reboots = trace.trigger_times("s2", St::Reboot);
        if completes {
            assert_eq!(trace.end, RunDecision::Completed, "{refusals}");
            assert_eq!(reboots.len() as u32, refusals + 1, "{refusals}");
            assert_eq!(trace.run.progress(), (3, 3), "{refusals}");
        } else {
            let RunDecision::Fail {
                server: failed,
                step,
                state,
                reason,
            } = &trace.end
            else {
                panic!("{refusals}: {:?}", trace.end);
            };
            assert_eq!(
                (failed.as_str(), *step, *state),
                ("s2", Some(St::Reboot), RS::InMaintenanceRebootPending)
            );
            assert!(reason.contains("ran out of attempts"), "{reason}");
            assert_eq!(reboots.len() as u32, cfg.step_retries + 1);
            let s2 = server(&trace.run, "s2");
            assert_eq!(
                s2.update.first_error.as_deref(),
                Some("reboot failed: POST /os/1.0/system/:reboot: HTTP 503")
            );
        }
    }
}

#[test]
fn stalled_step_retriggers_within_step_retries_then_ends_the_run_naming_it() {
    let cfg = RollingConfig {
        step_retries: 2,
        evacuate_timeout_secs: 300,
        restore_timeout_secs: 240,
        update_timeout_secs: 600,
        ..cfg()
    };
    let behind = members(&[
        ("s1", member(MS::Online, "1", "1", "2")),
        ("s2", online()),
        ("s3", online()),
    ]);
    // (label, run, the misbehaving step, how, the state the run ends in, the step's name in the reason)
    let rows: [(&str, RunKind, St, Misbehave, RS, &str); 4] = [
        (
            "evacuation stays Evacuating",
            RunKind::Reboot,
            St::Evacuate,
            Misbehave::Hangs,
            RS::Evacuating,
            "evacuate",
        ),
        (
            "evacuation never starts",
            RunKind::Reboot,
            St::Evacuate,
            Misbehave::Ignored,
            RS::Evacuating,
            "evacuate",
        ),
        (
            "restore stays Restoring",
            RunKind::Reboot,
            St::Restore,
            Misbehave::Hangs,
            RS::InMaintenanceRestoring,
            "restore",
        ),
        (
            "update never stages",
            update(),
            St::Update,
            Misbehave::Hangs,
            RS::Updating,
            "update",
        ),
    ];
    for (label, kind, stalled, how, end_state, name) in rows {
        let list = if kind == RunKind::Reboot {
            three_online()
        } else {
            behind.clone()
        };
        let run = launch(kind.clone(), &list);
        let cluster = Cluster::new(&kind, &list).misbehaving("s1", stalled, how);
        let trace = drive(run, cluster, &cfg, &settings(None));
        let times = trace.trigger_times("s1", stalled);
        assert_eq!(
            times.len(),
            cfg.step_retries as usize + 1,
            "{label}: first attempt and retries"
        );
        let timeout = cfg.timeout_secs(stalled) as i64;
        for pair in times.windows(2) {
            assert_eq!(
                pair[1] - pair[0],
                timeout,
                "{label}: re-triggered once its time is out"
            );
        }
        let RunDecision::Fail {
            server,
            step,
            state,
            reason,
        } = &trace.end
        else {
            panic!("{label}: {:?}", trace.end);
        };
        assert_eq!(
            (server.as_str(), *step, *state),
            ("s1", Some(stalled), end_state),
            "{label}"
        );
        assert!(reason.contains(name), "{label}: {reason}");
        assert_eq!(trace.now, times.last().unwrap() + timeout, "{label}");
        assert!(
            trace.triggers().iter().all(|(s, _)| s == "s1"),
            "{label}: nothing else touched"
        );
    }
}

/// The run right after `step` was triggered on s1 at t(0), with the facts Incus reports once the step's
/// operation failed.
fn failed_operation(step: St) -> (RollingRun, BTreeMap<String, MemberFacts>) {
    let list = three_online();
    let mut run = launch(RunKind::Reboot, &list);
    let mut facts: BTreeMap<String, MemberFacts> = list.into_iter().collect();
    let s1 = server_mut(&mut run, "s1");
    s1.update.step = Some(step);
    s1.update.step_triggered_at = Some(t(0));
    match step {
        // A failed evacuation leaves the member Online.
        St::Evacuate => {}
        // A failed restore leaves it Evacuated, after its reboot.
        St::Restore => {
            s1.update.reboot_pending = false;
            s1.went_down = true;
            s1.version_before_reboot = Some("1".into());
            facts.get_mut("s1").unwrap().status = Some(MS::Evacuated);
        }
        other => panic!("{other:?} has no Incus operation"),
    }
    (run, facts)
}

#[test]
fn operation_failure_retriggers_at_once_counted_keeping_the_first_error() {
    let cfg = cfg();
    for step in [St::Evacuate, St::Restore] {
        let (mut run, mut facts) = failed_operation(step);
        for (i, error) in ["boom", "bang", "crash"].into_iter().enumerate() {
            let now = 5 * (i as i64 + 1);
            server_mut(&mut run, "s1").operation = Some(format!("/1.0/operations/{i}"));
            facts.get_mut("s1").unwrap().operation_error = Some(error.into());
            let (next, d) = decide_run(&run, &facts, t(now), &cfg, &settings(None));
            assert_eq!(
                d,
                RunDecision::Trigger {
                    server: "s1".into(),
                    step
                },
                "{step:?} #{i}"
            );
            let rec = &server(&next, "s1").update;
            assert_eq!(rec.retries, i as u32 + 1, "{step:?} #{i}: counted");
            assert_eq!(rec.step_triggered_at, Some(t(now)), "{step:?} #{i}: at once");
            assert!(
                rec.first_error.as_deref().unwrap().contains("boom"),
                "{step:?} #{i}: {rec:?}"
            );
            assert!(
                rec.last_error.as_deref().unwrap().contains(error),
                "{step:?} #{i}: {rec:?}"
            );
            assert_eq!(
                server(&next, "s1").operation,
                None,
                "{step:?} #{i}: the failed operation is spent"
            );
            run = next;
        }
        // The attempts are spent: the next failure ends the run naming the step.
        server_mut(&mut run, "s1").operation = Some("/1.0/operations/last".into());
        let (next, d) = decide_run(&run, &facts, t(30), &cfg, &settings(None));
        assert!(
            matches!(&d, RunDecision::Fail { server, step: Some(s), .. } if server == "s1" && *s == step),
            "{step:?}: {d:?}"
        );
        assert!(
            server(&next, "s1")
                .update
                .first_error
                .as_deref()
                .unwrap()
                .contains("boom")
        );
    }
}

#[test]
fn operation_error_without_an_operation_in_flight_is_not_a_failure() {
    // A stale error (the worker recorded no operation for the current attempt) neither re-triggers nor counts.
    for step in [St::Evacuate, St::Restore] {
        let (run, mut facts) = failed_operation(step);
        facts.get_mut("s1").unwrap().operation_error = Some("boom".into());
        let (next, d) = decide_run(&run, &facts, t(5), &cfg(), &settings(None));
        assert!(matches!(d, RunDecision::Wait { .. }), "{step:?}: {d:?}");
        let rec = &server(&next, "s1").update;
        assert_eq!((rec.retries, &rec.first_error), (0, &None), "{step:?}");
    }
}

use super::*;

// ---------------------------------------------------------------------------------------------------------------
// Relaunch
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn relaunch_rewinds_every_record() {
    // An earlier run ran s1's evacuation out of attempts; Incus has since settled, s1 is Online.
    let list = three_online();
    let run = launch(RunKind::Reboot, &list);
    let cluster = Cluster::new(&RunKind::Reboot, &list).misbehaving("s1", St::Evacuate, Misbehave::Ignored);
    let trace = drive(run, cluster, &cfg(), &settings(None));
    assert!(
        matches!(
            trace.end,
            RunDecision::Fail {
                step: Some(St::Evacuate),
                ..
            }
        ),
        "{:?}",
        trace.end
    );
    let facts = trace.cluster.facts();
    let stale = server(&trace.run, "s1").clone();
    assert!(stale.update.step.is_some() && stale.update.retries > 0 && stale.update.first_error.is_some());

    // Carried on, the stale record ends the run again straight away.
    let (_, again) = decide_run(&trace.run, &facts, t(trace.now + 10), &cfg(), &settings(None));
    assert!(matches!(again, RunDecision::Fail { .. }), "{again:?}");

    for kind in [RunKind::Reboot, update()] {
        let polled: Vec<(String, MemberFacts)> = facts.clone().into_iter().collect();
        let relaunched = launch(kind.clone(), &polled);
        for s in &relaunched.servers {
            let fresh = RunServer {
                name: s.name.clone(),
                update: ServerUpdate {
                    reboot_pending: kind == RunKind::Reboot,
                    ..ServerUpdate::default()
                },
                ..RunServer::default()
            };
            assert_eq!(s, &fresh, "{kind:?}");
        }
        assert!(!relaunched.canceling && relaunched.gate_closed_since.is_none());
    }
    let relaunched = launch(RunKind::Reboot, &facts.into_iter().collect::<Vec<_>>());
    let (next, d) = decide_run(
        &relaunched,
        &trace.cluster.facts(),
        t(trace.now + 10),
        &cfg(),
        &settings(None),
    );
    assert_eq!(
        d,
        RunDecision::Trigger {
            server: "s1".into(),
            step: St::Evacuate
        }
    );
    assert_eq!(server(&next, "s1").update.retries, 0);
}

#[test]
fn an_evacuation_whose_operation_still_runs_is_waited_for_though_incus_reports_evacuated() {
    use racklift_deploy::rolling_run::observe;
    // Incus marks the member Evacuated when the evacuation starts; the operation says when it is done.
    for (running, want) in [(true, RS::Evacuating), (false, RS::InMaintenanceRebootPending)] {
        let mut s = RunServer {
            name: "s1".into(),
            operation: Some("/1.0/operations/1".into()),
            update: ServerUpdate {
                step: Some(St::Evacuate),
                step_triggered_at: Some(t(0)),
                reboot_pending: true,
                ..Default::default()
            },
            ..RunServer::default()
        };
        let f = MemberFacts {
            reachable: true,
            status: Some(MS::Evacuated),
            operation_running: running,
            ..MemberFacts::default()
        };
        assert_eq!(observe(&mut s, &f), want, "operation running: {running}");
    }
}

#[test]
fn a_retry_resumed_from_a_failed_run_keeps_done_servers_done_and_rewinds_the_rest() {
    // s2's evacuation runs out of attempts after s1 was rebooted; Incus has since settled, s2 is Online.
    let list = three_online();
    let run = launch(RunKind::Reboot, &list);
    let cluster = Cluster::new(&RunKind::Reboot, &list).misbehaving("s2", St::Evacuate, Misbehave::Ignored);
    let trace = drive(run, cluster, &cfg(), &settings(None));
    assert!(
        matches!(&trace.end, RunDecision::Fail { server, step: Some(St::Evacuate), .. } if server == "s2"),
        "{:?}",
        trace.end
    );
    assert!(server(&trace.run, "s1").done);
    let stale = server(&trace.run, "s2");
    assert!(stale.update.step.is_some() && stale.update.retries > 0 && stale.update.first_error.is_some());

    let mut failed = trace.run.clone();
    // Evacuated by hand before the run: the retry leaves s3 so, whatever the facts show by then.
    server_mut(&mut failed, "s3").update.keep_evacuated = true;
    let retry = RollingRun::resume_from(&failed);
    assert_eq!(retry.kind, RunKind::Reboot);
    assert_eq!(retry.phase, Phase::Restart);
    assert!(!retry.canceling && retry.gate_closed_since.is_none());
    assert_eq!(retry.progress(), (1, 3));
    let s1 = server(&retry, "s1");
    assert!(s1.done && !s1.update.reboot_pending, "{s1:?}");
    assert_eq!(
        server(&retry, "s2"),
        &RunServer {
            name: "s2".into(),
            update: ServerUpdate {
                reboot_pending: true,
                ..ServerUpdate::default()
            },
            member_name: stale.member_name.clone(),
            ..RunServer::default()
        }
    );
    let s3 = server(&retry, "s3");
    assert!(
        !s3.done && s3.update.reboot_pending && s3.update.keep_evacuated,
        "{s3:?}"
    );

    // Driven on the settled cluster, the retry restarts s2 and s3 only: s1 is not rebooted twice.
    let retry = RollingRun::resume_from(&trace.run);
    let resumed = drive_with(
        retry,
        Cluster::new(&RunKind::Reboot, &list),
        trace.now + 10,
        &cfg(),
        &settings(Some(20)),
        |_, _, _| {},
    );
    assert_eq!(resumed.end, RunDecision::Completed);
    assert_eq!(resumed.triggers(), restarts(&["s2", "s3"]));

    // A cancel leaves the servers after the current one done with their reboot still owed: a retry rewinds them.
    let mut canceled = launch(RunKind::Reboot, &list);
    canceled.cancel();
    let retry = RollingRun::resume_from(&canceled);
    assert_eq!(retry.progress(), (0, 3));
    assert!(retry.servers.iter().all(|s| s.update.reboot_pending));

    // An update run keeps the reboot a staged update still owes, and restarts from the update phase.
    let mut update_run = launch(update(), &update_cluster());
    update_run.phase = Phase::Restart;
    server_mut(&mut update_run, "b").update.reboot_pending = true;
    server_mut(&mut update_run, "b").update.step = Some(St::Evacuate);
    let retry = RollingRun::resume_from(&update_run);
    assert_eq!(retry.phase, Phase::Update);
    assert!(server(&retry, "b").update.reboot_pending && server(&retry, "b").update.step.is_none());
}

#[test]
fn a_retry_skipping_the_failed_server_restarts_the_others_and_leaves_its_reboot_owed() {
    let list = three_online();
    let run = launch(RunKind::Reboot, &list);
    let cluster = Cluster::new(&RunKind::Reboot, &list).misbehaving("s1", St::Evacuate, Misbehave::Ignored);
    let failed = drive(run, cluster, &cfg(), &settings(None));
    assert!(matches!(failed.end, RunDecision::Fail { .. }), "{:?}", failed.end);

    let retry = RollingRun::resume_skipping(&failed.run, "s1").expect("s1 can be skipped");
    let s1 = server(&retry, "s1");
    assert!(s1.done && s1.skipped && s1.update.reboot_pending, "{s1:?}");
    assert_eq!(s1.update.step, None, "{s1:?}");
    let trace = drive_with(
        retry,
        Cluster::new(&RunKind::Reboot, &list),
        failed.now + 10,
        &cfg(),
        &settings(None),
        |_, _, _| {},
    );
    assert_eq!(trace.end, RunDecision::Completed);
    assert_eq!(trace.triggers(), restarts(&["s2", "s3"]));
    assert_eq!(trace.run.pending_reboot(), vec!["s1"]);

    // A later retry of that run owes s1 its reboot again.
    let again = RollingRun::resume_from(&trace.run);
    let s1 = server(&again, "s1");
    assert!(!s1.done && !s1.skipped && s1.update.reboot_pending, "{s1:?}");
}

#[test]
fn a_skip_names_what_cannot_be_skipped() {
    let list = three_online();
    let mut failed = launch(RunKind::Reboot, &list);
    let s1 = server_mut(&mut failed, "s1");
    s1.done = true;
    s1.update.reboot_pending = false;
    for (server, expected) in [
        ("s1", SkipRefused::AlreadyDone { server: "s1".into() }),
        ("zz", SkipRefused::NotInRun { server: "zz".into() }),
    ] {
        assert_eq!(RollingRun::resume_skipping(&failed, server), Err(expected));
    }
}

#[test]
fn a_launch_after_a_run_that_left_a_member_evacuated_brings_it_back_first() {
    // The earlier run's restore of s2 never takes: it ends with s2 still evacuated by the run itself.
    let list = three_online();
    let run = launch(RunKind::Reboot, &list);
    let cluster = Cluster::new(&RunKind::Reboot, &list).misbehaving("s2", St::Restore, Misbehave::Ignored);
    let failed = drive(run, cluster, &cfg(), &settings(None));
    assert!(
        matches!(&failed.end, RunDecision::Fail { server, step: Some(St::Restore), .. } if server == "s2"),
        "{:?}",
        failed.end
    );
    let polled: Vec<(String, MemberFacts)> = failed.cluster.facts().into_iter().collect();
    assert_eq!(polled[1].1.status, Some(MS::Evacuated));

    // Launched from the facts alone, s2 would pass for an operator's evacuation and be left out.
    let blind = launch(RunKind::Reboot, &polled);
    assert!(server(&blind, "s2").update.keep_evacuated);
    let relaunched = blind.after(&failed.run);
    let order: Vec<&str> = relaunched.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(order, ["s2", "s1", "s3"]);
    assert!(!server(&relaunched, "s2").update.keep_evacuated);

    let trace = drive(
        relaunched,
        Cluster::new(&RunKind::Reboot, &polled),
        &cfg(),
        &settings(None),
    );
    assert_eq!(trace.end, RunDecision::Completed);
    assert_eq!(
        trace.triggers()[..2],
        tr(&[("s2", St::Reboot), ("s2", St::Restore)])[..],
        "s2 is brought back before anyone else is evacuated"
    );
    for (name, f) in &trace.cluster.members {
        assert_eq!(f.status, Some(MS::Online), "{name}");
    }

    // An operator's evacuation, found at the earlier run's launch, stays an operator's.
    let mut kept = failed.run.clone();
    server_mut(&mut kept, "s2").update.keep_evacuated = true;
    let relaunched = launch(RunKind::Reboot, &polled).after(&kept);
    assert!(server(&relaunched, "s2").update.keep_evacuated);
}

use super::*;

// ---------------------------------------------------------------------------------------------------------------
// Cancel
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn cancel_mid_evacuation_restores_the_current_server_without_reboot() {
    // Tick 0 triggers s1's evacuation; tick 1 sees it Evacuating, tick 2 Evacuated.
    for cancel_at in [1, 2] {
        let list = three_online();
        let run = launch(RunKind::Reboot, &list);
        let trace = drive_with(
            run,
            Cluster::new(&RunKind::Reboot, &list),
            0,
            &cfg(),
            &settings(Some(20)),
            |i, run, _| {
                if i == cancel_at {
                    run.cancel();
                }
            },
        );
        assert_eq!(trace.end, RunDecision::Completed, "cancel at {cancel_at}");
        assert_eq!(
            trace.triggers(),
            tr(&[("s1", St::Evacuate), ("s1", St::Restore)]),
            "cancel at {cancel_at}"
        );
        for (name, f) in &trace.cluster.members {
            assert_eq!(f.status, Some(MS::Online), "cancel at {cancel_at}: {name}");
        }
        for s in ["s2", "s3"] {
            assert_eq!(
                server(&trace.run, s).update,
                ServerUpdate {
                    reboot_pending: true,
                    ..ServerUpdate::default()
                }
            );
        }
    }
}

#[test]
fn cancel_before_any_trigger_triggers_nothing() {
    for kind in [RunKind::Reboot, update()] {
        let list = update_cluster();
        let mut run = launch(kind.clone(), &list);
        run.cancel();
        let trace = drive(run, Cluster::new(&kind, &list), &cfg(), &settings(None));
        assert_eq!(trace.end, RunDecision::Completed, "{kind:?}");
        assert!(trace.triggers().is_empty(), "{kind:?}: {:?}", trace.triggers());
        assert_eq!(trace.ticks.len(), 1, "{kind:?}: completed at once");
    }
}

#[test]
fn cancel_in_the_update_phase_completes_without_restarting_anything() {
    let list = update_cluster();
    let run = launch(update(), &list);
    let trace = drive_with(
        run,
        Cluster::new(&update(), &list),
        0,
        &cfg(),
        &settings(None),
        |i, run, _| {
            if i == 1 {
                assert_eq!(run.phase, Phase::Update);
                run.cancel();
            }
        },
    );
    assert_eq!(trace.end, RunDecision::Completed);
    assert_eq!(trace.triggers(), tr(&[("a", St::Update)]));
    for (name, f) in &trace.cluster.members {
        assert!(f.reachable && f.status == Some(MS::Online), "{name}");
    }
}

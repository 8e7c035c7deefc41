use super::*;

// ---------------------------------------------------------------------------------------------------------------
// Rolling reboot
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn rolling_reboot_reboots_every_server_exactly_once_in_order() {
    let trace = reboot_three();
    assert_eq!(trace.end, RunDecision::Completed);
    let mut expected = vec![];
    for s in ["s1", "s2", "s3"] {
        expected.extend(tr(&[(s, St::Evacuate), (s, St::Reboot), (s, St::Restore)]));
    }
    assert_eq!(trace.triggers(), expected);
    for (name, f) in &trace.cluster.members {
        assert!(
            f.reachable && f.status == Some(MS::Online),
            "{name} left as {f:?}"
        );
    }
    assert_eq!(trace.run.progress(), (3, 3));
    assert!(trace.run.pending_reboot().is_empty());
}

#[test]
fn rolling_reboot_never_has_two_members_evacuated_at_once() {
    // `drive` asserts it on every tick; here, that every server was in fact out of service at some tick, so the
    // assertion had something to bite on, and that each next evacuation came after the previous restore.
    let trace = reboot_three();
    for s in ["s1", "s2", "s3"] {
        assert!(
            trace
                .ticks
                .iter()
                .any(|k| k.facts[s].status == Some(MS::Evacuated)),
            "{s} never seen evacuated"
        );
    }
    for (prev, next) in [("s1", "s2"), ("s2", "s3")] {
        let online_again = trace
            .ticks
            .iter()
            .position(|k| {
                k.run_after.servers.iter().find(|r| r.name == prev).unwrap().done
                    && k.facts[prev].status == Some(MS::Online)
            })
            .expect("restored");
        let evacuated = trace
            .ticks
            .iter()
            .position(|k| {
                k.decision
                    == RunDecision::Trigger {
                        server: next.into(),
                        step: St::Evacuate,
                    }
            })
            .expect("evacuated");
        assert!(
            online_again <= evacuated,
            "{next} evacuated before {prev} was back"
        );
    }
}

#[test]
fn rolling_reboot_takes_seven_triggers_and_waits_per_server() {
    // Entered at evacuation pending: evacuate, wait, reboot, wait, restore, wait, post-restore wait.
    #[derive(Debug, PartialEq)]
    enum K {
        T(St),
        W,
    }
    let trace = reboot_three();
    for s in ["s1", "s2", "s3"] {
        let kinds: Vec<K> = trace
            .of(s)
            .iter()
            .map(|k| match &k.decision {
                RunDecision::Trigger { step, .. } => K::T(*step),
                RunDecision::Wait { .. } => K::W,
                other => panic!("{s}: {other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                K::T(St::Evacuate),
                K::W,
                K::T(St::Reboot),
                K::W,
                K::T(St::Restore),
                K::W,
                K::W
            ],
            "{s}"
        );
    }
}

#[test]
fn rolling_reboot_drops_a_servers_pending_reboot_once_its_reboot_is_triggered() {
    let trace = reboot_three();
    let mut owed: Vec<&str> = vec!["s1", "s2", "s3"];
    assert_eq!(trace.ticks[0].run_after.pending_reboot(), owed);
    for k in &trace.ticks {
        if let RunDecision::Trigger {
            server,
            step: St::Reboot,
        } = &k.decision
        {
            owed.retain(|s| s != server);
        }
        assert_eq!(k.run_after.pending_reboot(), owed, "at {}", k.at);
    }
    assert!(owed.is_empty());
}

#[test]
fn post_restore_delay_of_the_cluster_overrides_the_configs() {
    // (cluster's own delay, config's delay, the gap the run keeps between a server back Online and the next
    // evacuation)
    let rows: [(Option<u64>, u64, i64); 4] = [
        (Some(20), 120, 20),
        (Some(90), 10, 90),
        (None, 45, 45),
        (None, 120, 120),
    ];
    for (cluster_delay, cfg_delay, gap) in rows {
        let cfg = RollingConfig {
            post_restore_delay_secs: cfg_delay,
            ..cfg()
        };
        let list = three_online();
        let run = launch(RunKind::Reboot, &list);
        let trace = drive(
            run,
            Cluster::new(&RunKind::Reboot, &list),
            &cfg,
            &settings(cluster_delay),
        );
        assert_eq!(trace.end, RunDecision::Completed, "{cluster_delay:?}/{cfg_delay}");
        for (prev, next) in [("s1", "s2"), ("s2", "s3")] {
            let since = server(&trace.run, prev)
                .update
                .post_restore_since
                .expect("post restore observed");
            let evacuated = trace.trigger_times(next, St::Evacuate);
            assert_eq!(
                evacuated,
                vec![secs_of(since) + gap],
                "{cluster_delay:?}/{cfg_delay}: {next} after {prev}"
            );
        }
        // The last server settles too before the run completes.
        let since = server(&trace.run, "s3").update.post_restore_since.unwrap();
        assert_eq!(trace.now, secs_of(since) + gap, "{cluster_delay:?}/{cfg_delay}");
    }
}

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

/// A boot `secs` after `t(0)`, as a poll at `t(read)` computes it from the uptime the server reports.
fn booted(secs: i64, read: i64) -> BootTime {
    let uptime = u64::try_from(read - secs).expect("read after the boot");
    BootTime::from_uptime(uptime, t(read), t(read)).expect("a boot time")
}

#[test]
fn a_reboot_over_between_two_polls_is_known_by_its_boot_identity_whoever_polls() {
    // s2 is rebooted, and comes back before any poll sees it down, with the same version (a rolling reboot).
    // Its worker recorded the call's answer and nothing more (it lost its lease before its watch saw anything).
    // What the server reports of its boot is all a later holder has: the boot time its OS's uptime gives, and its
    // BMC's reset time. Either moved, the reboot happened; unchanged or not reported, it did not (or cannot be
    // told), and the run ends at the reboot timeout, rebooting nothing twice.
    let cfg = cfg();
    // (label, uptime reported, BMC reset time reported, the reboot moves them, completes)
    let rows = [
        ("uptime moved", true, false, true, true),
        ("BMC reset time moved", false, true, true, true),
        ("both moved", true, true, true, true),
        ("both reported, unchanged", true, true, false, false),
        ("neither reported", false, false, true, false),
    ];
    for (label, uptime, bmc, moves, completes) in rows {
        let mut list = three_online();
        for (_, f) in &mut list {
            f.booted = uptime.then(|| booted(-3600, 0));
            f.bmc_boot = bmc.then(|| BmcBoot {
                last_reset_time: Some(t(-3600)),
                ..BmcBoot::default()
            });
        }
        let run = launch(RunKind::Reboot, &list);
        let cluster = Cluster::new(&RunKind::Reboot, &list).misbehaving("s2", St::Reboot, Misbehave::Ignored);
        let mut rebooted = false;
        let trace = drive_with(run, cluster, 0, &cfg, &settings(None), |_, run, cluster| {
            let s = run.servers.iter().find(|s| s.name == "s2").unwrap();
            let Some(at) = s
                .update
                .step_triggered_at
                .filter(|_| s.update.step == Some(St::Reboot))
            else {
                return;
            };
            if !rebooted && moves {
                let at = secs_of(at);
                let m = cluster.members.get_mut("s2").unwrap();
                if uptime {
                    m.booted = Some(booted(at + 30, at + 40));
                }
                if bmc {
                    m.bmc_boot = Some(BmcBoot {
                        last_reset_time: Some(t(at + 1)),
                        ..BmcBoot::default()
                    });
                }
            }
            rebooted = true;
        });
        assert!(rebooted, "{label}: s2's reboot was triggered");
        assert_eq!(
            trace.trigger_times("s2", St::Reboot).len(),
            1,
            "{label}: rebooted once"
        );
        if completes {
            assert_eq!(trace.end, RunDecision::Completed, "{label}");
            assert_eq!(trace.run.progress(), (3, 3), "{label}");
        } else {
            let RunDecision::Fail { server, step, .. } = &trace.end else {
                panic!("{label}: {:?}", trace.end);
            };
            assert_eq!((server.as_str(), *step), ("s2", Some(St::Reboot)), "{label}");
        }
    }
}

#[test]
fn boot_times_tell_a_new_boot_from_the_same_one_read_again() {
    // (label, first read: uptime, sent, received; second read: uptime, sent, received; a new boot)
    let rows = [
        (
            "the same boot, read a minute later",
            (100, 0, 0),
            (160, 60, 60),
            false,
        ),
        (
            "the same boot, the first answer slow",
            (100, 0, 5),
            (165, 65, 65),
            false,
        ),
        (
            "the same boot, the fraction carried",
            (100, 0, 0),
            (161, 60, 60),
            false,
        ),
        (
            "the same boot, the second answer slow",
            (100, 0, 0),
            (160, 60, 70),
            false,
        ),
        ("a reboot 60 s later", (100, 0, 0), (5, 65, 65), true),
        (
            "a boot 2 s later: inside the slack",
            (100, 0, 0),
            (100, 2, 2),
            false,
        ),
        ("a boot 3 s later: past the slack", (100, 0, 0), (100, 3, 3), true),
    ];
    for (label, (u1, s1, r1), (u2, s2, r2), new_boot) in rows {
        let first = BootTime::from_uptime(u1, t(s1), t(r1)).unwrap();
        let second = BootTime::from_uptime(u2, t(s2), t(r2)).unwrap();
        assert_eq!(
            second.is_after(&first),
            new_boot,
            "{label}: {first:?} then {second:?}"
        );
    }
    assert_eq!(BootTime::from_uptime(u64::MAX, t(0), t(0)), None);
}

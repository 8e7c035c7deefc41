use super::*;

// ---------------------------------------------------------------------------------------------------------------
// Health gate
// ---------------------------------------------------------------------------------------------------------------

/// Ticks a run on fixed facts, following its waits, until it does something other than wait.
fn hold(
    mut run: RollingRun,
    facts: &BTreeMap<String, MemberFacts>,
    start: i64,
) -> (RollingRun, Vec<i64>, i64, RunDecision) {
    let mut now = start;
    let mut waits = vec![];
    for _ in 0..MAX_TICKS {
        let (next, d) = decide_run(&run, facts, t(now), &cfg(), &settings(None));
        run = next;
        match d {
            RunDecision::Wait { until } => {
                waits.push(now);
                assert!(secs_of(until) > now);
                now = secs_of(until);
            }
            other => return (run, waits, now, other),
        }
    }
    panic!("still waiting after {MAX_TICKS} ticks");
}

#[test]
fn health_gate_holds_the_next_evacuation_then_pauses_naming_the_member() {
    let rows: [(&str, Option<MemberFacts>); 5] = [
        (
            "Offline and not answering",
            Some(MemberFacts {
                reachable: false,
                status: Some(MS::Offline),
                ..MemberFacts::default()
            }),
        ),
        (
            "Online in the cluster's view, its API silent",
            Some(MemberFacts {
                reachable: false,
                ..online()
            }),
        ),
        (
            "Offline while answering",
            Some(MemberFacts {
                status: Some(MS::Offline),
                ..online()
            }),
        ),
        (
            "evacuated during the run",
            Some(member(MS::Evacuated, "1", "1", "1")),
        ),
        ("no facts polled for it", None),
    ];
    for (label, s2) in rows {
        let list = three_online();
        let run = launch(RunKind::Reboot, &list);
        let mut facts: BTreeMap<String, MemberFacts> = list.into_iter().collect();
        match s2 {
            Some(f) => facts.insert("s2".into(), f),
            None => facts.remove("s2"),
        };
        let (run, waits, now, d) = hold(run, &facts, 100);
        assert!(!waits.is_empty(), "{label}: held first");
        assert_eq!(
            now,
            100 + GATE_SECS as i64,
            "{label}: paused once the gate's time is out"
        );
        let RunDecision::Pause { reason } = d else {
            panic!("{label}: {d:?}");
        };
        assert!(reason.contains("s2"), "{label}: {reason}");
        assert_eq!(
            server(&run, "s1").update,
            launch(RunKind::Reboot, &three_online()).servers[0].update
        );
        assert_eq!(
            run.gate_closed_since, None,
            "{label}: the next hold starts afresh"
        );
    }
}

#[test]
fn health_gate_opens_once_the_member_is_back() {
    let list = three_online();
    let run = launch(RunKind::Reboot, &list);
    let mut facts: BTreeMap<String, MemberFacts> = list.into_iter().collect();
    facts.get_mut("s3").unwrap().status = Some(MS::Offline);
    facts.get_mut("s3").unwrap().reachable = false;
    let (run, d) = decide_run(&run, &facts, t(0), &cfg(), &settings(None));
    assert!(matches!(d, RunDecision::Wait { .. }), "{d:?}");
    assert_eq!(run.gate_closed_since, Some(t(0)));
    facts.insert("s3".into(), online());
    let (run, d) = decide_run(&run, &facts, t(60), &cfg(), &settings(None));
    assert_eq!(
        d,
        RunDecision::Trigger {
            server: "s1".into(),
            step: St::Evacuate
        }
    );
    assert_eq!(run.gate_closed_since, None);
}

#[test]
fn health_gate_is_not_closed_by_a_member_kept_evacuated_from_before_the_run() {
    let list = members(&[
        ("s1", online()),
        ("s2", online()),
        ("s3", member(MS::Evacuated, "1", "1", "1")),
    ]);
    let run = launch(RunKind::Reboot, &list);
    let facts: BTreeMap<String, MemberFacts> = list.iter().cloned().collect();
    let (_, d) = decide_run(&run, &facts, t(0), &cfg(), &settings(None));
    assert_eq!(
        d,
        RunDecision::Trigger {
            server: "s1".into(),
            step: St::Evacuate
        }
    );
    // And through a whole run: never held, every server rebooted.
    let trace = drive(
        run,
        Cluster::new(&RunKind::Reboot, &list),
        &cfg(),
        &settings(Some(0)),
    );
    assert_eq!(trace.end, RunDecision::Completed);
    assert!(trace.run.gate_closed_since.is_none());
    for s in ["s1", "s2", "s3"] {
        assert_eq!(trace.trigger_times(s, St::Reboot).len(), 1, "{s}");
    }
}

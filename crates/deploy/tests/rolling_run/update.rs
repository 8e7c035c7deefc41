use super::*;

// ---------------------------------------------------------------------------------------------------------------
// Rolling update
// ---------------------------------------------------------------------------------------------------------------

/// a and d need the update; b has it staged already (owes a reboot from launch); c needs nothing.
pub(crate) fn update_cluster() -> Vec<(String, MemberFacts)> {
    members(&[
        ("a", member(MS::Online, "1", "1", "2")),
        ("b", member(MS::Online, "1", "2", "2")),
        ("c", member(MS::Online, "2", "2", "2")),
        ("d", member(MS::Online, "1", "1", "2")),
    ])
}

fn update_run() -> Trace {
    let list = update_cluster();
    let run = launch(update(), &list);
    drive(run, Cluster::new(&update(), &list), &cfg(), &settings(Some(20)))
}

fn first_restart_tick(trace: &Trace) -> usize {
    trace
        .ticks
        .iter()
        .position(|k| matches!(k.decision, RunDecision::Trigger { step, .. } if step != St::Update))
        .expect("the restart phase triggered something")
}

#[test]
fn rolling_update_triggers_every_needed_update_before_any_evacuation() {
    let trace = update_run();
    assert_eq!(trace.end, RunDecision::Completed);
    let triggers = trace.triggers();
    let updates: Vec<_> = triggers
        .iter()
        .filter(|(_, st)| *st == St::Update)
        .cloned()
        .collect();
    assert_eq!(updates, tr(&[("a", St::Update), ("d", St::Update)]));
    assert_eq!(&triggers[..2], &updates[..], "the updates come first");
    let first = first_restart_tick(&trace);
    for k in &trace.ticks[..first] {
        assert_eq!(k.run_after.phase, Phase::Update, "at {}: {:?}", k.at, k.decision);
    }
    assert_eq!(trace.ticks[first].run_after.phase, Phase::Restart);
}

#[test]
fn rolling_update_records_the_owed_reboot_when_the_update_is_triggered() {
    let trace = update_run();
    for name in ["a", "d"] {
        let k = trace
            .ticks
            .iter()
            .find(|k| {
                k.decision
                    == RunDecision::Trigger {
                        server: name.into(),
                        step: St::Update,
                    }
            })
            .expect("updated");
        assert_eq!(
            k.facts[name].staged_version.as_deref(),
            Some("1"),
            "{name}: nothing staged yet"
        );
        assert!(server(&k.run_after, name).update.reboot_pending, "{name}");
    }
}

#[test]
fn rolling_update_phase_ends_only_once_every_triggered_server_has_staged() {
    let trace = update_run();
    let first = first_restart_tick(&trace);
    let facts = &trace.ticks[first].facts;
    for name in ["a", "d"] {
        assert_eq!(
            facts[name].staged_version, facts[name].available_version,
            "{name}"
        );
    }
    // The tick before saw d not staged yet, and waited rather than move on.
    let before = &trace.ticks[first - 1];
    assert!(
        matches!(before.decision, RunDecision::Wait { .. }),
        "{:?}",
        before.decision
    );
    assert_ne!(
        before.facts["d"].staged_version,
        before.facts["d"].available_version
    );
}

#[test]
fn rolling_update_seeds_servers_already_staged_at_launch() {
    let run = launch(update(), &update_cluster());
    assert_eq!(run.phase, Phase::Update);
    assert_eq!(run.pending_reboot(), vec!["b"]);
}

#[test]
fn rolling_update_restarts_exactly_the_updated_and_the_already_staged_servers() {
    let trace = update_run();
    let restarts: Vec<_> = trace
        .triggers()
        .into_iter()
        .filter(|(_, st)| *st != St::Update)
        .collect();
    let mut expected = vec![];
    for s in ["a", "b", "d"] {
        expected.extend(tr(&[(s, St::Evacuate), (s, St::Reboot), (s, St::Restore)]));
    }
    assert_eq!(restarts, expected);
    for name in ["a", "b", "d"] {
        assert_eq!(
            trace.cluster.members[name].running_version.as_deref(),
            Some("2"),
            "{name} booted it"
        );
    }
}

#[test]
fn rolling_update_does_not_reboot_a_server_that_needs_nothing() {
    let trace = update_run();
    assert!(
        trace.triggers().iter().all(|(s, _)| s != "c"),
        "{:?}",
        trace.triggers()
    );
    assert!(server(&trace.run, "c").done);
}

#[test]
fn rolling_update_restriction_decides_which_servers_are_updated_and_rebooted() {
    // os: only the OS is behind; lxd / ceph: only that application is behind; current: nothing behind.
    let list = members(&[
        (
            "os",
            with_apps(
                member(MS::Online, "1", "1", "2"),
                &[("ceph", "2")],
                &[("ceph", "2")],
            ),
        ),
        (
            "lxd",
            with_apps(
                member(MS::Online, "2", "2", "2"),
                &[("lxd", "1")],
                &[("lxd", "2")],
            ),
        ),
        (
            "ceph",
            with_apps(
                member(MS::Online, "2", "2", "2"),
                &[("ceph", "1")],
                &[("ceph", "2")],
            ),
        ),
        (
            "current",
            with_apps(
                member(MS::Online, "2", "2", "2"),
                &[("ceph", "2")],
                &[("ceph", "2")],
            ),
        ),
    ]);
    let rows: [(&str, RunKind, &[&str]); 4] = [
        ("unrestricted", update(), &["os", "lxd", "ceph"]),
        ("os_only", os_only(), &["os"]),
        ("applications ceph", apps(&["ceph"]), &["ceph"]),
        ("applications lxd", apps(&["lxd"]), &["lxd"]),
    ];
    for (label, kind, touched) in rows {
        let run = launch(kind.clone(), &list);
        let trace = drive(run, Cluster::new(&kind, &list), &cfg(), &settings(Some(0)));
        assert_eq!(trace.end, RunDecision::Completed, "{label}");
        let updated: Vec<String> = trace
            .triggers()
            .into_iter()
            .filter(|(_, st)| *st == St::Update)
            .map(|(s, _)| s)
            .collect();
        assert_eq!(updated, touched, "{label}: updated");
        let rebooted: Vec<String> = trace
            .triggers()
            .into_iter()
            .filter(|(_, st)| *st == St::Reboot)
            .map(|(s, _)| s)
            .collect();
        assert_eq!(rebooted, touched, "{label}: rebooted");
    }
}

#[test]
fn a_restricted_update_has_the_catalog_offer_only_its_components() {
    let cases: &[(RunKind, &str, bool)] = &[
        (update(), "os", true),
        (update(), "incus", true),
        (os_only(), "os", true),
        (os_only(), "incus", false),
        (apps(&["incus"]), "incus", true),
        (apps(&["incus"]), "os", false),
        (apps(&["incus"]), "migration-manager", false),
        (RunKind::Reboot, "os", true),
    ];
    for (kind, component, expected) in cases {
        assert_eq!(kind.covers(component), *expected, "{kind:?} offering {component}");
    }
}

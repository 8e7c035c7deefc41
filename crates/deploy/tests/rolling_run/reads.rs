use super::*;

// ---------------------------------------------------------------------------------------------------------------
// What a tick reads of each member: whole where the run decides on it, the status elsewhere
// ---------------------------------------------------------------------------------------------------------------

/// A run of three servers whose member names are known, shaped by `setup`.
fn known(kind: RunKind, setup: impl Fn(&mut RollingRun)) -> RollingRun {
    let mut run = launch(kind, &three_online());
    for s in &mut run.servers {
        s.member_name = Some(s.name.clone());
    }
    setup(&mut run);
    run
}

#[test]
fn a_tick_reads_whole_only_the_servers_it_decides_on() {
    let reboot = || RunKind::Reboot;
    type Setup = fn(&mut RollingRun);
    let cases: &[(&str, RunKind, Setup, [bool; 3])] = &[
        (
            "a reboot reads its current server",
            reboot(),
            |_| {},
            [true, false, false],
        ),
        (
            "the current server moves on with the run",
            reboot(),
            |r| server_mut(r, "s1").done = true,
            [false, true, false],
        ),
        (
            "a name not learnt yet is read whole",
            reboot(),
            |r| server_mut(r, "s3").member_name = None,
            [true, false, true],
        ),
        (
            "an update reads every server still to stage",
            update(),
            |_| {},
            [true, true, true],
        ),
        (
            "a server with nothing to stage is read for its status",
            update(),
            |r| server_mut(r, "s2").update_skipped = true,
            [true, false, true],
        ),
        (
            "the restart phase of an update reads its current server",
            update(),
            |r| r.phase = Phase::Restart,
            [true, false, false],
        ),
        (
            "a canceled update reads its current server",
            update(),
            |r| r.canceling = true,
            [true, false, false],
        ),
    ];
    for (what, kind, setup, expected) in cases {
        let run = known(kind.clone(), setup);
        let got = ["s1", "s2", "s3"].map(|s| run.reads_fully(s));
        assert_eq!(&got, expected, "{what}");
    }
    let run = known(RunKind::Reboot, |_| {});
    assert!(run.reads_fully("not-a-member"), "an unknown server is read whole");
}

#[test]
fn a_status_only_read_keeps_what_the_health_gate_needs_and_nothing_else() {
    let mut f = with_apps(online(), &[("incus", "1")], &[("incus", "2")]);
    f.member_name = Some("m1".into());
    f.busy = Some("evacuating".into());
    f.operation_running = true;
    let light = f.status_only();
    assert_eq!(
        light,
        MemberFacts {
            member_name: Some("m1".into()),
            reachable: true,
            status: Some(MS::Online),
            ..MemberFacts::default()
        }
    );
}

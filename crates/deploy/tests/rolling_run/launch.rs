use super::*;

// ---------------------------------------------------------------------------------------------------------------
// Launch rules
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn launch_refuses_what_spec_001_refuses() {
    let busy = MemberFacts {
        busy: Some("applying an update".into()),
        ..online()
    };
    let unreadable = MemberFacts {
        reachable: false,
        error: Some("connection refused".into()),
        ..online()
    };
    let behind = member(MS::Online, "1", "1", "2");
    let staged = member(MS::Online, "1", "2", "2");
    let ceph_current = with_apps(online(), &[("ceph", "2")], &[("ceph", "2")]);
    let ceph_behind = with_apps(online(), &[("ceph", "1")], &[("ceph", "2")]);
    type Row<'a> = (
        &'a str,
        RunKind,
        Vec<(&'a str, MemberFacts)>,
        Result<(), LaunchRefused>,
    );
    let rows: Vec<Row> = vec![
        (
            "reboot with a busy server",
            RunKind::Reboot,
            vec![("s1", online()), ("s2", busy.clone())],
            Err(LaunchRefused::Busy {
                server: "s2".into(),
                detail: "applying an update".into(),
            }),
        ),
        (
            "update with a busy server",
            update(),
            vec![("s1", behind.clone()), ("s2", busy)],
            Ok(()),
        ),
        (
            "listed application on no server",
            apps(&["ceph", "lxd"]),
            vec![("s1", ceph_behind.clone()), ("s2", online())],
            Err(LaunchRefused::ApplicationNowhere {
                application: "lxd".into(),
            }),
        ),
        (
            "os_only, everything up to date",
            os_only(),
            vec![("s1", online()), ("s2", ceph_behind.clone())],
            Err(LaunchRefused::NothingToUpdate),
        ),
        (
            "os_only, one behind",
            os_only(),
            vec![("s1", online()), ("s2", behind)],
            Ok(()),
        ),
        (
            "os_only, one staged not booted",
            os_only(),
            vec![("s1", online()), ("s2", staged.clone())],
            Ok(()),
        ),
        (
            "applications, all current",
            apps(&["ceph"]),
            vec![("s1", ceph_current.clone()), ("s2", online())],
            Err(LaunchRefused::NothingToUpdate),
        ),
        (
            "applications, all current, the OS staged elsewhere",
            apps(&["ceph"]),
            vec![("s1", ceph_current), ("s2", staged)],
            Err(LaunchRefused::NothingToUpdate),
        ),
        (
            "applications, one behind",
            apps(&["ceph"]),
            vec![("s1", ceph_behind), ("s2", online())],
            Ok(()),
        ),
        (
            "reboot with an unreadable server",
            RunKind::Reboot,
            vec![("s1", online()), ("s2", online()), ("s3", unreadable.clone())],
            Err(LaunchRefused::Unreadable {
                server: "s3".into(),
                error: "connection refused".into(),
            }),
        ),
        (
            "update with an unreadable server",
            update(),
            vec![("s1", unreadable), ("s2", online())],
            Err(LaunchRefused::Unreadable {
                server: "s1".into(),
                error: "connection refused".into(),
            }),
        ),
    ];
    for (label, kind, list, expected) in rows {
        let got = RollingRun::launch(kind, &members(&list)).map(|_| ());
        assert_eq!(got, expected, "{label}");
        if let Err(refused) = got {
            let text = refused.to_string();
            match refused {
                LaunchRefused::Busy { server, .. } | LaunchRefused::Unreadable { server, .. } => {
                    assert!(text.contains(&server), "{label}: {text}")
                }
                LaunchRefused::ApplicationNowhere { application } => {
                    assert!(text.contains(&application), "{label}: {text}")
                }
                LaunchRefused::NothingToUpdate => {}
            }
        }
    }
}

#[test]
fn launch_keeps_servers_evacuated_before_the_run_evacuated() {
    // (label, run, the servers' versions: running, staged, available)
    let rows: [(&str, RunKind, [&str; 3]); 2] = [
        ("rolling reboot", RunKind::Reboot, ["1", "1", "1"]),
        ("rolling update", update(), ["1", "1", "2"]),
    ];
    for (label, kind, [running, staged, available]) in rows {
        let list = members(&[
            ("s1", member(MS::Online, running, staged, available)),
            ("s2", member(MS::Evacuated, running, staged, available)),
            ("s3", member(MS::Online, running, staged, available)),
        ]);
        let run = launch(kind.clone(), &list);
        assert!(server(&run, "s2").update.keep_evacuated, "{label}");
        assert!(!server(&run, "s1").update.keep_evacuated, "{label}");
        let trace = drive(run, Cluster::new(&kind, &list), &cfg(), &settings(Some(0)));
        assert_eq!(trace.end, RunDecision::Completed, "{label}");
        let s2: Vec<St> = trace
            .triggers()
            .into_iter()
            .filter(|(s, st)| s == "s2" && *st != St::Update)
            .map(|(_, st)| st)
            .collect();
        assert_eq!(
            s2,
            vec![St::Reboot],
            "{label}: rebooted, never evacuated or restored"
        );
        assert_eq!(trace.cluster.members["s2"].status, Some(MS::Evacuated), "{label}");
        for s in ["s1", "s3"] {
            assert_eq!(trace.trigger_times(s, St::Restore).len(), 1, "{label}: {s}");
        }
    }
}

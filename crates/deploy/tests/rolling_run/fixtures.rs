use super::*;

// ---------------------------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------------------------

/// The config's own post-restore delay is deliberately longer than the poll interval (30 s) and than the
/// cluster overrides the tests use, so a test can tell which one the run took.
pub(crate) fn cfg() -> RollingConfig {
    RollingConfig {
        post_restore_delay_secs: 120,
        ..RollingConfig::default()
    }
}

pub(crate) const GATE_SECS: u64 = 600;

pub(crate) fn settings(post_restore_delay_secs: Option<u64>) -> RunSettings {
    RunSettings {
        post_restore_delay_secs,
        health_gate_timeout_secs: GATE_SECS,
    }
}

pub(crate) fn secs_of(time: Time) -> i64 {
    (time - t(0)).num_seconds()
}

pub(crate) fn member(status: MS, running: &str, staged: &str, available: &str) -> MemberFacts {
    MemberFacts {
        reachable: true,
        status: Some(status),
        running_version: Some(running.to_owned()),
        staged_version: Some(staged.to_owned()),
        available_version: Some(available.to_owned()),
        ..MemberFacts::default()
    }
}

/// An idle, up to date, Online member.
pub(crate) fn online() -> MemberFacts {
    member(MS::Online, "1", "1", "1")
}

pub(crate) fn with_apps(
    mut f: MemberFacts,
    installed: &[(&str, &str)],
    available: &[(&str, &str)],
) -> MemberFacts {
    f.applications = installed
        .iter()
        .map(|(a, v)| (a.to_string(), v.to_string()))
        .collect();
    f.available_applications = available
        .iter()
        .map(|(a, v)| (a.to_string(), v.to_string()))
        .collect();
    f
}

pub(crate) fn members(list: &[(&str, MemberFacts)]) -> Vec<(String, MemberFacts)> {
    list.iter().map(|(n, f)| (n.to_string(), f.clone())).collect()
}

pub(crate) fn three_online() -> Vec<(String, MemberFacts)> {
    members(&[("s1", online()), ("s2", online()), ("s3", online())])
}

pub(crate) fn update() -> RunKind {
    RunKind::Update {
        os_only: false,
        applications: vec![],
    }
}

pub(crate) fn os_only() -> RunKind {
    RunKind::Update {
        os_only: true,
        applications: vec![],
    }
}

pub(crate) fn apps(list: &[&str]) -> RunKind {
    RunKind::Update {
        os_only: false,
        applications: list.iter().map(|a| a.to_string()).collect(),
    }
}

pub(crate) fn launch(kind: RunKind, list: &[(String, MemberFacts)]) -> RollingRun {
    RollingRun::launch(kind, list).expect("the run launches")
}

pub(crate) fn server<'a>(run: &'a RollingRun, name: &str) -> &'a RunServer {
    run.servers
        .iter()
        .find(|s| s.name == name)
        .expect("a server of the run")
}

pub(crate) fn server_mut<'a>(run: &'a mut RollingRun, name: &str) -> &'a mut RunServer {
    run.servers
        .iter_mut()
        .find(|s| s.name == name)
        .expect("a server of the run")
}

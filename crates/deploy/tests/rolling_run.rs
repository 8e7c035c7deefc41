//! A whole rolling run of a cluster (spec 001): launch rules, the rolling reboot and the rolling update driven
//! tick by tick against a small in-test cluster model, the ends of a run, the health gate, cancel and relaunch.
//!
//! No I/O and no clock: every tick is at `t(secs)`, and the clock only moves to the times the run asks for.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::t;
use racklift_deploy::Time;
use racklift_deploy::rolling::{RollingConfig, RollingState as RS, RollingStep as St, ServerUpdate};
use racklift_deploy::rolling_run::{
    LaunchRefused, MemberFacts, MemberStatus as MS, Phase, RollingRun, RunDecision, RunKind, RunServer,
    RunSettings, decide_run,
};

// ---------------------------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------------------------

/// The config's own post-restore delay is deliberately longer than the poll interval (30 s) and than the
/// cluster overrides the tests use, so a test can tell which one the run took.
fn cfg() -> RollingConfig {
    RollingConfig {
        post_restore_delay_secs: 120,
        ..RollingConfig::default()
    }
}

const GATE_SECS: u64 = 600;

fn settings(post_restore_delay_secs: Option<u64>) -> RunSettings {
    RunSettings {
        post_restore_delay_secs,
        health_gate_timeout_secs: GATE_SECS,
    }
}

fn secs_of(time: Time) -> i64 {
    (time - t(0)).num_seconds()
}

fn member(status: MS, running: &str, staged: &str, available: &str) -> MemberFacts {
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
fn online() -> MemberFacts {
    member(MS::Online, "1", "1", "1")
}

fn with_apps(mut f: MemberFacts, installed: &[(&str, &str)], available: &[(&str, &str)]) -> MemberFacts {
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

fn members(list: &[(&str, MemberFacts)]) -> Vec<(String, MemberFacts)> {
    list.iter().map(|(n, f)| (n.to_string(), f.clone())).collect()
}

fn three_online() -> Vec<(String, MemberFacts)> {
    members(&[("s1", online()), ("s2", online()), ("s3", online())])
}

fn update() -> RunKind {
    RunKind::Update {
        os_only: false,
        applications: vec![],
    }
}

fn os_only() -> RunKind {
    RunKind::Update {
        os_only: true,
        applications: vec![],
    }
}

fn apps(list: &[&str]) -> RunKind {
    RunKind::Update {
        os_only: false,
        applications: list.iter().map(|a| a.to_string()).collect(),
    }
}

fn launch(kind: RunKind, list: &[(String, MemberFacts)]) -> RollingRun {
    RollingRun::launch(kind, list).expect("the run launches")
}

fn server<'a>(run: &'a RollingRun, name: &str) -> &'a RunServer {
    run.servers
        .iter()
        .find(|s| s.name == name)
        .expect("a server of the run")
}

fn server_mut<'a>(run: &'a mut RollingRun, name: &str) -> &'a mut RunServer {
    run.servers
        .iter_mut()
        .find(|s| s.name == name)
        .expect("a server of the run")
}

// ---------------------------------------------------------------------------------------------------------------
// The cluster model: applies each triggered step to the member facts the way Incus and IncusOS would
// ---------------------------------------------------------------------------------------------------------------

/// What a step, once triggered, does to a member that does not behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Misbehave {
    /// The step starts (its immediate effect shows) but never finishes.
    Hangs,
    /// The step has no effect at all.
    Ignored,
}

/// The effect a triggered step shows on the tick after the one that first sees it.
#[derive(Debug, Clone)]
enum Effect {
    Status(MS),
    /// Reachable again after a reboot, booted into the staged version, with the same status.
    BackUp,
    /// The update has been staged.
    Staged,
}

struct Cluster {
    kind: RunKind,
    members: BTreeMap<String, MemberFacts>,
    queued: Vec<(String, Effect)>,
    misbehave: Option<(String, St, Misbehave)>,
}

impl Cluster {
    fn new(kind: &RunKind, list: &[(String, MemberFacts)]) -> Cluster {
        Cluster {
            kind: kind.clone(),
            members: list.iter().cloned().collect(),
            queued: vec![],
            misbehave: None,
        }
    }

    fn misbehaving(mut self, server: &str, step: St, how: Misbehave) -> Cluster {
        self.misbehave = Some((server.to_owned(), step, how));
        self
    }

    fn facts(&self) -> BTreeMap<String, MemberFacts> {
        self.members.clone()
    }

    /// evacuate: Evacuating now, Evacuated on the next tick; reboot: unreachable for a tick, then reachable with
    /// the same status; restore: Restoring, then Online; update: staged on the next tick.
    fn apply(&mut self, server: &str, step: St) {
        let how = match &self.misbehave {
            Some((s, st, how)) if s == server && *st == step => Some(*how),
            _ => None,
        };
        if how == Some(Misbehave::Ignored) {
            return;
        }
        let m = self.members.get_mut(server).expect("a member of the cluster");
        let effect = match step {
            St::Evacuate => {
                m.status = Some(MS::Evacuating);
                Effect::Status(MS::Evacuated)
            }
            St::Reboot => {
                m.reachable = false;
                Effect::BackUp
            }
            St::Restore => {
                m.status = Some(MS::Restoring);
                Effect::Status(MS::Online)
            }
            St::Update => Effect::Staged,
        };
        if how.is_none() {
            self.queued.push((server.to_owned(), effect));
        }
    }

    /// One tick passes: what was triggered before this tick's decision takes effect.
    fn advance(&mut self) {
        for (server, effect) in std::mem::take(&mut self.queued) {
            let m = self.members.get_mut(&server).expect("a member of the cluster");
            match effect {
                Effect::Status(s) => m.status = Some(s),
                Effect::BackUp => {
                    m.reachable = true;
                    m.running_version = m.staged_version.clone();
                }
                Effect::Staged => {
                    let RunKind::Update {
                        os_only,
                        applications,
                    } = &self.kind
                    else {
                        panic!("an update triggered in a reboot run");
                    };
                    let available = m.available_applications.clone();
                    let stage_app = |m: &mut MemberFacts, app: &str| {
                        if let (Some(have), Some(avail)) = (m.applications.get_mut(app), available.get(app)) {
                            *have = avail.clone();
                        }
                    };
                    if applications.is_empty() {
                        m.staged_version = m.available_version.clone();
                        if !os_only {
                            for app in available.keys() {
                                stage_app(m, app);
                            }
                        }
                    } else {
                        for app in applications {
                            stage_app(m, app);
                        }
                    }
                }
            }
        }
    }

    /// Members away from service that the run did not find evacuated at launch.
    fn away(&self, kept: &BTreeSet<String>) -> Vec<String> {
        self.members
            .iter()
            .filter(|(n, f)| {
                !kept.contains(*n) && matches!(f.status, Some(MS::Evacuating | MS::Evacuated | MS::Restoring))
            })
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// One tick of a driven run.
#[derive(Debug, Clone)]
struct Tick {
    at: i64,
    /// The server the decision is about: the one triggered, or the one the run is on while it waits.
    server: Option<String>,
    facts: BTreeMap<String, MemberFacts>,
    decision: RunDecision,
    run_after: RollingRun,
}

struct Trace {
    ticks: Vec<Tick>,
    run: RollingRun,
    cluster: Cluster,
    end: RunDecision,
    now: i64,
}

impl Trace {
    fn triggers(&self) -> Vec<(String, St)> {
        self.ticks
            .iter()
            .filter_map(|k| match &k.decision {
                RunDecision::Trigger { server, step } => Some((server.clone(), *step)),
                _ => None,
            })
            .collect()
    }

    fn trigger_times(&self, name: &str, step: St) -> Vec<i64> {
        self.ticks
            .iter()
            .filter(|k| {
                k.decision
                    == RunDecision::Trigger {
                        server: name.into(),
                        step,
                    }
            })
            .map(|k| k.at)
            .collect()
    }

    fn of(&self, name: &str) -> Vec<&Tick> {
        self.ticks
            .iter()
            .filter(|k| k.server.as_deref() == Some(name))
            .collect()
    }
}

fn tr(list: &[(&str, St)]) -> Vec<(String, St)> {
    list.iter().map(|(s, st)| (s.to_string(), *st)).collect()
}

const MAX_TICKS: usize = 2_000;

/// Drives `run` against `cluster` from `t(start)` until it completes, pauses or fails. `hook` runs before every
/// tick's decision, with the tick's index, to play the worker or the operator. Asserts on every tick that the
/// clock only moves forward and that no two members the run is responsible for are out of service at once.
fn drive_with(
    mut run: RollingRun,
    mut cluster: Cluster,
    start: i64,
    cfg: &RollingConfig,
    settings: &RunSettings,
    mut hook: impl FnMut(usize, &mut RollingRun, &mut Cluster),
) -> Trace {
    let kept: BTreeSet<String> = run
        .servers
        .iter()
        .filter(|s| s.update.keep_evacuated)
        .map(|s| s.name.clone())
        .collect();
    let mut now = start;
    let mut ticks = vec![];
    for i in 0..MAX_TICKS {
        hook(i, &mut run, &mut cluster);
        let facts = cluster.facts();
        let (next, decision) = decide_run(&run, &facts, t(now), cfg, settings);
        run = next;
        let server = match &decision {
            RunDecision::Trigger { server, .. } => Some(server.clone()),
            RunDecision::Wait { .. } => run.current().map(|s| s.name.clone()),
            _ => None,
        };
        ticks.push(Tick {
            at: now,
            server,
            facts,
            decision: decision.clone(),
            run_after: run.clone(),
        });
        cluster.advance();
        match decision {
            RunDecision::Trigger { server, step } => {
                cluster.apply(&server, step);
                now += 1;
            }
            RunDecision::Wait { until } => {
                let until = secs_of(until);
                assert!(until > now, "tick {i}: a wait for {until} at {now} would spin");
                now = until;
            }
            end => {
                return Trace {
                    ticks,
                    run,
                    cluster,
                    end,
                    now,
                };
            }
        }
        let away = cluster.away(&kept);
        assert!(
            away.len() <= 1,
            "tick {i} at {now}: {away:?} are out of service at once"
        );
    }
    panic!("the run did not end within {MAX_TICKS} ticks");
}

fn drive(run: RollingRun, cluster: Cluster, cfg: &RollingConfig, settings: &RunSettings) -> Trace {
    drive_with(run, cluster, 0, cfg, settings, |_, _, _| {})
}

/// A rolling reboot of three idle Online servers, the cluster overriding the post-restore delay with 20 s.
fn reboot_three() -> Trace {
    let list = three_online();
    let run = launch(RunKind::Reboot, &list);
    drive(
        run,
        Cluster::new(&RunKind::Reboot, &list),
        &cfg(),
        &settings(Some(20)),
    )
}

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

// ---------------------------------------------------------------------------------------------------------------
// Rolling update
// ---------------------------------------------------------------------------------------------------------------

/// a and d need the update; b has it staged already (owes a reboot from launch); c needs nothing.
fn update_cluster() -> Vec<(String, MemberFacts)> {
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
    assert_eq!(
        resumed.triggers(),
        tr(&[
            ("s2", St::Evacuate),
            ("s2", St::Reboot),
            ("s2", St::Restore),
            ("s3", St::Evacuate),
            ("s3", St::Reboot),
            ("s3", St::Restore),
        ])
    );

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

//! Whole deployments against a tiny deterministic server model, driven as a worker would.

mod common;

use std::collections::BTreeMap;

use chrono::TimeDelta;
use common::*;
use racklift_deploy::facts::{
    AttrValue, BiosFacts, BootProgress, Fingerprint, KeyDb, MediaProgress, MediaSlot, PowerState, TaskState,
};
use racklift_deploy::secure_boot::DbPlan;
use racklift_deploy::{
    Action, Decision, Deployment, Facts, Jitter, Outcome, State, Terminal, Time, apply_outcome, decide,
};

/// A server that boots in 30 s, installs in 7 min from the media and registers 2 min after the
/// reboot that ends stage 1.
struct Server {
    power: bool,
    booted_at: Option<Time>,
    last_reset: Time,
    reports_progress: bool,
    reports_reset: bool,
    current: BTreeMap<String, AttrValue>,
    pending: BTreeMap<String, AttrValue>,
    key_dbs: BTreeMap<KeyDb, Vec<Fingerprint>>,
    media: Option<String>,
    install_started: Option<Time>,
    rebooted_after_install: Option<Time>,
    /// Without force_reboot the installer waits for the media to go away.
    waits_for_eject: bool,
    reads: Option<MediaProgress>,
    /// Dell-like: a BIOS apply answers with a task monitor, done at the next reset.
    task_monitors: bool,
    /// The BIOS apply task: its monitor URI, whether it is done, whether its final answer was read.
    task: Option<(String, bool, bool)>,
    tasks_created: u32,
    /// An eject lands this long after it is asked for; until then the media reads inserted.
    eject_lag: TimeDelta,
    eject_at: Option<Time>,
    /// The boot after stage 1 found the media still in at the end of its POST: the installer runs again and
    /// the server never registers until it boots without the media.
    installer_again: bool,
    post_checked: bool,
    /// The installed system never registers after a power cycle (a repair that does not help).
    dead_after_cycle: bool,
    power_cycles_after_install: u32,
    /// How long install stage 1 takes.
    install_minutes: i64,
}

impl Server {
    fn fresh() -> Self {
        Server {
            power: true,
            booted_at: Some(t(-3600)),
            last_reset: t(-3600),
            reports_progress: true,
            reports_reset: true,
            current: [("SriovGlobalEnable".to_owned(), AttrValue::Text("Disabled".into()))].into(),
            pending: BTreeMap::new(),
            key_dbs: [(KeyDb::PK, vec![fp("vendor-pk")])].into(),
            media: Some("left-behind.iso".into()),
            install_started: None,
            rebooted_after_install: None,
            waits_for_eject: false,
            reads: None,
            task_monitors: false,
            task: None,
            tasks_created: 0,
            eject_lag: TimeDelta::zero(),
            eject_at: None,
            installer_again: false,
            post_checked: false,
            dead_after_cycle: false,
            power_cycles_after_install: 0,
            install_minutes: 7,
        }
    }

    fn configured() -> Self {
        let mut s = Server::fresh();
        s.current = plan()
            .bios
            .attributes
            .into_iter()
            .chain(plan().bios.deferred_attributes)
            .collect();
        s.key_dbs = correct_key_dbs();
        s.media = None;
        s
    }

    /// The installed system comes up (and registers): not while the installer runs a second time, nor after a
    /// power cycle on a server whose repair does not help.
    fn boots_installed(&self) -> bool {
        let dead = self.dead_after_cycle && self.power_cycles_after_install > 0;
        !self.installer_again && !dead
    }

    fn reset(&mut self, now: Time) {
        self.last_reset = now;
        self.booted_at = Some(now);
        // Staged attributes take effect on a reset; deferred ones appear once their prerequisite is in.
        let staged = std::mem::take(&mut self.pending);
        self.current.extend(staged);
        if let Some((_, done, _)) = &mut self.task {
            *done = true;
        }
    }

    /// What polling a monitor answers: running, the final answer once, then 404.
    fn poll(&mut self, monitor: &str) -> TaskState {
        match &mut self.task {
            Some((uri, done, consumed)) if uri == monitor && !*consumed => {
                if *done {
                    *consumed = true;
                    TaskState::Completed
                } else {
                    TaskState::Running
                }
            }
            _ => TaskState::Unavailable,
        }
    }

    fn facts(&mut self, now: Time) -> Facts {
        // Install stage 1: the installer runs from the media, then the server reboots itself.
        if let (Some(start), None) = (self.install_started, self.rebooted_after_install) {
            let end = start + TimeDelta::minutes(self.install_minutes);
            if now >= end {
                self.reads = Some(MediaProgress {
                    bytes_read: (900 * MIB) as i64,
                    last_read_at: Some(end - TimeDelta::minutes(1)),
                });
                if !self.waits_for_eject {
                    self.rebooted_after_install = Some(end);
                    self.reset(end);
                }
            } else if now >= start + TimeDelta::minutes(1) {
                self.reads = Some(MediaProgress {
                    bytes_read: (300 * MIB) as i64,
                    last_read_at: Some(now),
                });
            }
        }
        if self.waits_for_eject
            && self.install_started.is_some()
            && self.media.is_none()
            && self.rebooted_after_install.is_none()
        {
            self.rebooted_after_install = Some(now);
            self.reset(now);
        }
        // The POST of the boot after stage 1 ends 30 s after its reset: whatever media is in then is booted.
        if let Some(r) = self.rebooted_after_install
            && !self.post_checked
            && now >= r + TimeDelta::seconds(30)
        {
            self.post_checked = true;
            let in_at_post_end =
                self.media.is_some() && self.eject_at.is_none_or(|e| e > r + TimeDelta::seconds(30));
            self.installer_again = in_at_post_end;
        }
        if self.eject_at.is_some_and(|e| now >= e) {
            self.eject_at = None;
            self.media = None;
        }
        let (progress, progress_at) = match (self.power, self.booted_at) {
            (false, _) | (true, None) => (BootProgress::None, None),
            (true, Some(b)) if now - b < TimeDelta::seconds(30) => {
                (BootProgress::MemoryInitializationStarted, Some(b))
            }
            (true, Some(b)) => (BootProgress::OSRunning, Some(b + TimeDelta::seconds(30))),
        };
        Facts {
            power: Some(if self.power {
                PowerState::On
            } else {
                PowerState::Off
            }),
            last_reset_time: self.reports_reset.then_some(self.last_reset),
            boot_progress: self.reports_progress.then_some(progress),
            boot_progress_at: progress_at.filter(|_| self.reports_progress),
            media: Some(MediaSlot {
                inserted: self.media.is_some(),
                image: self.media.clone(),
                transfer_method: None,
            }),
            bios: Some(BiosFacts {
                current: self.current.clone(),
                pending: self.pending.clone(),
            }),
            bios_absent: false,
            bios_task: None,
            key_dbs: self.key_dbs.clone(),
            registered: self.boots_installed()
                && self
                    .rebooted_after_install
                    .is_some_and(|r| now >= r + TimeDelta::minutes(2)),
            registration_refused: None,
            media_progress: self.reads,
            cancel: None,
        }
    }

    /// Carries the action out; returns the task monitor, where the BMC handed one out.
    fn act(&mut self, action: &Action, now: Time) -> Option<String> {
        match action {
            Action::PowerOff | Action::CancelCleanup => {
                self.power = false;
                self.booted_at = None;
            }
            Action::PowerOn if !self.power => {
                self.power = true;
                self.reset(now);
                if self.rebooted_after_install.is_some() {
                    // Booted again after the install: the POST decides afresh what it boots.
                    self.power_cycles_after_install += 1;
                    self.rebooted_after_install = Some(now);
                    self.post_checked = false;
                    self.installer_again = false;
                }
                if self.media.as_deref() == Some(IMAGE) && self.install_started.is_none() {
                    self.install_started = Some(now);
                }
            }
            Action::ApplyBios { attributes, .. } => {
                self.pending.extend(attributes.iter().cloned());
                if self.task_monitors {
                    // A pending job takes further changes, like an iDRAC BIOS configuration job.
                    if self.task.as_ref().is_none_or(|(_, done, _)| *done) {
                        self.tasks_created += 1;
                        let uri = format!("/redfish/v1/TaskService/TaskMonitors/{}", self.tasks_created);
                        self.task = Some((uri, false, false));
                    }
                    return self.task.as_ref().map(|(uri, _, _)| uri.clone());
                }
            }
            Action::EnrollSecureBoot { enrollment } => {
                for (db, p) in enrollment.dbs() {
                    if let DbPlan::Reinitialise { keep, enroll } = p {
                        let entries = self.key_dbs.entry(*db).or_default();
                        entries.retain(|f| keep.contains(f));
                        entries.extend(enroll.iter().cloned());
                    }
                }
            }
            Action::DetachMedia if self.eject_lag > TimeDelta::zero() => {
                self.eject_at.get_or_insert(now + self.eject_lag);
            }
            Action::ClearMedia | Action::DetachMedia => self.media = None,
            Action::AttachMedia { image_url } => self.media = Some(image_url.clone()),
            _ => {}
        }
        None
    }
}

/// Runs a deployment to its end; returns the terminal, the distinct states in order and the end time.
fn run(d: Deployment, server: &mut Server) -> (Terminal, Vec<State>, Time) {
    let (end, trace) = run_traced(d, server);
    let mut path: Vec<State> = trace.iter().map(|(s, _)| *s).collect();
    path.dedup();
    (end, path, trace.last().map_or(t(0), |(_, at)| *at))
}

/// Runs a deployment to its end; returns the terminal and every state with the time it was seen.
fn run_traced(d: Deployment, server: &mut Server) -> (Terminal, Vec<(State, Time)>) {
    let (end, trace, _) = run_to_end(d, server);
    (end, trace)
}

/// As [`run_traced`], with the deployment as it ended.
fn run_to_end(mut d: Deployment, server: &mut Server) -> (Terminal, Vec<(State, Time)>, Deployment) {
    let mut now = t(0);
    let mut trace = vec![(d.machine.state, now)];
    for _ in 0..10_000 {
        let mut facts = server.facts(now);
        // As the worker observes: the persisted monitor is polled in the BIOS waits, with the power on.
        if matches!(
            d.machine.state,
            State::WaitBIOSApplied | State::WaitBIOSAppliedDeferred
        ) && facts.power == Some(PowerState::On)
            && let Some(monitor) = &d.machine.bios_task_monitor
        {
            facts.bios_task = Some(server.poll(monitor));
        }
        let step = decide(&d, &facts, now, &cfg());
        d.machine = step.machine;
        match step.decision {
            Decision::Finished(terminal) => {
                trace.push((d.machine.state, now));
                return (terminal, trace, d);
            }
            Decision::Continue => {}
            Decision::Snooze { until } => now = until,
            Decision::Retry { at } => now = at,
            Decision::Act { action, .. } => {
                let outcome = match server.act(&action, now) {
                    Some(task_monitor) => Outcome::Accepted { task_monitor },
                    None => Outcome::Succeeded,
                };
                now += TimeDelta::seconds(2);
                let step = apply_outcome(&d, &outcome, now, &cfg(), Jitter::NONE);
                d.machine = step.machine;
            }
        }
        trace.push((d.machine.state, now));
    }
    panic!("did not finish: {trace:?}");
}

/// How long the deployment stayed in `state`, over every visit.
fn time_in(trace: &[(State, Time)], state: State) -> TimeDelta {
    trace
        .windows(2)
        .filter(|w| w[0].0 == state)
        .map(|w| w[1].1 - w[0].1)
        .sum()
}

#[test]
fn fresh_server_runs_both_bios_passes_and_the_settle_boot() {
    let (end, path, at) = run(Deployment::new(plan(), t(0)), &mut Server::fresh());
    assert_eq!(end, Terminal::Completed, "{path:?}");
    for s in [
        State::ApplyBIOS,
        State::VerifyBIOS,
        State::ApplyBIOSDeferred,
        State::VerifyBIOSDeferred,
        State::SecureBoot,
        State::WaitSecureBootSettled,
        State::WaitInstall,
        State::WaitReboot,
        State::Cleanup,
    ] {
        assert!(path.contains(&s), "{s} not visited: {path:?}");
    }
    assert!(at < t(60 * 60), "took until {at}");
}

#[test]
fn configured_server_skips_the_bios_passes_and_the_settle_boot() {
    let (end, path, _) = run(Deployment::new(plan(), t(0)), &mut Server::configured());
    assert_eq!(end, Terminal::Completed, "{path:?}");
    let expected = [
        State::RefreshBMCData,
        State::CheckBIOS,
        State::PowerOffSecureBoot,
        State::WaitPowerOffSecureBoot,
        State::SecureBoot,
        State::ClearMedia,
        State::WaitMediaCleared,
        State::AttachMedia,
        State::WaitMediaAttached,
        State::PowerOnInstall,
        State::WaitInstall,
        State::DetachMedia,
        State::WaitMediaDetached,
        State::WaitReboot,
        State::WaitRegistration,
        State::Cleanup,
        State::Completed,
    ];
    assert_eq!(path, expected);
}

#[test]
fn a_missed_eject_is_repaired_by_one_power_cycle() {
    struct Row {
        name: &'static str,
        progress: bool,
        reset: bool,
        eject_lag_secs: i64,
        dead_after_cycle: bool,
        end: Terminal,
        cycles: u32,
        /// Longest the repair may come after the media went out.
        repair_within: Option<TimeDelta>,
    }
    let grace = TimeDelta::seconds(cfg().missed_eject_grace_secs as i64);
    let soon = TimeDelta::seconds(cfg().poll_interval_secs as i64 * 2);
    let rows = [
        Row {
            name: "prompt eject",
            progress: true,
            reset: true,
            eject_lag_secs: 0,
            dead_after_cycle: false,
            end: Terminal::Completed,
            cycles: 0,
            repair_within: None,
        },
        Row {
            name: "prompt eject, reset time only",
            progress: false,
            reset: true,
            eject_lag_secs: 0,
            dead_after_cycle: false,
            end: Terminal::Completed,
            cycles: 0,
            repair_within: None,
        },
        Row {
            name: "late eject, boot progress and reset time",
            progress: true,
            reset: true,
            eject_lag_secs: 60,
            dead_after_cycle: false,
            end: Terminal::Completed,
            cycles: 1,
            repair_within: Some(soon),
        },
        Row {
            name: "late eject, boot progress only",
            progress: true,
            reset: false,
            eject_lag_secs: 60,
            dead_after_cycle: false,
            end: Terminal::Completed,
            cycles: 1,
            repair_within: Some(soon),
        },
        Row {
            name: "late eject, reset time only: the grace",
            progress: false,
            reset: true,
            eject_lag_secs: 60,
            dead_after_cycle: false,
            end: Terminal::Completed,
            cycles: 1,
            repair_within: Some(grace + soon),
        },
        Row {
            name: "late eject, the repair does not help",
            progress: true,
            reset: true,
            eject_lag_secs: 60,
            dead_after_cycle: true,
            end: Terminal::Failed,
            cycles: 1,
            repair_within: Some(soon),
        },
    ];
    for row in rows {
        let mut server = Server::configured();
        server.reports_progress = row.progress;
        server.reports_reset = row.reset;
        server.eject_lag = TimeDelta::seconds(row.eject_lag_secs);
        server.dead_after_cycle = row.dead_after_cycle;
        // Without boot progress a reset ends stage 1 only past the install reboot fallback delay.
        server.install_minutes = if row.progress { 7 } else { 12 };
        let (end, trace, d) = run_to_end(Deployment::new(plan(), t(0)), &mut server);
        let first = |state| trace.iter().find(|(s, _)| *s == state).map(|(_, at)| *at);
        let (media_out, repaired) = (first(State::WaitReboot), first(State::PowerOffMissedEject));
        assert_eq!(end, row.end, "{}: {:?}", row.name, d.machine.failure);
        assert_eq!(server.power_cycles_after_install, row.cycles, "{}", row.name);
        match (row.repair_within, repaired, media_out) {
            (None, None, _) => {}
            (Some(within), Some(at), Some(out)) => assert!(
                at >= out && at - out <= within,
                "{}: repaired {} s after the media went out",
                row.name,
                (at - out).num_seconds()
            ),
            other => panic!("{}: {other:?}", row.name),
        }
        if row.end == Terminal::Failed {
            let failure = d.machine.failure.as_ref().expect("a failure");
            assert_eq!(failure.state, State::WaitRegistration);
            let why = failure.error.as_deref().unwrap_or_default();
            assert!(
                why.contains("power-cycled") && why.contains("booted its installer a second time"),
                "{why}"
            );
        }
    }
}

#[test]
fn forced_install_on_a_bmc_without_reboot_signals_ends_on_media_idle() {
    let mut server = Server::configured();
    server.reports_progress = false;
    server.reports_reset = false;
    server.waits_for_eject = true;
    let mut d = Deployment::new(plan(), t(0));
    d.plan.force = true;
    let (end, path, _) = run(d, &mut server);
    assert_eq!(end, Terminal::Completed, "{path:?}");
    assert!(path.contains(&State::WaitReboot));
}

#[test]
fn a_bios_task_monitor_ends_the_bios_waits_before_the_settle_delay() {
    let settle = TimeDelta::seconds(cfg().settle_delay_secs as i64);
    let (end, without) = run_traced(Deployment::new(plan(), t(0)), &mut Server::fresh());
    assert_eq!(end, Terminal::Completed);
    let mut dell = Server::fresh();
    dell.task_monitors = true;
    let (end, with) = run_traced(Deployment::new(plan(), t(0)), &mut dell);
    assert_eq!(end, Terminal::Completed, "{with:?}");
    assert_eq!(dell.tasks_created, 2, "one task per pass");
    for wait in [State::WaitBIOSApplied, State::WaitBIOSAppliedDeferred] {
        assert!(
            time_in(&without, wait) >= settle,
            "{wait}: the settle delay stands in"
        );
        assert!(
            time_in(&with, wait) < settle,
            "{wait}: {:?}",
            time_in(&with, wait)
        );
    }
}

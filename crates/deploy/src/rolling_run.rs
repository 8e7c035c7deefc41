//! A whole rolling run of one cluster: what the servers are observed to be in, and what the run does next.
//!
//! [`crate::rolling`] decides for one server in a state it is handed. This module derives that state from what
//! a worker just polled ([`MemberFacts`]: the Incus member status and the version data IncusOS reports) and the
//! per-server records of the run, then walks the servers in order: the update phase first (an update run), then
//! the restart phase, one server at a time. Spec 001's two rules hold: every step is a persisted trigger and a
//! wait, and the wait's condition is re-derived from fresh facts on every tick, never taken from an operation's
//! callback.
//!
//! Beyond spec 001, a **health gate**: the next server is evacuated only while every other member is Online (or
//! evacuated since before the run, which it leaves so). A member that stays unhealthy past the gate's budget
//! pauses the run with a reason, rather than evacuating a second server of a degraded cluster.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::config::secs;
use crate::rolling::{
    EndReason, RollingConfig, RollingDecision, RollingState, RollingStep, ServerUpdate, decide_server,
    in_flight, trigger,
};

/// Which cluster-wide operation a run is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunKind {
    /// A rolling update: stage what the servers need, then restart them one by one.
    Update {
        /// Only the OS decides whether a server needs an update; applications stay on their version.
        #[serde(default)]
        os_only: bool,
        /// Only these applications decide (empty: not restricted to applications).
        #[serde(default)]
        applications: Vec<String>,
    },
    /// A rolling reboot of every server, entered at evacuation pending.
    Reboot,
}

impl RunKind {
    /// The operation name dead letters and metrics use.
    pub fn operation(&self) -> &'static str {
        match self {
            RunKind::Update { .. } => "rolling_update",
            RunKind::Reboot => "rolling_reboot",
        }
    }
}

/// An Incus cluster member's status, as Incus reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberStatus {
    Online,
    Evacuating,
    Evacuated,
    Restoring,
    Offline,
    Other(String),
}

impl MemberStatus {
    pub fn parse(text: &str) -> MemberStatus {
        match text {
            "Online" => MemberStatus::Online,
            "Evacuating" => MemberStatus::Evacuating,
            "Evacuated" => MemberStatus::Evacuated,
            "Restoring" => MemberStatus::Restoring,
            "Offline" => MemberStatus::Offline,
            other => MemberStatus::Other(other.to_owned()),
        }
    }
}

/// What one poll of a member found. A member whose own API did not answer is `reachable: false`; its status may
/// still come from another member's view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemberFacts {
    /// The server's name as an Incus cluster member (its own `GET /1.0/cluster`).
    pub member_name: Option<String>,
    pub reachable: bool,
    pub status: Option<MemberStatus>,
    pub running_version: Option<String>,
    /// The staged version (`os_version_next`), equal to the running one when nothing is staged.
    pub staged_version: Option<String>,
    /// The newest version racklift's update catalog offers on the server's channel.
    pub available_version: Option<String>,
    /// The server is busy with something of its own (an update it runs, an operation in flight).
    pub busy: Option<String>,
    /// The update channel the server follows (`update.yaml`), empty or unset for any.
    pub channel: Option<String>,
    /// Installed applications and their versions.
    pub applications: BTreeMap<String, String>,
    /// The newest version the catalog offers per application.
    pub available_applications: BTreeMap<String, String>,
    /// Why the member could not be read, when it could not.
    pub error: Option<String>,
    /// The Incus operation of the evacuation or restore in flight still runs. Incus marks a member Evacuated when
    /// its evacuation starts (and Online when a restore starts), so the status alone cannot tell a finished step.
    pub operation_running: bool,
    /// The Incus operation of the step in flight ended in failure, with Incus's error. An optimization only: it
    /// turns a fast failure into an immediate, counted re-trigger instead of waiting the step's time out.
    pub operation_error: Option<String>,
}

impl MemberFacts {
    /// Whether the covered components are behind what the catalog offers (and not staged yet).
    pub fn needs_update(&self, kind: &RunKind) -> bool {
        let RunKind::Update {
            os_only,
            applications,
        } = kind
        else {
            return false;
        };
        let os_behind = match (
            &self.available_version,
            &self.staged_version,
            &self.running_version,
        ) {
            (Some(avail), staged, Some(running)) => {
                avail.as_str() > running.as_str() && staged.as_deref().is_none_or(|s| avail.as_str() > s)
            }
            _ => false,
        };
        let app_behind =
            |name: &str| match (self.applications.get(name), self.available_applications.get(name)) {
                (Some(have), Some(avail)) => avail > have,
                _ => false,
            };
        if !applications.is_empty() {
            return applications.iter().any(|a| app_behind(a));
        }
        if *os_only {
            return os_behind;
        }
        os_behind || self.applications.keys().any(|a| app_behind(a))
    }

    /// A staged version ahead of the running one: the server owes a reboot.
    pub fn staged_ahead(&self) -> bool {
        match (&self.staged_version, &self.running_version) {
            (Some(staged), Some(running)) => staged.as_str() > running.as_str(),
            _ => false,
        }
    }
}

/// The phase a run is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Update,
    Restart,
}

/// A server's place in the run: its record plus what the restart phase needs to tell a reboot apart.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunServer {
    pub name: String,
    pub update: ServerUpdate,
    /// The server was seen down (its API not answering, or its running version changed) since its reboot was
    /// triggered: the reboot happened, and an answering server afterwards is back.
    pub went_down: bool,
    /// The running version when the reboot was triggered.
    pub version_before_reboot: Option<String>,
    /// The run is finished with this server.
    pub done: bool,
    /// The update phase found nothing to stage on it (or the restriction skips it).
    pub update_skipped: bool,
    /// The Incus operation (URL) of the evacuation or restore in flight, to read its outcome.
    pub operation: Option<String>,
    /// Its Incus member name, as last read from its own API: how the others are asked about it while it is down.
    pub member_name: Option<String>,
}

impl RunServer {
    /// A trigger call failed (the server refused it, or the call got no answer): recorded as the step's error,
    /// and the step made due again at once, so the next tick re-triggers it as a counted attempt instead of
    /// waiting out a step that never started.
    pub fn trigger_failed(&mut self, error: &str, now: Time, cfg: &RollingConfig) {
        let Some(step) = self.update.step else {
            return;
        };
        let text = format!("{} failed: {error}", step_name(step));
        self.update.last_error = Some(text.clone());
        self.update.first_error.get_or_insert(text);
        self.update.step_triggered_at = Some(now - secs(cfg.timeout_secs(step)));
        self.operation = None;
    }
}

/// Everything a run persists between ticks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollingRun {
    pub kind: RunKind,
    pub phase: Phase,
    /// In the order the restart phase takes them.
    pub servers: Vec<RunServer>,
    /// Since when the health gate has held the next evacuation back.
    #[serde(default)]
    pub gate_closed_since: Option<Time>,
    /// A cancel was requested: the current server is restored, the others are left alone.
    #[serde(default)]
    pub canceling: bool,
    /// When the next member may be started (not before a time, inside a daily window).
    #[serde(default)]
    pub schedule: crate::rolling_window::Schedule,
}

/// Why a run cannot be launched, for the 4xx answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum LaunchRefused {
    #[error("server {server} is busy ({detail}); a rolling reboot needs every server idle")]
    Busy { server: String, detail: String },
    #[error("application {application} is installed on none of the servers")]
    ApplicationNowhere { application: String },
    #[error("none of the servers needs an update of the covered components")]
    NothingToUpdate,
    #[error("server {server} could not be read: {error}")]
    Unreadable { server: String, error: String },
}

impl RollingRun {
    /// Seeds a run from the facts at launch (spec 001's launch rules): a rolling reboot needs every server idle
    /// and owes each a reboot; an update owes one to every server whose staged version is already ahead of its
    /// running one; a restricted update is refused when a listed application is nowhere or nothing needs it.
    /// Servers evacuated before the run are left evacuated.
    pub fn launch(kind: RunKind, members: &[(String, MemberFacts)]) -> Result<RollingRun, LaunchRefused> {
        for (name, f) in members {
            if !f.reachable {
                return Err(LaunchRefused::Unreadable {
                    server: name.clone(),
                    error: f.error.clone().unwrap_or_else(|| "no answer".into()),
                });
            }
        }
        if kind == RunKind::Reboot
            && let Some((name, f)) = members.iter().find(|(_, f)| f.busy.is_some())
        {
            return Err(LaunchRefused::Busy {
                server: name.clone(),
                detail: f.busy.clone().unwrap_or_default(),
            });
        }
        if let RunKind::Update {
            os_only,
            applications,
        } = &kind
        {
            for a in applications {
                if !members.iter().any(|(_, f)| f.applications.contains_key(a)) {
                    return Err(LaunchRefused::ApplicationNowhere {
                        application: a.clone(),
                    });
                }
            }
            let restricted = *os_only || !applications.is_empty();
            // A staged OS update is a covered component only when the OS is: an update restricted to
            // applications is refused when no listed application needs one, whatever the OS has staged.
            let os_covered = applications.is_empty();
            if restricted
                && !members
                    .iter()
                    .any(|(_, f)| f.needs_update(&kind) || (os_covered && f.staged_ahead()))
            {
                return Err(LaunchRefused::NothingToUpdate);
            }
        }
        let servers = members
            .iter()
            .map(|(name, f)| RunServer {
                name: name.clone(),
                update: ServerUpdate {
                    reboot_pending: kind == RunKind::Reboot || f.staged_ahead(),
                    keep_evacuated: f.status == Some(MemberStatus::Evacuated),
                    ..ServerUpdate::default()
                },
                // Relaunching rewinds whatever an earlier run left: every record starts fresh.
                ..RunServer::default()
            })
            .collect();
        let phase = match kind {
            RunKind::Reboot => Phase::Restart,
            RunKind::Update { .. } => Phase::Update,
        };
        Ok(RollingRun {
            kind,
            phase,
            servers,
            gate_closed_since: None,
            canceling: false,
            schedule: crate::rolling_window::Schedule::default(),
        })
    }

    /// A new run retrying `failed` (spec 001: relaunching rewinds stale records): the servers the failed run
    /// restarted stay done, and are not restarted again; every other server's record starts fresh, as at
    /// launch, but for what only the failed run knows: whether the server was evacuated before any run touched
    /// it (the facts now would mistake the failed run's own evacuation for an operator's), and for an update
    /// whether a staged update still owes its reboot. The update phase re-derives the rest from fresh facts.
    pub fn resume_from(failed: &RollingRun) -> RollingRun {
        let servers = failed
            .servers
            .iter()
            .map(|s| {
                // Done and owing no reboot: restarted by the failed run (a cancel marks the servers it leaves
                // done with their reboot still owed; those are rewound like the rest).
                if s.done && !s.update.reboot_pending {
                    return RunServer {
                        update_skipped: true,
                        operation: None,
                        ..s.clone()
                    };
                }
                RunServer {
                    name: s.name.clone(),
                    update: ServerUpdate {
                        reboot_pending: failed.kind == RunKind::Reboot || s.update.reboot_pending,
                        keep_evacuated: s.update.keep_evacuated,
                        ..ServerUpdate::default()
                    },
                    member_name: s.member_name.clone(),
                    ..RunServer::default()
                }
            })
            .collect();
        RollingRun {
            kind: failed.kind.clone(),
            phase: match failed.kind {
                RunKind::Reboot => Phase::Restart,
                RunKind::Update { .. } => Phase::Update,
            },
            servers,
            gate_closed_since: None,
            canceling: false,
            schedule: failed.schedule.clone(),
        }
    }

    /// The server the restart phase is on (the first not done), if any.
    pub fn current(&self) -> Option<&RunServer> {
        self.servers.iter().find(|s| !s.done)
    }

    /// `[k/N]`: the servers done, of all.
    pub fn progress(&self) -> (usize, usize) {
        (self.servers.iter().filter(|s| s.done).count(), self.servers.len())
    }

    /// Servers that still owe a reboot.
    pub fn pending_reboot(&self) -> Vec<&str> {
        self.servers
            .iter()
            .filter(|s| s.update.reboot_pending)
            .map(|s| s.name.as_str())
            .collect()
    }

    /// Stops the run after the current server: it is restored if the run evacuated it (without rebooting it
    /// when its reboot has not been triggered yet), every later server is left as it is.
    pub fn cancel(&mut self) {
        self.canceling = true;
        let mut first = true;
        for s in self.servers.iter_mut().filter(|s| !s.done) {
            if first && self.phase == Phase::Restart && s.update.step.is_some() {
                s.update.reboot_pending = false;
                first = false;
            } else {
                s.done = true;
            }
        }
    }
}

/// What a tick of the run does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunDecision {
    /// Issue `step` on `server`.
    Trigger { server: String, step: RollingStep },
    /// Nothing to do before `until`.
    Wait { until: Time },
    /// Every server is done.
    Completed,
    /// The cluster is degraded: pause, naming why.
    Pause { reason: String },
    /// End the run on `server` in `step`.
    Fail {
        server: String,
        step: Option<RollingStep>,
        state: RollingState,
        reason: String,
    },
}

/// The state a server is observed in during the restart phase, from its record and the facts just polled. May
/// note in the record that its reboot was seen to happen.
pub fn observe(s: &mut RunServer, f: &MemberFacts) -> RollingState {
    use RollingState as RS;
    let rebooting = s.update.step == Some(RollingStep::Reboot) && s.update.step_triggered_at.is_some();
    if rebooting && !s.went_down {
        let version_moved = f.running_version.is_some() && f.running_version != s.version_before_reboot;
        if !f.reachable || version_moved {
            s.went_down = true;
        }
    }
    if !f.reachable {
        return match s.update.step {
            Some(RollingStep::Reboot) if rebooting => RS::InMaintenanceRebooting,
            Some(RollingStep::Evacuate) => RS::Evacuating,
            Some(RollingStep::Restore) => RS::InMaintenanceRestoring,
            _ => RS::Undefined,
        };
    }
    if rebooting && !s.went_down {
        return RS::InMaintenanceRebooting;
    }
    // The step's own operation still runs, or (its URL lost with a worker that died before recording it) the
    // member still has an operation of its own running.
    if (f.operation_running && s.operation.is_some()) || (s.operation.is_none() && f.busy.is_some()) {
        match s.update.step {
            Some(RollingStep::Evacuate) => return RS::Evacuating,
            Some(RollingStep::Restore) => return RS::InMaintenanceRestoring,
            _ => {}
        }
    }
    match &f.status {
        Some(MemberStatus::Evacuating) => RS::Evacuating,
        Some(MemberStatus::Restoring) => RS::InMaintenanceRestoring,
        Some(MemberStatus::Evacuated) if s.update.reboot_pending => RS::InMaintenanceRebootPending,
        Some(MemberStatus::Evacuated) => RS::InMaintenanceRestorePending,
        Some(MemberStatus::Online) if s.update.step == Some(RollingStep::Restore) => {
            RS::InMaintenancePostRestore
        }
        Some(MemberStatus::Online) if s.update.step == Some(RollingStep::Evacuate) => RS::Evacuating,
        Some(MemberStatus::Online) if s.update.reboot_pending => RS::EvacuationPending,
        Some(MemberStatus::Online) => RS::UpToDate,
        Some(MemberStatus::Offline | MemberStatus::Other(_)) | None => RS::Undefined,
    }
}

/// Per-run settings beyond the rolling table's budgets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSettings {
    /// The cluster's own post-restore delay, if it configures one.
    pub post_restore_delay_secs: Option<u64>,
    /// How long the health gate may hold the next evacuation back before the run pauses.
    pub health_gate_timeout_secs: u64,
}

/// Decides the run's next move from the facts of every member (by server name), at `now`. Returns the run to
/// persist with the decision.
pub fn decide_run(
    run: &RollingRun,
    facts: &BTreeMap<String, MemberFacts>,
    now: Time,
    cfg: &RollingConfig,
    settings: &RunSettings,
) -> (RollingRun, RunDecision) {
    let mut next = run.clone();
    for s in &mut next.servers {
        if let Some(name) = facts.get(&s.name).and_then(|f| f.member_name.clone()) {
            s.member_name = Some(name);
        }
    }
    let decision = match next.phase {
        Phase::Update => match decide_update(&mut next, facts, now, cfg) {
            Some(d) => d,
            None => {
                next.phase = Phase::Restart;
                decide_restart(&mut next, facts, now, cfg, settings)
            }
        },
        Phase::Restart => decide_restart(&mut next, facts, now, cfg, settings),
    };
    (next, decision)
}

fn missing(name: &str) -> MemberFacts {
    MemberFacts {
        error: Some(format!("no facts were polled for {name}")),
        ..MemberFacts::default()
    }
}

/// The update phase: trigger the update on every server that needs one, wait until each has staged it. `None`
/// when the phase is over.
fn decide_update(
    run: &mut RollingRun,
    facts: &BTreeMap<String, MemberFacts>,
    now: Time,
    cfg: &RollingConfig,
) -> Option<RunDecision> {
    if run.canceling {
        return None;
    }
    let kind = run.kind.clone();
    let poll = now + secs(cfg.poll_interval_secs);
    let mut wait_until: Option<Time> = None;
    for s in run.servers.iter_mut().filter(|s| !s.update_skipped) {
        let f = facts.get(&s.name).cloned().unwrap_or_else(|| missing(&s.name));
        let triggered = s.update.step == Some(RollingStep::Update);
        if !f.reachable {
            if !triggered {
                return Some(fail(s, None, RollingState::Undefined, unreadable(&f)));
            }
        } else if !f.needs_update(&kind) {
            // Staged (or nothing to stage): the reboot it owes was recorded when it was triggered, or at launch.
            if !triggered {
                s.update_skipped = true;
            } else if s.update.step_triggered_at.is_some() {
                s.update.step = None;
                s.update.step_triggered_at = None;
                s.update.retries = 0;
                s.update_skipped = true;
            }
            continue;
        }
        let (rec, decision) = decide_update_step(&s.update, triggered, now, cfg);
        s.update = rec;
        match decision {
            RollingDecision::Trigger(step) => {
                // The reboot is owed from the moment the update is triggered (spec 001).
                s.update.reboot_pending = true;
                return Some(RunDecision::Trigger {
                    server: s.name.clone(),
                    step,
                });
            }
            RollingDecision::Wait { until } => wait_until = Some(wait_until.map_or(until, |w| w.min(until))),
            RollingDecision::EndRun(reason) => {
                return Some(fail(
                    s,
                    Some(RollingStep::Update),
                    RollingState::Updating,
                    end_text(&reason),
                ));
            }
            RollingDecision::Done => {}
        }
    }
    wait_until.map(|until| RunDecision::Wait {
        until: until.min(poll),
    })
}

/// The update step, read from the polled state directly rather than the table (spec 001): triggered when the
/// server needs an update, waited for under the update budget, re-triggered within its attempts when it stalls.
fn decide_update_step(
    rec: &ServerUpdate,
    triggered: bool,
    now: Time,
    cfg: &RollingConfig,
) -> (ServerUpdate, RollingDecision) {
    let mut next = rec.clone();
    let poll = now + secs(cfg.poll_interval_secs);
    let decision = if !triggered {
        trigger(&mut next, RollingStep::Update, now, cfg)
    } else {
        match in_flight(rec, RollingStep::Update, cfg) {
            Some(deadline) if now < deadline => RollingDecision::Wait {
                until: deadline.min(poll),
            },
            Some(_) => trigger(&mut next, RollingStep::Update, now, cfg),
            None => RollingDecision::EndRun(EndReason::NoOutstandingAttempt(RollingStep::Update)),
        }
    };
    (next, decision)
}

fn decide_restart(
    run: &mut RollingRun,
    facts: &BTreeMap<String, MemberFacts>,
    now: Time,
    cfg: &RollingConfig,
    settings: &RunSettings,
) -> RunDecision {
    let post_restore = if run.canceling {
        Some(0)
    } else {
        settings.post_restore_delay_secs
    };
    loop {
        let Some(index) = run.servers.iter().position(|s| !s.done) else {
            return RunDecision::Completed;
        };
        let f = facts
            .get(&run.servers[index].name)
            .cloned()
            .unwrap_or_else(|| missing(&run.servers[index].name));
        let s = &mut run.servers[index];
        let state = observe(s, &f);
        if state == RollingState::Undefined && !f.reachable {
            // Not in a step and not answering: the cluster is degraded, as with another member down.
            let reason = format!("member {} could not be read: {}", s.name, unreadable(&f));
            return gate_closed(run, now, cfg, settings, reason);
        }
        if let (Some(error), Some(step @ (RollingStep::Evacuate | RollingStep::Restore))) =
            (&f.operation_error, s.update.step)
            && s.operation.is_some()
        {
            // The step's operation failed: re-trigger now (counted) rather than wait its time out.
            let text = format!("{} failed: {error}", step_name(step));
            s.update.last_error = Some(text.clone());
            s.update.first_error.get_or_insert(text);
            s.update.step_triggered_at = Some(now - secs(cfg.timeout_secs(step)));
            s.operation = None;
        }
        let (rec, decision) = decide_server(&s.update, state, now, cfg, post_restore);
        let step_before = s.update.step;
        match decision {
            RollingDecision::Done => {
                s.update = rec;
                s.done = true;
                continue;
            }
            RollingDecision::Wait { until } => {
                s.update = rec;
                return RunDecision::Wait { until };
            }
            RollingDecision::EndRun(reason) => {
                s.update = rec;
                let step = step_of(&reason).or(step_before);
                return fail(s, step, state, end_text(&reason));
            }
            RollingDecision::Trigger(step) => {
                if step == RollingStep::Evacuate {
                    let name = s.name.clone();
                    // Starting the next member: only inside the run's schedule (what is in flight is finished).
                    if !run.canceling
                        && let Some(at) = run.schedule.next_start(now)
                    {
                        return RunDecision::Wait {
                            until: at.min(now + secs(cfg.poll_interval_secs.max(60))),
                        };
                    }
                    if let Some(reason) = unhealthy_other(run, facts, &name) {
                        let reason =
                            format!("{reason}; {name} is not evacuated while the cluster is degraded");
                        return gate_closed(run, now, cfg, settings, reason);
                    }
                    run.gate_closed_since = None;
                }
                let s = &mut run.servers[index];
                s.update = rec;
                s.operation = None;
                if step == RollingStep::Reboot {
                    s.went_down = false;
                    s.version_before_reboot = f.running_version.clone();
                }
                return RunDecision::Trigger {
                    server: s.name.clone(),
                    step,
                };
            }
        }
    }
}

/// The health gate holds the run: wait while within its budget, then pause naming why.
fn gate_closed(
    run: &mut RollingRun,
    now: Time,
    cfg: &RollingConfig,
    settings: &RunSettings,
    reason: String,
) -> RunDecision {
    let since = *run.gate_closed_since.get_or_insert(now);
    if now >= since + secs(settings.health_gate_timeout_secs) {
        run.gate_closed_since = None;
        return RunDecision::Pause { reason };
    }
    RunDecision::Wait {
        until: (now + secs(cfg.poll_interval_secs)).min(since + secs(settings.health_gate_timeout_secs)),
    }
}

/// The first other member that is neither Online nor evacuated since before the run, with what it is. A member
/// with no facts polled is not known to be Online, so it closes the gate like one that could not be read.
fn unhealthy_other(run: &RollingRun, facts: &BTreeMap<String, MemberFacts>, current: &str) -> Option<String> {
    run.servers.iter().filter(|s| s.name != current).find_map(|s| {
        let polled = facts.get(&s.name).cloned().unwrap_or_else(|| missing(&s.name));
        let f = &polled;
        match &f.status {
            Some(MemberStatus::Online) if f.reachable => None,
            Some(MemberStatus::Evacuated) if s.update.keep_evacuated => None,
            Some(status) => Some(format!("member {} is {}", s.name, status_text(status, f))),
            None => Some(format!("member {} could not be read: {}", s.name, unreadable(f))),
        }
    })
}

fn status_text(status: &MemberStatus, f: &MemberFacts) -> String {
    let text = match status {
        MemberStatus::Other(s) => s.clone(),
        other => format!("{other:?}"),
    };
    if f.reachable {
        text
    } else {
        format!("{text} (its API does not answer)")
    }
}

fn unreadable(f: &MemberFacts) -> String {
    f.error
        .clone()
        .unwrap_or_else(|| "its API does not answer".into())
}

fn step_of(reason: &EndReason) -> Option<RollingStep> {
    match reason {
        EndReason::Unsupported(_) => None,
        EndReason::AttemptsExhausted(s) | EndReason::NoFallback(s) | EndReason::NoOutstandingAttempt(s) => {
            Some(*s)
        }
    }
}

/// Operator-facing text for why a run ends.
pub fn end_text(reason: &EndReason) -> String {
    match reason {
        EndReason::Unsupported(state) => {
            format!("state {} observed, which the run cannot drive", state.def().label)
        }
        EndReason::AttemptsExhausted(step) => format!("{} stalled and ran out of attempts", step_name(*step)),
        EndReason::NoFallback(step) => format!(
            "{} timed out and cannot be triggered again: a server that does not come back cannot be rebooted",
            step_name(*step)
        ),
        EndReason::NoOutstandingAttempt(step) => {
            format!(
                "{} is in flight with no attempt recorded for it",
                step_name(*step)
            )
        }
    }
}

pub fn step_name(step: RollingStep) -> &'static str {
    match step {
        RollingStep::Update => "update",
        RollingStep::Evacuate => "evacuate",
        RollingStep::Reboot => "reboot",
        RollingStep::Restore => "restore",
    }
}

fn fail(s: &mut RunServer, step: Option<RollingStep>, state: RollingState, reason: String) -> RunDecision {
    s.update.last_error = Some(reason.clone());
    s.update.first_error.get_or_insert_with(|| reason.clone());
    RunDecision::Fail {
        server: s.name.clone(),
        step,
        state,
        reason,
    }
}

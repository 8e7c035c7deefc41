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
use crate::reboot::RebootWatch;

mod boot;
mod decide;
pub mod explain;

pub use boot::{BOOT_CLOCK_SLACK_SECS, BmcBoot, BootTime};
pub use decide::{decide_run, end_text, observe, step_name};

use crate::rolling::{RollingConfig, RollingState, RollingStep, ServerUpdate};

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
    /// Whether the run lets a member stage `component` (`os` or an application) from the update catalog: an
    /// update restricted to the OS, or to some applications, has the catalog offer its members only those.
    pub fn covers(&self, component: &str) -> bool {
        match self {
            RunKind::Update { applications, .. } if !applications.is_empty() => {
                applications.iter().any(|a| a == component)
            }
            RunKind::Update { os_only: true, .. } => component == "os",
            _ => true,
        }
    }

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
    /// When the server booted, from the uptime its OS reported. Whoever polls, a reboot shows as this moving
    /// later ([`RunServer::booted_before_reboot`]).
    pub booted: Option<BootTime>,
    /// What its BMC reports of its boots, read while its reboot is owed or under way.
    pub bmc_boot: Option<BmcBoot>,
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
    /// What a status-only read yields: the member's name, whether it answered, its status and why not.
    pub fn status_only(&self) -> MemberFacts {
        MemberFacts {
            member_name: self.member_name.clone(),
            reachable: self.reachable,
            status: self.status.clone(),
            error: self.error.clone(),
            ..MemberFacts::default()
        }
    }

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
    /// The reboot's trigger is recorded but nothing yet shows the server got it: its call was not answered and
    /// the server was not seen going down. A worker that stops between recording the trigger and the call
    /// leaves this set, and the reboot is made due again once the call could no longer be in flight
    /// ([`crate::rolling_run::decide`]), rather than waiting out a reboot that never started.
    pub reboot_unconfirmed: bool,
    /// The running version when the reboot was triggered.
    pub version_before_reboot: Option<String>,
    /// When the server had booted, as read by the poll that triggered its reboot: the reboot's identity. A later
    /// boot time means the reboot happened, whichever worker sent the call and whatever its polls saw meanwhile
    /// (a reboot over between two polls, a worker stopped before it recorded what it watched).
    pub booted_before_reboot: Option<BootTime>,
    /// The BMC's reset time and boot progress when the reboot was triggered, where it reports them: the same
    /// identity from the hardware's side, for a server whose OS reports no uptime.
    pub bmc_before_reboot: Option<RebootWatch>,
    /// The run is finished with this server.
    pub done: bool,
    /// The update phase found nothing to stage on it (or the restriction skips it).
    pub update_skipped: bool,
    /// The Incus operation (URL) of the evacuation or restore in flight, to read its outcome.
    pub operation: Option<String>,
    /// Its Incus member name, as last read from its own API: how the others are asked about it while it is down.
    pub member_name: Option<String>,
    /// An operator skipped it when retrying a run that failed on it: done without being restarted, its reboot
    /// still owed.
    pub skipped: bool,
}

impl RunServer {
    /// A trigger call failed and the step did not start (the server refused it, or the call got no answer and
    /// the server was not seen to act on it): recorded as the step's error, and the step made due again at
    /// once, so the next tick re-triggers it as a counted attempt instead of waiting out a step that never
    /// started. A reboot goes back to pending: the wait for a server to come back (which has no fallback) is
    /// only entered once a reboot was accepted.
    pub fn trigger_failed(&mut self, error: &str, now: Time, cfg: &RollingConfig) {
        let Some(step) = self.update.step else {
            return;
        };
        let text = format!("{} failed: {error}", step_name(step));
        self.update.last_error = Some(text.clone());
        self.update.first_error.get_or_insert(text);
        self.operation = None;
        if step == RollingStep::Reboot {
            self.update.reboot_pending = true;
            self.update.step_triggered_at = None;
            self.went_down = false;
            self.reboot_unconfirmed = false;
        } else {
            self.update.step_triggered_at = Some(now - secs(cfg.timeout_secs(step)));
        }
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

/// Why a server cannot be skipped in a retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkipRefused {
    #[error("server {server} is not one of the run's servers")]
    NotInRun { server: String },
    #[error("server {server} was restarted by the run already")]
    AlreadyDone { server: String },
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

    /// A run launched after `previous` ended: a member found evacuated that `previous` had taken out itself
    /// (its restore failed, say) is not one an operator evacuated, so it is not left so. It is taken first, so
    /// the run brings it back before it evacuates any other member; left last, it would hold the health gate
    /// shut in front of every other member.
    pub fn after(mut self, previous: &RollingRun) -> RollingRun {
        let left_out = |name: &str| {
            previous
                .servers
                .iter()
                .any(|p| p.name == name && !p.done && p.update.step.is_some() && !p.update.keep_evacuated)
        };
        let mut first = Vec::new();
        let mut rest = Vec::new();
        for mut s in std::mem::take(&mut self.servers) {
            if s.update.keep_evacuated && left_out(&s.name) {
                s.update.keep_evacuated = false;
                first.push(s);
            } else {
                rest.push(s);
            }
        }
        first.append(&mut rest);
        self.servers = first;
        self
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

    /// As [`RollingRun::resume_from`], with `server` skipped: marked done as it is, without a step, its reboot
    /// still owed, so the run goes on with the next server. What it is left in is the health gate's to judge: a
    /// server the failed run left evacuated holds the next evacuation back, as any member out of service does.
    pub fn resume_skipping(failed: &RollingRun, server: &str) -> Result<RollingRun, SkipRefused> {
        let mut run = RollingRun::resume_from(failed);
        let Some(s) = run.servers.iter_mut().find(|s| s.name == server) else {
            return Err(SkipRefused::NotInRun {
                server: server.to_owned(),
            });
        };
        if s.done {
            return Err(SkipRefused::AlreadyDone {
                server: server.to_owned(),
            });
        }
        s.done = true;
        s.skipped = true;
        s.update_skipped = true;
        Ok(run)
    }

    /// The server the restart phase is on (the first not done), if any.
    pub fn current(&self) -> Option<&RunServer> {
        self.servers.iter().find(|s| !s.done)
    }

    /// `[k/N]`: the servers done, of all.
    pub fn progress(&self) -> (usize, usize) {
        (self.servers.iter().filter(|s| s.done).count(), self.servers.len())
    }

    /// Whether the next tick must read `server` whole (versions, applications, operations) rather than only
    /// its member status. A tick decides on the current server and, in the update phase, on every server still
    /// to stage; every other member matters only to the health gate, through its status. A server whose member
    /// name is not known yet is read whole, which is how its name is learnt.
    pub fn reads_fully(&self, server: &str) -> bool {
        let Some(s) = self.servers.iter().find(|s| s.name == server) else {
            return true;
        };
        if s.member_name.is_none() || self.current().is_some_and(|c| c.name == server) {
            return true;
        }
        self.phase == Phase::Update && !self.canceling && !s.update_skipped && !s.done
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

/// Per-run settings beyond the rolling table's budgets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSettings {
    /// The cluster's own post-restore delay, if it configures one.
    pub post_restore_delay_secs: Option<u64>,
    /// How long the health gate may hold the next evacuation back before the run pauses.
    pub health_gate_timeout_secs: u64,
}

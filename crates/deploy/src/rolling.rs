//! The rolling restart / reboot table and the per-server decision.
//!
//! Unlike a deployment, the state of a server during a rolling run is *observed*, derived on
//! every tick from the cluster member status and the version data; only the step that was
//! triggered (and when, and how often) is persisted. So the decision takes the observed state
//! and the per-server record and says whether to trigger a step, keep waiting, settle, move on
//! or end the run. The reboot is the exception among the steps: a server that does not come
//! back cannot be rebooted again, so its wait has no fallback.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::config::secs;

/// A server's update state as observed during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RollingState {
    UpToDate,
    UpdatePending,
    EvacuationPending,
    Evacuating,
    InMaintenanceRebootPending,
    InMaintenanceRebooting,
    InMaintenanceRestorePending,
    InMaintenanceRestoring,
    InMaintenancePostRestore,
    RebootPending,
    Rebooting,
    /// Not part of the machine; ends the run wherever observed.
    Undefined,
    /// The update phase's state; ends the restart run wherever observed.
    Updating,
    /// Pseudo-state of the diagram: the run ends, naming the server and the step.
    RunFailed,
}

impl fmt::Display for RollingState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&format!("{self:?}"))
    }
}

/// One step a run triggers on a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RollingStep {
    Update,
    Evacuate,
    Reboot,
    Restore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RollingKind {
    /// The zero value: a state the run cannot drive ends it.
    Unsupported,
    Done,
    Trigger,
    Wait,
    Settle,
}

/// How a server sitting in this state is treated while the run works on another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutOfOrder {
    Benign,
    Blocks,
}

/// How a server that the run leaves evacuated is treated in this state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeptEvacuated {
    None,
    Tolerated,
    Done,
}

#[derive(Debug, Clone, Copy)]
pub struct RollingEdge {
    pub to: RollingState,
    pub reason: Option<&'static str>,
}

#[derive(Debug, Clone, Copy)]
pub struct RollingDef {
    pub state: RollingState,
    pub label: &'static str,
    pub kind: RollingKind,
    pub step: Option<RollingStep>,
    /// Whether a stalled wait re-issues its step; the reboot's does not.
    pub retrigger: bool,
    pub out_of_order: OutOfOrder,
    pub kept_evacuated: KeptEvacuated,
    pub edges: &'static [RollingEdge],
}

const fn e(to: RollingState, reason: &'static str) -> RollingEdge {
    RollingEdge {
        to,
        reason: Some(reason),
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "a table row constructor; named fields would bury the table"
)]
const fn r(
    state: RollingState,
    label: &'static str,
    kind: RollingKind,
    step: Option<RollingStep>,
    retrigger: bool,
    out_of_order: OutOfOrder,
    kept_evacuated: KeptEvacuated,
    edges: &'static [RollingEdge],
) -> RollingDef {
    RollingDef {
        state,
        label,
        kind,
        step,
        retrigger,
        out_of_order,
        kept_evacuated,
        edges,
    }
}

use KeptEvacuated as KE;
use OutOfOrder as O;
use RollingKind as RK;
use RollingState as RS;
use RollingStep as St;

const OBSERVED_ENDS_RUN: &str = "observed during the run";

/// The table, in the order a server passes through it.
pub static STATES: [RollingDef; 14] = [
    r(
        RS::UpToDate,
        "up to date",
        RK::Done,
        None,
        false,
        O::Benign,
        KE::None,
        &[],
    ),
    r(
        RS::UpdatePending,
        "update pending",
        RK::Unsupported,
        None,
        false,
        O::Benign,
        KE::None,
        &[e(RS::RunFailed, OBSERVED_ENDS_RUN)],
    ),
    r(
        RS::EvacuationPending,
        "evacuation pending",
        RK::Trigger,
        Some(St::Evacuate),
        false,
        O::Benign,
        KE::None,
        &[
            e(RS::Evacuating, "evacuation triggered"),
            e(RS::RunFailed, "attempts exhausted"),
        ],
    ),
    r(
        RS::Evacuating,
        "evacuating",
        RK::Wait,
        Some(St::Evacuate),
        true,
        O::Blocks,
        KE::None,
        &[
            e(RS::EvacuationPending, "timeout"),
            e(RS::InMaintenanceRebootPending, "evacuated"),
        ],
    ),
    r(
        RS::InMaintenanceRebootPending,
        "reboot pending",
        RK::Trigger,
        Some(St::Reboot),
        false,
        O::Benign,
        KE::Tolerated,
        &[
            e(RS::InMaintenanceRebooting, "reboot triggered"),
            e(RS::RunFailed, "attempts exhausted"),
        ],
    ),
    r(
        RS::InMaintenanceRebooting,
        "rebooting",
        RK::Wait,
        Some(St::Reboot),
        false,
        O::Blocks,
        KE::None,
        &[
            e(RS::InMaintenanceRestorePending, "back up"),
            e(
                RS::RunFailed,
                "timeout, a server that does not come back can not be rebooted again",
            ),
        ],
    ),
    r(
        RS::InMaintenanceRestorePending,
        "restore pending",
        RK::Trigger,
        Some(St::Restore),
        false,
        O::Benign,
        KE::Done,
        &[
            e(RS::InMaintenanceRestoring, "restore triggered"),
            e(RS::UpToDate, "kept evacuated"),
            e(RS::RunFailed, "attempts exhausted"),
        ],
    ),
    r(
        RS::InMaintenanceRestoring,
        "restoring",
        RK::Wait,
        Some(St::Restore),
        true,
        O::Blocks,
        KE::None,
        &[
            e(RS::InMaintenanceRestorePending, "timeout"),
            e(RS::InMaintenancePostRestore, "restored"),
        ],
    ),
    r(
        RS::InMaintenancePostRestore,
        "post restore",
        RK::Settle,
        None,
        false,
        O::Benign,
        KE::None,
        &[e(RS::UpToDate, "post restore delay passed")],
    ),
    r(
        RS::RebootPending,
        "reboot pending (standalone)",
        RK::Unsupported,
        None,
        false,
        O::Benign,
        KE::None,
        &[e(RS::RunFailed, OBSERVED_ENDS_RUN)],
    ),
    r(
        RS::Rebooting,
        "rebooting (standalone)",
        RK::Unsupported,
        None,
        false,
        O::Benign,
        KE::None,
        &[e(RS::RunFailed, OBSERVED_ENDS_RUN)],
    ),
    r(
        RS::Undefined,
        "undefined",
        RK::Unsupported,
        None,
        false,
        O::Blocks,
        KE::None,
        &[e(RS::RunFailed, OBSERVED_ENDS_RUN)],
    ),
    r(
        RS::Updating,
        "updating",
        RK::Unsupported,
        None,
        false,
        O::Blocks,
        KE::None,
        &[e(RS::RunFailed, OBSERVED_ENDS_RUN)],
    ),
    r(
        RS::RunFailed,
        "run failed",
        RK::Unsupported,
        None,
        false,
        O::Blocks,
        KE::None,
        &[],
    ),
];

impl RollingState {
    pub fn def(self) -> &'static RollingDef {
        // Declared in enum order; `table_in_enum_order` keeps it so.
        &STATES[self as usize]
    }
}

/// Budgets of the rolling run. OC publishes no numeric defaults for these; racklift's are chosen to be generous
/// for evacuations of busy members and strict for reboots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RollingConfig {
    /// Attempts a step gets beyond its first before the run ends.
    pub step_retries: u32,
    /// Staging an update (the OS or the listed applications).
    pub update_timeout_secs: u64,
    pub evacuate_timeout_secs: u64,
    /// No fallback: a server that does not come back in this time ends the run.
    pub reboot_timeout_secs: u64,
    pub restore_timeout_secs: u64,
    /// Overridden by a cluster's own `post_restore_delay_secs`.
    pub post_restore_delay_secs: u64,
    /// How often a run polls its members while a step is in flight.
    pub poll_interval_secs: u64,
    /// How long the health gate holds the next evacuation back (another member not Online) before the run
    /// pauses with the reason.
    pub health_gate_timeout_secs: u64,
    /// Deadline of one call to a server's Incus API.
    pub incus_call_timeout_secs: u64,
}

impl Default for RollingConfig {
    fn default() -> Self {
        Self {
            step_retries: 3,
            update_timeout_secs: 60 * 60,
            evacuate_timeout_secs: 30 * 60,
            reboot_timeout_secs: 20 * 60,
            restore_timeout_secs: 30 * 60,
            post_restore_delay_secs: 60,
            poll_interval_secs: 30,
            health_gate_timeout_secs: 10 * 60,
            incus_call_timeout_secs: 60,
        }
    }
}

impl RollingConfig {
    pub fn timeout_secs(&self, step: RollingStep) -> u64 {
        match step {
            RollingStep::Update => self.update_timeout_secs,
            RollingStep::Evacuate => self.evacuate_timeout_secs,
            RollingStep::Reboot => self.reboot_timeout_secs,
            RollingStep::Restore => self.restore_timeout_secs,
        }
    }

    /// The budgets of simulated hardware at `scale`: every duration scaled, polls never below a second, the
    /// waits never shorter than a simulated step could take.
    pub fn for_simulation(&self, scale: f64) -> RollingConfig {
        let s = |secs: u64| ((secs as f64 * scale).ceil() as u64).max(1);
        RollingConfig {
            step_retries: self.step_retries,
            update_timeout_secs: s(self.update_timeout_secs).max(60),
            evacuate_timeout_secs: s(self.evacuate_timeout_secs).max(30),
            reboot_timeout_secs: s(self.reboot_timeout_secs).max(60),
            restore_timeout_secs: s(self.restore_timeout_secs).max(30),
            post_restore_delay_secs: s(self.post_restore_delay_secs),
            poll_interval_secs: s(self.poll_interval_secs),
            health_gate_timeout_secs: s(self.health_gate_timeout_secs).max(30),
            incus_call_timeout_secs: s(self.incus_call_timeout_secs).max(10),
        }
    }

    /// Rejects values that would make a run stall or never time out.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        for (field, value) in [
            ("rolling.update_timeout_secs", self.update_timeout_secs),
            ("rolling.evacuate_timeout_secs", self.evacuate_timeout_secs),
            ("rolling.reboot_timeout_secs", self.reboot_timeout_secs),
            ("rolling.restore_timeout_secs", self.restore_timeout_secs),
            ("rolling.poll_interval_secs", self.poll_interval_secs),
            ("rolling.incus_call_timeout_secs", self.incus_call_timeout_secs),
        ] {
            if value == 0 {
                return Err(crate::ConfigError::Zero { field });
            }
        }
        Ok(())
    }
}

/// What the run has decided about one server (`ServerUpdate` in OC); the shape dead letters use.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerUpdate {
    pub step: Option<RollingStep>,
    pub step_triggered_at: Option<Time>,
    /// Attempts of `step` beyond the first.
    pub retries: u32,
    pub first_error: Option<String>,
    pub last_error: Option<String>,
    pub post_restore_since: Option<Time>,
    /// The server still owes a reboot (a rolling reboot, or an update staged but not booted).
    pub reboot_pending: bool,
    pub keep_evacuated: bool,
}

/// Why a run ends on a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    Unsupported(RollingState),
    AttemptsExhausted(RollingStep),
    /// The wait has no trigger to fall back to (the reboot).
    NoFallback(RollingStep),
    /// A wait whose record shows no outstanding attempt: nothing owns the step.
    NoOutstandingAttempt(RollingStep),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RollingDecision {
    /// Issue the step now (a first attempt or a counted re-trigger).
    Trigger(RollingStep),
    /// The step is in flight; look again at `until`.
    Wait { until: Time },
    /// Server done; the run may move on to the next one.
    Done,
    /// End the run, naming the server's step.
    EndRun(EndReason),
}

/// Decides for one server in the observed state. `post_restore_delay_secs` is the cluster's own
/// override, if it configures one.
pub fn decide_server(
    rec: &ServerUpdate,
    observed: RollingState,
    now: Time,
    cfg: &RollingConfig,
    post_restore_delay_secs: Option<u64>,
) -> (ServerUpdate, RollingDecision) {
    let def = observed.def();
    let mut next = rec.clone();
    let poll = now + secs(cfg.poll_interval_secs);
    let decision = match (def.kind, def.step) {
        (RollingKind::Done, _) => RollingDecision::Done,
        (RollingKind::Settle, _) => {
            let since = *next.post_restore_since.get_or_insert(now);
            let until = since + secs(post_restore_delay_secs.unwrap_or(cfg.post_restore_delay_secs));
            if now >= until {
                RollingDecision::Done
            } else {
                RollingDecision::Wait {
                    until: until.min(poll),
                }
            }
        }
        (RollingKind::Trigger, Some(step)) => {
            if step == RollingStep::Restore && rec.keep_evacuated {
                RollingDecision::Done
            } else {
                match in_flight(rec, step, cfg) {
                    // Triggered already; the observed state has not caught up yet.
                    Some(deadline) if now < deadline => RollingDecision::Wait {
                        until: deadline.min(poll),
                    },
                    _ => trigger(&mut next, step, now, cfg),
                }
            }
        }
        (RollingKind::Wait, Some(step)) => match in_flight(rec, step, cfg) {
            None => RollingDecision::EndRun(EndReason::NoOutstandingAttempt(step)),
            Some(deadline) if now < deadline => RollingDecision::Wait {
                until: deadline.min(poll),
            },
            Some(_) if def.retrigger => trigger(&mut next, step, now, cfg),
            Some(_) => RollingDecision::EndRun(EndReason::NoFallback(step)),
        },
        _ => RollingDecision::EndRun(EndReason::Unsupported(observed)),
    };
    if matches!(decision, RollingDecision::Trigger(RollingStep::Reboot)) {
        // A server stops reporting a pending reboot as soon as its reboot has been triggered.
        next.reboot_pending = false;
    }
    (next, decision)
}

/// The deadline of `step` if the record shows it triggered.
pub(crate) fn in_flight(rec: &ServerUpdate, step: RollingStep, cfg: &RollingConfig) -> Option<Time> {
    match (rec.step, rec.step_triggered_at) {
        (Some(s), Some(at)) if s == step => Some(at + secs(cfg.timeout_secs(step))),
        _ => None,
    }
}

pub(crate) fn trigger(
    next: &mut ServerUpdate,
    step: RollingStep,
    now: Time,
    cfg: &RollingConfig,
) -> RollingDecision {
    if next.step == Some(step) {
        next.retries += 1;
        if next.retries > cfg.step_retries {
            return RollingDecision::EndRun(EndReason::AttemptsExhausted(step));
        }
    } else {
        next.retries = 0;
    }
    next.step = Some(step);
    next.step_triggered_at = Some(now);
    RollingDecision::Trigger(step)
}

//! Pure rewrites and measurements for the dead-letter triage: where a failed deployment may be
//! resumed, how its machine looks when it is, and how far a live deployment is past what its
//! state should take.
//!
//! They live here rather than in the store or the API because they are decisions about the
//! state table: which states are safe re-entry points, which counters make a "fresh budget",
//! and what a state's budget in time is. Like the rest of the crate they take the time as an
//! argument and do no I/O.

use chrono::TimeDelta;
use serde::{Deserialize, Serialize};

use crate::Time;
use crate::config::{Config, secs};
use crate::record::Machine;
use crate::table::{Budget, Kind, State};

/// Why a failed deployment cannot be resumed where the operator asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    #[error("the deployment is {state}, not Failed")]
    NotFailed { state: State },
    /// Machines stored before failures were recorded carry no failed state to resume from.
    #[error("the failed deployment records no state it failed in")]
    NoFailure,
    #[error(
        "{requested} is not a trigger state; only the failed state ({failed}) or an earlier trigger can be resumed"
    )]
    NotTrigger { requested: State, failed: State },
    #[error(
        "{requested} comes after the failed state {failed}; only the failed state or an earlier trigger can be resumed"
    )]
    NotEarlier { requested: State, failed: State },
    /// A cancel clean up that failed can only be finished, never turned back into an install.
    #[error("the deployment failed in its cancel clean up ({failed}); only {failed} can be resumed")]
    InCancelCleanup { requested: State, failed: State },
}

/// Whether `state` is a trigger the table lets a resumed deployment start from: a trigger or a
/// decision (a trigger whose only action is reading), and not the cancel's own clean up.
pub fn is_resume_trigger(state: State) -> bool {
    matches!(state.kind(), Kind::Trigger | Kind::Decision) && !state.is_cancel_cleanup()
}

/// The states a failed machine may be resumed in, in table order: every earlier trigger, then
/// the failed state itself. Empty when the machine is not failed.
pub fn resume_states(m: &Machine) -> Vec<State> {
    let Some(failed) = failed_state(m) else {
        return Vec::new();
    };
    State::all()
        .filter(|&s| s == failed || (!failed.is_cancel_cleanup() && is_resume_trigger(s) && s < failed))
        .collect()
}

fn failed_state(m: &Machine) -> Option<State> {
    (m.state == State::Failed).then_some(())?;
    m.failure.as_ref().map(|f| f.state)
}

/// Puts a failed machine back into `to` with a fresh budget.
///
/// `to` must be the state the machine failed in or an earlier trigger of the table (table
/// order is flow order). The rewrite is what a first entry into `to` would look like:
/// - `seq` grows, so the step job enqueued for it gets a fresh idempotency key
///   (`deployment/<id>/<seq>`) that no dead or completed job can answer for;
/// - the retry and BIOS fallback counters, the backoff and the errors start over (the dead
///   letter keeps the old ones);
/// - `started_at` is `now`: the overall deadline restarts too, or a deployment that failed on
///   it would fail again on its first decision (the original start is the deployment row's
///   `created_at`);
/// - reboot snapshots and the "secure boot written" marker are dropped where `to` comes at or
///   before the state that sets them, so the resumed run takes them afresh.
pub fn resume_at(m: &Machine, to: State, now: Time) -> Result<Machine, ResumeError> {
    if m.state != State::Failed {
        return Err(ResumeError::NotFailed { state: m.state });
    }
    let failed = failed_state(m).ok_or(ResumeError::NoFailure)?;
    if to != failed {
        if failed.is_cancel_cleanup() {
            return Err(ResumeError::InCancelCleanup {
                requested: to,
                failed,
            });
        }
        if !is_resume_trigger(to) {
            return Err(ResumeError::NotTrigger {
                requested: to,
                failed,
            });
        }
        if to > failed {
            return Err(ResumeError::NotEarlier {
                requested: to,
                failed,
            });
        }
    }
    Ok(fresh(m, to, now))
}

/// Turns a failed machine into one running the cancel clean up (eject, power off), with a
/// fresh budget and deadline: the table's own `Cancel -> WaitCancel -> Canceled` path does
/// the work, so a failed deployment is cleaned up exactly like a running one.
pub fn resume_cancel(m: &Machine, now: Time) -> Result<Machine, ResumeError> {
    if m.state != State::Failed {
        return Err(ResumeError::NotFailed { state: m.state });
    }
    Ok(fresh(m, State::Cancel, now))
}

/// Marks a failed machine canceled without touching the server: media and power stay as the
/// failure left them.
pub fn cancel_failed(m: &Machine, now: Time) -> Result<Machine, ResumeError> {
    if m.state != State::Failed {
        return Err(ResumeError::NotFailed { state: m.state });
    }
    let mut next = m.clone();
    next.state = State::Canceled;
    next.seq += 1;
    next.state_entered_at = now;
    next.finished_at = Some(now);
    next.retry_at = None;
    Ok(next)
}

fn fresh(m: &Machine, to: State, now: Time) -> Machine {
    let mut next = m.clone();
    next.state = to;
    next.seq += 1;
    next.retries = 0;
    next.bios_fallbacks = 0;
    next.started_at = now;
    next.state_entered_at = now;
    next.retry_at = None;
    next.first_error = None;
    next.last_error = None;
    next.failure = None;
    next.finished_at = None;
    next.bios_task_monitor = None;
    if to <= State::SecureBoot {
        next.secure_boot_written = false;
    }
    if to <= State::WaitSecureBootSettled {
        next.settle_watch = None;
    }
    if to <= State::WaitInstall {
        next.install_watch = None;
    }
    next
}

/// Why a live deployment looks stuck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overdue {
    /// In its state longer than its budget in time: a wait past its timeout (the dispatcher
    /// would have fallen back or failed had it run), or a trigger past every attempt and backoff.
    State,
    /// Past the overall deadline without having failed: nothing is deciding it.
    Deadline,
}

/// How far a live deployment is into its state and its budgets, for the "stuck" view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub state: State,
    pub kind: Kind,
    pub time_in_state_secs: i64,
    /// The wait's configured timeout; `None` for triggers.
    pub state_timeout_secs: Option<u64>,
    /// How long the state may take before it is overdue (see [`state_budget`]).
    pub state_budget_secs: u64,
    /// Failures counted against the step, and how many it tolerates.
    pub retries: u32,
    pub retry_budget: u32,
    pub bios_fallbacks: u32,
    pub bios_fallback_budget: u32,
    pub elapsed_secs: i64,
    pub deadline_secs: u64,
    pub overdue: Vec<Overdue>,
}

/// How long `state` may take, with the slack of one poll and one call: a wait its timeout;
/// a trigger (or decision) every attempt its budget allows at its call deadline plus the
/// backoffs between them; a wait without timeout, the overall deadline.
pub fn state_budget(state: State, cfg: &Config) -> TimeDelta {
    let def = state.def();
    let slack = secs(cfg.poll_interval_secs) + secs(cfg.step_call_timeout_secs);
    let body = match (def.kind, def.timeout(cfg)) {
        (Kind::Wait, Some(timeout)) => timeout,
        (Kind::Trigger | Kind::Decision, _) => {
            let retries = retry_budget(state, cfg);
            let calls = secs(def.call_deadline_secs(cfg)) * (retries as i32 + 1);
            (1..=retries).fold(calls, |sum, n| sum + cfg.backoff(n))
        }
        _ => secs(cfg.deployment_timeout_secs),
    };
    body + slack
}

/// The failures a step tolerates, as the dispatcher counts them (`count_retry`).
fn retry_budget(state: State, cfg: &Config) -> u32 {
    match state.def().budget {
        Budget::Step | Budget::BiosFallback => cfg.step_retries,
        Budget::None => 0,
    }
}

/// Measures a live machine against its state's budget and the overall deadline at `now`.
pub fn progress(m: &Machine, now: Time, cfg: &Config) -> Progress {
    let in_state = now - m.state_entered_at;
    let elapsed = now - m.started_at;
    let budget = state_budget(m.state, cfg);
    let deadline = secs(cfg.deployment_timeout_secs);
    let mut overdue = Vec::new();
    if !m.state.is_terminal() {
        if in_state > budget {
            overdue.push(Overdue::State);
        }
        if elapsed > deadline + secs(cfg.poll_interval_secs) + secs(cfg.step_call_timeout_secs) {
            overdue.push(Overdue::Deadline);
        }
    }
    Progress {
        state: m.state,
        kind: m.state.kind(),
        time_in_state_secs: in_state.num_seconds(),
        state_timeout_secs: m.state.def().timeout(cfg).map(|t| t.num_seconds().max(0) as u64),
        state_budget_secs: budget.num_seconds().max(0) as u64,
        retries: m.retries,
        retry_budget: retry_budget(m.state, cfg),
        bios_fallbacks: m.bios_fallbacks,
        bios_fallback_budget: cfg.bios_fallback_attempts,
        elapsed_secs: elapsed.num_seconds(),
        deadline_secs: cfg.deployment_timeout_secs,
        overdue,
    }
}

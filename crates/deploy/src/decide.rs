//! The dispatcher: one pure function from (record, facts, now) to a decision, and one that
//! applies the outcome of an issued action.
//!
//! Order of precedence on every decision: terminal states stay; the overall deadline; a cancel;
//! then the state's own rule from the table. Keeping that order in one place is what lets the
//! property tests state "cancel always wins" and "everything ends by the deadline" at all.

mod branch;

use crate::Time;
use crate::bios;
use crate::config::{Config, secs};
use crate::decision::{Action, Cause, Decision, Failure, Jitter, Outcome, Step, Terminal, Transition};
use crate::facts::{Facts, PowerState, TaskState};
use crate::install::{self, WaitEval};
use crate::record::{Deployment, Machine, Plan};
use crate::secure_boot;
use crate::table::{Budget, Kind, State};

/// Decides what the worker does next for a deployment, given fresh facts and the time.
pub fn decide(d: &Deployment, facts: &Facts, now: Time, cfg: &Config) -> Step {
    within_deadline(decide_unclamped(d, facts, now, cfg), d, now, cfg)
}

/// Applies the outcome of the action a [`Decision::Act`] asked for.
pub fn apply_outcome(d: &Deployment, outcome: &Outcome, now: Time, cfg: &Config, jitter: Jitter) -> Step {
    within_deadline(apply_outcome_unclamped(d, outcome, now, cfg, jitter), d, now, cfg)
}

/// Nothing a decision asks for reaches past the overall deadline: no snooze, no backoff and no
/// call deadline, so the deadline check at the top of `decide` runs on time.
fn within_deadline(mut step: Step, d: &Deployment, now: Time, cfg: &Config) -> Step {
    let deadline = d.machine.started_at + secs(cfg.deployment_timeout_secs);
    match &mut step.decision {
        Decision::Snooze { until } => *until = (*until).min(deadline),
        Decision::Retry { at } => *at = (*at).min(deadline),
        Decision::Act {
            call_deadline_secs, ..
        } => {
            let left = u64::try_from((deadline - now).num_seconds()).unwrap_or(0).max(1);
            *call_deadline_secs = (*call_deadline_secs).min(left);
        }
        Decision::Continue | Decision::Finished(_) => {}
    }
    step
}

fn decide_unclamped(d: &Deployment, facts: &Facts, now: Time, cfg: &Config) -> Step {
    let m = &d.machine;
    let state = m.state;
    if let Some(t) = terminal(state) {
        return Step {
            machine: m.clone(),
            changed: false,
            transition: None,
            decision: Decision::Finished(t),
        };
    }
    if now >= m.started_at + secs(cfg.deployment_timeout_secs) {
        return fail(m.clone(), Cause::DeploymentTimeout, None, now);
    }
    if let Some(cancel) = facts.cancel
        && !state.is_cancel_cleanup()
    {
        // With skip_cleanup there is nothing to trigger: the server is left as it is.
        return if cancel.skip_cleanup {
            let mut m = m.clone();
            m.finished_at = Some(now);
            transition(m, State::Canceled, Cause::CancelSkipCleanup, now, true)
        } else {
            transition(m.clone(), State::Cancel, Cause::CancelRequested, now, true)
        };
    }
    match state.kind() {
        Kind::Trigger => decide_trigger(d, facts, now, cfg),
        Kind::Decision => branch::decide_branch(d, facts, now, cfg),
        Kind::Wait => decide_wait(d, facts, now, cfg),
        Kind::Terminal => unreachable_terminal(m),
    }
}

fn apply_outcome_unclamped(
    d: &Deployment,
    outcome: &Outcome,
    now: Time,
    cfg: &Config,
    jitter: Jitter,
) -> Step {
    let m = d.machine.clone();
    let state = m.state;
    match state.kind() {
        Kind::Terminal => unreachable_terminal(&m),
        // Actions inside a wait (powering a halted server on) are re-issued by the next
        // evaluation; the wait's own timeout bounds them, so errors are only recorded.
        Kind::Wait => {
            let mut m = m;
            if let Some(e) = error_text(outcome) {
                m.record_error(&e);
            }
            let changed = m != d.machine;
            Step {
                machine: m,
                changed,
                transition: None,
                decision: Decision::Snooze {
                    until: now + cfg.poll(),
                },
            }
        }
        Kind::Trigger | Kind::Decision => match outcome {
            Outcome::Succeeded | Outcome::Accepted { .. } => match state.next() {
                Some(next) => {
                    let mut m = m;
                    // Only a BIOS apply is waited on through its monitor; other tasks are
                    // observed through the resource they change.
                    if let Outcome::Accepted { task_monitor } = outcome
                        && matches!(state, State::ApplyBIOS | State::ApplyBIOSDeferred)
                    {
                        m.bios_task_monitor = Some(task_monitor.clone());
                    }
                    transition(m, next, Cause::ActionSucceeded, now, false)
                }
                // A decision state has no action of its own; re-evaluate.
                None => Step {
                    machine: m,
                    changed: false,
                    transition: None,
                    decision: Decision::Continue,
                },
            },
            Outcome::Fatal { error } => {
                let mut m = m;
                m.record_error(error);
                fail(m, Cause::NonRetryable, Some(error.clone()), now)
            }
            Outcome::Retryable { .. } | Outcome::DeadlineExpired => {
                let error = error_text(outcome).unwrap_or_default();
                count_retry(m, &error, now, cfg, jitter)
            }
        },
    }
}

/// Decides repeatedly while the machine moves on without needing the BMC ("run until
/// blocked"), bounded by `max_transitions_per_tick` so one wedged deployment cannot hog a worker.
pub fn run_until_blocked(
    d: &Deployment,
    facts: &Facts,
    now: Time,
    cfg: &Config,
) -> (Deployment, Vec<Transition>, Decision) {
    let mut d = d.clone();
    let mut transitions = Vec::new();
    for _ in 0..cfg.max_transitions_per_tick.max(1) {
        let step = decide(&d, facts, now, cfg);
        d.machine = step.machine;
        transitions.extend(step.transition);
        if step.decision != Decision::Continue {
            return (d, transitions, step.decision);
        }
    }
    (d, transitions, Decision::Snooze { until: now })
}

fn terminal(state: State) -> Option<Terminal> {
    match state {
        State::Completed => Some(Terminal::Completed),
        State::Failed => Some(Terminal::Failed),
        State::Canceled => Some(Terminal::Canceled),
        _ => None,
    }
}

fn unreachable_terminal(m: &Machine) -> Step {
    // Only reached for terminal states, which `decide` handles first; answer consistently anyway.
    let t = terminal(m.state).unwrap_or(Terminal::Failed);
    Step {
        machine: m.clone(),
        changed: false,
        transition: None,
        decision: Decision::Finished(t),
    }
}

fn error_text(outcome: &Outcome) -> Option<String> {
    match outcome {
        Outcome::Succeeded | Outcome::Accepted { .. } => None,
        Outcome::Retryable { error } | Outcome::Fatal { error } => Some(error.clone()),
        Outcome::DeadlineExpired => Some("call deadline expired".to_owned()),
    }
}

/// Moves to `to`. Counters survive a trigger's success and a wait's fallback (so a trigger and
/// its wait share one budget), and are reset where the step is done.
pub(super) fn transition(mut m: Machine, to: State, cause: Cause, now: Time, reset_retries: bool) -> Step {
    let from = m.state;
    m.state = to;
    m.seq += 1;
    m.state_entered_at = now;
    m.retry_at = None;
    if reset_retries {
        m.retries = 0;
    }
    match to {
        State::WaitInstall => {
            m.install_watch = None;
            m.eject = None;
        }
        State::WaitSecureBootSettled => m.settle_watch = None,
        _ => {}
    }
    // A BIOS apply's monitor is carried through its power on into its wait, and no further.
    if !matches!(
        to,
        State::PowerOnBIOS
            | State::PowerOnBIOSDeferred
            | State::WaitBIOSApplied
            | State::WaitBIOSAppliedDeferred
    ) {
        m.bios_task_monitor = None;
    }
    let decision = match terminal(to) {
        Some(t) => {
            m.finished_at = Some(now);
            Decision::Finished(t)
        }
        None => Decision::Continue,
    };
    Step {
        machine: m,
        changed: true,
        transition: Some(Transition { from, to, cause }),
        decision,
    }
}

/// Fails where the deployment stands: media and power are left as they are for the operator.
pub(super) fn fail(mut m: Machine, cause: Cause, error: Option<String>, now: Time) -> Step {
    m.failure = Some(Failure {
        state: m.state,
        cause,
        error,
    });
    transition(m, State::Failed, cause, now, false)
}

pub(super) fn count_retry(mut m: Machine, error: &str, now: Time, cfg: &Config, jitter: Jitter) -> Step {
    m.record_error(error);
    m.retries += 1;
    let budget = match m.state.def().budget {
        Budget::BiosFallback | Budget::Step => cfg.step_retries,
        Budget::None => 0,
    };
    if m.retries > budget {
        return fail(m, Cause::RetriesExhausted, Some(error.to_owned()), now);
    }
    let cap = cfg.backoff(m.retries);
    let waited = cap.num_milliseconds() as f64 * jitter.fraction();
    let at = now + chrono::TimeDelta::milliseconds(waited as i64);
    m.retry_at = Some(at);
    Step {
        machine: m,
        changed: true,
        transition: None,
        decision: Decision::Retry { at },
    }
}

/// A trigger (or decision) in backoff is not attempted before its time.
pub(super) fn in_backoff(m: &Machine, now: Time) -> Option<Step> {
    match m.retry_at {
        Some(at) if now < at => Some(Step {
            machine: m.clone(),
            changed: false,
            transition: None,
            decision: Decision::Retry { at },
        }),
        _ => None,
    }
}

fn decide_trigger(d: &Deployment, facts: &Facts, now: Time, cfg: &Config) -> Step {
    let m = &d.machine;
    if let Some(step) = in_backoff(m, now) {
        return step;
    }
    let mut next = m.clone();
    let action = match m.state {
        State::RefreshBMCData => Action::RefreshBmcData,
        State::PowerOffBIOS
        | State::PowerOffBIOSDeferred
        | State::PowerOffSecureBoot
        | State::PowerOffSecureBootSettled
        | State::PowerOffMissedEject => Action::PowerOff,
        State::PowerOnBIOS
        | State::PowerOnBIOSDeferred
        | State::PowerOnSecureBoot
        | State::PowerOnInstall
        | State::PowerOnMissedEject => Action::PowerOn,
        State::ApplyBIOS | State::ApplyBIOSDeferred => {
            let deferred = m.state == State::ApplyBIOSDeferred;
            let wanted = if deferred {
                &d.plan.bios.deferred_attributes
            } else {
                &d.plan.bios.attributes
            };
            let attributes = bios::to_stage(wanted, facts.bios.as_ref());
            if attributes.is_empty() {
                // Everything is staged already (a retry after the BMC accepted the PATCH).
                return advance(next, Cause::NothingToStage, now);
            }
            Action::ApplyBios { deferred, attributes }
        }
        State::SecureBoot => {
            // A snapshot without IncusOS certificates would have every entry deleted and nothing
            // enrolled: it fails here, before the BMC sees a request, and no retry can fix it.
            let incusos = match d.plan.secure_boot.incusos_keys() {
                Ok(keys) => keys,
                Err(e) => {
                    let error = format!("secure boot certificates: {e}");
                    next.record_error(&error);
                    return fail(next, Cause::NonRetryable, Some(error), now);
                }
            };
            let enrollment =
                secure_boot::plan_enrollment(&facts.key_dbs, &incusos, &d.plan.secure_boot.allow);
            if enrollment.is_empty() {
                return advance(next, Cause::CertificatesCorrect, now);
            }
            // Persisted before the writes: a wipe cut short looks like a no-op afterwards, yet
            // the firmware still needs its settle boot.
            next.secure_boot_written = true;
            Action::EnrollSecureBoot { enrollment }
        }
        State::ClearMedia => Action::ClearMedia,
        State::AttachMedia => Action::AttachMedia {
            image_url: d.plan.image_url.clone(),
        },
        State::DetachMedia => {
            if let Some(race) = next.eject.as_mut() {
                race.observe(facts);
            }
            Action::DetachMedia
        }
        State::Cleanup => Action::Cleanup,
        State::Cancel => Action::CancelCleanup,
        other => return unexpected(m, other, now),
    };
    let changed = next != *m;
    let call_deadline_secs = m.state.def().call_deadline_secs(cfg);
    Step {
        machine: next,
        changed,
        transition: None,
        decision: Decision::Act {
            action,
            call_deadline_secs,
        },
    }
}

/// A trigger with nothing to do moves on as if it had succeeded.
fn advance(m: Machine, cause: Cause, now: Time) -> Step {
    match m.state.next() {
        Some(to) => transition(m, to, cause, now, false),
        None => unexpected(&m, m.state, now),
    }
}

pub(super) fn unexpected(m: &Machine, state: State, now: Time) -> Step {
    // The table and this match disagree; fail loudly rather than guess.
    fail(
        m.clone(),
        Cause::NonRetryable,
        Some(format!("no rule for state {state}")),
        now,
    )
}

/// Sends a BIOS pass back to its power off (the firmware only picks staged attributes up on a
/// reset), counted against the budget both passes share.
pub(super) fn bios_fallback(mut m: Machine, to: State, now: Time, cfg: &Config) -> Step {
    m.bios_fallbacks += 1;
    if m.bios_fallbacks > cfg.bios_fallback_attempts {
        return fail(m, Cause::BiosFallbacksExhausted, None, now);
    }
    let cause = if m.state.kind() == Kind::Wait {
        Cause::WaitTimeout
    } else {
        Cause::BiosNotApplied
    };
    transition(m, to, cause, now, true)
}

fn decide_wait(d: &Deployment, facts: &Facts, now: Time, cfg: &Config) -> Step {
    let m = &d.machine;
    let def = m.state.def();
    let mut next = m.clone();
    let power = facts.power;
    let since = now - m.state_entered_at;
    let met = |to, cause| WaitEval::Met { to, cause };
    let eval = match m.state {
        State::WaitPowerOffBIOS
        | State::WaitPowerOffBIOSDeferred
        | State::WaitPowerOffSecureBoot
        | State::WaitPowerOffSecureBootSettled
        | State::WaitPowerOffMissedEject
        | State::WaitCancel
            if power == Some(PowerState::Off) =>
        {
            match m.state {
                State::WaitPowerOffBIOS => met(State::ApplyBIOS, Cause::ConditionMet),
                State::WaitPowerOffBIOSDeferred => met(State::ApplyBIOSDeferred, Cause::ConditionMet),
                State::WaitPowerOffSecureBoot if d.plan.skip_secure_boot_certificates => {
                    met(State::ClearMedia, Cause::SecureBootSkipped)
                }
                State::WaitPowerOffSecureBoot => met(State::SecureBoot, Cause::ConditionMet),
                State::WaitPowerOffSecureBootSettled => met(State::AttachMedia, Cause::ConditionMet),
                State::WaitPowerOffMissedEject => met(State::PowerOnMissedEject, Cause::ConditionMet),
                _ => met(State::Canceled, Cause::ConditionMet),
            }
        }
        State::WaitBIOSApplied | State::WaitBIOSAppliedDeferred => {
            let task_done = match facts.bios_task {
                Some(TaskState::Completed | TaskState::Failed) => true,
                Some(TaskState::Running) => false,
                // A monitor 404s once consumed or after a BMC reset: the settle delay stands in.
                Some(TaskState::Unavailable) | None => since >= secs(cfg.settle_delay_secs),
            };
            if power == Some(PowerState::On) && task_done {
                let to = if m.state == State::WaitBIOSApplied {
                    State::VerifyBIOS
                } else {
                    State::VerifyBIOSDeferred
                };
                met(to, Cause::ConditionMet)
            } else {
                WaitEval::Pending
            }
        }
        State::WaitMediaCleared => match &facts.media {
            Some(slot) if !slot.inserted => {
                // The settle boot is only needed where the enrolment wrote something.
                let to = if m.secure_boot_written {
                    State::PowerOnSecureBoot
                } else {
                    State::AttachMedia
                };
                met(to, Cause::ConditionMet)
            }
            _ => WaitEval::Pending,
        },
        State::WaitSecureBootSettled => install::wait_secure_boot_settled(&mut next, facts, now, cfg),
        State::WaitMediaAttached => match &facts.media {
            Some(slot) if slot.inserted && slot.image.as_deref() == Some(d.plan.image_url.as_str()) => {
                met(State::PowerOnInstall, Cause::ConditionMet)
            }
            _ => WaitEval::Pending,
        },
        State::WaitInstall => install::wait_install(&d.plan, &mut next, facts, now, cfg),
        State::WaitMediaDetached => match &facts.media {
            Some(slot) if !slot.inserted => {
                if let Some(race) = next.eject.as_mut() {
                    race.media_out_at = Some(now);
                }
                met(State::WaitReboot, Cause::ConditionMet)
            }
            _ => {
                if let Some(race) = next.eject.as_mut() {
                    race.observe(facts);
                }
                WaitEval::Pending
            }
        },
        State::WaitReboot => install::wait_reboot(&mut next, facts, now, cfg),
        State::WaitRegistration => install::wait_registration(&mut next, facts, now, cfg),
        _ => WaitEval::Pending,
    };
    let timeout_at = def.timeout(cfg).map(|t| m.state_entered_at + t);
    let timed_out = timeout_at.is_some_and(|at| now >= at);
    match eval {
        WaitEval::Met { to, cause } => transition(next, to, cause, now, true),
        _ if timed_out => wait_timeout(next, facts, &d.plan, now, cfg),
        WaitEval::Act(action) => {
            let changed = next != *m;
            let call_deadline_secs = def.call_deadline_secs(cfg);
            Step {
                machine: next,
                changed,
                transition: None,
                decision: Decision::Act {
                    action,
                    call_deadline_secs,
                },
            }
        }
        WaitEval::Pending => poll_again(next, m, now + cfg.poll(), timeout_at),
        WaitEval::PendingCatch => poll_again(next, m, now + cfg.catch_poll(), timeout_at),
    }
}

/// Still waiting: look again at `poll`, or at the wait's deadline if that comes first.
fn poll_again(next: Machine, m: &Machine, poll: Time, timeout_at: Option<Time>) -> Step {
    let changed = next != *m;
    Step {
        machine: next,
        changed,
        transition: None,
        decision: Decision::Snooze {
            until: timeout_at.map_or(poll, |at| at.min(poll)),
        },
    }
}

/// A wait outstayed its time: back to its trigger, counted, or failed where there is none.
fn wait_timeout(mut m: Machine, facts: &Facts, plan: &Plan, now: Time, cfg: &Config) -> Step {
    let def = m.state.def();
    let Some(fallback) = def.fallback else {
        let why = install::timeout_reason(&m, plan, facts, cfg);
        return fail(m, Cause::WaitTimeout, why, now);
    };
    if def.budget == Budget::BiosFallback {
        return bios_fallback(m, fallback, now, cfg);
    }
    m.retries += 1;
    if m.retries > def.budget(cfg) {
        let why = format!("{} timed out on each of its {} attempts", def.label, m.retries);
        return fail(m, Cause::RetriesExhausted, Some(why), now);
    }
    transition(m, fallback, Cause::WaitTimeout, now, false)
}

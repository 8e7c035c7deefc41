//! The decision of a tick: the state each member is observed in, the update phase, then the restart phase one
//! member at a time behind the health gate and the schedule.

use std::collections::BTreeMap;

use super::boot::{booted_again, record_before_reboot};
use super::{MemberFacts, MemberStatus, Phase, RollingRun, RunDecision, RunServer, RunSettings};
use crate::Time;
use crate::config::secs;
use crate::rolling::{
    EndReason, RollingConfig, RollingDecision, RollingState, RollingStep, ServerUpdate, decide_server,
    in_flight, trigger,
};

/// The state a server is observed in during the restart phase, from its record and the facts just polled. May
/// note in the record that its reboot was seen to happen.
pub fn observe(s: &mut RunServer, f: &MemberFacts) -> RollingState {
    use RollingState as RS;
    let rebooting = s.update.step == Some(RollingStep::Reboot) && s.update.step_triggered_at.is_some();
    if rebooting && !s.went_down {
        let version_moved = f.running_version.is_some() && f.running_version != s.version_before_reboot;
        if !f.reachable || version_moved || booted_again(s, f) {
            s.went_down = true;
            s.reboot_unconfirmed = false;
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
        let mut state = observe(s, &f);
        if state == RollingState::InMaintenanceRebooting
            && s.reboot_unconfirmed
            && f.reachable
            && s.update
                .step_triggered_at
                .is_some_and(|at| now >= at + secs(cfg.incus_call_timeout_secs))
        {
            // The trigger was recorded, its call's time is over, no answer was recorded and the server never
            // went down: the worker that held it stopped before the server saw it. Due again, as a counted
            // attempt.
            s.trigger_failed(
                "no answer to the reboot call was recorded and the server did not go down (its worker stopped)",
                now,
                cfg,
            );
            state = observe(s, &f);
        }
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
                    s.reboot_unconfirmed = true;
                    s.version_before_reboot = f.running_version.clone();
                    record_before_reboot(s, &f, now);
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
    let text = status.to_string();
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

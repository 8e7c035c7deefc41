//! The decision states: the BIOS check and the two verifications branch on the attribute values the BMC
//! reports, and a BMC without a Bios resource is passed by or failed here.

use super::{bios_fallback, count_retry, fail, in_backoff, transition, unexpected};
use crate::Time;
use crate::bios;
use crate::config::Config;
use crate::decision::{Cause, Jitter, Step};
use crate::facts::Facts;
use crate::record::Deployment;
use crate::table::State;

/// Decides a decision state from the BIOS facts.
pub(super) fn decide_branch(d: &Deployment, facts: &Facts, now: Time, cfg: &Config) -> Step {
    let m = &d.machine;
    if let Some(step) = in_backoff(m, now) {
        return step;
    }
    let plan = &d.plan.bios;
    if facts.bios.is_none() && facts.bios_absent {
        // No Bios resource, so nothing to read or stage: passed by when the plan sets nothing, otherwise the
        // plan cannot be carried out (the API's pre-flight refuses such a deployment; a BMC can lose the
        // resource after it, with a firmware update).
        let wanted = plan.attributes.len() + plan.deferred_attributes.len();
        if wanted > 0 {
            return fail(
                m.clone(),
                Cause::BiosAbsent,
                Some(format!(
                    "the BMC has no Bios resource, and the BIOS profiles set {wanted} attribute(s)"
                )),
                now,
            );
        }
        let mut next = m.clone();
        next.bios.first = false;
        next.bios.deferred = false;
        return match m.state {
            State::CheckBIOS => transition(next, State::PowerOffSecureBoot, Cause::BiosAbsent, now, true),
            other => unexpected(m, other, now),
        };
    }
    let Some(bios_facts) = facts.bios.as_ref() else {
        return count_retry(
            m.clone(),
            "BIOS attributes could not be read",
            now,
            cfg,
            Jitter::NONE,
        );
    };
    let first_applied = bios::applied(&plan.attributes, Some(bios_facts));
    let deferred_applied = bios::applied(&plan.deferred_attributes, Some(bios_facts));
    let mut next = m.clone();
    let (to, cause) = match m.state {
        State::CheckBIOS => {
            next.bios.first = !first_applied;
            next.bios.deferred = !deferred_applied;
            (
                route_after_first(first_applied, deferred_applied),
                Cause::BiosChecked,
            )
        }
        State::VerifyBIOS if !first_applied => return bios_fallback(next, State::PowerOffBIOS, now, cfg),
        State::VerifyBIOS => {
            // The estimate the check made is overwritten: a deferred attribute is only
            // published once its prerequisite is in effect.
            next.bios.first = false;
            next.bios.deferred = !deferred_applied;
            (route_after_first(true, deferred_applied), Cause::BiosChecked)
        }
        State::VerifyBIOSDeferred if !deferred_applied => {
            return bios_fallback(next, State::PowerOffBIOSDeferred, now, cfg);
        }
        State::VerifyBIOSDeferred => {
            next.bios.deferred = false;
            (State::PowerOffSecureBoot, Cause::BiosChecked)
        }
        other => return unexpected(m, other, now),
    };
    transition(next, to, cause, now, true)
}

fn route_after_first(first_applied: bool, deferred_applied: bool) -> State {
    match (first_applied, deferred_applied) {
        (false, _) => State::PowerOffBIOS,
        (true, false) => State::PowerOffBIOSDeferred,
        (true, true) => State::PowerOffSecureBoot,
    }
}

//! The deployment state table.
//!
//! One declaration per state holds everything the dispatcher needs (kind, timeout, fallback,
//! successors, budgets, call deadline) *and* the labels the documentation diagram is generated
//! from, so the diagram can never drift from the code that runs. State identifiers are the ones
//! of the spec's diagram, so the two can be compared line by line.

use std::fmt;
use std::str::FromStr;

use chrono::TimeDelta;
use serde::{Deserialize, Serialize};

use crate::UnknownState;
use crate::config::{Config, secs};

/// Every state of a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum State {
    RefreshBMCData,
    CheckBIOS,
    PowerOffBIOS,
    WaitPowerOffBIOS,
    ApplyBIOS,
    PowerOnBIOS,
    WaitBIOSApplied,
    VerifyBIOS,
    PowerOffBIOSDeferred,
    WaitPowerOffBIOSDeferred,
    ApplyBIOSDeferred,
    PowerOnBIOSDeferred,
    WaitBIOSAppliedDeferred,
    VerifyBIOSDeferred,
    PowerOffSecureBoot,
    WaitPowerOffSecureBoot,
    SecureBoot,
    ClearMedia,
    WaitMediaCleared,
    PowerOnSecureBoot,
    WaitSecureBootSettled,
    PowerOffSecureBootSettled,
    WaitPowerOffSecureBootSettled,
    AttachMedia,
    WaitMediaAttached,
    PowerOnInstall,
    WaitInstall,
    DetachMedia,
    WaitMediaDetached,
    WaitReboot,
    WaitRegistration,
    PowerOffMissedEject,
    WaitPowerOffMissedEject,
    PowerOnMissedEject,
    Cleanup,
    Cancel,
    WaitCancel,
    Completed,
    Failed,
    Canceled,
}

/// How the dispatcher drives a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// Issues one BMC action; errors are retried with backoff within the budget.
    Trigger,
    /// A trigger whose only action is reading: it branches on the facts, and a failed read
    /// counts against the budget like a trigger's retryable error.
    Decision,
    /// Observes only; its condition is re-derived from facts on every evaluation.
    Wait,
    /// Nothing left to do.
    Terminal,
}

/// Which configured timeout bounds a wait state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Timeout {
    None,
    Step,
    BiosApplied,
    Install,
    Reboot,
    Registration,
}

/// Which configured deadline bounds one attempt's BMC calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CallDeadline {
    Step,
    BmcDataRefresh,
    AttachMedia,
    SecureBoot,
}

/// Which budget a state's failures are counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Budget {
    /// Nothing is ever retried (terminal states, waits without fallback).
    None,
    /// `step_retries`, shared by a trigger and the wait that falls back to it.
    Step,
    /// `bios_fallback_attempts`, shared by both BIOS passes.
    BiosFallback,
}

/// Which block of the diagram an edge is drawn in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Flow,
    Failure,
    Cancel,
}

/// A drawn edge: a successor and the condition it is taken on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub to: State,
    pub reason: Option<&'static str>,
    pub group: Group,
}

/// Everything the dispatcher and the docs know about one state.
#[derive(Debug, Clone, Copy)]
pub struct StateDef {
    pub state: State,
    pub label: &'static str,
    pub kind: Kind,
    pub timeout: Timeout,
    /// The trigger a timed-out wait returns to; `None` fails the deployment.
    pub fallback: Option<State>,
    pub budget: Budget,
    pub call_deadline: CallDeadline,
    /// Edges drawn in the diagram. Implicit edges (to `Failed`, `Cancel`, `Canceled`) are
    /// added by [`is_edge`].
    pub edges: &'static [Edge],
}

const fn flow(to: State, reason: Option<&'static str>) -> Edge {
    Edge {
        to,
        reason,
        group: Group::Flow,
    }
}
const fn fail(reason: &'static str) -> Edge {
    Edge {
        to: State::Failed,
        reason: Some(reason),
        group: Group::Failure,
    }
}
const fn cancel(to: State, reason: Option<&'static str>) -> Edge {
    Edge {
        to,
        reason,
        group: Group::Cancel,
    }
}

const TIMEOUT: Option<&str> = Some("timeout");
const POWER_OFF: Option<&str> = Some("power state off");
const NOT_APPLIED: Option<&str> = Some("attributes not applied");
const MATCH: Option<&str> = Some("attributes match");
const MATCH_NO_DEFERRED: Option<&str> = Some("attributes match, no deferred attributes pending");
const BIOS_APPLIED: Option<&str> =
    Some("task completed, or task unavailable after settle delay and power state on");
const CANCEL_REQUESTED: Option<&str> = Some("cancel requested");

#[expect(
    clippy::too_many_arguments,
    reason = "a table row constructor; named fields would bury the table"
)]
const fn def(
    state: State,
    label: &'static str,
    kind: Kind,
    timeout: Timeout,
    fallback: Option<State>,
    budget: Budget,
    call_deadline: CallDeadline,
    edges: &'static [Edge],
) -> StateDef {
    StateDef {
        state,
        label,
        kind,
        timeout,
        fallback,
        budget,
        call_deadline,
        edges,
    }
}

use Budget as B;
use CallDeadline as C;
use Kind as K;
use State as S;
use Timeout as T;

/// The table, in the order of the spec's diagram.
#[rustfmt::skip]
pub static STATES: [StateDef; 40] = [
    def(S::RefreshBMCData, "refresh BMC data", K::Trigger, T::None, None, B::Step, C::BmcDataRefresh, &[
        flow(S::CheckBIOS, None),
        fail("retries exhausted"),
        cancel(S::Cancel, CANCEL_REQUESTED),
    ]),
    def(S::CheckBIOS, "check BIOS", K::Decision, T::None, None, B::Step, C::Step, &[
        flow(S::PowerOffBIOS, NOT_APPLIED),
        flow(S::PowerOffBIOSDeferred, MATCH),
        flow(S::PowerOffSecureBoot, MATCH_NO_DEFERRED),
        // Beyond the spec: a BMC without a Bios resource.
        flow(S::PowerOffSecureBoot, Some("no Bios resource, no attributes planned")),
        fail("no Bios resource, attributes planned"),
    ]),
    def(S::PowerOffBIOS, "power off", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitPowerOffBIOS, None)]),
    def(S::WaitPowerOffBIOS, "wait for power off", K::Wait, T::Step, Some(S::PowerOffBIOS), B::Step, C::Step, &[
        flow(S::PowerOffBIOS, TIMEOUT),
        flow(S::ApplyBIOS, POWER_OFF),
    ]),
    def(S::ApplyBIOS, "apply BIOS", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::PowerOnBIOS, None)]),
    def(S::PowerOnBIOS, "power on", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitBIOSApplied, None)]),
    def(S::WaitBIOSApplied, "wait for BIOS applied", K::Wait, T::BiosApplied, Some(S::PowerOffBIOS), B::BiosFallback, C::Step, &[
        flow(S::PowerOffBIOS, TIMEOUT),
        flow(S::VerifyBIOS, BIOS_APPLIED),
    ]),
    def(S::VerifyBIOS, "verify BIOS", K::Decision, T::None, None, B::BiosFallback, C::Step, &[
        flow(S::PowerOffBIOS, NOT_APPLIED),
        flow(S::PowerOffBIOSDeferred, MATCH),
        flow(S::PowerOffSecureBoot, MATCH_NO_DEFERRED),
    ]),
    def(S::PowerOffBIOSDeferred, "power off", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitPowerOffBIOSDeferred, None)]),
    def(S::WaitPowerOffBIOSDeferred, "wait for power off", K::Wait, T::Step, Some(S::PowerOffBIOSDeferred), B::Step, C::Step, &[
        flow(S::PowerOffBIOSDeferred, TIMEOUT),
        flow(S::ApplyBIOSDeferred, POWER_OFF),
    ]),
    def(S::ApplyBIOSDeferred, "apply deferred BIOS", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::PowerOnBIOSDeferred, None)]),
    def(S::PowerOnBIOSDeferred, "power on", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitBIOSAppliedDeferred, None)]),
    def(S::WaitBIOSAppliedDeferred, "wait for BIOS applied", K::Wait, T::BiosApplied, Some(S::PowerOffBIOSDeferred), B::BiosFallback, C::Step, &[
        flow(S::PowerOffBIOSDeferred, TIMEOUT),
        flow(S::VerifyBIOSDeferred, BIOS_APPLIED),
    ]),
    def(S::VerifyBIOSDeferred, "verify deferred BIOS", K::Decision, T::None, None, B::BiosFallback, C::Step, &[
        flow(S::PowerOffBIOSDeferred, NOT_APPLIED),
        flow(S::PowerOffSecureBoot, MATCH),
    ]),
    def(S::PowerOffSecureBoot, "power off", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitPowerOffSecureBoot, None)]),
    def(S::WaitPowerOffSecureBoot, "wait for power off", K::Wait, T::Step, Some(S::PowerOffSecureBoot), B::Step, C::Step, &[
        flow(S::PowerOffSecureBoot, TIMEOUT),
        flow(S::SecureBoot, POWER_OFF),
        flow(S::ClearMedia, Some("power state off, secure boot certificates skipped")),
    ]),
    def(S::SecureBoot, "secure boot certificates", K::Trigger, T::None, None, B::Step, C::SecureBoot, &[flow(S::ClearMedia, None)]),
    def(S::ClearMedia, "clear stale media", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitMediaCleared, None)]),
    def(S::WaitMediaCleared, "wait for media cleared", K::Wait, T::Step, Some(S::ClearMedia), B::Step, C::Step, &[
        flow(S::ClearMedia, TIMEOUT),
        flow(S::PowerOnSecureBoot, Some("no media inserted")),
        flow(S::AttachMedia, Some("no media inserted, no certificates enrolled")),
    ]),
    def(S::PowerOnSecureBoot, "power on", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitSecureBootSettled, None)]),
    def(S::WaitSecureBootSettled, "wait for secure boot settled", K::Wait, T::BiosApplied, Some(S::PowerOnSecureBoot), B::Step, C::Step, &[
        flow(S::PowerOnSecureBoot, TIMEOUT),
        flow(S::PowerOffSecureBootSettled, Some("reboot detected or settle duration passed")),
    ]),
    def(S::PowerOffSecureBootSettled, "power off", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitPowerOffSecureBootSettled, None)]),
    def(S::WaitPowerOffSecureBootSettled, "wait for power off", K::Wait, T::Step, Some(S::PowerOffSecureBootSettled), B::Step, C::Step, &[
        flow(S::PowerOffSecureBootSettled, TIMEOUT),
        flow(S::AttachMedia, POWER_OFF),
    ]),
    def(S::AttachMedia, "attach media", K::Trigger, T::None, None, B::Step, C::AttachMedia, &[flow(S::WaitMediaAttached, None)]),
    def(S::WaitMediaAttached, "wait for media attached", K::Wait, T::Step, Some(S::AttachMedia), B::Step, C::Step, &[
        flow(S::AttachMedia, TIMEOUT),
        flow(S::PowerOnInstall, Some("expected media inserted in selected device")),
    ]),
    def(S::PowerOnInstall, "power on", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitInstall, None)]),
    def(S::WaitInstall, "installing", K::Wait, T::Install, None, B::None, C::Step, &[
        flow(S::DetachMedia, Some("install stage 1 done")),
        fail("timeout"),
        cancel(S::Cancel, CANCEL_REQUESTED),
        cancel(S::Canceled, Some("cancel requested, clean up skipped")),
    ]),
    def(S::DetachMedia, "detach media", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitMediaDetached, None)]),
    def(S::WaitMediaDetached, "wait for media detached", K::Wait, T::Step, Some(S::DetachMedia), B::Step, C::Step, &[
        flow(S::DetachMedia, TIMEOUT),
        flow(S::WaitReboot, Some("media ejected")),
    ]),
    def(S::WaitReboot, "wait for reboot", K::Wait, T::Reboot, None, B::None, C::Step, &[
        flow(S::WaitRegistration, Some("server registered, reboot detected, or observation window passed while powered on")),
        fail("timeout"),
    ]),
    def(S::WaitRegistration, "wait for registration", K::Wait, T::Registration, None, B::None, C::Step, &[
        flow(S::Cleanup, Some("server registered")),
        flow(S::PowerOffMissedEject, Some("once: installer booted again with the media in, or no registration within the eject grace")),
        fail("timeout"),
    ]),
    def(S::PowerOffMissedEject, "power off (missed eject)", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitPowerOffMissedEject, None)]),
    def(S::WaitPowerOffMissedEject, "wait for power off", K::Wait, T::Step, Some(S::PowerOffMissedEject), B::Step, C::Step, &[
        flow(S::PowerOffMissedEject, TIMEOUT),
        flow(S::PowerOnMissedEject, POWER_OFF),
    ]),
    def(S::PowerOnMissedEject, "power on", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::WaitRegistration, None)]),
    def(S::Cleanup, "cleanup", K::Trigger, T::None, None, B::Step, C::Step, &[flow(S::Completed, None)]),
    def(S::Cancel, "cancel", K::Trigger, T::None, None, B::Step, C::Step, &[cancel(S::WaitCancel, None)]),
    def(S::WaitCancel, "wait for power off", K::Wait, T::Step, Some(S::Cancel), B::Step, C::Step, &[
        cancel(S::Cancel, TIMEOUT),
        cancel(S::Canceled, POWER_OFF),
    ]),
    def(S::Completed, "completed", K::Terminal, T::None, None, B::None, C::Step, &[]),
    def(S::Failed, "failed", K::Terminal, T::None, None, B::None, C::Step, &[]),
    def(S::Canceled, "canceled", K::Terminal, T::None, None, B::None, C::Step, &[]),
];

impl State {
    /// Every state, in table order.
    pub fn all() -> impl Iterator<Item = State> {
        STATES.iter().map(|d| d.state)
    }

    /// The table entry of this state.
    pub fn def(self) -> &'static StateDef {
        // The table is declared in enum order; the test `table_is_in_enum_order` keeps it so.
        &STATES[self as usize]
    }

    pub fn kind(self) -> Kind {
        self.def().kind
    }

    pub fn is_terminal(self) -> bool {
        self.kind() == Kind::Terminal
    }

    /// Whether the installer has finished by this state, so the installed IncusOS may register: from the media
    /// detach after the install wait on, through the reboot and registration waits and the missed-eject repair.
    /// Anything earlier is the installer (or racklift's preparation) still running; a registration then came
    /// from something else holding the token, or from an install racklift has not seen end, and IncusOS simply
    /// retries on its restart loop.
    pub fn installer_finished(self) -> bool {
        matches!(
            self,
            State::DetachMedia
                | State::WaitMediaDetached
                | State::WaitReboot
                | State::WaitRegistration
                | State::PowerOffMissedEject
                | State::WaitPowerOffMissedEject
                | State::PowerOnMissedEject
        )
    }

    /// The clean up a cancellation triggers itself; the only states a cancel does not preempt.
    pub fn is_cancel_cleanup(self) -> bool {
        matches!(self, State::Cancel | State::WaitCancel)
    }

    /// The successor a succeeded trigger moves to.
    pub fn next(self) -> Option<State> {
        match self.kind() {
            Kind::Trigger => self
                .def()
                .edges
                .iter()
                .find(|e| e.group != Group::Failure)
                .map(|e| e.to),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        NAMES[self as usize]
    }
}

static NAMES: [&str; 40] = [
    "RefreshBMCData",
    "CheckBIOS",
    "PowerOffBIOS",
    "WaitPowerOffBIOS",
    "ApplyBIOS",
    "PowerOnBIOS",
    "WaitBIOSApplied",
    "VerifyBIOS",
    "PowerOffBIOSDeferred",
    "WaitPowerOffBIOSDeferred",
    "ApplyBIOSDeferred",
    "PowerOnBIOSDeferred",
    "WaitBIOSAppliedDeferred",
    "VerifyBIOSDeferred",
    "PowerOffSecureBoot",
    "WaitPowerOffSecureBoot",
    "SecureBoot",
    "ClearMedia",
    "WaitMediaCleared",
    "PowerOnSecureBoot",
    "WaitSecureBootSettled",
    "PowerOffSecureBootSettled",
    "WaitPowerOffSecureBootSettled",
    "AttachMedia",
    "WaitMediaAttached",
    "PowerOnInstall",
    "WaitInstall",
    "DetachMedia",
    "WaitMediaDetached",
    "WaitReboot",
    "WaitRegistration",
    "PowerOffMissedEject",
    "WaitPowerOffMissedEject",
    "PowerOnMissedEject",
    "Cleanup",
    "Cancel",
    "WaitCancel",
    "Completed",
    "Failed",
    "Canceled",
];

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad` so tables can align state names with width specifiers.
        f.pad(self.name())
    }
}

impl FromStr for State {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::all()
            .find(|st| st.name() == s)
            .ok_or_else(|| UnknownState { name: s.to_owned() })
    }
}

impl StateDef {
    /// The wait timeout, `None` for states that never time out on their own.
    pub fn timeout(&self, cfg: &Config) -> Option<TimeDelta> {
        let s = match self.timeout {
            Timeout::None => return None,
            Timeout::Step => cfg.step_timeout_secs,
            Timeout::BiosApplied => cfg.bios_applied_timeout_secs,
            Timeout::Install => cfg.install_timeout_secs,
            Timeout::Reboot => cfg.reboot_timeout_secs,
            Timeout::Registration => cfg.registration_timeout_secs,
        };
        Some(secs(s))
    }

    /// The deadline of one attempt's BMC calls, in seconds.
    pub fn call_deadline_secs(&self, cfg: &Config) -> u64 {
        match self.call_deadline {
            CallDeadline::Step => cfg.step_call_timeout_secs,
            CallDeadline::BmcDataRefresh => cfg.bmc_data_refresh_timeout_secs,
            CallDeadline::AttachMedia => cfg.attach_media_call_timeout_secs,
            CallDeadline::SecureBoot => cfg.secure_boot_call_timeout_secs,
        }
    }

    /// The number of failures this state tolerates before the deployment fails.
    pub fn budget(&self, cfg: &Config) -> u32 {
        match self.budget {
            Budget::None => 0,
            Budget::Step => cfg.step_retries,
            Budget::BiosFallback => cfg.bios_fallback_attempts,
        }
    }
}

/// Whether `from -> to` is a transition the table allows, drawn or implicit.
///
/// Implicit: every non-terminal state can fail (a trigger out of budget, a wait without
/// fallback timing out, the overall deadline), and every state but the cancel's own clean up
/// can be preempted by a cancel, with or without clean up.
pub fn is_edge(from: State, to: State) -> bool {
    if from.is_terminal() {
        return false;
    }
    if from.def().edges.iter().any(|e| e.to == to) {
        return true;
    }
    match to {
        State::Failed => true,
        State::Cancel | State::Canceled => !from.is_cancel_cleanup(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The states a registration is accepted in are exactly those the install's end leads to (drawn flow edges
    /// from the media detach) before the clean up that follows a registration.
    #[test]
    fn installer_finished_is_what_follows_the_install_until_clean_up() {
        let mut reached = vec![State::DetachMedia];
        let mut i = 0;
        while i < reached.len() {
            for e in reached[i].def().edges {
                let onward = e.group == Group::Flow && !e.to.is_terminal() && e.to != State::Cleanup;
                if onward && !reached.contains(&e.to) {
                    reached.push(e.to);
                }
            }
            i += 1;
        }
        for state in State::all() {
            assert_eq!(state.installer_finished(), reached.contains(&state), "{state}");
        }
    }

    #[test]
    fn table_is_in_enum_order() {
        for (i, d) in STATES.iter().enumerate() {
            assert_eq!(d.state as usize, i, "{} is out of order", d.state);
        }
    }

    #[test]
    fn names_round_trip() {
        for s in State::all() {
            assert_eq!(s.name().parse::<State>().unwrap(), s);
            let json = serde_json_name(s);
            assert_eq!(json, s.name(), "serde and display names differ");
        }
        assert!("Nope".parse::<State>().is_err());
    }

    fn serde_json_name(s: State) -> String {
        serde_json::to_value(s).unwrap().as_str().unwrap().to_owned()
    }

    #[test]
    fn kinds_follow_naming() {
        for d in &STATES {
            let n = d.state.name();
            match d.kind {
                Kind::Wait => assert!(n.starts_with("Wait"), "{n}"),
                Kind::Terminal => assert!(matches!(d.state, S::Completed | S::Failed | S::Canceled)),
                Kind::Trigger | Kind::Decision => assert!(!n.starts_with("Wait"), "{n}"),
            }
        }
    }

    #[test]
    fn waits_with_fallback_fall_back_to_a_trigger_and_draw_it() {
        for d in STATES.iter().filter(|d| d.kind == Kind::Wait) {
            assert!(d.timeout != Timeout::None, "{} never times out", d.state);
            if let Some(f) = d.fallback {
                assert_eq!(f.kind(), Kind::Trigger, "{} falls back to a non-trigger", d.state);
                assert!(
                    d.edges.iter().any(|e| e.to == f && e.reason == TIMEOUT),
                    "{}",
                    d.state
                );
            } else {
                assert_eq!(d.budget, Budget::None, "{} has a budget but no fallback", d.state);
            }
        }
    }

    #[test]
    fn every_trigger_has_one_successor() {
        for d in STATES.iter().filter(|d| d.kind == Kind::Trigger) {
            let next = d
                .state
                .next()
                .unwrap_or_else(|| panic!("{} has no successor", d.state));
            assert!(is_edge(d.state, next));
            assert_ne!(d.budget, Budget::None, "{} cannot retry", d.state);
        }
    }

    #[test]
    fn long_call_deadlines() {
        let cfg = Config::default();
        assert_eq!(S::AttachMedia.def().call_deadline_secs(&cfg), 20 * 60);
        assert_eq!(S::SecureBoot.def().call_deadline_secs(&cfg), 15 * 60);
        assert_eq!(S::RefreshBMCData.def().call_deadline_secs(&cfg), 2 * 60);
        assert_eq!(S::PowerOffBIOS.def().call_deadline_secs(&cfg), 2 * 60);
    }

    #[test]
    fn implicit_edges() {
        assert!(is_edge(S::ApplyBIOS, S::Failed));
        assert!(is_edge(S::ApplyBIOS, S::Cancel));
        assert!(is_edge(S::Cleanup, S::Canceled));
        assert!(!is_edge(S::Cancel, S::Canceled));
        assert!(!is_edge(S::WaitCancel, S::Cancel) || S::WaitCancel.def().fallback == Some(S::Cancel));
        assert!(!is_edge(S::Completed, S::Failed));
        assert!(!is_edge(S::ApplyBIOS, S::AttachMedia));
    }
}

//! Sentences for people about a rolling run that ended on a server: the cluster, the server, the state it was
//! seen in, what that state waited for (or issued), why the run ended and what the member showed last.

use std::fmt;

use super::step_name;
use super::{MemberFacts, MemberStatus};
use crate::rolling::{RollingKind, RollingState, RollingStep};

impl fmt::Display for MemberStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Incus's own spelling of the member status.
        f.write_str(match self {
            MemberStatus::Online => "Online",
            MemberStatus::Evacuating => "Evacuating",
            MemberStatus::Evacuated => "Evacuated",
            MemberStatus::Restoring => "Restoring",
            MemberStatus::Offline => "Offline",
            MemberStatus::Other(s) => s,
        })
    }
}

/// What a state of the rolling table is about.
pub fn purpose(state: RollingState) -> String {
    let def = state.def();
    match def.kind {
        RollingKind::Wait | RollingKind::Settle => {
            let wanted = def
                .edges
                .iter()
                .filter(|e| e.to != RollingState::RunFailed)
                .filter_map(|e| e.reason)
                .find(|r| !r.starts_with("timeout"));
            match wanted {
                Some(w) => format!("waiting for: {w}"),
                None => format!("waiting ({})", def.label),
            }
        }
        RollingKind::Trigger => match def.step {
            Some(step) => format!("issuing the {}", step_name(step)),
            None => format!("issuing ({})", def.label),
        },
        RollingKind::Done | RollingKind::Unsupported => def.label.to_owned(),
    }
}

/// What the member showed last, in words.
pub fn seen(f: &MemberFacts) -> String {
    let mut parts = vec![];
    match (&f.status, f.reachable) {
        (Some(s), true) => parts.push(format!("member {s}")),
        (Some(s), false) => parts.push(format!(
            "member {s} as its peers see it, its own API not answering"
        )),
        (None, _) => parts.push(format!(
            "member status unreadable ({})",
            f.error.as_deref().unwrap_or("its API does not answer")
        )),
    }
    if let Some(v) = &f.running_version {
        parts.push(format!("running {v}"));
    }
    if let Some(v) = f
        .staged_version
        .as_ref()
        .filter(|v| Some(*v) != f.running_version.as_ref())
    {
        parts.push(format!("staged {v}"));
    }
    if let Some(busy) = &f.busy {
        parts.push(format!("busy: {busy}"));
    }
    if let Some(e) = &f.operation_error {
        parts.push(format!("its operation failed: {e}"));
    }
    parts.join(", ")
}

/// The sentence of a run that ended on `server`. `operation` is the operation's name (`rolling_reboot`).
pub fn run_failure_sentence(
    cluster: &str,
    operation: &str,
    server: &str,
    state: RollingState,
    step: Option<RollingStep>,
    reason: &str,
    facts: Option<&MemberFacts>,
) -> String {
    let step = step.map_or_else(String::new, |s| format!(", step {}", step_name(s)));
    let seen = facts.map_or_else(|| "nothing read from it".to_owned(), seen);
    format!(
        "cluster {cluster}: {} ended on server {server} in state {}{step}, {}: {reason}. Last seen: {seen}.",
        operation.replace('_', " "),
        state.def().label,
        purpose(state),
    )
}

//! Diagrams generated from the tables, so the documentation cannot drift from the code.
//!
//! The deployment diagram keeps the layout of the spec's diagram (declarations, then the flow,
//! the failure and the cancel blocks) so the two can be compared line by line.

use std::fmt::Write as _;

use crate::rolling;
use crate::table::{Group, STATES, State};

/// The deployment state diagram (mermaid `stateDiagram-v2`).
pub fn deployment() -> String {
    let mut out = String::from("stateDiagram-v2\n");
    for d in &STATES {
        let _ = writeln!(out, "    state \"{}\" as {}", d.label, d.state);
    }
    let blocks = [
        (Group::Flow, Some(State::RefreshBMCData), State::Completed),
        (Group::Failure, None, State::Failed),
        (Group::Cancel, None, State::Canceled),
    ];
    for (group, entry, exit) in blocks {
        out.push('\n');
        if let Some(entry) = entry {
            let _ = writeln!(out, "    [*] --> {entry}: deploy triggered");
        }
        for d in &STATES {
            for e in d.edges.iter().filter(|e| e.group == group) {
                edge(&mut out, &d.state.to_string(), &e.to.to_string(), e.reason);
            }
        }
        let _ = writeln!(out, "    {exit} --> [*]");
    }
    out
}

fn edge(out: &mut String, from: &str, to: &str, reason: Option<&str>) {
    match reason {
        Some(r) => {
            let _ = writeln!(out, "    {from} --> {to}: {r}");
        }
        None => {
            let _ = writeln!(out, "    {from} --> {to}");
        }
    }
}

/// The rolling restart / reboot state diagram.
pub fn rolling() -> String {
    let mut out = String::from("stateDiagram-v2\n");
    for d in &rolling::STATES {
        let _ = writeln!(out, "    state \"{}\" as {}", d.label, d.state);
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "    [*] --> {}: run launched",
        rolling::RollingState::EvacuationPending
    );
    for d in &rolling::STATES {
        for e in d.edges {
            edge(&mut out, &d.state.to_string(), &e.to.to_string(), e.reason);
        }
    }
    let _ = writeln!(out, "    {} --> [*]", rolling::RollingState::UpToDate);
    let _ = writeln!(out, "    {} --> [*]", rolling::RollingState::RunFailed);
    out
}

/// `STATES.md` as committed next to the crate.
pub fn states_markdown() -> String {
    format!(
        "# Deployment states\n\n\
         Generated from `src/table.rs` and `src/rolling.rs`; do not edit by hand.\n\
         Regenerate with `UPDATE_STATES_MD=1 cargo test -p racklift-deploy --test states_md`\n\
         (or print a diagram with `racklift deploy states --mermaid [--rolling]`).\n\n\
         Only some edges into `Failed` and `Cancel` are drawn: every non-terminal state can fail\n\
         (a trigger out of budget, a wait without fallback timing out, the overall deadline), and a\n\
         cancel preempts every state but the clean up it triggers itself (`Cancel`, `WaitCancel`).\n\n\
         ## Deployment\n\n```mermaid\n{}```\n\n\
         ## Rolling restart / reboot (per server)\n\n```mermaid\n{}```\n",
        deployment(),
        rolling()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_is_declared_and_every_drawn_edge_is_an_edge() {
        let text = deployment();
        for s in State::all() {
            assert!(text.contains(&format!(" as {s}\n")), "{s} not declared");
        }
        for line in text.lines().filter(|l| l.contains("-->") && !l.contains("[*]")) {
            let (from, rest) = line.trim().split_once(" --> ").unwrap();
            let to = rest.split(':').next().unwrap();
            assert!(
                crate::table::is_edge(from.parse().unwrap(), to.parse().unwrap()),
                "{line}"
            );
        }
    }
}

//! Diagrams generated from the tables, so the documentation cannot drift from the code.
//!
//! The deployment diagram keeps the layout of the spec's diagram (declarations, then the flow,
//! the failure and the cancel blocks) so the two can be compared line by line.

use std::fmt::Write as _;

use crate::Config;
use crate::rolling::{self, RollingConfig};
use crate::table::{Group, Kind, STATES, State};

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
         Beyond spec 000, a missed eject is repaired once (`src/eject.rs`): when the eject lands after the POST\n\
         of the reboot that ends install stage 1, the server boots its installer a second time and never\n\
         registers. `WaitRegistration` power-cycles it (`PowerOffMissedEject` .. `PowerOnMissedEject`, media\n\
         out) when a poll saw that boot reach the OS boot while the media was still inserted, or, where the BMC\n\
         reports no boot progress or the polls missed it, when the server is powered on and unregistered\n\
         `missed_eject_grace_secs` after the eject. The registration wait then starts again; a second miss\n\
         fails the deployment naming the repair.\n\n\
         ## Deployment\n\n```mermaid\n{}```\n\n\
         ## Rolling restart / reboot (per server)\n\n```mermaid\n{}```\n",
        deployment(),
        rolling()
    )
}

/// The deployment table as plain text, with the budgets `cfg` resolves to.
pub fn deployment_table(cfg: &Config) -> String {
    let mut out = format!(
        "{:<30} {:<9} {:>8} {:<26} {:>6} {:>9}  successors\n",
        "state", "kind", "timeout", "fallback", "budget", "call (s)"
    );
    for d in &STATES {
        let timeout = d
            .timeout(cfg)
            .map_or_else(|| "-".to_owned(), |t| format!("{}s", t.num_seconds()));
        let fallback = d.fallback.map_or_else(|| "-".to_owned(), |f| f.to_string());
        let call = if matches!(d.kind, Kind::Terminal) {
            "-".to_owned()
        } else {
            d.call_deadline_secs(cfg).to_string()
        };
        let next: Vec<String> = d.edges.iter().map(|e| e.to.to_string()).collect();
        let kind = format!("{:?}", d.kind);
        let _ = writeln!(
            out,
            "{:<30} {:<9} {:>8} {:<26} {:>6} {:>9}  {}",
            d.state,
            kind,
            timeout,
            fallback,
            d.budget(cfg),
            call,
            next.join(", ")
        );
    }
    out
}

/// The rolling restart / reboot table as plain text.
pub fn rolling_table(cfg: &RollingConfig) -> String {
    let mut out = format!(
        "{:<28} {:<11} {:<9} {:>8} {:>7} {:<10} {:<9}  successors\n",
        "state", "kind", "step", "timeout", "retries", "retrigger", "evacuated"
    );
    for d in &rolling::STATES {
        let step = d.step.map_or_else(|| "-".to_owned(), |s| format!("{s:?}"));
        let timeout = match (d.kind, d.step) {
            (rolling::RollingKind::Wait, Some(s)) => format!("{}s", cfg.timeout_secs(s)),
            (rolling::RollingKind::Settle, _) => format!("{}s", cfg.post_restore_delay_secs),
            _ => "-".to_owned(),
        };
        let retries = if d.step.is_some() {
            cfg.step_retries.to_string()
        } else {
            "-".to_owned()
        };
        let next: Vec<String> = d.edges.iter().map(|e| e.to.to_string()).collect();
        let (kind, kept) = (format!("{:?}", d.kind), format!("{:?}", d.kept_evacuated));
        let _ = writeln!(
            out,
            "{:<28} {:<11} {:<9} {:>8} {:>7} {:<10} {:<9}  {}",
            d.state,
            kind,
            step,
            timeout,
            retries,
            d.retrigger,
            kept,
            next.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_tables_list_every_state() {
        let text = deployment_table(&Config::default());
        assert_eq!(text.lines().count(), STATES.len() + 1);
        assert!(
            text.lines()
                .any(|l| l.starts_with("WaitInstall ") && l.contains("2700s"))
        );
        let text = rolling_table(&RollingConfig::default());
        assert_eq!(text.lines().count(), rolling::STATES.len() + 1);
    }

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

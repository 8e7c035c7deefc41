//! Reporting an operation: the line an accepted action prints, the live `[k/N]` line `--wait` keeps (a spinner on
//! a terminal, a plain line per change otherwise), and the exit an operation's end decides.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::bail;
use indicatif::{HumanDuration, ProgressBar, ProgressDrawTarget, ProgressStyle};
use racklift_api::{ClusterOperationView, ClusterView};
use racklift_store::OperationStatus;

use super::{Action, cluster_path};
use crate::client::{Client, ClientError, decode};

/// The line an accepted action is reported with: `rack1: rolling_update 7 started: [1/3] Updating servers`.
pub(super) fn accepted_line(name: &str, action: Action, op: &ClusterOperationView) -> String {
    format!(
        "{name}: {} {} {}: {}",
        action.done(),
        op.operation,
        op.id,
        progress_line(op)
    )
}

/// The live line of an operation: its `[k/N]` description, with what was asked of it and not done yet.
pub(super) fn progress_line(op: &ClusterOperationView) -> String {
    let mut line = if op.status_description.starts_with('[') {
        op.status_description.clone()
    } else {
        format!("{} {}", op.progress, op.status_description)
    };
    if op.status == OperationStatus::Running {
        if op.cancel_requested {
            line.push_str(" (cancel requested)");
        } else if op.pause_requested {
            line.push_str(" (pause requested)");
        }
    }
    line
}

/// How a finished wait ends the process: zero for a completed or canceled operation, an error naming the
/// reason for a failed or paused one. `None` while it still runs.
pub(super) fn verdict(name: &str, op: &ClusterOperationView) -> Option<Result<(), String>> {
    let reason = || {
        let mut why = op
            .status_reason
            .clone()
            .or_else(|| op.last_error.clone())
            .unwrap_or_else(|| "no reason recorded".to_owned());
        match (&op.failed_server, &op.failed_step) {
            (Some(server), Some(step)) => why.push_str(&format!(" (server {server}, step {step})")),
            (Some(server), None) => why.push_str(&format!(" (server {server})")),
            _ => {}
        }
        why
    };
    let (id, progress) = (op.id, &op.progress);
    match op.status {
        OperationStatus::Running => None,
        OperationStatus::Completed | OperationStatus::Canceled => Some(Ok(())),
        OperationStatus::Failed => Some(Err(format!(
            "{name}: operation {id} failed at {progress}: {}",
            reason()
        ))),
        OperationStatus::Paused => Some(Err(format!(
            "{name}: operation {id} paused at {progress}: {}; resume it with: racklift cluster resume {name}",
            reason()
        ))),
    }
}

/// Where the live line goes: redrawn in place on a terminal, a plain line per change otherwise (a pipe, a CI
/// log).
pub(super) enum Progress {
    Bar(ProgressBar),
    Lines { last: Option<String>, started: Instant },
}

impl Progress {
    /// Starts at `first`, the line already printed for the accepted request.
    fn new(name: &str, first: String) -> anyhow::Result<Progress> {
        if !std::io::stdout().is_terminal() {
            return Ok(Progress::Lines {
                last: Some(first),
                started: Instant::now(),
            });
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout())
            .with_style(ProgressStyle::with_template(
                "{spinner} {prefix} [{elapsed_precise}] {wide_msg}",
            )?)
            .with_prefix(name.to_owned())
            .with_message(first);
        bar.enable_steady_tick(Duration::from_millis(100));
        Ok(Progress::Bar(bar))
    }

    fn show(&mut self, name: &str, line: String) {
        match self {
            Progress::Bar(bar) => bar.set_message(line),
            Progress::Lines { last, started } => {
                if last.as_ref() != Some(&line) {
                    println!("{} {name}: {line}", clock(started.elapsed()));
                    *last = Some(line);
                }
            }
        }
    }

    fn finish(self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }

    fn abandon(self) {
        if let Progress::Bar(bar) = self {
            bar.abandon();
        }
    }
}

/// `m:ss`, as `racklift up --demo` stamps its plain lines.
pub(super) fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}", s / 60, s % 60)
}

/// Reads the cluster every `poll` until operation `started` is no longer running (a paused one ends the wait
/// too); Ctrl-C stops only the watching, the operation goes on. An unreachable API is retried so an API
/// restart does not end the wait; any other error does.
pub(super) async fn follow(
    client: &Client,
    name: &str,
    started: &ClusterOperationView,
    poll: Duration,
) -> anyhow::Result<()> {
    let (id, since) = (started.id, Instant::now());
    let mut progress = Progress::new(name, progress_line(started))?;
    let op = loop {
        match client.get(&cluster_path(name)).await {
            Ok(answer) => {
                let cluster: ClusterView = match decode(&answer) {
                    Ok(cluster) => cluster,
                    Err(e) => {
                        progress.abandon();
                        return Err(e);
                    }
                };
                let Some(op) = cluster.operation.filter(|op| op.id == id) else {
                    progress.abandon();
                    bail!(
                        "{name}: operation {id} is no longer the latest; see: racklift cluster show {name}"
                    );
                };
                if op.status != OperationStatus::Running {
                    break op;
                }
                progress.show(name, progress_line(&op));
            }
            Err(ClientError::Unreachable(e)) => progress.show(name, format!("{e:#}; retrying")),
            Err(e) => {
                progress.abandon();
                return Err(e.into());
            }
        }
        tokio::time::sleep(poll).await;
    };
    progress.finish();
    println!(
        "{name}: operation {id} ({}) ended {} after {}: {}",
        op.operation,
        op.status.as_str(),
        HumanDuration(since.elapsed()),
        progress_line(&op)
    );
    match verdict(name, &op) {
        Some(Err(why)) => bail!(why),
        _ => Ok(()),
    }
}

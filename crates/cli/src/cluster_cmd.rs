//! `racklift cluster …`: clusters of registered servers and their cluster-wide operations through a running
//! API: create, list, show and delete clusters; start a rolling update or reboot; cancel, pause and resume
//! the operation in progress. Each verb is one API call; `--wait` then follows the operation until it stops
//! running.

use std::time::Duration;

use anyhow::bail;
use racklift_api::{
    ClusterCreate, ClusterOperationView, ClusterServerView, ClusterView, ControlRequest, RebootRequest,
    UpdateRequest,
};
use racklift_deploy::rolling_window::DailyWindow;
use racklift_store::RestoreMode;
use serde_json::Value;

use crate::client::{ApiArgs, Client, decode};
use crate::output::{key_values, print_json, table, truncate};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    api: ApiArgs,
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(clap::Subcommand)]
enum ClusterCommand {
    /// Create a cluster from registered servers that already form one Incus cluster (admin).
    Create {
        /// The cluster's name: lower-case letters, digits, '.', '_', '-'.
        name: String,
        /// A registered server, given once per member in the order rolling operations take them.
        #[arg(long = "server", value_name = "SERVER", required = true)]
        servers: Vec<String>,
        /// How long to wait after a member's restore before the next member is evacuated, in whole seconds,
        /// e.g. 30s or 5m (default: the API's configured delay).
        #[arg(long, value_name = "DURATION", value_parser = whole_seconds)]
        post_restore_delay: Option<u64>,
        /// Leave a restored member's instances where the evacuation put them instead of moving them back.
        #[arg(long)]
        restore_skip: bool,
        /// Print the API's JSON instead of key: value lines.
        #[arg(long)]
        json: bool,
    },
    /// List the clusters with their operation in progress (or their last one).
    List {
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show a cluster, its operation in progress (or its last one) and each server's record in it.
    Show {
        /// The cluster's name.
        name: String,
        /// Print the API's JSON instead of key: value lines and a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete a cluster on which no operation runs; its servers stay registered (admin).
    Delete {
        /// The cluster's name.
        name: String,
        /// Print the API's answer (`null`: it has no body) instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Start a rolling update: stage what the servers need, then restart them one at a time.
    Update {
        /// The cluster's name.
        name: String,
        /// Only the OS decides whether a server needs an update; applications stay on their version.
        #[arg(long, conflicts_with = "applications")]
        os_only: bool,
        /// Only this application decides (given once per application); servers without any are skipped.
        #[arg(long = "application", value_name = "APP")]
        applications: Vec<String>,
        /// Makes a retried request answer with the operation it started instead of "operation running".
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        #[command(flatten)]
        schedule: ScheduleArgs,
        #[command(flatten)]
        wait: WaitArgs,
        /// Print the API's JSON instead of a sentence.
        #[arg(long, conflicts_with = "wait")]
        json: bool,
    },
    /// Start a rolling reboot of every server, one at a time (every server must be idle).
    Reboot {
        /// The cluster's name.
        name: String,
        /// Makes a retried request answer with the operation it started instead of "operation running".
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        #[command(flatten)]
        schedule: ScheduleArgs,
        #[command(flatten)]
        wait: WaitArgs,
        /// Print the API's JSON instead of a sentence.
        #[arg(long, conflicts_with = "wait")]
        json: bool,
    },
    /// Cancel the operation in progress: the server being worked on is restored, the others left as they are.
    Cancel {
        /// The cluster's name.
        name: String,
        /// Why, kept with the operation.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        #[command(flatten)]
        wait: WaitArgs,
        /// Print the API's JSON instead of a sentence.
        #[arg(long, conflicts_with = "wait")]
        json: bool,
    },
    /// Pause the operation in progress once the step in flight is done; resume goes on from there.
    Pause {
        /// The cluster's name.
        name: String,
        /// Why, kept with the operation.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// Print the API's JSON instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Resume a paused operation (paused by an operator or by the health gate).
    Resume {
        /// The cluster's name.
        name: String,
        /// Why, kept with the operation.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// Print the API's JSON instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Forget the cluster's recorded certificate so that racklift records the one its members all serve at the
    /// next read, e.g. after it was replaced on purpose (admin; recorded in each member's event log).
    Repin {
        /// The cluster's name.
        name: String,
        /// Why the certificate changed, for the event log.
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Print the API's JSON instead of a sentence.
        #[arg(long)]
        json: bool,
    },
}

/// When the operation may start its members.
#[derive(clap::Args)]
struct ScheduleArgs {
    /// Start no member before this time (RFC 3339, e.g. 2026-12-24T22:00:00Z).
    #[arg(long, value_name = "TIME")]
    not_before: Option<chrono::DateTime<chrono::Utc>>,
    /// Start members only inside a daily window (UTC) opening at HH:MM; one in flight when it closes is
    /// finished.
    #[arg(long, value_name = "HH:MM", requires = "window_length")]
    window_start: Option<String>,
    /// How long the daily window stays open, e.g. 4h.
    #[arg(long, value_name = "DURATION", requires = "window_start", value_parser = whole_seconds)]
    window_length: Option<u64>,
}

impl ScheduleArgs {
    fn window(&self) -> Option<DailyWindow> {
        Some(DailyWindow {
            start_utc: self.window_start.clone()?,
            duration_secs: self.window_length?,
        })
    }
}

/// `--wait` and its poll interval; flattened into the verbs that start or end an operation.
#[derive(clap::Args)]
struct WaitArgs {
    /// Follow the operation until it is no longer running; exit 0 only if it completed or was canceled (a
    /// failed or paused operation exits non-zero with its reason).
    #[arg(long)]
    wait: bool,
    /// How often --wait reads the cluster again, e.g. 2s or 500ms.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "2s",
        value_parser = poll_interval,
        requires = "wait"
    )]
    poll: Duration,
}

/// A humantime duration in whole seconds, as the API takes `post_restore_delay_secs`: a fraction would be cut
/// off silently otherwise.
fn whole_seconds(s: &str) -> Result<u64, String> {
    let d =
        humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 30s or 5m: {e}"))?;
    if d.subsec_nanos() != 0 {
        return Err(format!("{s:?} is not a whole number of seconds"));
    }
    Ok(d.as_secs())
}

/// A humantime duration above zero: a zero interval would poll the API in a tight loop.
fn poll_interval(s: &str) -> Result<Duration, String> {
    let d =
        humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 2s or 500ms: {e}"))?;
    if d.is_zero() {
        return Err("the poll interval must be above zero".to_owned());
    }
    Ok(d)
}

// --- the verbs ----------------------------------------------------------------------------------------------------

const CLUSTERS: &str = "/1.0/provisioning/clusters";

/// Cluster names go into the path unescaped: the API restricts them to characters that need no escaping.
fn cluster_path(name: &str) -> String {
    format!("{CLUSTERS}/{name}")
}

/// What a verb asks of the cluster's operation, and how its answer is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Update,
    Reboot,
    Cancel,
    Pause,
    Resume,
}

impl Action {
    /// The action segment of the path: `…/{name}:{segment}`.
    fn segment(self) -> &'static str {
        match self {
            Action::Update => "update",
            Action::Reboot => "reboot",
            Action::Cancel => "cancel-operation",
            Action::Pause => "pause",
            Action::Resume => "resume",
        }
    }

    /// How the accepted request reads: "started", "cancel requested for", …
    fn done(self) -> &'static str {
        match self {
            Action::Update | Action::Reboot => "started",
            Action::Cancel => "cancel requested for",
            Action::Pause => "pause requested for",
            Action::Resume => "resumed",
        }
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.api.client()?;
    match args.command {
        ClusterCommand::Create {
            name,
            servers,
            post_restore_delay,
            restore_skip,
            json,
        } => {
            let body = ClusterCreate {
                name,
                servers,
                post_restore_delay_secs: post_restore_delay,
                restore_mode: if restore_skip {
                    RestoreMode::Skip
                } else {
                    RestoreMode::Default
                },
            };
            let answer = client
                .post(CLUSTERS, &serde_json::to_value(&body)?, |r| r)
                .await?;
            if json {
                return print_json(&answer);
            }
            print!("{}", key_values(&cluster_lines(&decode(&answer)?)));
            Ok(())
        }
        ClusterCommand::List { json } => list(&client, json).await,
        ClusterCommand::Show { name, json } => show(&client, &name, json).await,
        ClusterCommand::Delete { name, json } => {
            let answer = client.delete(&cluster_path(&name)).await?;
            if json {
                return print_json(&answer);
            }
            println!("cluster {name}: deleted");
            Ok(())
        }
        ClusterCommand::Update {
            name,
            os_only,
            applications,
            idempotency_key,
            schedule,
            wait,
            json,
        } => {
            let body = serde_json::to_value(UpdateRequest {
                os_only,
                applications,
                not_before: schedule.not_before,
                window: schedule.window(),
            })?;
            let request = Request {
                action: Action::Update,
                body,
                idempotency_key,
            };
            act(&client, &name, request, Some(wait), json).await
        }
        ClusterCommand::Reboot {
            name,
            idempotency_key,
            schedule,
            wait,
            json,
        } => {
            let request = Request {
                action: Action::Reboot,
                body: serde_json::to_value(RebootRequest {
                    not_before: schedule.not_before,
                    window: schedule.window(),
                })?,
                idempotency_key,
            };
            act(&client, &name, request, Some(wait), json).await
        }
        ClusterCommand::Cancel {
            name,
            reason,
            wait,
            json,
        } => {
            let request = Request::control(Action::Cancel, reason)?;
            act(&client, &name, request, Some(wait), json).await
        }
        ClusterCommand::Pause { name, reason, json } => {
            let request = Request::control(Action::Pause, reason)?;
            act(&client, &name, request, None, json).await
        }
        ClusterCommand::Resume { name, reason, json } => {
            let request = Request::control(Action::Resume, reason)?;
            act(&client, &name, request, None, json).await
        }
        ClusterCommand::Repin { name, reason, json } => repin(&client, &name, &reason, json).await,
    }
}

/// Asks the API to record the certificate the cluster's members serve at the next read.
async fn repin(client: &Client, name: &str, reason: &str, as_json: bool) -> anyhow::Result<()> {
    let path = format!("{}:repin", cluster_path(name));
    let answer = client
        .post(&path, &serde_json::json!({ "reason": reason }), |r| r)
        .await?;
    if as_json {
        return print_json(&answer);
    }
    println!(
        "{name}: racklift will record the certificate its members all serve at the next read; \
         see racklift events for each member"
    );
    Ok(())
}

/// One `POST …/{name}:{action}`.
struct Request {
    action: Action,
    body: Value,
    idempotency_key: Option<String>,
}

impl Request {
    /// A cancel, pause or resume, with its reason when given (an empty one is refused before it is sent).
    fn control(action: Action, reason: Option<String>) -> anyhow::Result<Request> {
        if let Some(reason) = &reason
            && reason.trim().is_empty()
        {
            bail!("--reason is empty: say why, or leave it out");
        }
        Ok(Request {
            action,
            body: serde_json::to_value(ControlRequest { reason })?,
            idempotency_key: None,
        })
    }
}

/// Sends the action, reports the operation it answers with and, when asked, follows it.
async fn act(
    client: &Client,
    name: &str,
    request: Request,
    wait: Option<WaitArgs>,
    as_json: bool,
) -> anyhow::Result<()> {
    let path = format!("{}:{}", cluster_path(name), request.action.segment());
    let key = request.idempotency_key;
    let answer = client
        .post(&path, &request.body, |r| match key {
            Some(key) => r.header("Idempotency-Key", key),
            None => r,
        })
        .await?;
    if as_json {
        return print_json(&answer);
    }
    let cluster: ClusterView = decode(&answer)?;
    let Some(op) = &cluster.operation else {
        bail!("{name}: the API answered without the operation");
    };
    println!("{}", accepted_line(name, request.action, op));
    match wait {
        Some(wait) if wait.wait => follow(client, name, op, wait.poll).await,
        _ => {
            println!("follow it with: racklift cluster show {name}");
            Ok(())
        }
    }
}

async fn list(client: &Client, as_json: bool) -> anyhow::Result<()> {
    let clusters = client.get(CLUSTERS).await?;
    if as_json {
        return print_json(&clusters);
    }
    let rows: Vec<[String; 5]> = decode::<Vec<ClusterView>>(&clusters)?
        .into_iter()
        .map(|c| {
            let servers = c.servers.len().to_string();
            match c.operation {
                Some(op) => [
                    c.name,
                    servers,
                    format!("{} {}", op.operation, op.id),
                    op.status.as_str().to_owned(),
                    truncate(&progress_line(&op), 64),
                ],
                None => [c.name, servers, "-".into(), "-".into(), "-".into()],
            }
        })
        .collect();
    print!(
        "{}",
        table(["NAME", "SERVERS", "OPERATION", "STATUS", "PROGRESS"], &rows)
    );
    Ok(())
}

async fn show(client: &Client, name: &str, as_json: bool) -> anyhow::Result<()> {
    let answer = client.get(&cluster_path(name)).await?;
    if as_json {
        return print_json(&answer);
    }
    let cluster: ClusterView = decode(&answer)?;
    let mut lines = cluster_lines(&cluster);
    let Some(op) = &cluster.operation else {
        lines.push(("operation", "none".to_owned()));
        print!("{}", key_values(&lines));
        return Ok(());
    };
    lines.extend(operation_lines(op));
    print!("{}", key_values(&lines));
    println!();
    print!("{}", server_table(&op.servers));
    Ok(())
}

/// The cluster's own lines, as `create` and `show` print them.
fn cluster_lines(c: &ClusterView) -> Vec<(&'static str, String)> {
    let delay = match c.post_restore_delay_secs {
        Some(secs) => humantime::format_duration(Duration::from_secs(secs)).to_string(),
        None => "default".to_owned(),
    };
    vec![
        ("name", c.name.clone()),
        ("servers", list_or_dash(&c.servers)),
        ("post restore delay", delay),
        ("created", c.created_at.to_rfc3339()),
    ]
}

/// The operation's lines of `show`.
fn operation_lines(op: &ClusterOperationView) -> Vec<(&'static str, String)> {
    let restricted_to = if op.os_only {
        "the OS".to_owned()
    } else if !op.applications.is_empty() {
        op.applications.join(", ")
    } else {
        "-".to_owned()
    };
    vec![
        ("operation", format!("{} {}", op.operation, op.id)),
        ("status", op.status.as_str().to_owned()),
        ("phase", op.phase.clone()),
        ("progress", op.progress.clone()),
        ("status description", progress_line(op)),
        ("current server", or_dash(&op.current_server)),
        ("current step", or_dash(&op.current_step)),
        ("pending reboot", list_or_dash(&op.pending_reboot)),
        ("restricted to", restricted_to),
        ("status reason", or_dash(&op.status_reason)),
        ("failed server", or_dash(&op.failed_server)),
        ("failed step", or_dash(&op.failed_step)),
        ("first error", or_dash(&op.first_error)),
        ("last error", or_dash(&op.last_error)),
        ("requested by", op.requested_by.clone()),
        ("started", op.created_at.to_rfc3339()),
        ("updated", op.updated_at.to_rfc3339()),
        (
            "finished",
            op.finished_at.map_or("-".to_owned(), |t| t.to_rfc3339()),
        ),
    ]
}

/// The servers' records in the run, in the order it takes them.
fn server_table(servers: &[ClusterServerView]) -> String {
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_owned();
    let rows: Vec<[String; 7]> = servers
        .iter()
        .map(|s| {
            [
                s.name.clone(),
                or_dash(&s.step),
                s.attempts.to_string(),
                yes_no(s.reboot_pending),
                yes_no(s.kept_evacuated),
                if s.skipped {
                    "skipped".to_owned()
                } else {
                    yes_no(s.done)
                },
                truncate(&or_dash(&s.last_error), 48),
            ]
        })
        .collect();
    table(
        [
            "SERVER",
            "STEP",
            "ATTEMPTS",
            "REBOOT PENDING",
            "KEPT EVACUATED",
            "DONE",
            "LAST ERROR",
        ],
        &rows,
    )
}

/// `-` for an absent or empty text, as the other tables show it.
fn or_dash(s: &Option<String>) -> String {
    match s.as_deref() {
        None | Some("") => "-".to_owned(),
        Some(s) => s.to_owned(),
    }
}

/// Names separated by `, `; `-` when there are none.
fn list_or_dash(names: &[String]) -> String {
    if names.is_empty() {
        "-".to_owned()
    } else {
        names.join(", ")
    }
}

mod follow;

use follow::{accepted_line, follow, progress_line};

#[cfg(test)]
mod tests;

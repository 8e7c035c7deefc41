//! `racklift server …`: operator commands against a running API, so listing, inspecting, deploying and
//! canceling does not need curl and hand-written JSON.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use indicatif::{HumanBytes, HumanDuration, ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use crate::client::{Client, ClientError};

#[derive(clap::Args)]
pub struct Args {
    /// The racklift API to talk to.
    #[arg(
        long,
        global = true,
        env = "RACKLIFT_API",
        default_value = "http://127.0.0.1:7878"
    )]
    api: String,
    /// A file holding the API bearer token (default ~/.config/racklift/token if it exists). RACKLIFT_TOKEN
    /// wins over any file; the token is never taken from a flag so it stays out of process listings.
    #[arg(long, global = true, value_name = "PATH")]
    token_file: Option<PathBuf>,
    #[command(subcommand)]
    command: ServerCommand,
}

#[derive(clap::Subcommand)]
enum ServerCommand {
    /// List the servers with their status and newest deployment's state.
    List {
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one server and its newest deployment.
    Show {
        /// The server's name.
        name: String,
        /// Print the API's JSON instead of key: value lines.
        #[arg(long)]
        json: bool,
    },
    /// Deploy IncusOS to a server.
    Deploy(DeployArgs),
    /// Cancel the server's running deployment.
    Cancel {
        /// The server's name.
        name: String,
        /// Stop at once, leaving the media attached and the power as it is.
        #[arg(long)]
        skip_cleanup: bool,
    },
}

#[derive(clap::Args)]
struct DeployArgs {
    /// The server's name.
    name: String,
    /// The provisioning token (a UUID) the installed OS registers with.
    #[arg(long, value_name = "UUID")]
    token: String,
    /// The token's public seed to install with.
    #[arg(long, value_name = "NAME")]
    seed: String,
    /// Deploy even though the seed does not set force_reboot.
    #[arg(long)]
    force: bool,
    /// Leave the UEFI key databases alone (for BMCs that cannot modify them through Redfish).
    #[arg(long)]
    skip_secure_boot_certificates: bool,
    /// Makes a retried request answer with the original deployment instead of "deployment running".
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    /// Follow the deployment until it finishes; exit 0 only if it completed.
    #[arg(long)]
    wait: bool,
}

/// How often `--wait` polls: often enough that the spinner's state name keeps up with the short states.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// At most this many `GET /servers/{name}` requests are in flight while `list` fills in deployment states.
const LIST_CONCURRENCY: usize = 8;

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = Client::new(&args.api, args.token_file.as_deref())?;
    match args.command {
        ServerCommand::List { json } => list(&client, json).await,
        ServerCommand::Show { name, json } => show(&client, &name, json).await,
        ServerCommand::Deploy(deploy_args) => deploy(&client, deploy_args).await,
        ServerCommand::Cancel { name, skip_cleanup } => cancel(&client, &name, skip_cleanup).await,
    }
}

/// Server names go into the path unescaped: the API restricts them to characters that need no escaping.
fn server_path(name: &str) -> String {
    format!("/1.0/servers/{name}")
}

async fn list(client: &Client, as_json: bool) -> anyhow::Result<()> {
    let servers = client.get("/1.0/servers").await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&servers)?);
        return Ok(());
    }
    let servers = servers.as_array().cloned().unwrap_or_default();
    let states = deployment_states(client, &servers).await?;
    let rows: Vec<[String; 4]> = servers
        .iter()
        .zip(states)
        .map(|(s, state)| {
            [
                text(&s["name"]),
                text(&s["status"]),
                truncate(&text(&s["status_detail"]), 48),
                state,
            ]
        })
        .collect();
    print!(
        "{}",
        table(["NAME", "STATUS", "DETAIL", "DEPLOYMENT STATE"], &rows)
    );
    Ok(())
}

/// The newest deployment's state of each server, `-` when it has none. The list endpoint leaves deployments
/// out, so each server is fetched, a few at a time.
async fn deployment_states(client: &Client, servers: &[Value]) -> anyhow::Result<Vec<String>> {
    let limit = Arc::new(tokio::sync::Semaphore::new(LIST_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, s) in servers.iter().enumerate() {
        let (client, limit, name) = (client.clone(), limit.clone(), text(&s["name"]));
        tasks.spawn(async move {
            let _permit = limit.acquire().await;
            (i, client.get(&server_path(&name)).await)
        });
    }
    let mut states = vec!["-".to_owned(); servers.len()];
    while let Some(joined) = tasks.join_next().await {
        let (i, shown) = joined?;
        match shown {
            Ok(v) => states[i] = text(&v["deployment"]["state"]),
            // Deleted since the list was read: nothing to show, not a reason to fail the listing.
            Err(ClientError::Other(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(states)
}

async fn show(client: &Client, name: &str, as_json: bool) -> anyhow::Result<()> {
    let server = client.get(&server_path(name)).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&server)?);
        return Ok(());
    }
    let d = &server["deployment"];
    let mut lines = vec![
        ("name", text(&server["name"])),
        ("status", text(&server["status"])),
        ("status detail", text(&server["status_detail"])),
    ];
    if d.is_null() {
        lines.push(("deployment", "none".to_owned()));
    } else {
        lines.extend([
            ("deployment", text(&d["id"])),
            ("deployment state", text(&d["state"])),
            ("attempts", text(&d["attempts"])),
            ("started", text(&d["started_at"])),
            ("state entered", text(&d["state_entered_at"])),
            ("finished", text(&d["finished_at"])),
            ("media bytes read / size", media_progress(d)),
            ("last error", text(&d["last_error"])),
        ]);
    }
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    for (key, value) in lines {
        println!("{:width$} {value}", format!("{key}:"));
    }
    Ok(())
}

async fn deploy(client: &Client, args: DeployArgs) -> anyhow::Result<()> {
    let body = json!({
        "token": args.token,
        "seed": args.seed,
        "force": args.force,
        "skip_secure_boot_certificates": args.skip_secure_boot_certificates,
    });
    let path = format!("/1.0/provisioning/servers/{}:deploy", args.name);
    let key = args.idempotency_key.clone();
    let deployment = client
        .post(&path, &body, |r| match key {
            Some(key) => r.header("Idempotency-Key", key),
            None => r,
        })
        .await?;
    println!(
        "{}: deployment {} accepted (state {})",
        args.name,
        text(&deployment["id"]),
        text(&deployment["state"])
    );
    if !args.wait {
        println!("follow it with: racklift server show {}", args.name);
        return Ok(());
    }
    wait(client, &args.name, &deployment["id"]).await
}

/// Polls the server until deployment `id` has finished, with a spinner showing its state; Ctrl-C stops only
/// the watching, the deployment goes on. An unreachable API is retried so an API restart does not end the
/// wait; any other error does.
async fn wait(client: &Client, name: &str, id: &Value) -> anyhow::Result<()> {
    let started = Instant::now();
    let bar = ProgressBar::new_spinner()
        .with_style(ProgressStyle::with_template(
            "{spinner} {prefix} [{elapsed_precise}] {wide_msg}",
        )?)
        .with_prefix(name.to_owned());
    bar.enable_steady_tick(Duration::from_millis(100));
    let deployment = loop {
        match client.get(&server_path(name)).await {
            Ok(server) => {
                let d = &server["deployment"];
                if d["id"] != *id {
                    bar.abandon();
                    bail!(
                        "{name}: deployment {id} is no longer the newest (now {}); see racklift server show {name}",
                        text(&d["id"])
                    );
                }
                if !d["finished_at"].is_null() {
                    break d.clone();
                }
                let media = match d["media_bytes_read"].as_u64() {
                    Some(_) => format!(" (media {})", media_progress(d)),
                    None => String::new(),
                };
                bar.set_message(format!("{}{media}", text(&d["state"])));
            }
            Err(ClientError::Unreachable(e)) => bar.set_message(format!("{e}; retrying")),
            Err(e) => {
                bar.abandon();
                return Err(e.into());
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    };
    bar.finish_and_clear();
    let state = text(&deployment["state"]);
    println!(
        "{name}: deployment {id} ended {state} after {}",
        HumanDuration(started.elapsed())
    );
    if state == "Completed" {
        return Ok(());
    }
    if !deployment["last_error"].is_null() {
        println!("last error: {}", text(&deployment["last_error"]));
    }
    bail!("{name}: deployment {id} ended {state}, not Completed")
}

async fn cancel(client: &Client, name: &str, skip_cleanup: bool) -> anyhow::Result<()> {
    let path = format!("/1.0/provisioning/servers/{name}:cancel-deploy");
    let deployment = client
        .post(&path, &json!({ "skip_cleanup": skip_cleanup }), |r| r)
        .await?;
    println!(
        "{name}: cancel requested for deployment {} (state {})",
        text(&deployment["id"]),
        text(&deployment["state"])
    );
    Ok(())
}

/// "12.0 MiB / 16.0 MiB"; `-` for a side not known yet.
fn media_progress(d: &Value) -> String {
    let bytes = |v: &Value| v.as_u64().map_or("-".to_owned(), |n| HumanBytes(n).to_string());
    format!("{} / {}", bytes(&d["media_bytes_read"]), bytes(&d["media_size"]))
}

/// A JSON value for display: strings without quotes, null as `-`.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) if s.is_empty() => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Keeps a table row on one line; the full text is in `show`.
fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// Left-aligned columns two spaces apart, padded by characters (not bytes) so non-ASCII details line up.
fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; N]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    };
    line(header);
    for row in rows {
        line(row.each_ref().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_pads_columns_and_trims_line_ends() {
        let rows = [["server-0".to_owned(), "deploying".to_owned(), "-".to_owned()]];
        assert_eq!(
            table(["NAME", "STATUS", "STATE"], &rows),
            "NAME      STATUS     STATE\nserver-0  deploying  -\n"
        );
    }

    #[test]
    fn text_shows_null_and_empty_as_dash() {
        assert_eq!(text(&Value::Null), "-");
        assert_eq!(text(&json!("")), "-");
        assert_eq!(text(&json!("x")), "x");
        assert_eq!(text(&json!(3)), "3");
    }
}

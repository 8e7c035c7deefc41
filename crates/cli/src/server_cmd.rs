//! `racklift server …`: operator commands against a running API, so listing, inspecting, deploying, canceling
//! and ad-hoc power and media actions do not need curl and hand-written JSON.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use indicatif::{HumanBytes, HumanDuration, ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use crate::client::{ApiArgs, Client, ClientError};
use crate::output::{key_values, print_json, table, text, truncate};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    api: ApiArgs,
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
    /// Power the server on, off or cycle it through its BMC (a job, run when no deployment step holds the
    /// server).
    Power {
        /// The server's name.
        name: String,
        #[arg(value_enum)]
        action: PowerAction,
        /// Makes a retried request answer with the original job instead of enqueueing another.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// Insert an image into the server's virtual media, or eject it (a job, like power).
    Media {
        /// The server's name.
        name: String,
        #[arg(value_enum)]
        action: MediaAction,
        /// The http(s) URL of the image to insert.
        #[arg(long, value_name = "URL", required_if_eq("action", "insert"))]
        image_url: Option<String>,
        /// Makes a retried request answer with the original job instead of enqueueing another.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PowerAction {
    On,
    Off,
    Cycle,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum MediaAction {
    Insert,
    Eject,
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
    let client = args.api.client()?;
    match args.command {
        ServerCommand::List { json } => list(&client, json).await,
        ServerCommand::Show { name, json } => show(&client, &name, json).await,
        ServerCommand::Deploy(deploy_args) => deploy(&client, deploy_args).await,
        ServerCommand::Cancel { name, skip_cleanup } => cancel(&client, &name, skip_cleanup).await,
        ServerCommand::Power {
            name,
            action,
            idempotency_key,
        } => {
            let action = match action {
                PowerAction::On => "on",
                PowerAction::Off => "off",
                PowerAction::Cycle => "cycle",
            };
            let body = json!({ "action": action });
            bmc_action(&client, &name, "power", &body, idempotency_key).await
        }
        ServerCommand::Media {
            name,
            action,
            image_url,
            idempotency_key,
        } => {
            let body = match action {
                MediaAction::Insert => json!({ "action": "insert", "image_url": image_url }),
                MediaAction::Eject => json!({ "action": "eject" }),
            };
            bmc_action(&client, &name, "media", &body, idempotency_key).await
        }
    }
}

/// Enqueues an ad-hoc BMC action and says where its outcome will show: the server's event log.
async fn bmc_action(
    client: &Client,
    name: &str,
    kind: &str,
    body: &Value,
    idempotency_key: Option<String>,
) -> anyhow::Result<()> {
    let path = format!("/1.0/provisioning/servers/{name}:{kind}");
    let job = client
        .post(&path, body, |r| match idempotency_key {
            Some(key) => r.header("Idempotency-Key", key),
            None => r,
        })
        .await?;
    println!(
        "{name}: {kind} {} queued as job {}; follow it with: racklift events {name} --follow",
        text(&body["action"]),
        text(&job["job_id"])
    );
    Ok(())
}

/// Server names go into the path unescaped: the API restricts them to characters that need no escaping.
fn server_path(name: &str) -> String {
    format!("/1.0/servers/{name}")
}

async fn list(client: &Client, as_json: bool) -> anyhow::Result<()> {
    let servers = client.get("/1.0/servers").await?;
    if as_json {
        return print_json(&servers);
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
        return print_json(&server);
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
    print!("{}", key_values(&lines));
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

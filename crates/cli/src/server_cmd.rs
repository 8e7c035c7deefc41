//! `racklift server …`: operator commands against a running API, so adding, listing, inspecting, deploying,
//! canceling and ad-hoc power and media actions do not need curl and hand-written JSON. The bulk forms of deploy
//! and cancel (`--all`) are in `bulk`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use indicatif::{HumanBytes, HumanDuration, ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::{Value, json};

use crate::bulk;
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
    /// Add a server to the catalog with its BMC's address and credentials.
    Add(AddArgs),
    /// Remove a server without a running deployment from the catalog.
    Remove {
        /// The server's name.
        name: String,
        /// Print the API's answer (`null`: it has no body) instead of a sentence.
        #[arg(long)]
        json: bool,
    },
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
    /// Deploy IncusOS to a server, or with --all to every server the filters match.
    Deploy(DeployArgs),
    /// Cancel the server's running deployment, or with --all the running deployments the filters match.
    Cancel(CancelArgs),
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
        /// Print the API's JSON instead of a sentence.
        #[arg(long)]
        json: bool,
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
        /// Print the API's JSON instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Trust the certificate the server's Incus API serves at racklift's next connection, in place of the one it
    /// registered with (admin; recorded in its event log with the reason).
    Repin {
        /// The server's name.
        name: String,
        /// Why the certificate changed, for the event log.
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Print the API's JSON instead of a sentence.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct AddArgs {
    /// The server's name: lower-case letters, digits, '.', '_', '-'.
    name: String,
    /// The BMC's Redfish address, e.g. https://10.0.0.5.
    #[arg(long, value_name = "URL")]
    bmc_address: String,
    /// The BMC user racklift logs in as.
    #[arg(long, value_name = "USER")]
    bmc_username: String,
    /// Where the API and the workers read the BMC password on their own hosts: file:NAME, a file name relative to
    /// their secrets directory (paths.secrets_dir), or env:NAME, a variable whose name starts with their secret
    /// prefix (paths.secret_env_prefix, by default RACKLIFT_SECRET_). Never the password itself: a flag value
    /// ends up in process listings and shell histories.
    #[arg(long, value_name = "file:NAME|env:NAME", value_parser = password_ref)]
    bmc_password_ref: String,
    /// The SHA-256 pin of the BMC's (self-signed) certificate.
    #[arg(long, value_name = "SHA256")]
    bmc_cert_pin: Option<String>,
    /// Accept any BMC certificate (prefer --bmc-cert-pin).
    #[arg(long)]
    bmc_insecure: bool,
    /// The BMC's vendor (dell, hpe, lenovo, supermicro, generic): BIOS profiles match on it.
    #[arg(long, value_name = "VENDOR")]
    vendor_hint: Option<String>,
    /// Allow an http:// BMC address, whose password would cross the network in clear text.
    #[arg(long)]
    allow_plain_http: bool,
    /// The Id of the BMC's Redfish System that is this server (1, System.Embedded.1, System_0), for BMCs whose
    /// /redfish/v1/Systems lists more than one that could be it; a DPU is passed over without it.
    #[arg(long, value_name = "ID")]
    system_id: Option<String>,
    /// Print the API's JSON instead of key: value lines.
    #[arg(long)]
    json: bool,
}

/// `POST /1.0/servers`. Optional fields are left out rather than sent as null so the API's defaults apply;
/// `allow_plain_http` only when asked for, which an API that predates it accepts as well.
#[derive(Serialize)]
struct NewServerBody<'a> {
    name: &'a str,
    bmc_address: &'a str,
    bmc_username: &'a str,
    bmc_password_ref: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    bmc_cert_pin: Option<&'a str>,
    bmc_insecure: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    vendor_hint: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    allow_plain_http: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_id: Option<&'a str>,
}

/// Refuses anything that is not a reference before it leaves this machine: a password typed here by mistake
/// must not reach the API, nor its logs. The API checks the rest (the prefix, where a file leads).
fn password_ref(s: &str) -> Result<String, String> {
    racklift_bmc_access::secrets::parse_form(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
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
    /// The server's name (or --all).
    #[arg(required_unless_present = "all", conflicts_with_all = ["all", "filter", "yes"])]
    name: Option<String>,
    #[command(flatten)]
    selection: bulk::Selection,
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
    /// The server needs no BIOS settings: deploy although no BIOS profile matching it sets anything (refused
    /// where one does).
    #[arg(long)]
    no_bios_settings: bool,
    /// Reinstall a server that has registered before: its disk is wiped, and a reinstall of the version already
    /// on it is confirmed with the first six characters of the machine-id it registered with.
    #[arg(long)]
    force_install: bool,
    /// Makes a retried request answer with the original deployment instead of "deployment running" (keys are
    /// per server, so one key makes a whole --all run safe to retry).
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    /// Follow the deployment until it finishes; exit 0 only if it completed.
    #[arg(long, conflicts_with = "all")]
    wait: bool,
    /// With --all: deploy without asking first.
    #[arg(long)]
    yes: bool,
    /// Print the API's JSON instead of a sentence (with --all, an array of each server's answer or error).
    #[arg(long, conflicts_with = "wait")]
    json: bool,
}

#[derive(clap::Args)]
struct CancelArgs {
    /// The server's name (or --all).
    #[arg(required_unless_present = "all", conflicts_with_all = ["all", "filter"])]
    name: Option<String>,
    #[command(flatten)]
    selection: bulk::Selection,
    /// Stop at once, leaving the media attached and the power as it is.
    #[arg(long)]
    skip_cleanup: bool,
    /// Why, kept in each server's event log; required with --all, where it is all that explains the cancels
    /// later.
    #[arg(long, value_name = "TEXT", required_if_eq("all", "true"))]
    reason: Option<String>,
    /// Print the API's JSON instead of a sentence (with --all, an array of each server's answer or error).
    #[arg(long)]
    json: bool,
}

/// The body of `…:deploy`, the same for every server of a bulk deploy.
#[derive(Serialize)]
struct DeployBody {
    token: String,
    seed: String,
    force: bool,
    skip_secure_boot_certificates: bool,
    no_bios_settings: bool,
    force_install: bool,
}

/// The body of `…:cancel-deploy`.
#[derive(Serialize)]
struct CancelBody {
    skip_cleanup: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// How often `--wait` polls: often enough that the spinner's state name keeps up with the short states.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// At most this many `GET /servers/{name}` requests are in flight while `list` fills in deployment states, and
/// at most this many calls while a bulk deploy or cancel runs: enough to be quick, few enough not to crowd the
/// API (a deploy's pre-flight talks to the BMC).
pub(crate) const LIST_CONCURRENCY: usize = 8;

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.api.client()?;
    match args.command {
        ServerCommand::Add(add_args) => add(&client, add_args).await,
        ServerCommand::Remove { name, json } => remove(&client, &name, json).await,
        ServerCommand::List { json } => list(&client, json).await,
        ServerCommand::Show { name, json } => show(&client, &name, json).await,
        ServerCommand::Deploy(deploy_args) => deploy(&client, deploy_args).await,
        ServerCommand::Cancel(cancel_args) => cancel(&client, cancel_args).await,
        ServerCommand::Power {
            name,
            action,
            idempotency_key,
            json,
        } => {
            let action = match action {
                PowerAction::On => "on",
                PowerAction::Off => "off",
                PowerAction::Cycle => "cycle",
            };
            let body = json!({ "action": action });
            bmc_action(&client, &name, "power", &body, idempotency_key, json).await
        }
        ServerCommand::Media {
            name,
            action,
            image_url,
            idempotency_key,
            json,
        } => {
            let body = match action {
                MediaAction::Insert => json!({ "action": "insert", "image_url": image_url }),
                MediaAction::Eject => json!({ "action": "eject" }),
            };
            bmc_action(&client, &name, "media", &body, idempotency_key, json).await
        }
        ServerCommand::Repin { name, reason, json } => repin(&client, &name, &reason, json).await,
    }
}

/// The body of `…:repin`.
#[derive(Serialize)]
struct RepinBody<'a> {
    reason: &'a str,
}

/// Asks the API to pin the certificate the server serves at the next connection.
async fn repin(client: &Client, name: &str, reason: &str, as_json: bool) -> anyhow::Result<()> {
    let path = format!("{}:repin", server_path(name));
    let answer = client
        .post(&path, &serde_json::to_value(RepinBody { reason })?, |r| r)
        .await?;
    if as_json {
        return print_json(&answer);
    }
    println!(
        "{name}: racklift will trust the certificate its Incus API serves at the next connection; \
         see racklift events {name}"
    );
    Ok(())
}

/// Enqueues an ad-hoc BMC action and says where its outcome will show: the server's event log.
async fn bmc_action(
    client: &Client,
    name: &str,
    kind: &str,
    body: &Value,
    idempotency_key: Option<String>,
    as_json: bool,
) -> anyhow::Result<()> {
    let path = format!("/1.0/provisioning/servers/{name}:{kind}");
    let job = client
        .post(&path, body, |r| match idempotency_key {
            Some(key) => r.header("Idempotency-Key", key),
            None => r,
        })
        .await?;
    if as_json {
        return print_json(&job);
    }
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

async fn add(client: &Client, args: AddArgs) -> anyhow::Result<()> {
    let body = NewServerBody {
        name: &args.name,
        bmc_address: &args.bmc_address,
        bmc_username: &args.bmc_username,
        bmc_password_ref: &args.bmc_password_ref,
        bmc_cert_pin: args.bmc_cert_pin.as_deref(),
        bmc_insecure: args.bmc_insecure,
        vendor_hint: args.vendor_hint.as_deref(),
        allow_plain_http: args.allow_plain_http,
        system_id: args.system_id.as_deref(),
    };
    let server = client
        .post("/1.0/servers", &serde_json::to_value(&body)?, |r| r)
        .await?;
    if args.json {
        return print_json(&server);
    }
    print!(
        "{}",
        key_values(&[
            ("name", text(&server["name"])),
            ("status", text(&server["status"])),
            ("bmc address", text(&server["bmc_address"])),
            ("bmc username", text(&server["bmc_username"])),
            ("bmc password", text(&server["bmc_password_ref"])),
            ("bmc cert pin", text(&server["bmc_cert_pin"])),
            ("bmc insecure", text(&server["bmc_insecure"])),
            ("allow plain http", text(&server["allow_plain_http"])),
            ("vendor hint", text(&server["vendor_hint"])),
            ("system id", text(&server["system_id"])),
        ])
    );
    Ok(())
}

async fn remove(client: &Client, name: &str, as_json: bool) -> anyhow::Result<()> {
    let answer = client.delete(&server_path(name)).await?;
    if as_json {
        return print_json(&answer);
    }
    println!("{name}: removed");
    Ok(())
}

async fn list(client: &Client, as_json: bool) -> anyhow::Result<()> {
    let servers = client.get("/1.0/servers").await?;
    if as_json {
        return print_json(&servers);
    }
    let servers = servers.as_array().cloned().unwrap_or_default();
    let deployments = newest_deployments(client, &servers).await?;
    let rows: Vec<[String; 4]> = servers
        .iter()
        .zip(deployments)
        .map(|(s, d)| {
            [
                text(&s["name"]),
                text(&s["status"]),
                truncate(&text(&s["status_detail"]), 48),
                text(&d["state"]),
            ]
        })
        .collect();
    print!(
        "{}",
        table(["NAME", "STATUS", "DETAIL", "DEPLOYMENT STATE"], &rows)
    );
    Ok(())
}

/// The newest deployment of each server of a `/1.0/servers` list, null when it has none. The list endpoint
/// leaves deployments out, so each server is fetched, a few at a time.
pub(crate) async fn newest_deployments(client: &Client, servers: &[Value]) -> anyhow::Result<Vec<Value>> {
    let limit = Arc::new(tokio::sync::Semaphore::new(LIST_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, s) in servers.iter().enumerate() {
        let (client, limit, name) = (client.clone(), limit.clone(), text(&s["name"]));
        tasks.spawn(async move {
            let _permit = limit.acquire().await;
            (i, client.get(&server_path(&name)).await)
        });
    }
    let mut deployments = vec![Value::Null; servers.len()];
    while let Some(joined) = tasks.join_next().await {
        let (i, shown) = joined?;
        match shown {
            Ok(mut v) => deployments[i] = v["deployment"].take(),
            // Deleted since the list was read: nothing to show, not a reason to fail the listing.
            Err(ClientError::Other(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(deployments)
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

/// `POST …/{name}:deploy`, one server's share of a single or bulk deploy.
pub(crate) async fn post_deploy(
    client: &Client,
    name: &str,
    body: &Value,
    key: Option<String>,
) -> Result<Value, ClientError> {
    let path = format!("/1.0/provisioning/servers/{name}:deploy");
    client
        .post(&path, body, |r| match key {
            Some(key) => r.header("Idempotency-Key", key),
            None => r,
        })
        .await
}

/// The line a deploy the API accepted is reported with.
pub(crate) fn deploy_accepted(name: &str, deployment: &Value) -> String {
    format!(
        "{name}: deployment {} accepted (state {})",
        text(&deployment["id"]),
        text(&deployment["state"])
    )
}

async fn deploy(client: &Client, args: DeployArgs) -> anyhow::Result<()> {
    let body = serde_json::to_value(DeployBody {
        token: args.token,
        seed: args.seed,
        force: args.force,
        skip_secure_boot_certificates: args.skip_secure_boot_certificates,
        no_bios_settings: args.no_bios_settings,
        force_install: args.force_install,
    })?;
    let Some(name) = args.name else {
        return bulk::deploy(
            client,
            &args.selection,
            body,
            args.idempotency_key,
            args.yes,
            args.json,
        )
        .await;
    };
    let deployment = post_deploy(client, &name, &body, args.idempotency_key).await?;
    if args.json {
        return print_json(&deployment);
    }
    println!("{}", deploy_accepted(&name, &deployment));
    if !args.wait {
        println!("follow it with: racklift server show {name}");
        return Ok(());
    }
    wait(client, &name, &deployment["id"]).await
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

/// `POST …/{name}:cancel-deploy`, one server's share of a single or bulk cancel.
pub(crate) async fn post_cancel(client: &Client, name: &str, body: &Value) -> Result<Value, ClientError> {
    let path = format!("/1.0/provisioning/servers/{name}:cancel-deploy");
    client.post(&path, body, |r| r).await
}

/// The line a cancel the API accepted is reported with.
pub(crate) fn cancel_requested(name: &str, deployment: &Value) -> String {
    format!(
        "{name}: cancel requested for deployment {} (state {})",
        text(&deployment["id"]),
        text(&deployment["state"])
    )
}

async fn cancel(client: &Client, args: CancelArgs) -> anyhow::Result<()> {
    if let Some(reason) = &args.reason
        && reason.trim().is_empty()
    {
        bail!("--reason is empty: say why the deployments are canceled");
    }
    let body = serde_json::to_value(CancelBody {
        skip_cleanup: args.skip_cleanup,
        reason: args.reason,
    })?;
    let Some(name) = args.name else {
        return bulk::cancel(client, &args.selection, body, args.json).await;
    };
    let deployment = post_cancel(client, &name, &body).await?;
    if args.json {
        return print_json(&deployment);
    }
    println!("{}", cancel_requested(&name, &deployment));
    Ok(())
}

/// "12.0 MiB / 16.0 MiB"; `-` for a side not known yet.
fn media_progress(d: &Value) -> String {
    let bytes = |v: &Value| v.as_u64().map_or("-".to_owned(), |n| HumanBytes(n).to_string());
    format!("{} / {}", bytes(&d["media_bytes_read"]), bytes(&d["media_size"]))
}

//! `racklift deadletter …`: the triage dashboard's lists and actions from a terminal, with the same filters, so
//! an operator on a jump host (or a script) can see what is stuck and act on it. Every action needs a reason,
//! which the API records with the caller's token name.

use serde_json::{Value, json};

use crate::client::{ApiArgs, Client};
use crate::output::{age, key_values, print_json, table, text, truncate};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    api: ApiArgs,
    #[command(subcommand)]
    command: DeadLetterCommand,
}

#[derive(clap::Subcommand)]
enum DeadLetterCommand {
    /// List dead letters, newest first (open ones unless --status says otherwise).
    List {
        #[command(flatten)]
        filter: Filter,
        /// Which triage status to list.
        #[arg(long, value_enum, default_value_t = Status::Open)]
        status: Status,
        /// At most this many rows (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Continue after a previous page (the cursor it printed).
        #[arg(long)]
        cursor: Option<String>,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Count dead letters per operation, error class, Redfish MessageId, vendor and state.
    Groups {
        #[command(flatten)]
        filter: Filter,
        /// Which triage status to count.
        #[arg(long, value_enum, default_value_t = Status::Open)]
        status: Status,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one dead letter: the error, its deployment, the timeline and the actions taken so far.
    Show {
        id: i64,
        /// Print the API's JSON instead of the summary.
        #[arg(long)]
        json: bool,
    },
    /// Retry from the failed state with a fresh budget, or from an earlier trigger with --from-state.
    Retry {
        id: i64,
        /// Why (recorded with your token's name).
        #[arg(long)]
        reason: String,
        /// Resume at this earlier state instead (one of the detail's resume states).
        #[arg(long, value_name = "STATE")]
        from_state: Option<String>,
        /// Print the API's JSON instead of one line.
        #[arg(long)]
        json: bool,
    },
    /// Close the dead letter without acting on the server.
    Discard {
        id: i64,
        /// Why (recorded with your token's name).
        #[arg(long)]
        note: String,
        /// Print the API's JSON instead of one line.
        #[arg(long)]
        json: bool,
    },
    /// Cancel the dead letter's deployment, cleaning up (eject media, power off) unless --skip-cleanup.
    Cancel {
        id: i64,
        /// Why (recorded with your token's name).
        #[arg(long)]
        reason: String,
        /// Leave the media attached and the power as it is.
        #[arg(long)]
        skip_cleanup: bool,
        /// Print the API's JSON instead of one line.
        #[arg(long)]
        json: bool,
    },
    /// Retry every open dead letter a filter matches (at least one filter is required).
    BulkRetry {
        #[command(flatten)]
        filter: Filter,
        /// Why (recorded once for the whole group).
        #[arg(long)]
        reason: String,
        /// At most this many (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Print the API's JSON instead of a summary.
        #[arg(long)]
        json: bool,
    },
}

/// The dashboard's filters, sent as the API's query parameters (or bulk filter) of the same names.
#[derive(clap::Args, Default)]
struct Filter {
    /// deployment, bmc_action, rolling_reboot or rolling_update.
    #[arg(long)]
    operation: Option<String>,
    /// The error class, e.g. bmc_error, timeout, unreachable.
    #[arg(long)]
    error_class: Option<String>,
    /// The Redfish MessageId the BMC answered with.
    #[arg(long)]
    message_id: Option<String>,
    /// The server's vendor (personality).
    #[arg(long)]
    vendor: Option<String>,
    /// The deployment state the work failed in.
    #[arg(long)]
    state: Option<String>,
    /// One server.
    #[arg(long)]
    server: Option<String>,
    /// Only dead letters at least this old, e.g. 90s, 15m, 2h, 1d.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    older_than: Option<i64>,
}

impl Filter {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let text = [
            ("operation", &self.operation),
            ("error_class", &self.error_class),
            ("message_id", &self.message_id),
            ("vendor", &self.vendor),
            ("state", &self.state),
            ("server", &self.server),
        ];
        let mut pairs: Vec<(&'static str, String)> = text
            .into_iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
            .collect();
        if let Some(secs) = self.older_than {
            pairs.push(("min_age_secs", secs.to_string()));
        }
        pairs
    }

    /// The bulk retry's `filter` object; numbers stay numbers.
    fn to_json(&self) -> Value {
        let mut filter = serde_json::Map::new();
        for (k, v) in self.pairs() {
            let value = match k {
                "min_age_secs" => json!(self.older_than),
                _ => json!(v),
            };
            filter.insert(k.to_owned(), value);
        }
        Value::Object(filter)
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Status {
    Open,
    Retried,
    Discarded,
    Resolved,
    Canceled,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Open => "open",
            Status::Retried => "retried",
            Status::Discarded => "discarded",
            Status::Resolved => "resolved",
            Status::Canceled => "canceled",
        }
    }
}

/// `90s`, `15m`, `2h`, `1d` or plain seconds, as seconds.
fn parse_age(s: &str) -> Result<i64, String> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not an age like 90s, 15m, 2h or 1d"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("{s:?}: the unit must be s, m, h or d")),
    };
    n.checked_mul(scale).ok_or_else(|| format!("{s:?} is too large"))
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.api.client()?;
    match args.command {
        DeadLetterCommand::List {
            filter,
            status,
            limit,
            cursor,
            json,
        } => {
            let mut query = filter.pairs();
            query.push(("status", status.name().to_owned()));
            query.push(("limit", limit.to_string()));
            if let Some(cursor) = cursor {
                query.push(("cursor", cursor));
            }
            let page = client.get_query("/1.0/deadletters", &query).await?;
            if json {
                return print_json(&page);
            }
            print_list(&page);
            Ok(())
        }
        DeadLetterCommand::Groups { filter, status, json } => {
            let mut query = filter.pairs();
            query.push(("status", status.name().to_owned()));
            let groups = client.get_query("/1.0/deadletters/groups", &query).await?;
            if json {
                return print_json(&groups);
            }
            print_groups(&groups);
            Ok(())
        }
        DeadLetterCommand::Show { id, json } => {
            let detail = client.get(&format!("/1.0/deadletters/{id}")).await?;
            if json {
                return print_json(&detail);
            }
            print!("{}", detail_text(&detail));
            Ok(())
        }
        DeadLetterCommand::Retry {
            id,
            reason,
            from_state,
            json,
        } => {
            let body = json!({ "reason": reason, "from_state": from_state });
            let r = act(&client, id, "retry", &body).await?;
            if json {
                return print_json(&r);
            }
            println!(
                "dead letter {id} retried: {} resumes in {} as job {}",
                subject(&r),
                text(&r["state"]),
                text(&r["job_id"])
            );
            Ok(())
        }
        DeadLetterCommand::Discard { id, note, json } => {
            let r = act(&client, id, "discard", &json!({ "note": note })).await?;
            if json {
                return print_json(&r);
            }
            println!("dead letter {id} discarded");
            Ok(())
        }
        DeadLetterCommand::Cancel {
            id,
            reason,
            skip_cleanup,
            json,
        } => {
            let body = json!({ "reason": reason, "skip_cleanup": skip_cleanup });
            let r = act(&client, id, "cancel", &body).await?;
            if json {
                return print_json(&r);
            }
            println!(
                "dead letter {id}: deployment {} {}",
                text(&r["deployment_id"]),
                match r["job_id"].as_i64() {
                    Some(job) => format!("is cleaning up (job {job})"),
                    None => format!("marked {}", text(&r["state"])),
                }
            );
            Ok(())
        }
        DeadLetterCommand::BulkRetry {
            filter,
            reason,
            limit,
            json,
        } => {
            let body = json!({ "reason": reason, "filter": filter.to_json(), "limit": limit });
            let r = client.post("/1.0/deadletters:bulk-retry", &body, |r| r).await?;
            if json {
                return print_json(&r);
            }
            print!("{}", bulk_text(&r));
            Ok(())
        }
    }
}

async fn act(client: &Client, id: i64, action: &str, body: &Value) -> anyhow::Result<Value> {
    let path = format!("/1.0/deadletters/{id}:{action}");
    Ok(client.post(&path, body, |r| r).await?)
}

/// "server-3 (deployment 17)", or whatever of the two the work had.
fn subject(v: &Value) -> String {
    match (v["server"].as_str(), v["deployment_id"].as_i64()) {
        (Some(s), Some(d)) => format!("{s} (deployment {d})"),
        (Some(s), None) => s.to_owned(),
        (None, Some(d)) => format!("deployment {d}"),
        (None, None) => "the work".to_owned(),
    }
}

fn print_list(page: &Value) {
    let items = page["items"].as_array().cloned().unwrap_or_default();
    let rows: Vec<[String; 9]> = items
        .iter()
        .map(|d| {
            [
                text(&d["id"]),
                age(d["age_secs"].as_i64().unwrap_or(0)),
                text(&d["operation"]),
                text(&d["server"]),
                text(&d["state"]),
                text(&d["error_class"]),
                text(&d["message_id"]),
                format!("{}/{}", text(&d["attempts"]), text(&d["max_attempts"])),
                truncate(&text(&d["last_error"]), 60),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            [
                "ID",
                "AGE",
                "OPERATION",
                "SERVER",
                "STATE",
                "ERROR CLASS",
                "MESSAGE ID",
                "ATTEMPTS",
                "LAST ERROR"
            ],
            &rows
        )
    );
    if let Some(cursor) = page["next_cursor"].as_str() {
        println!("more: --cursor {cursor}");
    }
}

fn print_groups(groups: &Value) {
    let items = groups["groups"].as_array().cloned().unwrap_or_default();
    let rows: Vec<[String; 6]> = items
        .iter()
        .map(|g| {
            [
                text(&g["count"]),
                text(&g["operation"]),
                text(&g["error_class"]),
                text(&g["message_id"]),
                text(&g["vendor"]),
                text(&g["state"]),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            [
                "COUNT",
                "OPERATION",
                "ERROR CLASS",
                "MESSAGE ID",
                "VENDOR",
                "STATE"
            ],
            &rows
        )
    );
    println!("total: {}", text(&groups["total"]));
}

/// The detail as an operator reads it: what failed and why, the deployment, then the timeline and actions.
fn detail_text(detail: &Value) -> String {
    let dl = &detail["dead_letter"];
    let d = &detail["deployment"];
    let mut lines = vec![
        ("dead letter", text(&dl["id"])),
        ("triage status", text(&dl["triage_status"])),
        ("operation", text(&dl["operation"])),
        ("server", text(&dl["server"])),
        ("failed state", text(&dl["state"])),
        ("cause", text(&dl["cause"])),
        ("reason", text(&dl["reason"])),
        ("error class", text(&dl["error_class"])),
        ("message id", text(&dl["message_id"])),
        (
            "attempts",
            format!("{} of {}", text(&dl["attempts"]), text(&dl["max_attempts"])),
        ),
        ("dead at", text(&dl["dead_at"])),
        ("first error", text(&dl["first_error"])),
        ("last error", text(&dl["last_error"])),
    ];
    if !d.is_null() {
        lines.extend([
            ("deployment", text(&d["id"])),
            ("deployment state", text(&d["state"])),
            ("media bytes read / size", media(d)),
            ("may resume at", list_text(&d["resume_states"])),
        ]);
    }
    let job = &detail["live_job"];
    if !job.is_null() {
        lines.push((
            "live job",
            format!(
                "{} {} ({}), fence {}, leased by {} until {}",
                text(&job["id"]),
                text(&job["kind"]),
                text(&job["state"]),
                text(&job["fence"]),
                text(&job["leased_by"]),
                text(&job["lease_expires_at"])
            ),
        ));
    }
    let mut out = key_values(&lines);
    let events = detail["timeline"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!("\ntimeline ({} events):\n", events.len()));
    for e in &events {
        out.push_str(&format!("  {}\n", crate::events_cmd::event_line(e)));
    }
    let actions = detail["actions"].as_array().cloned().unwrap_or_default();
    if !actions.is_empty() {
        out.push_str("\nactions:\n");
        for a in &actions {
            out.push_str(&format!(
                "  {}  {} by {} ({}): {}\n",
                text(&a["at"]),
                text(&a["action"]),
                text(&a["actor"]),
                text(&a["actor_role"]),
                text(&a["reason"])
            ));
        }
    }
    out
}

fn media(d: &Value) -> String {
    format!("{} / {}", text(&d["media_bytes_read"]), text(&d["media_size"]))
}

fn list_text(v: &Value) -> String {
    match v.as_array() {
        Some(items) if !items.is_empty() => items.iter().map(text).collect::<Vec<_>>().join(", "),
        _ => "-".to_owned(),
    }
}

fn bulk_text(r: &Value) -> String {
    let mut out = format!(
        "bulk retry {}: matched {}, retried {}, skipped {}\n",
        text(&r["bulk_id"]),
        text(&r["matched"]),
        text(&r["retried"]),
        text(&r["skipped"])
    );
    for s in r["skipped_items"].as_array().into_iter().flatten() {
        out.push_str(&format!("  skipped {}\n", compact(s)));
    }
    if r["more"].as_bool() == Some(true) {
        out.push_str("more dead letters match than --limit allowed; run it again for the rest\n");
    }
    out
}

/// An object on one line, `key=value` for its fields.
fn compact(v: &Value) -> String {
    match v.as_object() {
        Some(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", text(v)))
            .collect::<Vec<_>>()
            .join(" "),
        None => text(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_with_units() {
        for (given, secs) in [("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400)] {
            assert_eq!(parse_age(given), Ok(secs), "{given}");
        }
        for bad in ["", "m", "5w", "1.5h", "-3s", "99999999999999999999d"] {
            assert!(parse_age(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn filters_become_the_dashboards_query_and_bulk_filter() {
        let filter = Filter {
            error_class: Some("bmc_error".into()),
            state: Some("ApplyBIOS".into()),
            older_than: Some(900),
            ..Filter::default()
        };
        assert_eq!(
            filter.pairs(),
            vec![
                ("error_class", "bmc_error".to_owned()),
                ("state", "ApplyBIOS".to_owned()),
                ("min_age_secs", "900".to_owned()),
            ]
        );
        assert_eq!(
            filter.to_json(),
            json!({ "error_class": "bmc_error", "state": "ApplyBIOS", "min_age_secs": 900 })
        );
    }

    #[test]
    fn subjects_name_what_the_work_had() {
        assert_eq!(
            subject(&json!({ "server": "s1", "deployment_id": 4 })),
            "s1 (deployment 4)"
        );
        assert_eq!(subject(&json!({ "server": "s1" })), "s1");
        assert_eq!(subject(&json!({})), "the work");
    }
}

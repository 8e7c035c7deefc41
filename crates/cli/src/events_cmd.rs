//! `racklift events NAME [--follow]`: a server's event log (transitions, BMC calls, registrations, operator
//! actions), like `tail -f` when following. Following polls the API with `after=` the last id seen, so nothing
//! is printed twice or skipped, and it rides out an API restart.

use std::time::Duration;

use serde_json::Value;

use crate::client::{ApiArgs, Client, ClientError};
use crate::output::{text, truncate};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    api: ApiArgs,
    /// The server's name.
    name: String,
    /// Keep printing new events until Ctrl-C.
    #[arg(long, short)]
    follow: bool,
    /// Only events after this id (ids only grow).
    #[arg(long, default_value_t = 0)]
    after: i64,
    /// Print each event as one JSON object per line.
    #[arg(long)]
    json: bool,
}

/// How often `--follow` asks for new events.
const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);
/// The API's largest page.
const PAGE: i64 = 1000;

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.api.client()?;
    let mut after = args.after;
    let mut warned = false;
    loop {
        match page(&client, &args.name, after).await {
            Ok(events) => {
                warned = false;
                for e in &events {
                    if args.json {
                        println!("{}", serde_json::to_string(e)?);
                    } else {
                        println!("{}", event_line(e));
                    }
                    after = after.max(e["id"].as_i64().unwrap_or(after));
                }
                // A full page means more are waiting: fetch them now rather than after the interval.
                if events.len() as i64 == PAGE {
                    continue;
                }
                if !args.follow {
                    return Ok(());
                }
            }
            Err(ClientError::Unreachable(e)) if args.follow => {
                if !warned {
                    eprintln!("{e:#}; still following");
                    warned = true;
                }
            }
            Err(e) => return Err(e.into()),
        }
        tokio::time::sleep(FOLLOW_INTERVAL).await;
    }
}

async fn page(client: &Client, name: &str, after: i64) -> Result<Vec<Value>, ClientError> {
    let query = [("after", after.to_string()), ("limit", PAGE.to_string())];
    let events = client
        .get_query(&format!("/1.0/servers/{name}/events"), &query)
        .await?;
    Ok(events.as_array().cloned().unwrap_or_default())
}

/// One event on one line: time, kind, deployment and fence when it had them, then the detail's fields.
pub fn event_line(e: &Value) -> String {
    let mut line = format!("{}  {}", text(&e["at"]), text(&e["kind"]));
    if let Some(d) = e["deployment_id"].as_i64() {
        line.push_str(&format!("  deployment={d}"));
    }
    if let Some(f) = e["fence"].as_i64() {
        line.push_str(&format!("  fence={f}"));
    }
    let detail = match &e["detail"] {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", truncate(&scalar(v), 120)))
            .collect::<Vec<_>>()
            .join(" "),
        Value::Null => String::new(),
        other => scalar(other),
    };
    if !detail.is_empty() {
        line.push_str("  ");
        line.push_str(&detail);
    }
    line
}

/// Strings bare, anything nested as compact JSON.
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_is_one_line_with_its_fields() {
        let e = json!({
            "id": 7, "server": "s1", "deployment_id": 3, "at": "2026-11-29T20:00:00Z",
            "kind": "transition", "fence": 12,
            "detail": { "from": "PowerOff", "to": "WaitPowerOff", "facts": { "power": "On" } }
        });
        assert_eq!(
            event_line(&e),
            "2026-11-29T20:00:00Z  transition  deployment=3  fence=12  \
             facts={\"power\":\"On\"} from=PowerOff to=WaitPowerOff"
        );
        let bare = json!({ "id": 8, "at": "t", "kind": "registered", "deployment_id": null,
            "fence": null, "detail": null });
        assert_eq!(event_line(&bare), "t  registered");
    }
}

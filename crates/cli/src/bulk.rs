//! The bulk forms of `server deploy` and `server cancel`: the servers a set of filters matches, one API call
//! each, a few at a time. The API has no bulk endpoint for these, so each server's outcome is its own call's,
//! reported on its own line, and one failure does not stop the others.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;

use anyhow::bail;
use serde_json::Value;

use crate::client::{Client, ClientError};
use crate::output::{print_json, text};
use crate::server_cmd::{
    LIST_CONCURRENCY, cancel_requested, deploy_accepted, newest_deployments, post_cancel, post_deploy,
};

/// `--all` and the filters narrowing it; flattened into `server deploy` and `server cancel`.
#[derive(clap::Args)]
pub struct Selection {
    /// Act on every server the filters match instead of one named server.
    #[arg(long)]
    pub all: bool,
    /// KEY=VALUE, with --all: status=STATUS, vendor=VENDOR (the vendor hint), name=GLOB (`*` any run, `?` one
    /// character: `rack1-*` is a prefix), state=STATE (the newest deployment's, or `none`). Different keys
    /// must all match; a key given again widens it (status=failed --filter status=unregistered).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_filter)]
    pub filter: Vec<Filter>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Status,
    Vendor,
    Name,
    State,
}

/// One `--filter KEY=VALUE`.
#[derive(Clone, Debug)]
pub struct Filter {
    key: Key,
    value: String,
}

fn parse_filter(s: &str) -> Result<Filter, String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    let key = match key {
        "status" => Key::Status,
        "vendor" => Key::Vendor,
        "name" => Key::Name,
        "state" => Key::State,
        other => {
            return Err(format!(
                "unknown filter key {other:?}: use status, vendor, name or state"
            ));
        }
    };
    if value.is_empty() {
        return Err(format!("the {s:?} filter has no value"));
    }
    Ok(Filter {
        key,
        value: value.to_owned(),
    })
}

impl Selection {
    /// The filters grouped by key: the values of one key are alternatives.
    fn by_key(&self) -> BTreeMap<Key, Vec<&str>> {
        let mut keys: BTreeMap<Key, Vec<&str>> = BTreeMap::new();
        for f in &self.filter {
            keys.entry(f.key).or_default().push(&f.value);
        }
        keys
    }

    /// Whether `server` (a list entry) with newest deployment `deployment` (null when none) matches.
    fn matches(&self, server: &Value, deployment: &Value) -> bool {
        self.by_key().iter().all(|(key, values)| {
            values.iter().any(|want| match key {
                Key::Status => text(&server["status"]).eq_ignore_ascii_case(want),
                Key::Vendor => server["vendor_hint"]
                    .as_str()
                    .is_some_and(|v| v.eq_ignore_ascii_case(want)),
                Key::Name => glob(want, server["name"].as_str().unwrap_or("")),
                Key::State => match deployment["state"].as_str() {
                    Some(state) => state.eq_ignore_ascii_case(want),
                    None => want.eq_ignore_ascii_case("none"),
                },
            })
        })
    }

    fn needs_deployments(&self) -> bool {
        self.filter.iter().any(|f| f.key == Key::State)
    }
}

/// `*` matches any run of characters, `?` one; everything else itself.
fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was and how much of the name it has taken so far, to backtrack to.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// A matched server and its newest deployment (null when it has none or it was not needed).
pub struct Target {
    pub name: String,
    pub deployment: Value,
}

/// The servers `selection` matches, in the API's order. With `deployments`, each server's newest deployment is
/// read too (as `server list` does), which state filters need anyway.
pub async fn select(
    client: &Client,
    selection: &Selection,
    deployments: bool,
) -> anyhow::Result<Vec<Target>> {
    let servers = client.get("/1.0/servers").await?;
    let servers = servers.as_array().cloned().unwrap_or_default();
    let newest = if deployments || selection.needs_deployments() {
        newest_deployments(client, &servers).await?
    } else {
        vec![Value::Null; servers.len()]
    };
    Ok(servers
        .iter()
        .zip(newest)
        .filter(|(s, d)| selection.matches(s, d))
        .map(|(s, deployment)| Target {
            name: text(&s["name"]),
            deployment,
        })
        .collect())
}

/// Asks on the terminal before acting on `names`; without one, refuses unless `--yes` said so already.
pub async fn confirm(verb: &str, names: &[String]) -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        bail!(
            "refusing to {verb} {} servers without --yes (stdin is not a terminal to ask on)",
            names.len()
        );
    }
    let question = format!("{verb} {} servers ({})? [y/N] ", names.len(), names.join(", "));
    let answer = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        eprint!("{question}");
        std::io::stderr().flush()?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        Ok(line)
    })
    .await??;
    if !matches!(answer.trim(), "y" | "Y" | "yes") {
        bail!("not confirmed: nothing done");
    }
    Ok(())
}

/// `server deploy --all`: deploys `body` to every matched server, after asking unless `yes`. Servers the API
/// refuses (registered, already deploying, no BMC) are reported as failures, not skipped: the operator asked
/// for them.
pub async fn deploy(
    client: &Client,
    selection: &Selection,
    body: Value,
    key: Option<String>,
    yes: bool,
    as_json: bool,
) -> anyhow::Result<()> {
    let targets = select(client, selection, false).await?;
    if targets.is_empty() {
        bail!("no server matches the filters: nothing to deploy");
    }
    if !yes {
        let names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
        confirm("deploy", &names).await?;
    }
    let (client, body) = (client.clone(), Arc::new(body));
    let call = move |name: String| {
        let (client, body, key) = (client.clone(), body.clone(), key.clone());
        async move { post_deploy(&client, &name, &body, key).await }
    };
    run_each(targets, as_json, call, deploy_accepted).await
}

/// `server cancel --all`: cancels the running deployment of every matched server. Only servers whose newest
/// deployment has not finished are targets (there is nothing to cancel on the others); none is an error, so a
/// filter that matches nothing is noticed.
pub async fn cancel(
    client: &Client,
    selection: &Selection,
    body: Value,
    as_json: bool,
) -> anyhow::Result<()> {
    let matched = select(client, selection, true).await?;
    let total = matched.len();
    let targets: Vec<Target> = matched
        .into_iter()
        .filter(|t| t.deployment.is_object() && t.deployment["finished_at"].is_null())
        .collect();
    if targets.is_empty() {
        bail!("none of the {total} matched servers has a running deployment: nothing to cancel");
    }
    if !as_json && targets.len() < total {
        println!(
            "{} of {total} matched servers have no running deployment; left alone",
            total - targets.len()
        );
    }
    let (client, body) = (client.clone(), Arc::new(body));
    let call = move |name: String| {
        let (client, body) = (client.clone(), body.clone());
        async move { post_cancel(&client, &name, &body).await }
    };
    run_each(targets, as_json, call, cancel_requested).await
}

/// One server's line of a bulk action's `--json` output: the API's answer, or why the call failed.
#[derive(serde::Serialize)]
struct BulkOutcome<'a> {
    server: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Runs `call` for every target, at most [`LIST_CONCURRENCY`] at once. Without `as_json` each outcome is
/// printed as it arrives (`success` words a success line from the API's answer); with it, one JSON array,
/// sorted by server, once all are done. Fails, after all have run, if any call failed.
pub async fn run_each<F, Fut>(
    targets: Vec<Target>,
    as_json: bool,
    call: F,
    success: fn(&str, &Value) -> String,
) -> anyhow::Result<()>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<Value, ClientError>> + Send + 'static,
{
    let total = targets.len();
    let limit = Arc::new(tokio::sync::Semaphore::new(LIST_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for target in targets {
        let (limit, request) = (limit.clone(), call(target.name.clone()));
        tasks.spawn(async move {
            let _permit = limit.acquire().await;
            (target.name, request.await)
        });
    }
    let mut outcomes = Vec::with_capacity(total);
    let mut failed = 0;
    while let Some(joined) = tasks.join_next().await {
        let (name, outcome) = joined?;
        let outcome = outcome.map_err(anyhow::Error::from);
        if outcome.is_err() {
            failed += 1;
        }
        if !as_json {
            match &outcome {
                Ok(v) => println!("{}", success(&name, v)),
                Err(e) => println!("{name}: failed: {e:#}"),
            }
        }
        outcomes.push((name, outcome));
    }
    if as_json {
        outcomes.sort_by(|a, b| a.0.cmp(&b.0));
        let shown: Vec<BulkOutcome> = outcomes
            .iter()
            .map(|(name, outcome)| BulkOutcome {
                server: name,
                response: outcome.as_ref().ok(),
                error: outcome.as_ref().err().map(|e| format!("{e:#}")),
            })
            .collect();
        print_json(&serde_json::to_value(&shown)?)?;
    }
    if failed > 0 {
        bail!("{failed} of {total} servers failed");
    }
    if !as_json {
        println!("all {total} requests succeeded");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection(filters: &[&str]) -> Selection {
        Selection {
            all: true,
            filter: filters.iter().map(|f| parse_filter(f).unwrap()).collect(),
        }
    }

    #[test]
    fn globs_match_runs_single_characters_and_prefixes() {
        for (pattern, name, want) in [
            ("rack1-*", "rack1-node3", true),
            ("rack1-*", "rack2-node3", false),
            ("node-?", "node-7", true),
            ("node-?", "node-17", false),
            ("*-3", "rack1-node-3", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("*", "", true),
        ] {
            assert_eq!(glob(pattern, name), want, "{pattern} ~ {name}");
        }
    }

    #[test]
    fn keys_and_and_repeated_keys_or() {
        let server = serde_json::json!({ "name": "rack1-a", "status": "failed", "vendor_hint": "Dell" });
        let d = serde_json::json!({ "state": "Failed" });
        assert!(selection(&[]).matches(&server, &d));
        assert!(selection(&["status=failed", "vendor=dell"]).matches(&server, &d));
        assert!(!selection(&["status=failed", "vendor=hpe"]).matches(&server, &d));
        assert!(selection(&["status=registered", "status=failed"]).matches(&server, &d));
        assert!(selection(&["name=rack1-*", "state=failed"]).matches(&server, &d));
        assert!(selection(&["state=none"]).matches(&server, &Value::Null));
        assert!(!selection(&["state=none"]).matches(&server, &d));
    }

    #[test]
    fn bad_filters_are_refused_with_the_keys_to_use() {
        assert!(
            parse_filter("colour=red")
                .unwrap_err()
                .contains("status, vendor, name or state")
        );
        assert!(parse_filter("status").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_filter("status=").unwrap_err().contains("no value"));
    }
}

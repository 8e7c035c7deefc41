//! `racklift up --demo`: deploys the whole simulated rack through the API, then follows every deployment. On a
//! terminal it draws a live table, one line per server (the logs went to a file, so nothing crosses it);
//! without one it prints a plain line per state change, for a pipe or a CI log.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use racklift_api::demo::{self, DemoCatalog, RackServer};
use racklift_store::{DeploymentRecord, Store};
use tokio_util::sync::CancellationToken;

/// How often the deployments are read again.
const REFRESH: Duration = Duration::from_millis(300);

/// Deploys every server, then shows their progress until each has finished or `shutdown` fires.
pub async fn deploy_rack(
    api_url: &str,
    ca_file: Option<&std::path::Path>,
    catalog: &DemoCatalog,
    rack: &[RackServer],
    store: &Store,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let mut http = reqwest::Client::builder().timeout(Duration::from_secs(60));
    if let Some(ca) = ca_file {
        // Exactly the API's own certificate, as `--ca-cert` trusts it.
        http = http.tls_certs_only(reqwest::Certificate::from_pem_bundle(&std::fs::read(ca)?)?);
    }
    let http = http.build()?;
    for server in rack {
        let name = &server.name;
        let response = http
            .post(format!("{api_url}/1.0/provisioning/servers/{name}:deploy"))
            .bearer_auth(&catalog.admin_token)
            .json(&demo::deploy_request(catalog, &server.vendor))
            .send()
            .await?;
        if !response.status().is_success() {
            anyhow::bail!("deploying {name} was refused: {}", response.text().await?);
        }
    }
    let mut view: Box<dyn View> = if std::io::stdout().is_terminal() {
        Box::new(Table::new(rack))
    } else {
        Box::new(Lines::default())
    };
    let started = Instant::now();
    let mut open: Vec<&RackServer> = rack.iter().collect();
    let (mut completed, mut failed) = (0, 0);
    while !open.is_empty() && !shutdown.is_cancelled() {
        let mut still_open = Vec::with_capacity(open.len());
        for server in open {
            let row = match store.latest_deployment(&server.name).await? {
                Some(d) => Row::of(&d),
                None => Row::pending(),
            };
            view.show(server, &row, started.elapsed());
            match row.outcome {
                Some(true) => completed += 1,
                Some(false) => failed += 1,
                None => still_open.push(server),
            }
        }
        open = still_open;
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(REFRESH) => {}
        }
    }
    // After a signal the terminal may be gone: print nothing more.
    if !shutdown.is_cancelled() {
        view.finish(completed, failed, started.elapsed());
    }
    Ok(())
}

/// One server's line: its state and, once finished, whether it completed.
struct Row {
    state: String,
    detail: String,
    outcome: Option<bool>,
}

impl Row {
    fn pending() -> Row {
        Row {
            state: "Requested".into(),
            detail: String::new(),
            outcome: None,
        }
    }

    fn of(d: &DeploymentRecord) -> Row {
        let m = &d.deployment.machine;
        let retries = if m.retries > 0 {
            format!("retry {}", m.retries)
        } else {
            String::new()
        };
        match (&m.failure, d.is_finished()) {
            (Some(f), true) => Row {
                state: m.state.name().to_owned(),
                detail: format!("in {}: {:?}", f.state.name(), f.cause),
                outcome: Some(false),
            },
            (None, true) => Row {
                state: m.state.name().to_owned(),
                detail: String::new(),
                outcome: Some(true),
            },
            (_, false) => Row {
                state: m.state.name().to_owned(),
                detail: retries,
                outcome: None,
            },
        }
    }
}

trait View {
    fn show(&mut self, server: &RackServer, row: &Row, elapsed: Duration);
    fn finish(&mut self, completed: usize, failed: usize, elapsed: Duration);
}

/// The live table: a header and one redrawn line per server.
struct Table {
    _bars: MultiProgress,
    lines: HashMap<String, ProgressBar>,
}

impl Table {
    fn new(rack: &[RackServer]) -> Table {
        let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let width = rack.iter().map(|s| s.name.len()).max().unwrap_or(6).max(6);
        let header = bars.add(ProgressBar::new_spinner().with_style(plain_style()));
        // A finished bar is drawn once and stays: the header never redraws.
        header.finish_with_message(format!(
            "{:<width$}  {:<10}  {:<8}  {:<28}  DETAIL",
            "SERVER", "VENDOR", "ELAPSED", "STATE"
        ));
        let lines = rack
            .iter()
            .map(|s| {
                let line = bars.add(ProgressBar::new_spinner().with_style(plain_style()));
                line.set_prefix(format!("{:<width$}  {:<10}", s.name, s.vendor));
                line.enable_steady_tick(Duration::from_millis(250));
                (s.name.clone(), line)
            })
            .collect();
        Table { _bars: bars, lines }
    }
}

fn plain_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix}{wide_msg}").expect("a valid template")
}

impl View for Table {
    fn show(&mut self, server: &RackServer, row: &Row, elapsed: Duration) {
        let Some(line) = self.lines.get(&server.name) else {
            return;
        };
        let mark = match row.outcome {
            Some(true) => "done",
            Some(false) => "FAILED",
            None => "",
        };
        let message = format!(
            "  {:<8}  {:<28}  {} {}",
            clock(elapsed),
            row.state,
            mark,
            row.detail
        );
        if row.outcome.is_some() {
            line.finish_with_message(message);
        } else {
            line.set_message(message);
        }
    }

    fn finish(&mut self, completed: usize, failed: usize, elapsed: Duration) {
        // Every line has finished, so nothing redraws any more: the summary goes below the table.
        println!(
            "{} deployments finished in {}: {completed} completed, {failed} failed",
            completed + failed,
            clock(elapsed)
        );
    }
}

/// A plain line whenever a server's state changes.
#[derive(Default)]
struct Lines {
    last: HashMap<String, String>,
}

impl View for Lines {
    fn show(&mut self, server: &RackServer, row: &Row, elapsed: Duration) {
        let now = format!("{} {}", row.state, row.detail);
        if self.last.get(&server.name) == Some(&now) {
            return;
        }
        self.last.insert(server.name.clone(), now);
        let outcome = match row.outcome {
            Some(true) => " (done)",
            Some(false) => " (FAILED)",
            None => "",
        };
        println!(
            "{} {} {} {}{outcome} {}",
            clock(elapsed),
            server.name,
            server.vendor,
            row.state,
            row.detail
        );
    }

    fn finish(&mut self, completed: usize, failed: usize, elapsed: Duration) {
        println!(
            "{} deployments finished in {}: {completed} completed, {failed} failed",
            completed + failed,
            clock(elapsed)
        );
    }
}

/// `m:ss`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}", s / 60, s % 60)
}

//! A whole racklift (API, worker pool, a real PostgreSQL) deploying to sushy-tools' emulator with its fake
//! driver as the server's BMC, exiting non-zero on the first failed expectation. Run by `ops/sushy-test`, which
//! starts the emulator and a throwaway PostgreSQL (`DATABASE_URL`):
//!
//! ```text
//! cargo run -p racklift-tests --example sushy_deploy -- <sushy-url>
//! ```
//!
//! The fake driver has no Bios resource and never boots anything: it takes power, boot and virtual media calls
//! (downloading the image on insert) and reports nothing a boot could be seen by. So racklift must
//! 1. refuse the deploy with 422 `bios_absent` naming `name` while a BIOS profile sets an attribute for it;
//! 2. with none planned (the request says the server needs no BIOS settings), pass CheckBIOS by with
//!    `BiosAbsent`, drive the power and media steps, and end at WaitInstall on the install backstop
//!    (`WaitTimeout`), in bounded attempts, instead of retrying.
//!
//! The timing is set through racklift's configuration (`CONFIG`, loaded as a `racklift.toml` is), short enough
//! that the run ends in well under two minutes.

use std::collections::BTreeMap;
use std::error::Error;
use std::time::{Duration, Instant};

use racklift_api::demo;
use racklift_config::{Settings, Sources};
use racklift_deploy::{Cause, State, Transition};
use racklift_store::{NewBiosProfile, NewServer};
use racklift_tests::rack::Rack;
use serde::Deserialize;
use serde_json::Value;

type Res<T> = Result<T, Box<dyn Error>>;

/// The server the emulator's one System is registered as, and the profile that would set its BIOS.
const SERVER: &str = "sushy-fake";
const PROFILE: &str = "sushy-bios";

/// The `[deploy]` keys of crates/config/README.md, shortened for an emulator that answers at once. The fake
/// driver lands a power change 1 to 11 s after the call, so the power waits keep 30 s; the install backstop is
/// what ends the deployment, after a settle delay and a reboot fallback it never reaches; the whole deployment
/// is bounded above it, so a stall elsewhere fails as `DeploymentTimeout` instead of hanging.
const CONFIG: &str = r#"
[deploy]
poll_interval_secs = 1
step_retries = 2
retry_backoff_secs = 1
retry_backoff_max_secs = 2
step_timeout_secs = 30
settle_delay_secs = 2
secure_boot_settle_secs = 2
min_install_duration_secs = 5
install_reboot_fallback_delay_secs = 10
install_timeout_secs = 25
deployment_timeout_secs = 100
step_call_timeout_secs = 30
attach_media_call_timeout_secs = 60
"#;

/// How long the accepted deployment may take to end, above `deployment_timeout_secs`.
const FINISH_LIMIT: Duration = Duration::from_secs(110);

/// Where and why the deployment is expected to end on the fake driver.
const EXPECTED_END: (State, Cause) = (State::WaitInstall, Cause::WaitTimeout);

/// The parts of the API's answers read here (`ErrorBody`, `ServerDetail`, `DeploymentView`, `Event`).
#[derive(Debug, Deserialize)]
struct ErrorReply {
    error: ErrorDetail,
}

#[derive(Debug, Deserialize)]
struct ErrorDetail {
    code: String,
    message: String,
    field: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ServerReply {
    deployment: Option<DeploymentReply>,
}

#[derive(Debug, Deserialize)]
struct DeploymentReply {
    id: i64,
    state: String,
    attempts: u32,
    finished_at: Option<String>,
    media_bytes_read: Option<u64>,
    media_size: Option<u64>,
    failure: Option<FailureReply>,
}

#[derive(Debug, Deserialize)]
struct FailureReply {
    state: String,
    cause: String,
    reason: String,
}

#[derive(Debug, Deserialize)]
struct EventReply {
    deployment_id: Option<i64>,
    kind: String,
    detail: Value,
}

/// The `detail` of a `bmc_call` event.
#[derive(Debug, Deserialize)]
struct BmcCall {
    action: String,
    outcome: String,
    error: Option<String>,
}

fn ensure(cond: bool, what: impl std::fmt::Display) -> Res<()> {
    if cond {
        println!("ok   {what}");
        Ok(())
    } else {
        Err(format!("FAIL {what}").into())
    }
}

/// The admin's view of the rack's API.
struct Api<'a> {
    rack: &'a Rack,
}

impl Api<'_> {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.rack.api_url)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Res<reqwest::Response> {
        Ok(request.bearer_auth(&self.rack.catalog.admin_token).send().await?)
    }

    async fn post<T: serde::Serialize>(&self, path: &str, body: &T) -> Res<reqwest::Response> {
        self.send(self.rack.http.post(self.url(path)).json(body)).await
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Res<T> {
        let response = self.send(self.rack.http.get(self.url(path))).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("GET {path}: {status}: {}", response.text().await?).into());
        }
        Ok(response.json().await?)
    }

    async fn delete(&self, path: &str) -> Res<()> {
        let response = self.send(self.rack.http.delete(self.url(path))).await?;
        ensure(
            response.status().is_success(),
            format!("DELETE {path} ({})", response.status()),
        )
    }

    async fn deploy(&self, no_bios_settings: bool) -> Res<reqwest::Response> {
        let mut request = demo::deploy_request(&self.rack.catalog, "generic");
        // sushy's SecureBoot resource links no key databases: the pre-flight refuses to enrol into none.
        request.skip_secure_boot_certificates = true;
        request.no_bios_settings = no_bios_settings;
        self.post(&format!("/1.0/provisioning/servers/{SERVER}:deploy"), &request)
            .await
    }

    async fn deployment(&self) -> Res<Option<DeploymentReply>> {
        let server: ServerReply = self.get(&format!("/1.0/servers/{SERVER}")).await?;
        Ok(server.deployment)
    }

    async fn events(&self, deployment: i64) -> Res<Vec<EventReply>> {
        let all: Vec<EventReply> = self
            .get(&format!("/1.0/servers/{SERVER}/events?limit=1000"))
            .await?;
        Ok(all
            .into_iter()
            .filter(|e| e.deployment_id == Some(deployment))
            .collect())
    }
}

/// racklift's configuration with `CONFIG` as its file, layered and validated as the commands load it.
fn load_config(dir: &std::path::Path) -> Res<racklift_deploy::Config> {
    let file = dir.join("racklift.toml");
    std::fs::write(&file, CONFIG)?;
    let settings = Settings::load(&Sources {
        file: Some(file),
        ..Sources::default()
    })?;
    Ok(settings.deploy)
}

/// Registers the emulator's System through the API: plain http on loopback needs `allow_plain_http`, and the
/// fake driver checks no credentials (sushy authenticates only with an auth file configured), so the rack's
/// password file serves.
async fn register(api: &Api<'_>, bmc_url: &str) -> Res<()> {
    let server = NewServer {
        name: SERVER.to_owned(),
        bmc_address: bmc_url.to_owned(),
        bmc_username: "admin".to_owned(),
        bmc_password_ref: Some("file:bmc-password".to_owned()),
        allow_plain_http: true,
        ..NewServer::default()
    };
    let response = api.post("/1.0/servers", &server).await?;
    let status = response.status();
    ensure(
        status.is_success(),
        format!("server {SERVER} registered at {bmc_url} ({status})"),
    )
}

/// Step 1: a profile setting one attribute for the server, and the deploy is refused before anything starts.
async fn refused_with_attributes(api: &Api<'_>) -> Res<()> {
    // The demo catalog's baseline profile sets attributes for every server; this run names its own.
    api.delete("/1.0/bios-profiles/incusos-baseline").await?;
    let profile = NewBiosProfile {
        name: PROFILE.to_owned(),
        match_rules: serde_json::to_value(BTreeMap::from([("name_prefix", "sushy-")]))?,
        attributes: serde_json::to_value(BTreeMap::from([("BootMode", "Uefi")]))?,
        ..NewBiosProfile::default()
    };
    let response = api.post("/1.0/bios-profiles", &profile).await?;
    ensure(
        response.status().is_success(),
        format!("BIOS profile {PROFILE} stored ({})", response.status()),
    )?;

    let refused = api.deploy(false).await?;
    let status = refused.status();
    let body: ErrorReply = refused.json().await?;
    println!("info refusal: {}", body.error.message);
    ensure(
        status == 422 && body.error.code == "bios_absent",
        format!(
            "deploy refused with 422 bios_absent (got {status} {})",
            body.error.code
        ),
    )?;
    ensure(
        body.error.field.as_deref() == Some("name"),
        format!("the refusal names the field `name` ({:?})", body.error.field),
    )?;
    ensure(
        body.error.message.contains(PROFILE),
        format!("the refusal names the profile {PROFILE}"),
    )?;
    ensure(api.deployment().await?.is_none(), "no deployment was started")?;
    api.delete(&format!("/1.0/bios-profiles/{PROFILE}")).await
}

/// Step 2: accepted, followed through its transitions until it ends.
async fn runs_to_a_clear_end(api: &Api<'_>, config: &racklift_deploy::Config) -> Res<()> {
    // No profile is left for the server: the request says it needs no BIOS settings.
    let accepted = api.deploy(true).await?;
    let status = accepted.status();
    if status != 202 {
        return Err(format!("FAIL deploy accepted: {status}: {}", accepted.text().await?).into());
    }
    println!("ok   deploy accepted (202)");

    let started = Instant::now();
    let mut shown = 0;
    let end = loop {
        let Some(d) = api.deployment().await? else {
            return Err("FAIL the accepted deployment is not on the server".into());
        };
        let events = api.events(d.id).await?;
        for t in transitions(&events)?.iter().skip(shown) {
            println!(
                "info {:>5.1}s {} -> {} ({:?})",
                started.elapsed().as_secs_f64(),
                t.from.name(),
                t.to.name(),
                t.cause
            );
            shown += 1;
        }
        if d.finished_at.is_some() {
            break (d, events);
        }
        if started.elapsed() > FINISH_LIMIT {
            return Err(format!(
                "FAIL the deployment ended within {FINISH_LIMIT:?} (still {} after {} attempts)",
                d.state, d.attempts
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let (d, events) = end;
    let transitions = transitions(&events)?;
    println!(
        "info ended {} after {:.1}s: {}",
        d.state,
        started.elapsed().as_secs_f64(),
        d.failure.as_ref().map_or("(no failure)", |f| f.reason.as_str())
    );

    let check_bios: Vec<&Transition> = transitions
        .iter()
        .filter(|t| t.from == State::CheckBIOS)
        .collect();
    ensure(
        matches!(check_bios.as_slice(), [t] if t.cause == Cause::BiosAbsent && t.to == State::PowerOffSecureBoot),
        format!("CheckBIOS passed by once with BiosAbsent ({check_bios:?})"),
    )?;
    let (state, cause) = EXPECTED_END;
    let failure = d.failure.as_ref();
    ensure(
        d.state == State::Failed.name()
            && failure.is_some_and(|f| f.state == state.name() && f.cause == format!("{cause:?}")),
        format!(
            "failed at {} with {cause:?} (got {} {:?})",
            state.name(),
            d.state,
            failure.map(|f| (&f.state, &f.cause))
        ),
    )?;
    ensure(
        failure.is_some_and(|f| f.reason.contains(SERVER) && f.reason.contains(state.name())),
        "the reason names the server and the state",
    )?;
    ensure(
        d.media_size.is_some() && d.media_bytes_read == d.media_size,
        format!(
            "the emulator fetched the whole image from racklift's media server ({:?} of {:?} bytes)",
            d.media_bytes_read, d.media_size
        ),
    )?;
    bounded(&d, &events, &transitions, config)
}

/// The attempts stayed within the configured budget: no trigger retried past `step_retries`, no state entered
/// over and over.
fn bounded(
    d: &DeploymentReply,
    events: &[EventReply],
    transitions: &[Transition],
    config: &racklift_deploy::Config,
) -> Res<()> {
    let calls: Vec<BmcCall> = events
        .iter()
        .filter(|e| e.kind == "bmc_call")
        .map(|e| serde_json::from_value(e.detail.clone()))
        .collect::<Result<_, _>>()?;
    let failed: Vec<&BmcCall> = calls
        .iter()
        .filter(|c| !matches!(c.outcome.as_str(), "Succeeded" | "Accepted"))
        .collect();
    for c in &failed {
        println!("info BMC call {} {}: {:?}", c.action, c.outcome, c.error);
    }
    let mut per_action: BTreeMap<&str, u32> = BTreeMap::new();
    for c in &calls {
        *per_action.entry(c.action.as_str()).or_default() += 1;
    }
    let busiest = per_action.iter().max_by_key(|(_, n)| **n);
    let mut entered: BTreeMap<&str, usize> = BTreeMap::new();
    for t in transitions {
        *entered.entry(t.to.name()).or_default() += 1;
    }
    let most = entered.iter().max_by_key(|(_, n)| **n);
    println!(
        "info {} BMC calls ({} failed), {} transitions, attempts {}",
        calls.len(),
        failed.len(),
        transitions.len(),
        d.attempts
    );
    ensure(
        d.attempts <= config.step_retries,
        format!(
            "attempts {} within step_retries {}",
            d.attempts, config.step_retries
        ),
    )?;
    ensure(
        busiest.is_none_or(|(_, n)| *n <= config.step_retries + 1),
        format!("no BMC action sent more than 1 + step_retries times ({busiest:?})"),
    )?;
    ensure(
        most.is_none_or(|(_, n)| *n <= 2),
        format!("no state entered more than twice ({most:?})"),
    )
}

fn transitions(events: &[EventReply]) -> Res<Vec<Transition>> {
    Ok(events
        .iter()
        .filter(|e| e.kind == "transition")
        .map(|e| serde_json::from_value(e.detail.clone()))
        .collect::<Result<_, _>>()?)
}

async fn run(bmc_url: &str) -> Res<()> {
    let dir = std::env::temp_dir().join(format!("racklift-sushy-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = load_config(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let config = config?;
    let rack = Rack::start_empty(config.clone()).await;
    let api = Api { rack: &rack };
    let result = async {
        register(&api, bmc_url).await?;
        refused_with_attributes(&api).await?;
        runs_to_a_clear_end(&api, &config).await
    }
    .await;
    if result.is_err() {
        println!("info event log:\n{}", rack.event_log(SERVER).await);
    }
    rack.stop().await;
    result
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bmc_url] = args.as_slice() else {
        eprintln!("usage: sushy_deploy <sushy-url>");
        std::process::exit(2);
    };
    if let Err(e) = run(bmc_url).await {
        eprintln!("{e}");
        std::process::exit(1);
    }
    println!("sushy_deploy: passed");
}

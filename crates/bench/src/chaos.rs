//! `racklift bench chaos`: a rack under faults, reproduced from outside with separate processes, and the proof
//! that racklift holds.
//!
//! The simulator (`racklift bmc-sim`), the API (`racklift api`) and K workers (`racklift worker`) run as child
//! processes against a PostgreSQL of the run's own (a primary with a synchronous standby behind HAProxy when the
//! run promotes). Phase 1 deploys every server through the API; phase 2 forms Incus clusters from the deployed
//! servers and reboots every cluster at once. Throughout both, a schedule drawn from one seed (`schedule`)
//! kills and stops workers, cuts a worker off from PostgreSQL (each reaches it through a proxy of its own that can
//! be frozen; in the rolling phase right after the worker sent a member a reboot call), restarts PostgreSQL and the API, fails the database over and makes BMCs and Incus
//! APIs hang, fail or drop connections for a few requests (`inject`). Every wait is on a condition read from the
//! database or the simulator, and bounded; what did not finish is reported as stuck.
//!
//! The tally (`tally`) says whether racklift held: every deployment and cluster reboot completed, no mutation
//! reached a BMC or an Incus API with a stale fence, never two calls at once on one BMC and never two members
//! of a cluster out at once, and no job lost.

mod database;
mod inject;
mod partition;
mod phases;
mod procs;
mod report;
mod requests;
mod schedule;
mod sim_control;
mod tally;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use racklift_api::demo;
use racklift_bmc_sim::{PersonalityChoice, SimConfig};
use racklift_store::Store;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;

pub use database::DatabaseChoice;
pub use report::{
    ChaosReport, ClusterOutcome, ClusterTally, ConcurrencySeen, DeadLetter, DeploymentTally, FaultRecord,
    FaultTally, JobTally, LateEject, MutationTally, PhaseTimes, Recovery, RunSettings, ServerOutcome,
};
pub use schedule::{FaultKind, FaultMix, Phase};

use database::ChaosDb;
use procs::{ApiProcess, ApiSpec, SimProcess, WorkerSpec, Workers};
use schedule::Planned;
use sim_control::{SimControl, SimServer};

/// The benchmark database's name, with the process id: runs at once on one server (tests against
/// `DATABASE_URL`) must not share it.
fn database_name() -> String {
    format!("racklift_bench_chaos_{}", std::process::id())
}
/// How often a phase checks its condition and the schedule.
const TICK: Duration = Duration::from_millis(250);

/// What a run does.
#[derive(Debug, Clone)]
pub struct ChaosRun {
    pub servers: usize,
    pub workers: usize,
    /// The schedule's seed: the same seed, mix and rack size give the same schedule.
    pub seed: u64,
    /// The simulator's time scale; the API and workers use `Config::for_simulation` of it.
    pub time_scale: f64,
    pub faults: FaultMix,
    /// Clusters rebooted in phase 2; `None`: as many as the deployed servers fill.
    pub clusters: Option<usize>,
    pub members: usize,
    /// Jobs in flight per worker.
    pub concurrency: usize,
    /// The workers' lease time to live; a stopped worker stays stopped past it.
    pub lease_ttl_ms: u64,
    pub image_bytes: u64,
    /// Where the processes' logs go; by default a temporary directory, removed after a clean run.
    pub logs_dir: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChaosError {
    #[error("invalid run: {0}")]
    Settings(String),
    #[error("the chaos database")]
    Database(#[from] sqlx::Error),
    #[error("setting up the benchmark database")]
    Bench(#[from] crate::BenchError),
    #[error("the run's PostgreSQL")]
    Postgres(#[from] racklift_pgembed::PgEmbedError),
    #[error("the run's replicated PostgreSQL")]
    Replication(#[from] racklift_pgembed::ReplicationError),
    #[error("the proxy in front of PostgreSQL")]
    Proxy(#[from] racklift_pgembed::haproxy::ProxyError),
    #[error("{what}")]
    Process {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} exited {status}")]
    Exited { what: String, status: String },
    #[error("the simulator {0}")]
    Simulator(String),
    #[error("{what}")]
    Http {
        what: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{what}: HTTP {status}: {body}")]
    Refused { what: String, status: u16, body: String },
    #[error("the catalog")]
    Catalog(#[from] racklift_api::demo::DemoError),
    #[error("{what} not within {waited:?}: {detail}")]
    Timeout {
        what: String,
        waited: Duration,
        detail: String,
    },
}

/// Everything a run holds while it runs. Children come first, so an early return kills them before the
/// database they use is stopped.
pub(crate) struct Harness {
    pub(crate) workers: Workers,
    pub(crate) api: ApiProcess,
    sim_process: SimProcess,
    pub(crate) db: ChaosDb,
    pub(crate) run: ChaosRun,
    /// The benchmark database, as the API and workers reach it.
    pub(crate) url: String,
    pub(crate) pool: PgPool,
    pub(crate) sim: SimControl,
    pub(crate) servers: Vec<SimServer>,
    pub(crate) api_url: String,
    pub(crate) token: String,
    pub(crate) http: reqwest::Client,
    pub(crate) rng: StdRng,
    pub(crate) started: Instant,
    /// `started` as seconds since the Unix epoch, to put the database's timestamps on the run's clock.
    pub(crate) started_epoch: f64,
    pub(crate) late_ejects: BTreeSet<String>,
    /// Servers in a cluster: the targets of Incus faults.
    pub(crate) members: Vec<String>,
    pub(crate) clusters: Vec<(String, Vec<String>)>,
    pub(crate) injected: Vec<FaultRecord>,
    pub(crate) recoveries: Vec<Recovery>,
    pub(crate) problems: Vec<String>,
    /// Every job id seen live, sampled all along: each must end completed or dead.
    pub(crate) observed_jobs: Arc<Mutex<BTreeSet<i64>>>,
    /// Per server whose BMC saw two requests at once: when that was first seen (seconds into the run).
    pub(crate) concurrency_seen: Arc<Mutex<BTreeMap<String, f64>>>,
    /// Servers given a hang that may still hold a request: a worker is not stopped while one does (see
    /// `inject::Harness::drain_hangs`).
    pub(crate) hangs: BTreeSet<String>,
    /// When workers were stopped or cut off from PostgreSQL: (from, to) seconds into the run, and the pid.
    pub(crate) stopped: Vec<(f64, f64, u32)>,
    submitting: Option<tokio::task::JoinHandle<Vec<String>>>,
    pub(crate) logs: PathBuf,
}

/// Runs the chaos benchmark with the `racklift` binary `racklift`.
pub async fn run(racklift: &Path, choice: DatabaseChoice, run: ChaosRun) -> Result<ChaosReport, ChaosError> {
    validate(&run, &choice)?;
    let dir = std::env::temp_dir().join(format!("racklift-chaos-{}", std::process::id()));
    let logs = run.logs_dir.clone().unwrap_or_else(|| dir.join("logs"));
    for d in [&dir, &logs] {
        std::fs::create_dir_all(d).map_err(|source| ChaosError::Process {
            what: format!("creating {}", d.display()),
            source,
        })?;
    }
    let replicated = run.faults.promotions > 0;
    let pg_dir = dir.join("postgres");
    let db = tokio::task::block_in_place(|| ChaosDb::start(&choice, replicated, &pg_dir))?;
    tracing::info!(database = %db.describe(), dir = %dir.display(), "chaos run starting");
    let scale = run.time_scale;
    let clusters = run.clusters.unwrap_or(run.servers / run.members);
    let estimates = (
        deploy_estimate(scale),
        (clusters > 0).then(|| rolling_estimate(scale, run.members)),
    );
    let plan = schedule::plan(run.seed, &run.faults, run.servers, estimates.0, estimates.1);
    let kept_logs = run.logs_dir.is_some();
    let outcome = match Harness::start(racklift, db, run, &dir, logs.clone(), &plan).await {
        Ok(harness) => harness.run(plan, estimates, clusters).await,
        Err(e) => Err(e),
    };
    let clean = outcome.as_ref().is_ok_and(|r| r.problems.is_empty());
    // The logs of a run that went wrong are kept for reading; everything else goes.
    for sub in ["postgres", "secrets", "images"] {
        let _ = std::fs::remove_dir_all(dir.join(sub));
    }
    if clean || kept_logs {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let logs_kept = (!clean || kept_logs).then(|| logs.display().to_string());
    match outcome {
        Ok(mut report) => {
            report.logs_dir = logs_kept;
            Ok(report)
        }
        Err(e) => {
            if let Some(logs) = logs_kept {
                tracing::warn!(logs = %logs, "the run failed; its processes' logs are kept");
            }
            Err(e)
        }
    }
}

fn validate(run: &ChaosRun, choice: &DatabaseChoice) -> Result<(), ChaosError> {
    let bad = |why: &str| Err(ChaosError::Settings(why.to_owned()));
    if run.servers == 0 {
        return bad("--servers must be at least 1");
    }
    if !(run.time_scale > 0.0 && run.time_scale <= 1.0) {
        return bad("--time-scale must be in (0, 1]");
    }
    if run.faults.promotions > 1 {
        return bad("--promotions: one standby can be promoted once");
    }
    if run.members == 0 {
        return bad("--members must be at least 1");
    }
    if run.faults.touches_postgres() && matches!(choice, DatabaseChoice::External { .. }) {
        return bad("PostgreSQL restarts and promotions need the run's own PostgreSQL, not DATABASE_URL");
    }
    Ok(())
}

/// The expected length of phase 1 at `scale`: the install dominates (25 nominal minutes), the rest of a
/// deployment and the floors of the simulation's timings add about a third.
fn deploy_estimate(scale: f64) -> Duration {
    let install = SimConfig::for_deployments(1, PersonalityChoice::Mix, scale)
        .timings
        .install;
    Duration::from_secs(20) + install.mul_f64(1.2 * scale)
}

/// The expected length of phase 2: one cluster's members in sequence (the clusters reboot side by side), each
/// with a poll period of slack.
fn rolling_estimate(scale: f64, members: usize) -> Duration {
    let timings = SimConfig::for_deployments(1, PersonalityChoice::Mix, scale).timings;
    let rolling = racklift_deploy::Config::for_simulation(scale).rolling;
    let member: f64 = crate::rolling::member_steps(&timings, scale, rolling.post_restore_delay_secs)
        .iter()
        .sum::<f64>()
        + rolling.poll_interval_secs as f64;
    Duration::from_secs_f64(member * members as f64)
}

impl Harness {
    /// Starts the rack: the benchmark database, the simulator, the catalog, the API and the workers.
    async fn start(
        racklift: &Path,
        db: ChaosDb,
        run: ChaosRun,
        dir: &Path,
        logs: PathBuf,
        plan: &schedule::Plan,
    ) -> Result<Harness, ChaosError> {
        let dbs = crate::BenchDb::new(db.admin_url());
        let (url, setup) = dbs.fresh(&database_name(), 2).await?;
        setup.close().await;
        // The harness's own connections give up quickly while PostgreSQL is down: its waits poll again. It watches
        // racklift from outside (and reads a standby mid-failover), so it is not one of racklift's bounded,
        // primary-only pools (`racklift_queue::session`); the processes it runs are.
        let pool = PgPoolOptions::new()
            .max_connections(6)
            .acquire_timeout(Duration::from_secs(3))
            .connect(&url)
            .await?;
        let password = racklift_store::new_secret();
        let sim_process = SimProcess::start(
            racklift,
            run.servers,
            run.time_scale,
            &password,
            &logs.join("bmc-sim.log"),
        )
        .await?;
        let sim = SimControl::new(sim_process.control_url.clone())?;
        let mut servers = sim.servers().await?;
        servers.sort_by_key(|s| s.index);
        tracing::info!(servers = servers.len(), url = %sim_process.base_url, "simulator up");

        let (secrets, images) = (dir.join("secrets"), dir.join("images"));
        let io = |what: &str, source| ChaosError::Process {
            what: what.to_owned(),
            source,
        };
        std::fs::create_dir_all(&secrets).map_err(|e| io("creating the secrets directory", e))?;
        std::fs::write(secrets.join("bmc-password"), &password)
            .map_err(|e| io("writing the BMC password", e))?;
        let (image, sha) =
            demo::generate_image(&images, run.image_bytes).map_err(|e| io("writing the image", e))?;
        let listen = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| io("finding a port for the API", e))?;
        let media_listen = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| io("finding a port for the media", e))?;
        let api_url = format!("https://{listen}");
        let cert = racklift_listener::tls::self_signed(
            &["localhost".to_owned(), "127.0.0.1".to_owned()],
            "racklift API",
        )
        .map_err(|e| {
            io(
                "making the API's certificate",
                std::io::Error::other(e.to_string()),
            )
        })?;
        let tls = (dir.join("api.crt"), dir.join("api.key"));
        std::fs::write(&tls.0, &cert.certificate_pem).map_err(|e| io("writing the API's certificate", e))?;
        std::fs::write(&tls.1, &cert.key_pem).map_err(|e| io("writing the API's key", e))?;
        let rack: Vec<demo::RackServer> = servers
            .iter()
            .map(|s| demo::RackServer {
                name: s.name.clone(),
                bmc_url: s.bmc_url.clone(),
                vendor: s.personality.clone(),
                bmc_cert_pin: None,
            })
            .collect();
        let store = Store::new(pool.clone());
        let catalog = demo::seed_catalog(
            &store,
            &rack,
            "admin",
            "file:bmc-password",
            &api_url,
            (&image, run.image_bytes, &sha),
        )
        .await?;
        let api = ApiProcess::start(ApiSpec {
            bin: racklift.to_owned(),
            listen,
            database_url: url.clone(),
            secrets: secrets.clone(),
            images,
            time_scale: run.time_scale,
            logs: logs.clone(),
            tls,
            media_listen,
        })?;
        let workers = Workers::start(
            WorkerSpec {
                bin: racklift.to_owned(),
                database_url: url.clone(),
                secrets,
                time_scale: run.time_scale,
                concurrency: run.concurrency,
                lease_ttl_ms: run.lease_ttl_ms,
                logs: logs.clone(),
            },
            run.workers,
        )
        .await?;
        let api_certificate =
            reqwest::Certificate::from_pem(cert.certificate_pem.as_bytes()).map_err(|source| {
                ChaosError::Http {
                    what: "the API's certificate".into(),
                    source,
                }
            })?;
        let http = reqwest::Client::builder()
            .add_root_certificate(api_certificate)
            .timeout(Duration::from_secs(90))
            .build()
            .map_err(|source| ChaosError::Http {
                what: "the API client".into(),
                source,
            })?;
        let mut harness = Harness {
            workers,
            api,
            sim_process,
            db,
            rng: StdRng::seed_from_u64(run.seed.wrapping_add(1)),
            run,
            url,
            pool,
            sim,
            servers,
            api_url,
            token: catalog.admin_token.clone(),
            http,
            started: Instant::now(),
            started_epoch: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            late_ejects: BTreeSet::new(),
            members: Vec::new(),
            clusters: Vec::new(),
            injected: Vec::new(),
            recoveries: Vec::new(),
            problems: Vec::new(),
            observed_jobs: Arc::new(Mutex::new(BTreeSet::new())),
            concurrency_seen: Arc::new(Mutex::new(BTreeMap::new())),
            hangs: BTreeSet::new(),
            stopped: Vec::new(),
            submitting: None,
            logs,
        };
        if harness.api_answers(Duration::from_secs(60)).await.is_none() {
            return Err(ChaosError::Timeout {
                what: "the API answering".into(),
                waited: Duration::from_secs(60),
                detail: format!("see {}", harness.logs.join("api-1.log").display()),
            });
        }
        harness.late_ejects = plan
            .late_ejects
            .iter()
            .filter_map(|&i| harness.servers.get(i).map(|s| s.name.clone()))
            .collect();
        harness.submit_deployments(catalog);
        Ok(harness)
    }

    /// Both phases, then the tally. The deploy requests are already on their way (`start`).
    async fn run(
        mut self,
        plan: schedule::Plan,
        (deploy_est, rolling_est): (Duration, Option<Duration>),
        cluster_count: usize,
    ) -> Result<ChaosReport, ChaosError> {
        let sampler = CancellationToken::new();
        tokio::spawn(phases::sample_jobs(
            self.pool.clone(),
            self.observed_jobs.clone(),
            sampler.clone(),
        ));
        let names: Vec<String> = self.servers.iter().map(|s| s.name.clone()).collect();
        tokio::spawn(phases::sample_concurrency(
            self.sim.clone(),
            names,
            self.started,
            self.concurrency_seen.clone(),
            sampler.clone(),
        ));

        let deploy_limit = Duration::from_secs(300) + deploy_est * 4;
        let deploy = self
            .drive(Phase::Deploy, plan.deploy.clone(), deploy_limit)
            .await?;
        if let Some(submitting) = self.submitting.take() {
            match submitting.await {
                Ok(refused) => self.problems.extend(refused),
                Err(e) => self.problems.push(format!("the deploy submission ended: {e}")),
            }
        }
        tracing::info!(
            secs = deploy.secs,
            timed_out = deploy.timed_out,
            "deploy phase done"
        );

        let mut rolling = None;
        let mut left = deploy.left;
        if let Some(rolling_est) = rolling_est {
            self.form_clusters(cluster_count).await?;
            if !self.clusters.is_empty() {
                // Faults the deploy phase ended too soon for fire in the rolling phase, spread the same way.
                let ratio = rolling_est.as_secs_f64() / deploy_est.as_secs_f64().max(1e-9);
                let mut events: Vec<Planned> = left
                    .drain(..)
                    .map(|p| Planned {
                        at: p.at.mul_f64(ratio),
                        action: p.action,
                    })
                    .chain(plan.rolling.iter().copied())
                    .collect();
                events.sort_by_key(|p| p.at);
                self.reboot_clusters().await?;
                let limit = Duration::from_secs(300) + rolling_est * 4;
                let end = self.drive(Phase::Rolling, events, limit).await?;
                tracing::info!(secs = end.secs, timed_out = end.timed_out, "rolling phase done");
                left = end.left.clone();
                rolling = Some(end);
            }
        } else {
            left.extend(plan.rolling.iter().copied());
        }
        sampler.cancel();
        for missed in &left {
            tracing::info!(fault = ?missed.action, "not injected: the work ended first");
        }
        let times = PhaseTimes {
            deploy_secs: deploy.secs,
            deploy_timed_out: deploy.timed_out,
            deploy_estimate_secs: deploy_est.as_secs_f64(),
            rolling_secs: rolling.as_ref().map(|r| r.secs),
            rolling_timed_out: rolling.as_ref().is_some_and(|r| r.timed_out),
            rolling_estimate_secs: rolling_est.map(|r| r.as_secs_f64()),
            total_secs: self.started.elapsed().as_secs_f64(),
        };
        let report = tally::gather(&self, &plan, times).await?;
        self.shutdown().await;
        Ok(report)
    }

    /// Stops every process of the run (the database last, when the harness is dropped).
    async fn shutdown(self) {
        let Harness {
            workers,
            mut api,
            sim_process,
            pool,
            db,
            ..
        } = self;
        workers.shutdown().await;
        api.kill().await;
        sim_process.stop().await;
        pool.close().await;
        // A server of the run's own goes with its directory; on DATABASE_URL's the database is dropped.
        if db.is_external()
            && let Err(error) = crate::BenchDb::new(db.admin_url())
                .drop_db(&database_name())
                .await
        {
            tracing::warn!(error = %error, "dropping the benchmark database");
        }
        drop(db);
    }
}

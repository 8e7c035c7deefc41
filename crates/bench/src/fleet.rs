//! `racklift bench fleet`: a simulated rack deployed at once by separate `racklift worker` processes against one
//! PostgreSQL, with the API (media, registration) in this process. First one server of each vendor personality is
//! deployed, five at once and nothing else running: each one's duration is its vendor's ideal (simulated hardware
//! time plus the control loop's poll). The vendors differ (a Dell-like BMC keeps reporting its media inserted for
//! a while after an eject, for one), so a mixed fleet cannot finish before its slowest vendor's ideal: that is the
//! ideal the fleet's wall time is compared with, and each deployment is also compared with its own vendor's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::StreamExt;
use racklift_api::demo::{self, RackServer};
use racklift_api::{ApiConfig, AppState};
use racklift_bmc_sim::{Personality, PersonalityChoice, Sim, SimConfig};
use racklift_queue::{Queue, QueueConfig};
use racklift_store::Store;
use serde::Serialize;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::proc_stats::{cpu_secs, peak_rss_kib, postgres_cpu_secs};
use crate::{BenchDb, BenchError};

#[derive(Debug, Clone, Copy)]
pub struct FleetRun {
    pub servers: usize,
    pub workers: usize,
    pub time_scale: f64,
    pub image_bytes: u64,
    pub concurrency: usize,
    /// Leave the benchmark database in place afterwards, to look into.
    pub keep_database: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    pub servers: usize,
    /// The slowest vendor's ideal: no mixed fleet can finish sooner.
    pub ideal_secs: f64,
    /// Each vendor's ideal: one server of that personality, deployed with nothing else running.
    pub ideal_by_vendor: Vec<(String, f64)>,
    pub wall_secs: f64,
    /// Time to submit every deploy request (each runs its pre-flight BMC read).
    pub submit_secs: f64,
    /// Per deployment, created to finished: median, 90th percentile and the slowest.
    pub duration_secs: [f64; 3],
    /// Per deployment, its duration over its own vendor's ideal: median, 90th percentile and the worst.
    pub duration_ratio: [f64; 3],
    pub completed: usize,
    pub failed: usize,
    pub dead_letters: i64,
    pub transitions: i64,
    /// Transactions that wrote (each draws a transaction id), whole fleet phase.
    pub write_transactions: i64,
    /// Leases of step jobs (each draws a fencing token): one per job, plus one per wait poll.
    pub leases: i64,
    /// Jobs enqueued: one per run of transitions, the first of each deployment included.
    pub jobs: i64,
    /// Every committed transaction of the database, reads included.
    pub committed_transactions: i64,
    pub worker_cpu_secs: f64,
    pub postgres_cpu_secs: f64,
    /// This process: the API (deploy requests, media, registration), the simulated BMCs and the harness.
    pub api_and_sim_cpu_secs: f64,
    /// Per vendor: deployments, and their median and worst duration over that vendor's ideal.
    pub by_vendor: Vec<(String, usize, f64, f64)>,
    /// Where the fleet lost time: the (vendor, state) pairs whose mean time in the state grew most over the
    /// vendor's lone deployment (the mean, so a few long stays count as much as everyone's short delay).
    pub slowed_states: Vec<SlowedState>,
    pub worker_peak_rss_kib: Vec<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SlowedState {
    pub vendor: String,
    pub state: String,
    /// Seconds the vendor's lone deployment spent in the state (all visits).
    pub lone_secs: f64,
    /// Over the fleet's deployments of that vendor: mean, median, 90th percentile and the longest.
    pub fleet_mean_secs: f64,
    pub fleet_p50_secs: f64,
    pub fleet_p90_secs: f64,
    pub fleet_max_secs: f64,
}

/// Runs the fleet benchmark on a fresh database under `admin_url`.
pub async fn run(racklift: &Path, admin_url: &str, run: FleetRun) -> Result<FleetReport, BenchError> {
    let dbs = BenchDb::new(admin_url);
    let (url, pool) = dbs.fresh("racklift_bench_fleet", 32).await?;
    let sim_config =
        SimConfig::for_deployments(run.servers + VENDORS, PersonalityChoice::Mix, run.time_scale);
    let sim = Sim::start(sim_config)
        .await
        .map_err(|e| BenchError::Stalled(format!("simulator: {e}")))?;
    let dir = std::env::temp_dir().join(format!("racklift-fleet-{}", std::process::id()));
    // The API here and the worker processes are confined to these, like any racklift.
    let (secrets, images) = (dir.join("secrets"), dir.join("images"));
    std::fs::create_dir_all(&secrets).map_err(BenchError::Process)?;
    std::fs::write(secrets.join("bmc-password"), sim.credentials().1).map_err(BenchError::Process)?;
    let (image, sha) = demo::generate_image(&images, run.image_bytes).map_err(BenchError::Process)?;
    let access = racklift_bmc_access::AccessPolicy::load(
        None,
        &secrets,
        racklift_bmc_access::secrets::DEFAULT_ENV_PREFIX,
    )
    .map_err(BenchError::Access)?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(BenchError::Process)?;
    let api_url = format!("http://{}", listener.local_addr().map_err(BenchError::Process)?);
    let store = Store::new(pool.clone());
    let rack: Vec<RackServer> = (0..sim.len())
        .map(|i| RackServer {
            name: sim.name(i).to_owned(),
            bmc_url: sim.bmc_url(i),
            vendor: sim.personality(i).as_str().to_owned(),
            bmc_cert_pin: None,
        })
        .collect();
    let catalog = demo::seed_catalog(
        &store,
        &rack,
        sim.credentials().0,
        "file:bmc-password",
        &api_url,
        (&image, run.image_bytes, &sha),
    )
    .await
    .map_err(|e| BenchError::Stalled(format!("catalog: {e}")))?;
    let queue = Queue::new(pool.clone(), QueueConfig::default());
    let shutdown = CancellationToken::new();
    let state = AppState::new(
        store.clone(),
        queue,
        ApiConfig {
            deploy: racklift_deploy::Config::for_simulation(run.time_scale),
            bmc_access: access,
            images_dir: images,
            // Every simulated server reads its media from this host's own address: one peer for the listener.
            listener: racklift_listener::Limits {
                max_connections_per_peer: racklift_listener::Limits::default().max_connections,
                ..racklift_listener::Limits::default()
            },
            ..ApiConfig::default()
        },
    );
    let api = tokio::spawn(racklift_api::serve(listener, state, shutdown.clone()));
    let mut workers = Vec::new();
    for _ in 0..run.workers.max(1) {
        workers.push(spawn_worker(
            racklift,
            &url,
            &secrets,
            run.time_scale,
            run.concurrency,
        )?);
    }
    let http = reqwest::Client::new();
    let deploy = |server: &RackServer| {
        http.post(format!(
            "{api_url}/1.0/provisioning/servers/{}:deploy",
            server.name
        ))
        .bearer_auth(&catalog.admin_token)
        .json(&demo::deploy_request(&catalog, &server.vendor))
        .send()
    };

    let vendor_of: HashMap<&str, &str> = rack
        .iter()
        .map(|s| (s.name.as_str(), s.vendor.as_str()))
        .collect();

    // The ideals: the first server of each personality (`Mix` assigns them round-robin), five at once.
    let lone = &rack[..VENDORS];
    let sent = futures::future::join_all(lone.iter().map(deploy)).await;
    for response in sent {
        check(response)?;
    }
    wait_all(&store, Duration::from_secs(600)).await?;
    let lone_names: Vec<String> = lone.iter().map(|s| s.name.clone()).collect();
    let ideal_by_vendor: Vec<(String, f64)> = durations(&pool, &lone_names, true)
        .await?
        .into_iter()
        .map(|(server, secs)| (vendor_of[server.as_str()].to_owned(), secs))
        .collect();
    let ideal = ideal_by_vendor.iter().map(|v| v.1).fold(0.0, f64::max);

    let before = Counters::read(&pool, &workers).await?;
    let started = Instant::now();
    let fleet = &rack[VENDORS..];
    // As an operator's script would: a fixed number of requests in flight, the next sent as soon as one returns
    // (not in lockstep chunks, where every chunk waits for its slowest request).
    let mut sent = futures::stream::iter(fleet.iter().map(deploy)).buffer_unordered(SUBMIT_IN_FLIGHT);
    while let Some(response) = sent.next().await {
        check(response)?;
    }
    drop(sent);
    let submit = started.elapsed();
    wait_all(&store, Duration::from_secs(3600)).await?;
    let wall = started.elapsed();
    let after = Counters::read(&pool, &workers).await?;

    let (completed, failed): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE state = 'Completed'), count(*) FILTER (WHERE state <> 'Completed') \
         FROM deployments WHERE server <> ALL($1)",
    )
    .bind(&lone_names)
    .fetch_one(&pool)
    .await?;
    let fleet_durations = durations(&pool, &lone_names, false).await?;
    let seconds: Vec<f64> = fleet_durations.iter().map(|d| d.1).collect();
    let vendor_ratios: Vec<(String, f64)> = fleet_durations
        .iter()
        .map(|(server, secs)| {
            let vendor = vendor_of[server.as_str()].to_owned();
            let own = ideal_by_vendor
                .iter()
                .find(|v| v.0 == vendor)
                .map_or(ideal, |v| v.1);
            (vendor, secs / own)
        })
        .collect();
    let ratios: Vec<f64> = vendor_ratios.iter().map(|v| v.1).collect();
    let by_vendor = ideal_by_vendor
        .iter()
        .map(|(vendor, _)| {
            let own: Vec<f64> = vendor_ratios
                .iter()
                .filter(|v| &v.0 == vendor)
                .map(|v| v.1)
                .collect();
            let count = own.len();
            let [p50, _, max] = quantiles(own);
            (vendor.clone(), count, p50, max)
        })
        .collect();
    let transitions: i64 =
        sqlx::query_scalar("SELECT coalesce(sum(seq), 0)::bigint FROM deployments WHERE server <> ALL($1)")
            .bind(&lone_names)
            .fetch_one(&pool)
            .await?;
    let slowed_states = slowed_states(&store, &rack[..VENDORS]).await?;
    let dead_letters: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_letters")
        .fetch_one(&pool)
        .await?;
    let peak_rss = workers.iter().map(|w| peak_rss_kib(w.1)).collect();

    shutdown.cancel();
    for (mut child, _) in workers {
        let _ = child.kill().await;
    }
    let _ = api.await;
    sim.shutdown().await;
    pool.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    if !run.keep_database {
        dbs.drop_db("racklift_bench_fleet").await?;
    }
    Ok(FleetReport {
        servers: fleet.len(),
        ideal_secs: ideal,
        ideal_by_vendor,
        wall_secs: wall.as_secs_f64(),
        submit_secs: submit.as_secs_f64(),
        duration_secs: quantiles(seconds),
        duration_ratio: quantiles(ratios),
        completed: completed as usize,
        failed: failed as usize,
        dead_letters,
        transitions,
        write_transactions: after.xid - before.xid,
        leases: after.fence - before.fence,
        jobs: after.job_id - before.job_id,
        committed_transactions: after.commits - before.commits,
        worker_cpu_secs: after.worker_cpu - before.worker_cpu,
        postgres_cpu_secs: after.postgres_cpu - before.postgres_cpu,
        api_and_sim_cpu_secs: after.own_cpu - before.own_cpu,
        by_vendor,
        slowed_states,
        worker_peak_rss_kib: peak_rss,
    })
}

/// One server of each personality makes the ideals.
const VENDORS: usize = Personality::ALL.len();
/// Deploy requests the harness keeps in flight while submitting the fleet.
const SUBMIT_IN_FLIGHT: usize = 64;

/// Created-to-finished seconds of the deployments of `servers` (`among`) or of every other server.
async fn durations(pool: &PgPool, servers: &[String], among: bool) -> Result<Vec<(String, f64)>, BenchError> {
    Ok(sqlx::query_as(
        "SELECT server, extract(epoch FROM finished_at - created_at)::float8 FROM deployments \
         WHERE (server = ANY($1)) = $2",
    )
    .bind(servers)
    .bind(among)
    .fetch_all(pool)
    .await?)
}

/// Time per state and deployment (every visit summed) from the transition events, lone against fleet.
async fn slowed_states(store: &Store, lone: &[RackServer]) -> Result<Vec<SlowedState>, BenchError> {
    let spans = store
        .state_spans(86_400) // the benchmark database is its own
        .await
        .map_err(|e| BenchError::Stalled(format!("state spans: {e}")))?;
    let lone: HashSet<&str> = lone.iter().map(|s| s.name.as_str()).collect();
    let mut groups: BTreeMap<(String, String), (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for span in spans {
        let entry = groups
            .entry((span.vendor.unwrap_or_default(), span.state))
            .or_default();
        if lone.contains(span.server.as_str()) {
            entry.0.push(span.secs);
        } else {
            entry.1.push(span.secs);
        }
    }
    let mut slowed: Vec<SlowedState> = groups
        .into_iter()
        .filter(|(_, (lone, fleet))| !lone.is_empty() && !fleet.is_empty())
        .map(|((vendor, state), (lone, fleet))| {
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            let fleet_mean_secs = mean(&fleet);
            let [fleet_p50_secs, fleet_p90_secs, fleet_max_secs] = quantiles(fleet);
            SlowedState {
                vendor,
                state,
                lone_secs: mean(&lone),
                fleet_mean_secs,
                fleet_p50_secs,
                fleet_p90_secs,
                fleet_max_secs,
            }
        })
        .collect();
    slowed.sort_by(|a, b| (b.fleet_mean_secs - b.lone_secs).total_cmp(&(a.fleet_mean_secs - a.lone_secs)));
    slowed.truncate(10);
    Ok(slowed)
}

/// Median, 90th percentile (nearest rank) and maximum.
pub(crate) fn quantiles(mut values: Vec<f64>) -> [f64; 3] {
    if values.is_empty() {
        return [0.0; 3];
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    [at(0.5), at(0.9), at(1.0)]
}

/// A `racklift worker` process of a benchmark at `time_scale`; `RACKLIFT_BENCH_WORKER_LOG` sets its log filter to
/// look into a run.
pub(crate) fn spawn_worker(
    racklift: &Path,
    url: &str,
    secrets: &Path,
    time_scale: f64,
    concurrency: usize,
) -> Result<(tokio::process::Child, u32), BenchError> {
    let child = tokio::process::Command::new(racklift)
        .args([
            "worker",
            "--sim-time-scale",
            &time_scale.to_string(),
            "--concurrency",
            &concurrency.to_string(),
            "--batch",
            "100",
        ])
        .env("DATABASE_URL", url)
        .env("RACKLIFT_PATHS__SECRETS_DIR", secrets)
        // Several workers run at once: each serves metrics on a free port rather than all on the default.
        .env("RACKLIFT_METRICS_LISTEN", "127.0.0.1:0")
        // The simulated rack is plain http:// on loopback: its every-use warning would bury the run's output.
        .env(
            "RUST_LOG",
            std::env::var("RACKLIFT_BENCH_WORKER_LOG")
                .unwrap_or_else(|_| "warn,racklift_bmc_access=error".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(BenchError::Process)?;
    let pid = child
        .id()
        .ok_or_else(|| BenchError::Stalled("worker exited at once".into()))?;
    Ok((child, pid))
}

fn check(response: reqwest::Result<reqwest::Response>) -> Result<(), BenchError> {
    match response {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(BenchError::Stalled(format!(
            "deploy refused: HTTP {}",
            r.status()
        ))),
        Err(e) => Err(BenchError::Stalled(format!("deploy request: {e}"))),
    }
}

/// Waits until no deployment is running. Only the phase's own deployments exist unfinished, so the count walks the
/// small partial index of running deployments: the harness's ten checks a second must not load the database it
/// measures (matching 1,000 names per row took 2.5 ms a check).
async fn wait_all(store: &Store, limit: Duration) -> Result<(), BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        let open: i64 = sqlx::query_scalar("SELECT count(*) FROM deployments WHERE finished_at IS NULL")
            .fetch_one(store.pool())
            .await?;
        if open == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Stalled(format!(
                "{open} deployments still running after {limit:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Counters {
    xid: i64,
    fence: i64,
    job_id: i64,
    commits: i64,
    worker_cpu: f64,
    postgres_cpu: f64,
    own_cpu: f64,
}

impl Counters {
    async fn read(pool: &PgPool, workers: &[(tokio::process::Child, u32)]) -> Result<Counters, BenchError> {
        // Reading the current transaction id assigns one: one extra write per reading, negligible.
        let xid: i64 = sqlx::query_scalar("SELECT pg_current_xact_id()::text::bigint")
            .fetch_one(pool)
            .await?;
        let commits: i64 =
            sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
                .fetch_one(pool)
                .await?;
        // Sequence positions, read without drawing from them.
        let (fence, job_id): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT last_value FROM job_fence_seq), (SELECT last_value FROM jobs_id_seq)",
        )
        .fetch_one(pool)
        .await?;
        Ok(Counters {
            xid,
            fence,
            job_id,
            commits,
            worker_cpu: workers.iter().map(|w| cpu_secs(w.1, false)).sum(),
            postgres_cpu: postgres_cpu_secs(),
            own_cpu: cpu_secs(std::process::id(), false),
        })
    }
}

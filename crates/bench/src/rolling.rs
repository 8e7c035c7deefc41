//! `racklift bench rolling`: many Incus clusters rebooting at once, driven by separate `racklift worker` processes
//! against one PostgreSQL, with the API in this process.
//!
//! Set-up skips deployments: every simulated server boots with IncusOS already installed from a seed that trusts
//! racklift's client certificate and names its hostname (`SimHandle::boot_installed`), and its row in `servers`
//! gets what a registration writes there (`connection_url`, the client certificate's SHA-256, `registered`), the
//! statement of `Store::register_deployment` without the deployment it would complete. The simulator then forms
//! each cluster (as its administrator would with `incus cluster join`) and racklift creates it through the API,
//! which checks over each member's Incus API that they form one cluster.
//!
//! One extra cluster first reboots alone (nothing else running): its time is what racklift's control loop takes
//! with no contention. Then every other cluster's `:reboot` is sent at once and the wall time runs until the last
//! one ends. The ideal is the simulated hardware's: per member, the evacuation's Incus operation, the reboot
//! (POST and OS boot), the restore's operation and the post-restore delay, members one after the other.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use racklift_api::demo::{self, RackServer};
use racklift_api::{ApiConfig, AppState};
use racklift_bmc_sim::{Personality, PersonalityChoice, Sim, SimConfig, SimHandle, Timings};
use racklift_queue::{Queue, QueueConfig};
use racklift_store::Store;
use serde::Serialize;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::fleet::{quantiles, spawn_worker};
use crate::proc_stats::{cpu_secs, peak_rss_kib, postgres_cpu_secs};
use crate::{BenchDb, BenchError};

const DATABASE: &str = "racklift_bench_rolling";

/// Incus steps of a rolling reboot per member: evacuate, reboot, restore.
pub const STEPS_PER_MEMBER: usize = 3;

#[derive(Debug, Clone, Copy)]
pub struct RollingBench {
    pub clusters: usize,
    pub members: usize,
    pub workers: usize,
    pub concurrency: usize,
    pub time_scale: f64,
    /// Leave the benchmark database in place afterwards, to look into.
    pub keep_database: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct RollingReport {
    pub clusters: usize,
    pub members: usize,
    /// The simulated hardware's time for one cluster, members in sequence: no cluster can finish sooner.
    pub ideal_secs: f64,
    /// One member's share of the ideal: evacuate, reboot, restore, post-restore delay.
    pub member_steps_secs: [f64; 4],
    /// How often a run polls its members while a step is in flight (the workers' setting at this scale).
    pub poll_interval_secs: u64,
    /// The extra cluster, rebooted with nothing else running.
    pub alone_secs: f64,
    pub setup_secs: f64,
    pub wall_secs: f64,
    /// Time to send every `:reboot` (each launch polls the cluster's members).
    pub submit_secs: f64,
    /// Per cluster, launched to ended: median, 90th percentile and the slowest.
    pub duration_secs: [f64; 3],
    pub completed: usize,
    pub not_completed: usize,
    pub dead_letters: i64,
    /// Writes of the runs' state (`cluster_operations.seq`, one per save), all clusters.
    pub run_saves: i64,
    /// Transactions that wrote (each draws a transaction id), whole phase.
    pub write_transactions: i64,
    /// Every committed transaction of the database, reads included.
    pub committed_transactions: i64,
    /// Leases of cluster step jobs (each draws a fencing token).
    pub leases: i64,
    pub worker_cpu_secs: f64,
    pub postgres_cpu_secs: f64,
    /// This process: the API, the simulated servers (1 Incus TLS listener each) and the harness.
    pub api_and_sim_cpu_secs: f64,
    pub worker_peak_rss_kib: Vec<u64>,
    pub audit: AuditSummary,
}

/// The simulator's cluster audits, over every cluster of the measured phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditSummary {
    /// The most members of one cluster out for an evacuation at once (must be 1).
    pub max_out_at_once: u32,
    pub mutations: u64,
    pub unfenced_mutations: u64,
    pub stale_mutations: usize,
    /// Members evacuated, rebooted and restored exactly once each.
    pub members_rolled_once: usize,
}

impl RollingReport {
    pub fn steps(&self) -> usize {
        self.clusters * self.members * STEPS_PER_MEMBER
    }
}

/// The ideal of one member at `scale` with the simulator's `timings`: evacuate, reboot, restore, post-restore delay, in seconds.
pub fn member_steps(timings: &Timings, scale: f64, post_restore_delay_secs: u64) -> [f64; 4] {
    let op = timings.incus_operation.as_secs_f64() * scale;
    // A warm reset: six POST stages, then the OS boot from disk (`racklift_bmc_sim` driver).
    let reboot = (timings.post_stage.as_secs_f64() * 6.0 + timings.os_boot.as_secs_f64()) * scale;
    [op, reboot, op, post_restore_delay_secs as f64]
}

/// Runs the rolling reboot benchmark on a fresh database under `admin_url`.
pub async fn run(racklift: &Path, admin_url: &str, run: RollingBench) -> Result<RollingReport, BenchError> {
    let setup_started = Instant::now();
    let members = run.members.max(1);
    let clusters = run.clusters.max(1);
    // The measured clusters, then the one rebooted alone.
    let servers = (clusters + 1) * members;
    let dbs = BenchDb::new(admin_url);
    let (url, pool) = dbs.fresh(DATABASE, 32).await?;
    // As the cluster tests' racks: each POST stage at least half a real second, so a reboot lasts longer than the
    // Incus client's polite retries of a GET (which would otherwise ride over it unseen).
    let sim_config = SimConfig::for_deployments(
        servers,
        PersonalityChoice::Single(Personality::Generic),
        run.time_scale,
    );
    let timings = sim_config.timings.clone();
    let sim = Sim::start(sim_config)
        .await
        .map_err(|e| BenchError::Stalled(format!("simulator: {e}")))?;
    let dir = std::env::temp_dir().join(format!("racklift-rolling-{}", std::process::id()));
    let (secrets, images) = (dir.join("secrets"), dir.join("images"));
    std::fs::create_dir_all(&secrets).map_err(BenchError::Process)?;
    std::fs::write(secrets.join("bmc-password"), sim.credentials().1).map_err(BenchError::Process)?;
    let image_bytes = 2 << 20;
    let (image, sha) = demo::generate_image(&images, image_bytes).map_err(BenchError::Process)?;
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
        (&image, image_bytes, &sha),
    )
    .await
    .map_err(|e| BenchError::Stalled(format!("catalog: {e}")))?;
    let deploy_config = racklift_deploy::Config::for_simulation(run.time_scale);
    let rolling = deploy_config.rolling.clone();
    let queue = Queue::new(pool.clone(), QueueConfig::default());
    let shutdown = CancellationToken::new();
    let state = AppState::new(
        store.clone(),
        queue,
        ApiConfig {
            deploy: deploy_config,
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

    install_and_register(&sim, &store).await?;
    let names: Vec<String> = (0..=clusters).map(|c| format!("c{c:03}")).collect();
    let members_of = |c: usize| (c * members..(c + 1) * members).collect::<Vec<usize>>();
    for (c, name) in names.iter().enumerate() {
        sim.form_cluster(name, &members_of(c))
            .map_err(|e| BenchError::Stalled(format!("forming {name}: {e}")))?;
    }
    let http = reqwest::Client::new();
    let post = |path: String, body: serde_json::Value| {
        http.post(format!("{api_url}{path}"))
            .bearer_auth(&catalog.admin_token)
            .json(&body)
            .send()
    };
    let creates = names.iter().enumerate().map(|(c, name)| {
        let servers: Vec<&str> = members_of(c).into_iter().map(|i| sim.name(i)).collect();
        // No delay of its own: the workers' post-restore delay (scaled like the hardware) applies.
        post(
            "/1.0/provisioning/clusters".to_owned(),
            json!({"name": name, "servers": servers}),
        )
    });
    let mut created = futures::stream::iter(creates).buffer_unordered(8);
    while let Some(response) = created.next().await {
        check(response, "cluster create").await?;
    }
    drop(created);
    for name in &names {
        sim.reset_cluster_audit(name);
    }
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
    let setup = setup_started.elapsed();

    // Alone: the last cluster, nothing else running.
    let lone = &names[clusters];
    check(
        post(format!("/1.0/provisioning/clusters/{lone}:reboot"), json!({})).await,
        "reboot",
    )
    .await?;
    let limit = Duration::from_secs_f64(
        60.0 + 10.0
            * members as f64
            * member_steps(&timings, run.time_scale, rolling.post_restore_delay_secs)
                .iter()
                .sum::<f64>()
                .max(rolling.poll_interval_secs as f64 * 4.0),
    );
    wait_all(&pool, limit).await?;
    let alone: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM finished_at - created_at)::float8 FROM cluster_operations WHERE cluster = $1",
    )
    .bind(lone)
    .fetch_one(&pool)
    .await?;

    let measured = &names[..clusters];
    let before = Counters::read(&pool, &workers).await?;
    let started = Instant::now();
    let reboots = measured
        .iter()
        .map(|name| post(format!("/1.0/provisioning/clusters/{name}:reboot"), json!({})));
    let mut sent = futures::stream::iter(reboots).buffer_unordered(SUBMIT_IN_FLIGHT);
    while let Some(response) = sent.next().await {
        check(response, "reboot").await?;
    }
    drop(sent);
    let submit = started.elapsed();
    wait_all(&pool, limit).await?;
    let wall = started.elapsed();
    let after = Counters::read(&pool, &workers).await?;

    let (completed, not_completed): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status <> 'completed') \
         FROM cluster_operations WHERE cluster <> $1",
    )
    .bind(lone)
    .fetch_one(&pool)
    .await?;
    let durations: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM finished_at - created_at)::float8 FROM cluster_operations \
         WHERE cluster <> $1 AND finished_at IS NOT NULL",
    )
    .bind(lone)
    .fetch_all(&pool)
    .await?;
    let run_saves: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(seq), 0)::bigint FROM cluster_operations WHERE cluster <> $1",
    )
    .bind(lone)
    .fetch_one(&pool)
    .await?;
    let dead_letters: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_letters")
        .fetch_one(&pool)
        .await?;
    let audit = audit(&sim, measured, members);
    let peak_rss = workers.iter().map(|w| peak_rss_kib(w.1)).collect();
    let steps = member_steps(&timings, run.time_scale, rolling.post_restore_delay_secs);

    shutdown.cancel();
    for (mut child, _) in workers {
        let _ = child.kill().await;
    }
    let _ = api.await;
    sim.shutdown().await;
    pool.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    if !run.keep_database {
        dbs.drop_db(DATABASE).await?;
    }
    Ok(RollingReport {
        clusters,
        members,
        ideal_secs: members as f64 * steps.iter().sum::<f64>(),
        member_steps_secs: steps,
        poll_interval_secs: rolling.poll_interval_secs,
        alone_secs: alone,
        setup_secs: setup.as_secs_f64(),
        wall_secs: wall.as_secs_f64(),
        submit_secs: submit.as_secs_f64(),
        duration_secs: quantiles(durations),
        completed: completed as usize,
        not_completed: not_completed as usize,
        dead_letters,
        run_saves,
        write_transactions: after.xid - before.xid,
        committed_transactions: after.commits - before.commits,
        leases: after.fence - before.fence,
        worker_cpu_secs: after.worker_cpu - before.worker_cpu,
        postgres_cpu_secs: after.postgres_cpu - before.postgres_cpu,
        api_and_sim_cpu_secs: after.own_cpu - before.own_cpu,
        worker_peak_rss_kib: peak_rss,
        audit,
    })
}

/// Launches the API keeps in flight while the reboots are submitted.
const SUBMIT_IN_FLIGHT: usize = 32;

/// Boots every server with IncusOS installed (trusting racklift's client certificate, named as in the catalog)
/// and records in `servers` what its registration would: where its Incus API answers and its certificate.
async fn install_and_register(sim: &SimHandle, store: &Store) -> Result<(), BenchError> {
    let identity = store
        .client_identity()
        .await
        .map_err(|e| BenchError::Stalled(format!("racklift's client identity: {e}")))?;
    for i in 0..sim.len() {
        let incus = json!({
            "version": "1",
            "apply_defaults": true,
            "preseed": {"certificates": [
                {"name": "racklift", "type": "client", "certificate": identity.certificate_pem}
            ]},
        });
        let network = format!("version: \"1\"\ndns:\n  hostname: {}\n", sim.name(i));
        let seed = ustar(&[
            ("incus.json", incus.to_string().as_bytes()),
            ("network.yaml", network.as_bytes()),
        ]);
        sim.boot_installed(i, &seed)
            .map_err(|e| BenchError::Stalled(format!("seed of {}: {e}", sim.name(i))))?;
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut pending: Vec<usize> = (0..sim.len()).collect();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for i in pending {
            let running = sim.truth(i)["phase"]["phase"] == "os_running";
            match (running, sim.incus_url(i), sim.client_certificate_sha256(i)) {
                (true, Some(url), Some(sha256)) => register(store, sim.name(i), &url, &sha256).await?,
                _ => still.push(i),
            }
        }
        pending = still;
        if !pending.is_empty() {
            if Instant::now() > deadline {
                return Err(BenchError::Stalled(format!(
                    "{} servers not running IncusOS after 300 s",
                    pending.len()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// The `servers` columns a registration sets (`Store::register_deployment`), with the detail it keeps.
async fn register(store: &Store, name: &str, url: &str, sha256: &str) -> Result<(), BenchError> {
    let detail = json!({"name": name, "connection_url": url, "client_certificate_sha256": sha256});
    let updated = sqlx::query(
        "UPDATE servers SET registered_at = now(), registration = $2, connection_url = $3, \
         client_certificate_sha256 = $4, status = 'registered', status_detail = 'registered', updated_at = now() \
         WHERE name = $1",
    )
    .bind(name)
    .bind(&detail)
    .bind(url)
    .bind(sha256)
    .execute(store.pool())
    .await?;
    if updated.rows_affected() != 1 {
        return Err(BenchError::Stalled(format!(
            "server {name} is not in the catalog"
        )));
    }
    Ok(())
}

/// A POSIX ustar archive of `files` (what IncusOS finds at the start of partition 2).
fn ustar(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in files {
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        let mut field = |at: usize, text: &str| header[at..at + text.len()].copy_from_slice(text.as_bytes());
        field(100, "0000644\0");
        field(108, "0000000\0");
        field(116, "0000000\0");
        field(124, &format!("{:011o}\0", data.len()));
        field(136, "00000000000\0");
        field(148, "        ");
        field(156, "0");
        field(257, "ustar\0");
        field(263, "00");
        let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
        header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

fn audit(sim: &SimHandle, clusters: &[String], members: usize) -> AuditSummary {
    let mut summary = AuditSummary::default();
    for name in clusters {
        let Some(report) = sim.cluster_audit(name) else {
            continue;
        };
        summary.max_out_at_once = summary.max_out_at_once.max(report.max_evacuated_at_once);
        summary.mutations += report.mutations;
        summary.unfenced_mutations += report.unfenced_mutations;
        summary.stale_mutations += report.stale_mutations.len();
        summary.members_rolled_once += report
            .members
            .values()
            .filter(|m| (m.evacuations, m.reboots, m.restores) == (1, 1, 1))
            .count()
            .min(members);
    }
    summary
}

async fn check(response: reqwest::Result<reqwest::Response>, what: &str) -> Result<(), BenchError> {
    match response {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => {
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            Err(BenchError::Stalled(format!(
                "{what} refused: HTTP {status}: {body}"
            )))
        }
        Err(e) => Err(BenchError::Stalled(format!("{what} request: {e}"))),
    }
}

/// Waits until no cluster operation runs (the partial index of live operations answers the count).
async fn wait_all(pool: &PgPool, limit: Duration) -> Result<(), BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        let open: i64 =
            sqlx::query_scalar("SELECT count(*) FROM cluster_operations WHERE status = 'running'")
                .fetch_one(pool)
                .await?;
        if open == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Stalled(format!(
                "{open} cluster operations still running after {limit:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Counters {
    xid: i64,
    fence: i64,
    commits: i64,
    worker_cpu: f64,
    postgres_cpu: f64,
    own_cpu: f64,
}

impl Counters {
    async fn read(pool: &PgPool, workers: &[(tokio::process::Child, u32)]) -> Result<Counters, BenchError> {
        let xid: i64 = sqlx::query_scalar("SELECT pg_current_xact_id()::text::bigint")
            .fetch_one(pool)
            .await?;
        let commits: i64 =
            sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
                .fetch_one(pool)
                .await?;
        let fence: i64 = sqlx::query_scalar("SELECT last_value FROM job_fence_seq")
            .fetch_one(pool)
            .await?;
        Ok(Counters {
            xid,
            fence,
            commits,
            worker_cpu: workers.iter().map(|w| cpu_secs(w.1, false)).sum(),
            postgres_cpu: postgres_cpu_secs(),
            own_cpu: cpu_secs(std::process::id(), false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_archive_is_read_back_by_the_simulator() {
        let tar = ustar(&[("network.yaml", b"version: \"1\"\n"), ("incus.json", b"{}")]);
        let files = racklift_bmc_sim::seed::SeedFiles::from_partition(&tar).expect("a ustar archive");
        assert_eq!(files.names(), ["network.yaml", "incus.json"]);
    }
}

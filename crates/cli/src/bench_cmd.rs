//! `racklift bench`: the queue benchmark (every figure from one run on one PostgreSQL, printed side by side), and
//! the fleet, media, rolling and chaos benchmarks.

use std::path::PathBuf;

use anyhow::Context;
use racklift_bench::{BenchDb, CpuPerJob, E2eRun, GraphilePeer, GraphileRun, Throughput, median};
use racklift_pgembed::EmbeddedPostgres;
use racklift_queue::WorkerConfig;

use crate::db;

mod chaos;
mod rolling;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(clap::Subcommand)]
enum BenchCommand {
    /// Queue throughput (raw-SQL bound, racklift, apalis-postgres, graphile-worker), idle pickup latency and worker
    /// RSS.
    Queue(QueueArgs),
    /// A simulated rack deployed at once by separate worker processes: wall time against the ideal, transactions
    /// per transition, CPU, RSS and dead letters.
    Fleet(FleetArgs),
    /// The media server (`racklift api`, a deployment's composed image) against nginx serving the same file,
    /// side by side: bytes/s and server CPU per GiB with N readers of random ranges and of sequential streams.
    Media(MediaArgs),
    /// Incus clusters rebooting at once (rolling reboots) driven by separate worker processes: wall time against
    /// the simulated hardware's ideal, writes per Incus step, CPU and the simulator's cluster audit.
    Rolling(rolling::RollingArgs),
    /// A rack under faults from outside: workers killed, stopped and cut off from PostgreSQL, PostgreSQL restarted
    /// and failed over, the API restarted, BMCs and Incus APIs failing, while every server deploys and every
    /// cluster reboots. Fails
    /// when a deployment or reboot failed or stuck, a mutation was stale, unfenced or concurrent, or a job lost.
    Chaos(chaos::ChaosArgs),
}

#[derive(clap::Args)]
struct MediaArgs {
    /// Readers at once.
    #[arg(long, default_value_t = 100)]
    readers: usize,
    /// Image size in bytes.
    #[arg(long, default_value_t = 512 << 20)]
    image_bytes: u64,
    /// Bytes per random range.
    #[arg(long, default_value_t = 1 << 20)]
    range_bytes: u64,
    /// Seconds per measured run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Runs per server and mode, alternating between the two; the median is reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Where the embedded benchmark database lives when DATABASE_URL is not set.
    #[arg(long, default_value = ".racklift/bench-postgres")]
    data_dir: PathBuf,
}

#[derive(clap::Args)]
struct FleetArgs {
    /// Servers deployed at once (plus one deployed alone first, for the ideal).
    #[arg(long, default_value_t = 1000)]
    servers: usize,
    /// `racklift worker` processes.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Jobs in flight per worker process.
    #[arg(long, default_value_t = 1000)]
    concurrency: usize,
    /// Simulated hardware time scale.
    #[arg(long, default_value_t = 0.01)]
    time_scale: f64,
    /// Installation image size in bytes (every server reads it through the API's media server).
    #[arg(long, default_value_t = 1024 * 1024)]
    image_bytes: u64,
    /// Keep the `racklift_bench_fleet` database afterwards (deployments, events, jobs) to look into; only useful
    /// with DATABASE_URL, since an embedded server is stopped at the end.
    #[arg(long)]
    keep_database: bool,
    /// Where the embedded benchmark database lives when DATABASE_URL is not set.
    #[arg(long, default_value = ".racklift/bench-postgres")]
    data_dir: std::path::PathBuf,
}

#[derive(clap::Args)]
struct QueueArgs {
    /// Jobs per throughput run.
    #[arg(long, default_value_t = 50_000)]
    jobs: u64,
    /// Repetitions of each throughput run; the median is reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Claim batch size, for the raw bound and racklift alike.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Connections issuing raw statements.
    #[arg(long, default_value_t = 4)]
    raw_clients: usize,
    /// racklift worker pools.
    #[arg(long, default_value_t = 2)]
    pools: usize,
    /// Jobs in flight per pool.
    #[arg(long, default_value_t = 1000)]
    concurrency: usize,
    /// Completion statements each racklift pool keeps in flight at once.
    #[arg(long, default_value_t = WorkerConfig::default().completer_flushes)]
    completer_flushes: usize,
    /// Idle pickup latency samples.
    #[arg(long, default_value_t = 200)]
    latency_samples: usize,
    /// Jobs held in flight by one worker process while its RSS is read.
    #[arg(long, default_value_t = 1000)]
    rss_in_flight: usize,
    /// apalis-postgres settings to try, as WORKERSxBATCH; the best is reported. The default holds the best
    /// settings found on the 2-core machines (a wider grid: 1-16 workers x batch 10-2000).
    #[arg(long, value_delimiter = ',', default_value = "4x1000,8x1000,8x500")]
    apalis_grid: Vec<String>,
    /// The graphile-worker peer's driver (Node.js; `ops/bench-queue` installs its dependency). When it is not
    /// installed the peer is skipped with a line saying so.
    #[arg(long, default_value = "crates/bench/peers/graphile-worker/bench.mjs")]
    graphile_driver: PathBuf,
    /// graphile-worker settings to try, as PROCESSESxCONCURRENCY (local queue 500, completion batch delay 0); the
    /// best is reported. 2x24 is the setting of the reference figure (31.6k jobs/s on these machines).
    #[arg(long, value_delimiter = ',', default_value = "2x24,4x24,2x50")]
    graphile_grid: Vec<String>,
    /// Where the embedded benchmark database lives when DATABASE_URL is not set.
    #[arg(long, default_value = ".racklift/bench-postgres")]
    data_dir: PathBuf,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Queue(args) => queue(args).await,
        BenchCommand::Fleet(args) => fleet(args).await,
        BenchCommand::Media(args) => media(args).await,
        BenchCommand::Rolling(args) => rolling::run(args).await,
        BenchCommand::Chaos(args) => chaos::run(args).await,
    }
}

async fn queue(args: QueueArgs) -> anyhow::Result<()> {
    let (admin_url, embedded) = match db::database_url_from_env() {
        Some(url) => (url, None),
        None => {
            let pg = EmbeddedPostgres::start(&args.data_dir)?;
            (pg.admin_url(), Some(pg))
        }
    };
    let result = queue_on(&admin_url, &args).await;
    if let Some(pg) = embedded {
        pg.stop()?;
    }
    result
}

async fn queue_on(admin_url: &str, args: &QueueArgs) -> anyhow::Result<()> {
    let dbs = BenchDb::new(admin_url);
    let (_, probe) = dbs.fresh("racklift_bench_probe", 2).await?;
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&probe)
        .await?;
    let fsync: String = sqlx::query_scalar("SHOW fsync").fetch_one(&probe).await?;
    let sync_commit: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&probe)
        .await?;
    probe.close().await;
    dbs.drop_db("racklift_bench_probe").await?;
    println!(
        "racklift bench queue: PostgreSQL {version} (fsync={fsync}, synchronous_commit={sync_commit}), {} jobs per run, \
         median of {} runs, batch {}",
        args.jobs, args.reps, args.batch
    );

    let mut rows: Vec<(String, f64, Option<CpuPerJob>)> = Vec::new();
    for keep_completed in [false, true] {
        let style = if keep_completed {
            "complete=move to jobs_completed (kept for retention, the default)"
        } else {
            "complete=DELETE (retention 0)"
        };
        let (mut raw, mut e2e) = (Vec::new(), Vec::new());
        for rep in 0..args.reps {
            let (_, pool) = dbs
                .fresh("racklift_bench_raw", (args.raw_clients + 2) as u32)
                .await?;
            raw.push(
                racklift_bench::raw_bound(&pool, args.jobs, args.raw_clients, args.batch, keep_completed)
                    .await?,
            );
            pool.close().await;
            let (_, pool) = dbs.fresh("racklift_bench_e2e", 16 * args.pools as u32).await?;
            let run = E2eRun {
                jobs: args.jobs,
                pools: args.pools,
                concurrency: args.concurrency,
                batch: args.batch,
                completer_flushes: args.completer_flushes,
                keep_completed,
            };
            e2e.push(racklift_bench::e2e::run(&pool, run).await?);
            pool.close().await;
            eprintln!(
                "  rep {}/{} ({style}): raw {:.0}/s, racklift {:.0}/s",
                rep + 1,
                args.reps,
                raw[rep].jobs_per_sec,
                e2e[rep].jobs_per_sec
            );
        }
        let (raw, raw_cpu) = median_run(&raw);
        let (e2e, e2e_cpu) = median_run(&e2e);
        rows.push((
            format!("raw-SQL bound, {} clients, {style}", args.raw_clients),
            raw,
            Some(raw_cpu),
        ));
        rows.push((
            format!(
                "racklift end to end, {} pools x {} in flight, {style}  ({:.0}% of raw)",
                args.pools,
                args.concurrency,
                100.0 * e2e / raw
            ),
            e2e,
            Some(e2e_cpu),
        ));
    }
    dbs.drop_db("racklift_bench_raw").await?;
    dbs.drop_db("racklift_bench_e2e").await?;

    let racklift_delete = rows[1].1;
    let racklift_default = rows[3].1;
    let versus = |peer: f64| {
        format!(
            "racklift/peer = {:.1}x DELETE, {:.1}x default",
            racklift_delete / peer,
            racklift_default / peer
        )
    };

    let grid = parse_grid(&args.apalis_grid, "apalis grid cells look like 4x1000")?;
    let url = dbs.fresh_empty("racklift_bench_apalis").await?;
    let (best, _, tried) = racklift_bench::apalis_best_of(&url, args.jobs, &grid).await?;
    for (run, result) in &tried {
        eprintln!(
            "  apalis {} workers x batch {}: {:.0}/s",
            run.workers, run.batch, result.jobs_per_sec
        );
    }
    // The best setting again, so its figure is a median like the others.
    let mut apalis: Vec<f64> = tried
        .iter()
        .filter(|(r, _)| *r == best)
        .map(|(_, r)| r.jobs_per_sec)
        .collect();
    for _ in 1..args.reps {
        let url = dbs.fresh_empty("racklift_bench_apalis").await?;
        apalis.push(racklift_bench::apalis_run(&url, &best).await?.jobs_per_sec);
    }
    dbs.drop_db("racklift_bench_apalis").await?;
    let apalis = median(&mut apalis);
    rows.push((
        format!(
            "apalis-postgres 1.0 at its best: {} workers x batch {}  ({})",
            best.workers,
            best.batch,
            versus(apalis)
        ),
        apalis,
        None,
    ));

    match GraphilePeer::find(&args.graphile_driver) {
        Ok(peer) => {
            let (best, runs) = graphile_best(&dbs, &peer, args).await?;
            let (rate, cpu) = median_run(&runs);
            rows.push((
                format!(
                    "graphile-worker 0.18 at its best: {} processes x {}, local queue {}  ({})",
                    best.processes,
                    best.concurrency,
                    best.local_queue,
                    versus(rate)
                ),
                rate,
                Some(cpu),
            ));
        }
        Err(why) => eprintln!("  graphile-worker peer skipped: {why}"),
    }

    println!();
    println!("{:>12}  {:>21}  what", "jobs/s", "CPU us/job: own / PG");
    for (label, rate, cpu) in &rows {
        let cpu = cpu.map_or(String::new(), |c| {
            format!("{:.1} / {:.1}", c.own_us, c.postgres_us)
        });
        println!("{rate:>12.0}  {cpu:>21}  {label}");
    }

    let (_, pool) = dbs.fresh("racklift_bench_latency", 8).await?;
    let latency = racklift_bench::measure_latency(&pool, args.latency_samples).await?;
    pool.close().await;
    dbs.drop_db("racklift_bench_latency").await?;
    println!();
    println!(
        "idle pickup latency (enqueue commit -> handler start, {} samples): p50 {:.2} ms, p99 {:.2} ms",
        latency.samples, latency.p50_ms, latency.p99_ms
    );

    let exe = std::env::current_exe().context("locating the racklift binary")?;
    let (url, pool) = dbs.fresh("racklift_bench_rss", 4).await?;
    let kib = racklift_bench::measure_worker_rss(&exe, &url, &pool, args.rss_in_flight).await?;
    pool.close().await;
    dbs.drop_db("racklift_bench_rss").await?;
    println!(
        "worker peak RSS with {} jobs in flight: {:.1} MiB",
        args.rss_in_flight,
        kib as f64 / 1024.0
    );
    Ok(())
}

/// The median jobs/s of a set of runs, and the medians of their CPU per job (each measured on its own).
fn median_run(runs: &[Throughput]) -> (f64, CpuPerJob) {
    let pick = |f: fn(&Throughput) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
    let cpu = CpuPerJob {
        own_us: pick(|t| t.cpu.own_us),
        postgres_us: pick(|t| t.cpu.postgres_us),
    };
    (pick(|t| t.jobs_per_sec), cpu)
}

/// Runs every cell of the graphile-worker grid `reps` times, round robin so that the machine's slow and fast
/// stretches fall on every cell alike, and returns the cell with the best median and its runs.
async fn graphile_best(
    dbs: &BenchDb,
    peer: &GraphilePeer,
    args: &QueueArgs,
) -> anyhow::Result<(GraphileRun, Vec<Throughput>)> {
    let cells: Vec<GraphileRun> = parse_grid(&args.graphile_grid, "graphile grid cells look like 2x24")?
        .into_iter()
        .map(|(processes, concurrency)| GraphileRun {
            jobs: args.jobs,
            processes,
            concurrency,
            local_queue: 500,
        })
        .collect();
    let mut runs: Vec<Vec<Throughput>> = vec![Vec::new(); cells.len()];
    for rep in 0..args.reps {
        for (cell, runs) in cells.iter().zip(&mut runs) {
            let url = dbs.fresh_empty("racklift_bench_graphile").await?;
            let result = peer.run(&url, *cell).await?;
            eprintln!(
                "  rep {}/{}: graphile-worker {} processes x {}: {:.0}/s",
                rep + 1,
                args.reps,
                cell.processes,
                cell.concurrency,
                result.jobs_per_sec
            );
            runs.push(result);
        }
    }
    dbs.drop_db("racklift_bench_graphile").await?;
    cells
        .into_iter()
        .zip(runs)
        .max_by(|a, b| median_run(&a.1).0.total_cmp(&median_run(&b.1).0))
        .context("the graphile grid is empty")
}

fn parse_grid(cells: &[String], shape: &'static str) -> anyhow::Result<Vec<(usize, usize)>> {
    cells
        .iter()
        .map(|cell| {
            let (w, b) = cell.split_once('x').context(shape)?;
            Ok((w.trim().parse()?, b.trim().parse()?))
        })
        .collect()
}

async fn media(args: MediaArgs) -> anyhow::Result<()> {
    use racklift_bench::media::{MediaRun, run};
    anyhow::ensure!(
        args.range_bytes > 0 && args.range_bytes < args.image_bytes,
        "--range-bytes must be between 1 and --image-bytes"
    );
    let (admin_url, embedded) = match db::database_url_from_env() {
        Some(url) => (url, None),
        None => {
            let pg = EmbeddedPostgres::start(&args.data_dir)?;
            (pg.admin_url(), Some(pg))
        }
    };
    let exe = std::env::current_exe().context("locating the racklift binary")?;
    let settings = MediaRun {
        readers: args.readers,
        image_bytes: args.image_bytes,
        range_bytes: args.range_bytes,
        duration: std::time::Duration::from_secs(args.seconds),
        reps: args.reps,
    };
    let result = run(&exe, &admin_url, settings).await;
    if let Some(pg) = embedded {
        pg.stop()?;
    }
    let r = result?;
    println!(
        "racklift bench media: {} readers, {} MiB image, {} KiB ranges, {} s per run, median of {}; {}",
        args.readers,
        args.image_bytes >> 20,
        args.range_bytes >> 10,
        args.seconds,
        args.reps,
        r.nginx_version
    );
    println!(
        "| readers | media listener MiB/s | API listener MiB/s | nginx MiB/s | media / nginx | API / nginx | media CPU s/GiB | API CPU s/GiB | nginx CPU s/GiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mib = |s: &racklift_bench::media::Served| s.bytes_per_sec / f64::from(1u32 << 20);
    for row in &r.rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} % | {:.0} % | {:.2} | {:.2} | {:.2} |",
            row.mode.name(),
            mib(&row.media_listener),
            mib(&row.api_listener),
            mib(&row.nginx),
            100.0 * row.media_listener.bytes_per_sec / row.nginx.bytes_per_sec,
            100.0 * row.api_listener.bytes_per_sec / row.nginx.bytes_per_sec,
            row.media_listener.cpu_secs_per_gib,
            row.api_listener.cpu_secs_per_gib,
            row.nginx.cpu_secs_per_gib
        );
    }
    Ok(())
}

async fn fleet(args: FleetArgs) -> anyhow::Result<()> {
    let (admin_url, embedded) = match db::database_url_from_env() {
        Some(url) => (url, None),
        None => {
            let pg = EmbeddedPostgres::start(&args.data_dir)?;
            (pg.admin_url(), Some(pg))
        }
    };
    let exe = std::env::current_exe().context("locating the racklift binary")?;
    let run = racklift_bench::fleet::FleetRun {
        servers: args.servers,
        workers: args.workers,
        time_scale: args.time_scale,
        image_bytes: args.image_bytes,
        concurrency: args.concurrency,
        keep_database: args.keep_database,
    };
    let result = racklift_bench::fleet::run(&exe, &admin_url, run).await;
    if let Some(pg) = embedded {
        pg.stop()?;
    }
    let r = result?;
    println!(
        "racklift bench fleet: {} servers at once, {} worker processes, time scale {}",
        r.servers, args.workers, args.time_scale
    );
    println!(
        "  ideal (slowest vendor alone):    {:.1} s  ({})",
        r.ideal_secs,
        r.ideal_by_vendor
            .iter()
            .map(|(vendor, secs)| format!("{vendor} {secs:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  fleet wall time:                 {:.1} s  ({:.2}x the ideal)",
        r.wall_secs,
        r.wall_secs / r.ideal_secs
    );
    println!("  deploy requests submitted in:    {:.1} s", r.submit_secs);
    println!(
        "  per deployment p50 / p90 / max:  {:.1} / {:.1} / {:.1} s",
        r.duration_secs[0], r.duration_secs[1], r.duration_secs[2]
    );
    println!(
        "  over own vendor's ideal:         {:.2}x / {:.2}x / {:.2}x",
        r.duration_ratio[0], r.duration_ratio[1], r.duration_ratio[2]
    );
    for (vendor, count, p50, max) in &r.by_vendor {
        println!("    {vendor:<11} {count:>4} deployments: {p50:.2}x / max {max:.2}x");
    }
    println!("  states that slowed most (vendor, state: alone -> fleet mean; fleet p50 / p90 / max):");
    for s in &r.slowed_states {
        println!(
            "    {:<11} {:<26} {:>6.1} s -> {:>6.1} s;  {:.1} / {:.1} / {:.1} s",
            s.vendor,
            s.state,
            s.lone_secs,
            s.fleet_mean_secs,
            s.fleet_p50_secs,
            s.fleet_p90_secs,
            s.fleet_max_secs
        );
    }
    println!(
        "  completed / failed:              {} / {}",
        r.completed, r.failed
    );
    println!("  dead letters:                    {}", r.dead_letters);
    println!(
        "  state transitions:               {}  ({:.1} per deployment)",
        r.transitions,
        r.transitions as f64 / r.servers.max(1) as f64
    );
    // A lease that found nothing new ends in a snooze, written in batches with other snoozes and completions.
    let polls = (r.leases - r.jobs).max(0);
    println!(
        "  step leases / jobs / wait polls: {} / {} / {}  ({:.1} polls per deployment)",
        r.leases,
        r.jobs,
        polls,
        polls as f64 / r.servers.max(1) as f64
    );
    println!(
        "  write transactions:              {}  ({:.2} per transition, wait polls' batched snoozes included)",
        r.write_transactions,
        r.write_transactions as f64 / r.transitions.max(1) as f64,
    );
    println!(
        "  committed transactions (reads too): {}  ({:.1} per deployment)",
        r.committed_transactions,
        r.committed_transactions as f64 / r.servers.max(1) as f64
    );
    println!("  worker CPU:                      {:.1} s", r.worker_cpu_secs);
    println!("  PostgreSQL CPU:                  {:.1} s", r.postgres_cpu_secs);
    println!(
        "  API + simulator CPU:             {:.1} s  (the benchmark process)",
        r.api_and_sim_cpu_secs
    );
    println!(
        "  worker peak RSS:                 {} MiB",
        r.worker_peak_rss_kib
            .iter()
            .map(|k| format!("{:.1}", *k as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(" / ")
    );
    Ok(())
}

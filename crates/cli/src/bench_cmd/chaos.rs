//! `racklift bench chaos`: the command line and the printed tally of `racklift_bench::chaos`. The command fails
//! when racklift did not hold (the tally's problems), after printing the tally either way.

use std::path::PathBuf;

use anyhow::Context;
use racklift_bench::chaos::{ChaosReport, ChaosRun, DatabaseChoice, FaultMix, Recovery};

use crate::db;

#[derive(clap::Args)]
pub(super) struct ChaosArgs {
    /// Simulated servers (mixed vendors), all deployed at once.
    #[arg(long, default_value_t = 50)]
    servers: usize,
    /// `racklift worker` processes; a killed one is replaced.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Seed of the fault schedule: the same seed, fault mix and rack size give the same schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulated hardware time scale (0.1: a deployment takes about 3 minutes).
    #[arg(long, default_value_t = 0.1)]
    time_scale: f64,
    /// `kill -9` of a worker holding jobs, a replacement started at once.
    #[arg(long, default_value_t = 3)]
    kills: usize,
    /// SIGSTOP of a worker holding jobs for longer than its lease, then SIGCONT.
    #[arg(long, default_value_t = 2)]
    stops: usize,
    /// A worker cut off from PostgreSQL (no FIN or RST) past its lease, then let through again: while clusters
    /// reboot, the one that just sent a member a reboot call.
    #[arg(long, default_value_t = 2)]
    partitions: usize,
    /// PostgreSQL stopped and kept down a few seconds (one of them 6 to 7 s), then started again.
    #[arg(long, default_value_t = 2)]
    pg_restarts: usize,
    /// The primary killed and its synchronous standby promoted behind HAProxy (0 or 1).
    #[arg(long, default_value_t = 1)]
    promotions: usize,
    /// `kill -9` of the `racklift api` process, then a new one on the same address.
    #[arg(long, default_value_t = 1)]
    api_restarts: usize,
    /// Transient faults on random servers clearing themselves after a few requests: BMC hang, 5xx, busy and
    /// connection reset, and Incus 5xx and connection reset while clusters reboot.
    #[arg(long, default_value_t = 40)]
    bmc_faults: usize,
    /// Servers whose eject lands after the reboot that ends install stage 1 (one power cycle repairs it).
    #[arg(long, default_value_t = 3)]
    late_ejects: usize,
    /// Clusters rebooted at once after the deployments (default: as many as the deployed servers fill; 0: no
    /// rolling phase).
    #[arg(long)]
    clusters: Option<usize>,
    /// Members per cluster.
    #[arg(long, default_value_t = 5)]
    members: usize,
    /// Jobs in flight per worker process.
    #[arg(long, default_value_t = 100)]
    concurrency: usize,
    /// The workers' lease time to live in milliseconds: a stopped worker stays stopped past it, and the long
    /// PostgreSQL outage outlasts it at the default.
    #[arg(long, default_value_t = 5000)]
    lease_ttl_ms: u64,
    /// Installation image size in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    image_bytes: u64,
    /// Keep the processes' logs here (by default they are kept only when the run finds a problem).
    #[arg(long)]
    logs_dir: Option<PathBuf>,
    /// Print the tally as JSON.
    #[arg(long)]
    json: bool,
}

pub(super) async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let faults = FaultMix {
        kills: args.kills,
        stops: args.stops,
        partitions: args.partitions,
        pg_restarts: args.pg_restarts,
        promotions: args.promotions,
        api_restarts: args.api_restarts,
        bmc_faults: args.bmc_faults,
        late_ejects: args.late_ejects,
    };
    // A run that stops PostgreSQL needs a server of its own; otherwise DATABASE_URL's is used when set.
    let choice = match db::database_url_from_env() {
        Some(admin_url) if !faults.touches_postgres() => DatabaseChoice::External { admin_url },
        Some(_) => {
            tracing::info!("DATABASE_URL is not used: the run stops PostgreSQL, so it runs one of its own");
            DatabaseChoice::Own
        }
        None => DatabaseChoice::Own,
    };
    let exe = std::env::current_exe().context("locating the racklift binary")?;
    let run = ChaosRun {
        servers: args.servers,
        workers: args.workers,
        seed: args.seed,
        time_scale: args.time_scale,
        faults,
        clusters: args.clusters,
        members: args.members,
        concurrency: args.concurrency,
        lease_ttl_ms: args.lease_ttl_ms,
        image_bytes: args.image_bytes,
        logs_dir: args.logs_dir,
    };
    // Interrupted, the run is dropped: its child processes are killed and its PostgreSQL stopped, rather than
    // left running behind this process.
    let interrupted = crate::worker_cmd::shutdown_on_signal();
    let report = tokio::select! {
        report = racklift_bench::chaos::run(&exe, choice, run) => report?,
        () = interrupted.cancelled() => {
            anyhow::bail!("interrupted: the run's processes and its PostgreSQL were stopped")
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    anyhow::ensure!(
        report.problems.is_empty(),
        "racklift did not hold under faults: {}",
        report.problems.join("; ")
    );
    Ok(())
}

fn print(r: &ChaosReport) {
    let s = &r.settings;
    println!(
        "racklift bench chaos: {} servers, {} workers, seed {}, time scale {}, lease TTL {} ms, {}",
        s.servers, s.workers, s.seed, s.time_scale, s.lease_ttl_ms, s.database
    );
    let p = &r.phases;
    let rolling = match (p.rolling_secs, p.rolling_estimate_secs) {
        (Some(secs), Some(est)) => format!(
            "rolling {secs:.1} s (estimate {est:.1} s){}",
            if p.rolling_timed_out { ", TIMED OUT" } else { "" }
        ),
        _ => "no rolling phase".into(),
    };
    println!(
        "  phases: deploy {:.1} s (estimate {:.1} s){}, {rolling}; total {:.1} s",
        p.deploy_secs,
        p.deploy_estimate_secs,
        if p.deploy_timed_out { ", TIMED OUT" } else { "" },
        p.total_secs
    );
    println!();
    println!("  {:<44} {:>8} {:>9}", "fault", "planned", "injected");
    for f in r.faults.iter().filter(|f| f.planned > 0 || f.injected > 0) {
        println!("  {:<44} {:>8} {:>9}", f.label, f.planned, f.injected);
    }
    println!();
    let d = &r.deployments;
    println!(
        "  deployments: {} / {} completed, failed {} expected / {} unexpected, {} canceled, {} stuck, {} not started",
        d.completed, d.servers, d.failed_expected, d.failed_unexpected, d.canceled, d.stuck, d.not_started
    );
    for o in &d.not_completed {
        println!(
            "    {} {}: {} [{}]",
            o.server,
            o.state,
            o.detail.as_deref().unwrap_or("-"),
            o.machine.as_deref().unwrap_or("-")
        );
        for event in &o.events {
            println!("      {event}");
        }
    }
    for l in &r.late_ejects {
        println!(
            "  late eject {} ({}): {}, {} power cycle(s), {}",
            l.server,
            l.personality,
            if l.took { "landed late" } else { "did not take" },
            l.power_cycles,
            l.state
        );
    }
    let c = &r.clusters;
    println!(
        "  cluster reboots: {} clusters of {}: {} completed, {} failed, {} canceled, {} stuck",
        c.clusters, c.members, c.completed, c.failed, c.canceled, c.stuck
    );
    for o in &c.not_completed {
        println!(
            "    {} {}: {} (server {}, step {})",
            o.cluster,
            o.status,
            o.reason.as_deref().unwrap_or("-"),
            o.failed_server.as_deref().unwrap_or("-"),
            o.failed_step.as_deref().unwrap_or("-")
        );
    }
    println!("  dead letters: {}", r.dead_letters.len());
    for l in &r.dead_letters {
        println!(
            "    job {} {} ({}, {}) {}: {}",
            l.job_id,
            l.kind,
            l.reason,
            l.error_class.as_deref().unwrap_or("-"),
            l.server.as_deref().unwrap_or("-"),
            l.message.as_deref().unwrap_or("-")
        );
    }
    let m = &r.mutations;
    println!(
        "  BMC mutations: {}, {} stale, {} unfenced; at most {} request(s) at once on one BMC",
        m.bmc_mutations, m.bmc_stale, m.bmc_unfenced, m.bmc_max_concurrent
    );
    println!(
        "  Incus mutations: {}, {} stale, {} unfenced (at most {} request(s) at once on one Incus API); cluster \
         audits: {} mutations, {} stale, {} unfenced, at most {} member(s) out at once",
        m.incus_mutations,
        m.incus_stale,
        m.incus_unfenced,
        m.incus_max_concurrent,
        m.cluster_mutations,
        m.cluster_stale,
        m.cluster_unfenced,
        m.max_evacuated_at_once
    );
    for e in &m.stale_examples {
        println!("    {e}");
    }
    for c in &m.bmc_concurrency {
        let seen = c
            .first_seen_secs
            .map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s"));
        let stop = c.during_stop_of.map_or_else(String::new, |pid| {
            format!(", while worker {pid} was stopped or cut off")
        });
        println!(
            "    {}: two requests at once first seen at {seen}{stop}; faults before: {}",
            c.server,
            if c.faults_before.is_empty() {
                "none".to_owned()
            } else {
                c.faults_before.join("; ")
            }
        );
    }
    let j = &r.jobs;
    println!(
        "  jobs: {} ids drawn = {} completed + {} dead + {} live + {} without a row; {} seen live, {} lost",
        j.ids_drawn,
        j.completed,
        j.dead,
        j.live,
        j.ids_without_row,
        j.observed,
        j.lost.len()
    );
    if !r.recoveries.is_empty() {
        println!();
        println!(
            "  {:>7}  {:<40} {:>7} {:>7} {:>7} {:>7} {:>9}  target",
            "at s", "recovery after", "down", "API", "write", "lease", "takeover"
        );
        for rec in &r.recoveries {
            print_recovery(rec);
        }
    }
    println!();
    if r.problems.is_empty() {
        println!("  racklift held: no problem");
    } else {
        println!("  problems:");
        for problem in &r.problems {
            println!("    {problem}");
        }
    }
    if let Some(logs) = &r.logs_dir {
        println!("  logs: {logs}");
    }
}

fn print_recovery(r: &Recovery) {
    let secs = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |s| format!("{s:.1}"));
    let kind = match r.held_jobs {
        Some(n) => format!("{} ({n} jobs held)", r.kind.label()),
        None => r.kind.label().to_owned(),
    };
    let target = match r.after_reboot_call_secs {
        Some(after) => format!("{}, {:.0} ms after a reboot call", r.target, after * 1000.0),
        None => r.target.clone(),
    };
    println!(
        "  {:>7.1}  {:<40} {:>7} {:>7} {:>7} {:>7} {:>9}  {}",
        r.at_secs,
        kind,
        secs(r.down_secs),
        secs(r.api_secs),
        secs(r.write_secs),
        secs(r.lease_secs),
        secs(r.takeover_secs),
        target
    );
}

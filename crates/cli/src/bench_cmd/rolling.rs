//! `racklift bench rolling`: the command line and the printed table of `racklift_bench::rolling`.

use std::path::PathBuf;

use anyhow::Context;
use racklift_pgembed::EmbeddedPostgres;

use crate::db;

#[derive(clap::Args)]
pub(super) struct RollingArgs {
    /// Clusters rebooting at once (plus one rebooted alone first).
    #[arg(long, default_value_t = 100)]
    clusters: usize,
    /// Members per cluster.
    #[arg(long, default_value_t = 10)]
    members: usize,
    /// `racklift worker` processes.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Jobs in flight per worker process.
    #[arg(long, default_value_t = 200)]
    concurrency: usize,
    /// Simulated hardware time scale (0.1: a member's evacuate, reboot and restore take 11 s, polled every 3 s).
    #[arg(long, default_value_t = 0.1)]
    time_scale: f64,
    /// Keep the `racklift_bench_rolling` database afterwards to look into; only useful with DATABASE_URL, since
    /// an embedded server is stopped at the end.
    #[arg(long)]
    keep_database: bool,
    /// Where the embedded benchmark database lives when DATABASE_URL is not set.
    #[arg(long, default_value = ".racklift/bench-postgres")]
    data_dir: PathBuf,
}

pub(super) async fn run(args: RollingArgs) -> anyhow::Result<()> {
    let (admin_url, embedded) = match db::database_url_from_env() {
        Some(url) => (url, None),
        None => {
            let pg = EmbeddedPostgres::start(&args.data_dir)?;
            (pg.admin_url(), Some(pg))
        }
    };
    let exe = std::env::current_exe().context("locating the racklift binary")?;
    let run = racklift_bench::rolling::RollingBench {
        clusters: args.clusters,
        members: args.members,
        workers: args.workers,
        concurrency: args.concurrency,
        time_scale: args.time_scale,
        keep_database: args.keep_database,
    };
    let result = racklift_bench::rolling::run(&exe, &admin_url, run).await;
    if let Some(pg) = embedded {
        pg.stop()?;
    }
    let r = result?;
    let [evacuate, reboot, restore, delay] = r.member_steps_secs;
    println!(
        "racklift bench rolling: {} clusters x {} members rebooting at once, {} worker processes, time scale {}",
        r.clusters, r.members, args.workers, args.time_scale
    );
    println!(
        "  set-up (boot installed, register, form, create):  {:.1} s",
        r.setup_secs
    );
    println!(
        "  ideal (members in sequence):     {:.1} s  (per member: evacuate {evacuate:.1} + reboot {reboot:.1} + \
         restore {restore:.1} + post-restore delay {delay:.1} s; runs poll every {} s)",
        r.ideal_secs, r.poll_interval_secs
    );
    println!(
        "  one cluster alone:               {:.1} s  ({:.2}x the ideal)",
        r.alone_secs,
        r.alone_secs / r.ideal_secs
    );
    println!(
        "  all clusters, wall time:         {:.1} s  ({:.2}x the ideal, {:.2}x alone)",
        r.wall_secs,
        r.wall_secs / r.ideal_secs,
        r.wall_secs / r.alone_secs
    );
    println!("  reboot requests submitted in:    {:.1} s", r.submit_secs);
    println!(
        "  per cluster p50 / p90 / max:     {:.1} / {:.1} / {:.1} s",
        r.duration_secs[0], r.duration_secs[1], r.duration_secs[2]
    );
    println!(
        "  completed / not completed:       {} / {}",
        r.completed, r.not_completed
    );
    println!("  dead letters:                    {}", r.dead_letters);
    let steps = r.steps().max(1) as f64;
    println!(
        "  Incus steps:                     {}  (evacuate, reboot, restore per member)",
        r.steps()
    );
    println!(
        "  run saves (cluster_operations):  {}  ({:.2} per step)",
        r.run_saves,
        r.run_saves as f64 / steps
    );
    println!(
        "  step leases:                     {}  ({:.2} per step)",
        r.leases,
        r.leases as f64 / steps
    );
    println!(
        "  write transactions:              {}  ({:.2} per step)",
        r.write_transactions,
        r.write_transactions as f64 / steps
    );
    println!(
        "  committed transactions (reads too): {}  ({:.1} per step)",
        r.committed_transactions,
        r.committed_transactions as f64 / steps
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
    let a = &r.audit;
    println!(
        "  audit: max out at once {} per cluster, {} mutations, {} unfenced, {} stale, {} / {} members \
         evacuated, rebooted and restored once",
        a.max_out_at_once,
        a.mutations,
        a.unfenced_mutations,
        a.stale_mutations,
        a.members_rolled_once,
        r.clusters * r.members
    );
    Ok(())
}

//! Probes apalis-postgres 1.0 on a small grid and prints jobs/s per setting and the best one.
//!
//! ```text
//! DATABASE_URL=postgres://... [APALIS_PROBE_JOBS=20000] [APALIS_PROBE_GRID=1x10,4x100] \
//!     cargo run --release -p racklift-bench-apalis --example apalis_probe
//! ```
//!
//! `DATABASE_URL` must name a database that apalis may run its migrations in. Build with
//! `SQLX_OFFLINE=true` when `DATABASE_URL` is set (see the crate docs).

use racklift_bench_apalis::best_of;

/// Workers x batch. Batch 10 is slow (a 1 x 10 run of 20,000 jobs took about 94 s on the project's
/// 2-core machine under load); apalis peaks at batch 500-1000 with 4-8 workers.
const DEFAULT_GRID: &[(usize, usize)] = &[
    (1, 10),
    (1, 100),
    (2, 100),
    (4, 10),
    (4, 100),
    (4, 500),
    (4, 1000),
    (8, 100),
    (8, 500),
    (8, 1000),
];

fn parse_grid(spec: &str) -> Result<Vec<(usize, usize)>, String> {
    spec.split(',')
        .map(|cell| {
            let (w, b) = cell
                .trim()
                .split_once('x')
                .ok_or_else(|| format!("bad grid cell {cell:?}"))?;
            let w = w
                .parse()
                .map_err(|e| format!("bad worker count in {cell:?}: {e}"))?;
            let b = b
                .parse()
                .map_err(|e| format!("bad batch size in {cell:?}: {e}"))?;
            Ok((w, b))
        })
        .collect()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                // sqlx warns about every statement over 1 s and about the ROLLBACK apalis issues
                // when a worker stops; neither matters for the figures.
                "warn,sqlx::query=error,sqlx::postgres::notice=error".into()
            }),
        )
        .init();
    let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set")?;
    let jobs: u64 = match std::env::var("APALIS_PROBE_JOBS") {
        Ok(v) => v.parse()?,
        Err(_) => 20_000,
    };
    let grid = match std::env::var("APALIS_PROBE_GRID") {
        Ok(spec) => parse_grid(&spec)?,
        Err(_) => DEFAULT_GRID.to_vec(),
    };

    println!("apalis-postgres 1.0, {jobs} no-op jobs per run, no-op handler");
    println!(
        "{:>7} {:>6} {:>10} {:>10} {:>12}",
        "workers", "batch", "jobs/s", "elapsed", "enqueue/s"
    );
    let (best, best_result, rows) = best_of(&url, jobs, &grid).await?;
    for (run, result) in &rows {
        println!(
            "{:>7} {:>6} {:>10.0} {:>9.2}s {:>12.0}",
            run.workers,
            run.batch,
            result.jobs_per_sec,
            result.elapsed.as_secs_f64(),
            result.enqueue_per_sec
        );
    }
    println!(
        "best: {} workers x batch {}: {:.0} jobs/s ({} executed in {:.2}s), push_bulk {:.0} jobs/s",
        best.workers,
        best.batch,
        best_result.jobs_per_sec,
        best_result.executed,
        best_result.elapsed.as_secs_f64(),
        best_result.enqueue_per_sec
    );
    Ok(())
}

//! The raw-SQL bound: racklift's exact claim and complete statements from a few connections, nothing around them.

use std::time::{Duration, Instant};

use racklift_queue::{Fence, JobId, LEASE_SQL, complete_sql};
use sqlx::{PgPool, Row};

use crate::proc_stats::{CpuMeter, Throughput};
use crate::{BenchError, seed_jobs};

/// Drains `jobs` pre-inserted no-op jobs with `clients` connections claiming `batch` at a time.
pub async fn run(
    pool: &PgPool,
    jobs: u64,
    clients: usize,
    batch: usize,
    keep_completed: bool,
) -> Result<Throughput, BenchError> {
    seed_jobs(pool, "noop", jobs, &serde_json::json!({})).await?;
    let cpu = CpuMeter::start();
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let pool = pool.clone();
        tasks.spawn(async move {
            let mut conn = pool.acquire().await?;
            let holder = format!("raw-{client}");
            let mut done = 0u64;
            loop {
                let rows = sqlx::query(LEASE_SQL)
                    .bind(["noop"].as_slice())
                    .bind(batch as i64)
                    .bind(30_000i64)
                    .bind(&holder)
                    .fetch_all(&mut *conn)
                    .await?;
                if rows.is_empty() {
                    return Ok::<u64, sqlx::Error>(done);
                }
                let ids: Vec<JobId> = rows.iter().map(|r| r.get("id")).collect();
                let fences: Vec<Fence> = rows.iter().map(|r| r.get("fence")).collect();
                let completed: Vec<JobId> = sqlx::query_scalar(complete_sql(keep_completed))
                    .bind(&ids)
                    .bind(&fences)
                    .fetch_all(&mut *conn)
                    .await?;
                done += completed.len() as u64;
            }
        });
    }
    let mut total = 0;
    while let Some(joined) = tasks.join_next().await {
        total += joined.map_err(|e| BenchError::Stalled(format!("raw client panicked: {e}")))??;
    }
    let elapsed = start.elapsed().max(Duration::from_micros(1));
    let cpu = cpu.per_job(jobs);
    if total != jobs {
        return Err(BenchError::Stalled(format!(
            "raw bound completed {total} of {jobs} jobs"
        )));
    }
    Ok(Throughput {
        jobs_per_sec: jobs as f64 / elapsed.as_secs_f64(),
        cpu,
    })
}

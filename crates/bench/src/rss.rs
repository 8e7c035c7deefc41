//! Worker memory: a real `racklift worker` process holding `in_flight` sleeping jobs; its peak RSS is read from
//! the kernel (`VmHWM`), so it counts everything the process ever touched.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::proc_stats::peak_rss_kib;
use crate::{BenchError, seed_jobs};

/// Returns peak RSS in KiB of a worker while `in_flight` jobs are running at once.
pub async fn measure(racklift: &Path, url: &str, pool: &PgPool, in_flight: usize) -> Result<u64, BenchError> {
    seed_jobs(
        pool,
        "sleep",
        in_flight as u64,
        &serde_json::json!({ "ms": 4000 }),
    )
    .await?;
    let mut child = tokio::process::Command::new(racklift)
        .args([
            "worker",
            "--concurrency",
            &in_flight.to_string(),
            "--batch",
            "500",
        ])
        .env("DATABASE_URL", url)
        // Several workers run at once: each serves metrics on a free port rather than all on the default.
        .env("RACKLIFT_METRICS_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(BenchError::Process)?;
    let pid = child
        .id()
        .ok_or_else(|| BenchError::Stalled("worker exited at once".into()))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let running: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'running'")
            .fetch_one(pool)
            .await?;
        if running as usize >= in_flight {
            break;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Stalled(format!(
                "only {running} of {in_flight} jobs were running after 60 s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let hwm_kib = peak_rss_kib(pid);
    if hwm_kib == 0 {
        return Err(BenchError::Stalled(format!(
            "could not read the peak RSS of worker process {pid}"
        )));
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    Ok(hwm_kib)
}

//! racklift end to end: worker pools with no-op handlers drain pre-inserted jobs; the clock stops when the last
//! completion is durable (the jobs table is empty, or has no live rows when completed rows are kept).

use std::time::{Duration, Instant};

use racklift_queue::{
    HandlerResult, JobContext, Outcome, Queue, QueueConfig, Registry, WorkerConfig, WorkerPool,
};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::{BenchError, seed_jobs};

#[derive(Debug, Clone, Copy)]
pub struct E2eRun {
    pub jobs: u64,
    /// Worker pools (each one what a `racklift worker` process runs).
    pub pools: usize,
    pub concurrency: usize,
    pub batch: usize,
    pub keep_completed: bool,
}

async fn noop(_ctx: JobContext) -> HandlerResult {
    Ok(Outcome::Complete)
}

pub async fn run(pool: &PgPool, run: E2eRun) -> Result<f64, BenchError> {
    seed_jobs(pool, "noop", run.jobs, &serde_json::json!({})).await?;
    let retention = if run.keep_completed {
        Duration::from_secs(3600)
    } else {
        Duration::ZERO
    };
    let queue = Queue::new(
        pool.clone(),
        QueueConfig {
            completed_retention: retention,
            ..QueueConfig::default()
        },
    );
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let mut pools = tokio::task::JoinSet::new();
    for _ in 0..run.pools {
        let config = WorkerConfig {
            concurrency: run.concurrency,
            batch: run.batch,
            ..WorkerConfig::default()
        };
        let worker = WorkerPool::new(queue.clone(), Registry::new().register("noop", noop), config);
        pools.spawn(worker.run(shutdown.clone()));
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let live: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('queued', 'running'))")
                .fetch_one(pool)
                .await?;
        if !live {
            break;
        }
        if Instant::now() > deadline {
            shutdown.cancel();
            return Err(BenchError::Stalled(
                "racklift end-to-end run did not drain in 600 s".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = start.elapsed();
    shutdown.cancel();
    while pools.join_next().await.is_some() {}
    Ok(run.jobs as f64 / elapsed.as_secs_f64())
}

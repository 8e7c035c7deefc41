//! racklift end to end: worker pools with no-op handlers drain pre-inserted jobs; the clock stops when the last
//! completion is durable: once every job's handler has run, the pools are shut down, and a pool returns only after
//! its outcomes are written. Afterwards (off the clock) the table is checked to hold no live job.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use racklift_queue::{
    HandlerResult, JobContext, Outcome, Queue, QueueConfig, Registry, WorkerConfig, WorkerPool,
};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::proc_stats::{CpuMeter, Throughput};
use crate::{BenchError, seed_jobs};

#[derive(Debug, Clone, Copy)]
pub struct E2eRun {
    pub jobs: u64,
    /// Worker pools (each one what a `racklift worker` process runs).
    pub pools: usize,
    pub concurrency: usize,
    pub batch: usize,
    /// Completion statements in flight per pool.
    pub completer_flushes: usize,
    pub keep_completed: bool,
}

/// Counts handler runs so the driver knows when every job has run, without polling the database.
#[derive(Clone)]
struct Counting {
    ran: Arc<AtomicU64>,
    target: u64,
    all_ran: Arc<Notify>,
}

impl Counting {
    async fn noop(self, _ctx: JobContext) -> HandlerResult {
        if self.ran.fetch_add(1, Ordering::AcqRel) + 1 == self.target {
            self.all_ran.notify_one();
        }
        Ok(Outcome::Complete)
    }
}

pub async fn run(pool: &PgPool, run: E2eRun) -> Result<Throughput, BenchError> {
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
    let counting = Counting {
        ran: Arc::new(AtomicU64::new(0)),
        target: run.jobs,
        all_ran: Arc::new(Notify::new()),
    };
    let shutdown = CancellationToken::new();
    let cpu = CpuMeter::start();
    let start = Instant::now();
    let mut pools = tokio::task::JoinSet::new();
    for _ in 0..run.pools {
        let config = WorkerConfig {
            concurrency: run.concurrency,
            batch: run.batch,
            completer_flushes: run.completer_flushes,
            ..WorkerConfig::default()
        };
        let counting = counting.clone();
        let registry = Registry::new().register("noop", move |ctx| counting.clone().noop(ctx));
        let worker = WorkerPool::new(queue.clone(), registry, config);
        pools.spawn(worker.run(shutdown.clone()));
    }
    if tokio::time::timeout(Duration::from_secs(600), counting.all_ran.notified())
        .await
        .is_err()
    {
        shutdown.cancel();
        return Err(BenchError::Stalled(
            "racklift end-to-end run did not drain in 600 s".into(),
        ));
    }
    shutdown.cancel();
    while pools.join_next().await.is_some() {}
    let elapsed = start.elapsed();
    let cpu = cpu.per_job(run.jobs);
    let live: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')")
        .fetch_one(pool)
        .await?;
    if live != 0 {
        return Err(BenchError::Stalled(format!(
            "racklift end-to-end run left {live} live jobs after its pools drained"
        )));
    }
    Ok(Throughput {
        jobs_per_sec: run.jobs as f64 / elapsed.as_secs_f64(),
        cpu,
    })
}

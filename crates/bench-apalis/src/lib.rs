//! apalis-postgres 1.0 as a benchmark peer for `racklift bench queue`.
//!
//! apalis was rejected for racklift's core queue (see `reference/queues.md` §8); it lives here only
//! so that the queue benchmark can print apalis's throughput on the same PostgreSQL, at apalis's
//! best settings, next to racklift's own figures.
//!
//! One run ([`run`]) is a burn-down:
//!
//! 1. connect a fresh pool, run apalis's own migrations (schema `apalis`, extensions `hstore` and
//!    `pgcrypto`, sqlx's `_sqlx_migrations` table in the connection's default schema), and empty
//!    `apalis.jobs` and `apalis.workers`;
//! 2. enqueue `jobs` no-op jobs with `push_bulk` (timed: `enqueue_per_sec`), then `ANALYZE` the
//!    table so every run starts from the same planner statistics (not timed);
//! 3. start `workers` apalis workers, each its own tokio task with the given batch size, and time
//!    until the handler has run `jobs` times (an [`AtomicU64`] counted in the handler);
//! 4. stop every worker gracefully (apalis flushes its buffered acks on the way out), wait for the
//!    tasks to end, and check in `apalis.jobs` that every job is `Done` and none is left.
//!
//! Because apalis's migrations create a `_sqlx_migrations` table, point `database_url` at a
//! database of its own, not at racklift's.
//!
//! Building note: apalis-postgres checks its SQL with `sqlx::query_file!`. With `DATABASE_URL` set
//! in the environment *at compile time* those macros try to verify against that database; build
//! with `SQLX_OFFLINE=true` (or without `DATABASE_URL`) so they use the crate's bundled metadata.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use apalis::prelude::{BoxDynError, Data, TaskSink, TaskSinkError, WorkerBuilder, WorkerContext};
use apalis_postgres::{Config, PostgresStorage};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The apalis queue (its `job_type`) used by the benchmark.
pub const QUEUE: &str = "racklift-bench-apalis";

/// Jobs per `push_bulk` call (one multi-row INSERT and one transaction each).
const PUSH_CHUNK: u64 = 10_000;

/// A run fails if no job completes for this long.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long stopped workers get to flush their acks and exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The settings of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApalisRun {
    /// Number of apalis workers, each a separate tokio task with its own fetch loop.
    pub workers: usize,
    /// apalis `Config::batch_size`: jobs claimed per fetch.
    pub batch: usize,
    /// Jobs enqueued and then drained.
    pub jobs: u64,
}

/// The figures of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ApalisResult {
    /// `executed / elapsed`.
    pub jobs_per_sec: f64,
    /// From the workers' start until the handler had run `jobs` times.
    pub elapsed: Duration,
    /// Handler executions counted (equals `jobs` on success; more would mean double execution).
    pub executed: u64,
    /// `jobs / time of the push_bulk calls`.
    pub enqueue_per_sec: f64,
}

/// Why a benchmark run failed.
#[derive(Debug, thiserror::Error)]
pub enum ApalisBenchError {
    /// The settings cannot be run.
    #[error("invalid benchmark settings: {0}")]
    InvalidSettings(String),
    /// A query of the benchmark itself (connect, truncate, analyze, verify) failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// apalis's migrations failed.
    #[error("apalis migrations failed: {0}")]
    Setup(#[source] apalis_postgres::Error),
    /// `push_bulk` failed.
    #[error("apalis push_bulk failed: {0}")]
    Push(#[source] TaskSinkError<apalis_postgres::Error>),
    /// A worker ended with an error, panicked, or did not stop in time.
    #[error("apalis worker {worker}: {message}")]
    Worker {
        /// The worker's name.
        worker: String,
        /// What went wrong.
        message: String,
    },
    /// No job completed for [`STALL_TIMEOUT`].
    #[error("apalis stalled: {executed} of {expected} jobs executed, no progress for {stalled_for:?}")]
    Stalled {
        /// Handler executions so far.
        executed: u64,
        /// Jobs enqueued.
        expected: u64,
        /// How long there was no progress.
        stalled_for: Duration,
    },
    /// After the run, `apalis.jobs` did not show every job as done.
    #[error("apalis.jobs after the run: {done} done, {not_done} not done, expected {expected} done")]
    NotDrained {
        /// Rows with status `Done`.
        done: i64,
        /// Rows with any other status.
        not_done: i64,
        /// Jobs enqueued.
        expected: u64,
    },
    /// The handler ran more often than jobs were enqueued.
    #[error("apalis executed {executed} times for {expected} jobs")]
    DuplicateExecution {
        /// Handler executions counted.
        executed: u64,
        /// Jobs enqueued.
        expected: u64,
    },
}

/// Shared between the handler and the benchmark driver.
struct Counter {
    executed: AtomicU64,
    target: u64,
    done: Notify,
}

/// The no-op job handler: counts, and signals when the target is reached.
async fn noop(_job: u64, counter: Data<Arc<Counter>>) -> Result<(), BoxDynError> {
    let n = counter.executed.fetch_add(1, Ordering::Relaxed) + 1;
    if n == counter.target {
        counter.done.notify_one();
    }
    Ok(())
}

/// A spawned worker: its context (to stop it) and its task.
struct RunningWorker {
    ctx: WorkerContext,
    handle: JoinHandle<Result<(), apalis::prelude::WorkerError>>,
}

/// Runs apalis-postgres against `database_url` (a database this function may freely create tables
/// in: it runs apalis's own migrations there). Pushes `jobs` no-op jobs with `push_bulk`, then
/// starts `workers` workers with the given batch size and measures the time until every job has
/// been executed (counted with an [`AtomicU64`] in the handler); after stopping the workers it
/// checks in apalis's table that none remain pending. Returns the figures.
///
/// Must be called within a tokio runtime (multi-threaded for the workers to run in parallel).
pub async fn run(database_url: &str, run: &ApalisRun) -> Result<ApalisResult, ApalisBenchError> {
    if run.workers == 0 || run.batch == 0 || run.jobs == 0 {
        return Err(ApalisBenchError::InvalidSettings(format!(
            "workers, batch and jobs must all be positive (got {run:?})"
        )));
    }
    // Each worker holds at most one connection for its fetch/ack loop, plus one for a heartbeat.
    let max_connections = u32::try_from(run.workers.saturating_mul(2).saturating_add(2))
        .unwrap_or(u32::MAX)
        .max(20);
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .connect(database_url)
        .await?;
    let result = run_with_pool(&pool, run).await;
    pool.close().await;
    result
}

async fn run_with_pool(pool: &PgPool, run: &ApalisRun) -> Result<ApalisResult, ApalisBenchError> {
    PostgresStorage::setup(pool)
        .await
        .map_err(ApalisBenchError::Setup)?;
    sqlx::query("TRUNCATE apalis.jobs, apalis.workers")
        .execute(pool)
        .await?;

    let config = Config::default().queue(QUEUE).batch_size(run.batch);
    let storage: PostgresStorage<u64> = PostgresStorage::new(pool).with_config(config);

    // Enqueue.
    let mut sink = storage.clone();
    let push_start = Instant::now();
    let mut next = 0u64;
    while next < run.jobs {
        let end = run.jobs.min(next + PUSH_CHUNK);
        sink.push_bulk((next..end).collect())
            .await
            .map_err(ApalisBenchError::Push)?;
        next = end;
    }
    let push_elapsed = push_start.elapsed();
    sqlx::query("ANALYZE apalis.jobs").execute(pool).await?;

    // Drain.
    let counter = Arc::new(Counter {
        executed: AtomicU64::new(0),
        target: run.jobs,
        done: Notify::new(),
    });
    // Unique per run, so that apalis never sees a worker name it already knows.
    let run_tag = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or_default();
    let start = Instant::now();
    let mut running = Vec::with_capacity(run.workers);
    for i in 0..run.workers {
        let ctx = WorkerContext::new(&format!("racklift-bench-apalis-{run_tag}-{i}"));
        let worker = WorkerBuilder::new(&ctx)
            .backend(storage.clone())
            .data(counter.clone())
            .build(noop);
        running.push(RunningWorker {
            ctx,
            handle: tokio::spawn(worker.run()),
        });
    }

    let waited = wait_for_target(&counter, &running).await;
    let elapsed = start.elapsed();
    let stopped = stop_all(running).await;
    waited?;
    stopped?;

    let executed = counter.executed.load(Ordering::Relaxed);
    if executed > run.jobs {
        return Err(ApalisBenchError::DuplicateExecution {
            executed,
            expected: run.jobs,
        });
    }
    verify_drained(pool, run.jobs).await?;

    Ok(ApalisResult {
        jobs_per_sec: executed as f64 / elapsed.as_secs_f64(),
        elapsed,
        executed,
        enqueue_per_sec: run.jobs as f64 / push_elapsed.as_secs_f64(),
    })
}

/// Waits until the handler has run `target` times, failing if a worker ends early or progress
/// stops for [`STALL_TIMEOUT`].
async fn wait_for_target(counter: &Counter, running: &[RunningWorker]) -> Result<(), ApalisBenchError> {
    let mut last = 0u64;
    let mut last_progress = Instant::now();
    loop {
        let executed = counter.executed.load(Ordering::Relaxed);
        if executed >= counter.target {
            return Ok(());
        }
        if executed != last {
            last = executed;
            last_progress = Instant::now();
        } else if last_progress.elapsed() >= STALL_TIMEOUT {
            return Err(ApalisBenchError::Stalled {
                executed,
                expected: counter.target,
                stalled_for: last_progress.elapsed(),
            });
        }
        if let Some(w) = running.iter().find(|w| w.handle.is_finished()) {
            return Err(ApalisBenchError::Worker {
                worker: w.ctx.name().to_owned(),
                message: "ended before every job was executed".to_owned(),
            });
        }
        // Woken at once when the target is reached; the timeout only drives the checks above.
        let _ = tokio::time::timeout(Duration::from_millis(250), counter.done.notified()).await;
    }
}

/// Stops every worker gracefully and waits for its task; a worker that does not end within
/// [`STOP_TIMEOUT`] is aborted, so that nothing keeps polling the database after a run.
async fn stop_all(running: Vec<RunningWorker>) -> Result<(), ApalisBenchError> {
    for w in &running {
        // Fails only for a worker that never started or already ended; joining below tells which.
        let _ = w.ctx.stop();
    }
    let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
    let mut first_error = None;
    for mut w in running {
        let worker = w.ctx.name().to_owned();
        let outcome = match tokio::time::timeout_at(deadline, &mut w.handle).await {
            Ok(Ok(Ok(()))) => None,
            Ok(Ok(Err(e))) => Some(e.to_string()),
            Ok(Err(join)) => Some(format!("task failed: {join}")),
            Err(_) => {
                w.handle.abort();
                let _ = w.handle.await;
                Some(format!("did not stop within {STOP_TIMEOUT:?}; aborted"))
            }
        };
        if let Some(message) = outcome {
            first_error.get_or_insert(ApalisBenchError::Worker { worker, message });
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Checks in `apalis.jobs` that every job is `Done` and none is left pending or in flight.
async fn verify_drained(pool: &PgPool, expected: u64) -> Result<(), ApalisBenchError> {
    let (done, not_done): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'Done'), count(*) FILTER (WHERE status <> 'Done') \
         FROM apalis.jobs WHERE job_type = $1",
    )
    .bind(QUEUE)
    .fetch_one(pool)
    .await?;
    if not_done != 0 || u64::try_from(done).ok() != Some(expected) {
        return Err(ApalisBenchError::NotDrained {
            done,
            not_done,
            expected,
        });
    }
    Ok(())
}

/// Runs every `(workers, batch)` setting of `grid` with `jobs` jobs, one after the other, and
/// returns the best run (highest jobs/s) with its settings, plus all rows in grid order, so the
/// caller can print "apalis at its best settings".
pub async fn best_of(
    database_url: &str,
    jobs: u64,
    grid: &[(usize, usize)],
) -> Result<(ApalisRun, ApalisResult, Vec<(ApalisRun, ApalisResult)>), ApalisBenchError> {
    let mut rows = Vec::with_capacity(grid.len());
    for &(workers, batch) in grid {
        let settings = ApalisRun { workers, batch, jobs };
        let result = run(database_url, &settings).await?;
        tracing::info!(
            workers,
            batch,
            jobs,
            jobs_per_sec = result.jobs_per_sec,
            elapsed_ms = result.elapsed.as_millis() as u64,
            "apalis run"
        );
        rows.push((settings, result));
    }
    let (best_run, best_result) = rows
        .iter()
        .copied()
        .max_by(|a, b| a.1.jobs_per_sec.total_cmp(&b.1.jobs_per_sec))
        .ok_or_else(|| ApalisBenchError::InvalidSettings("the grid is empty".to_owned()))?;
    Ok((best_run, best_result, rows))
}

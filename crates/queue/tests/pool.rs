//! The worker pool against a real PostgreSQL: wake-ups, heartbeats, lease loss, draining, panics.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use racklift_queue::{
    Backoff, Failure, HandlerResult, JobContext, NewJob, Outcome, Queue, QueueConfig, Registry, WorkerConfig,
    WorkerPool,
};
use racklift_testdb::{TestDb, wait_for};
use tokio_util::sync::CancellationToken;

fn short_lease(pool: &sqlx::PgPool) -> Queue {
    Queue::new(
        pool.clone(),
        QueueConfig {
            lease_ttl: Duration::from_millis(600),
            backoff: Backoff {
                base: Duration::from_millis(10),
                cap: Duration::from_millis(50),
            },
            ..QueueConfig::default()
        },
    )
}

/// A pool whose fallback poll and rescuer are slow enough that only notifications and heartbeats matter.
fn config(concurrency: usize) -> WorkerConfig {
    WorkerConfig {
        concurrency,
        batch: 10,
        poll_interval: Duration::from_secs(60),
        rescue_interval: Duration::from_secs(60),
        ..WorkerConfig::default()
    }
}

fn sleeper(ms: u64) -> NewJob {
    NewJob::new("sleep", &serde_json::json!({ "ms": ms })).unwrap()
}

async fn sleep_handler(ctx: JobContext) -> HandlerResult {
    let ms = ctx.job.payload::<serde_json::Value>().unwrap()["ms"]
        .as_u64()
        .unwrap();
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(Outcome::Complete),
        _ = ctx.cancel.cancelled() => Err(Failure::retryable("cancelled")),
    }
}

async fn count(pool: &sqlx::PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pool_is_woken_by_notify_not_by_its_poll() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let registry = Registry::new().register("k", move |_ctx: JobContext| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { HandlerResult::Ok(Outcome::Complete) }
    });
    let shutdown = CancellationToken::new();
    let pool = tokio::spawn(WorkerPool::new(q.clone(), registry, config(4)).run(shutdown.clone()));
    // The pool's first fetch finds nothing; from then on only a notification (poll is 60 s) can wake it.
    wait_for(Duration::from_secs(5), "listener to connect", || async {
        count(
            &db.pool,
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'",
        )
        .await
            > 0
    })
    .await;
    for _ in 0..5 {
        enqueue(&q, &job("k")).await;
    }
    wait_for(Duration::from_secs(10), "five jobs to run", || async {
        ran.load(Ordering::SeqCst) == 5
    })
    .await;
    wait_for(Duration::from_secs(10), "completions to be written", || async {
        count(&db.pool, "SELECT count(*) FROM jobs_completed").await == 5
    })
    .await;
    shutdown.cancel();
    pool.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_long_job_leased_past_its_ttl() {
    let db = TestDb::new().await;
    let q = short_lease(&db.pool);
    let id = enqueue(&q, &sleeper(2_000)).await.id();
    let shutdown = CancellationToken::new();
    let pool = tokio::spawn(
        WorkerPool::new(
            q.clone(),
            Registry::new().register("sleep", sleep_handler),
            config(1),
        )
        .run(shutdown.clone()),
    );
    // While it sleeps for more than three lease lifetimes, a rescuer keeps looking and finds nothing to rescue.
    let mut rescued = 0;
    while state_of(&db.pool, id).await.as_deref() != Some("completed") {
        let r = q.rescue(10).await.unwrap();
        rescued += r.retried + r.dead_lettered;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rescued, 0);
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM jobs_completed WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 1);
    shutdown.cancel();
    pool.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_cancels_the_handler_and_its_outcome_is_discarded() {
    let db = TestDb::new().await;
    let q = short_lease(&db.pool);
    let id = enqueue(&q, &sleeper(60_000)).await.id();
    let cancelled = Arc::new(AtomicUsize::new(0));
    let seen = cancelled.clone();
    let registry = Registry::new().register("sleep", move |ctx: JobContext| {
        let seen = seen.clone();
        async move {
            ctx.cancel.cancelled().await;
            seen.fetch_add(1, Ordering::SeqCst);
            // A stale holder trying to report success anyway must not complete the job.
            HandlerResult::Ok(Outcome::Complete)
        }
    });
    let shutdown = CancellationToken::new();
    let pool = tokio::spawn(WorkerPool::new(q.clone(), registry, config(1)).run(shutdown.clone()));
    wait_for(Duration::from_secs(5), "the job to be leased", || async {
        state_of(&db.pool, id).await.as_deref() == Some("running")
    })
    .await;
    let fence_before: i64 = sqlx::query_scalar("SELECT fence FROM jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    shutdown.cancel(); // stop leasing, so the revoked job is not simply picked up again by this pool
    let mut conn = db.pool.acquire().await.unwrap();
    assert!(q.revoke(&mut conn, id).await.unwrap());
    wait_for(Duration::from_secs(5), "the handler to be cancelled", || async {
        cancelled.load(Ordering::SeqCst) == 1
    })
    .await;
    pool.await.unwrap();
    let (state, fence): (String, i64) = sqlx::query_as("SELECT state, fence FROM jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(state, "queued", "the stale holder's success was refused");
    assert!(fence > fence_before);
}

/// Set when dropped: a handler's future that was stopped rather than returning.
struct DropFlag(Arc<std::sync::Mutex<Option<std::time::Instant>>>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(std::time::Instant::now());
    }
}

/// A handler that never returns and never looks at its cancellation (a BMC call that hangs, say), recording when
/// its future is dropped and its lease clock.
fn hanging(
    dropped: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    lease: Arc<std::sync::Mutex<Option<racklift_queue::LeaseClock>>>,
) -> Registry {
    Registry::new().register("hang", move |ctx: JobContext| {
        let flag = DropFlag(dropped.clone());
        *lease.lock().unwrap() = Some(ctx.lease.clone());
        async move {
            let _flag = flag;
            std::future::pending::<()>().await;
            HandlerResult::Ok(Outcome::Complete)
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_a_handler_that_does_not_watch_for_it() {
    let db = TestDb::new().await;
    let q = short_lease(&db.pool);
    let id = enqueue(&q, &job("hang")).await.id();
    let dropped = Arc::new(std::sync::Mutex::new(None));
    let lease = Arc::new(std::sync::Mutex::new(None));
    let shutdown = CancellationToken::new();
    let pool = tokio::spawn(
        WorkerPool::new(q.clone(), hanging(dropped.clone(), lease), config(1)).run(shutdown.clone()),
    );
    wait_for(Duration::from_secs(5), "the job to be leased", || async {
        state_of(&db.pool, id).await.as_deref() == Some("running")
    })
    .await;
    shutdown.cancel();
    let mut conn = db.pool.acquire().await.unwrap();
    assert!(q.revoke(&mut conn, id).await.unwrap());
    wait_for(Duration::from_secs(5), "the handler to be stopped", || async {
        dropped.lock().unwrap().is_some()
    })
    .await;
    pool.await.unwrap();
    assert_eq!(state_of(&db.pool, id).await.as_deref(), Some("queued"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_renew_stops_its_handler_before_the_lease_runs_out() {
    let db = TestDb::new().await;
    let q = short_lease(&db.pool);
    let id = enqueue(&q, &job("hang")).await.id();
    let dropped = Arc::new(std::sync::Mutex::new(None));
    let lease = Arc::new(std::sync::Mutex::new(None));
    // The job's row locked from before its lease: every renewal waits on the lock, as on a database that does
    // not answer.
    let shutdown = CancellationToken::new();
    let pool = tokio::spawn(
        WorkerPool::new(q.clone(), hanging(dropped.clone(), lease.clone()), config(1)).run(shutdown.clone()),
    );
    wait_for(Duration::from_secs(5), "the job to be leased", || async {
        lease.lock().unwrap().is_some()
    })
    .await;
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *blocker)
        .await
        .unwrap();
    let deadline = lease.lock().unwrap().as_ref().unwrap().deadline();
    wait_for(Duration::from_secs(5), "the handler to be stopped", || async {
        dropped.lock().unwrap().is_some()
    })
    .await;
    let stopped = dropped.lock().unwrap().unwrap();
    // No renewal got through, so the lease clock still holds its first deadline, and the handler went before it.
    assert_eq!(lease.lock().unwrap().as_ref().unwrap().deadline(), deadline);
    assert!(
        stopped < deadline,
        "stopped {:?} after the lease ran out",
        stopped - deadline
    );
    blocker.rollback().await.unwrap();
    shutdown.cancel();
    pool.await.unwrap();
}

/// A handler that ends its job in its own transaction (`Outcome::Finished`) and is still returning when the
/// first renewal falls due has lost nothing: the renewal must not cancel it or count a lost lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_its_handler_ended_is_not_a_lost_lease() {
    let db = TestDb::new().await;
    let q = short_lease(&db.pool);
    let id = enqueue(&q, &job("own")).await.id();
    let cancelled = Arc::new(AtomicUsize::new(0));
    let returned = Arc::new(AtomicUsize::new(0));
    let (seen, done) = (cancelled.clone(), returned.clone());
    let registry = Registry::new().register("own", move |ctx: JobContext| {
        let (seen, done) = (seen.clone(), done.clone());
        async move {
            let mut conn = ctx.queue.pool().acquire().await.unwrap();
            ctx.queue.complete(&mut conn, ctx.job_ref()).await.unwrap();
            drop(conn);
            // Work after the commit that outlasts the first renewal (a third of the 600 ms lease).
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(600)) => {}
                _ = ctx.cancel.cancelled() => { seen.fetch_add(1, Ordering::SeqCst); }
            }
            done.fetch_add(1, Ordering::SeqCst);
            HandlerResult::Ok(Outcome::Finished)
        }
    });
    let lost_before = lease_lost_total();
    let shutdown = CancellationToken::new();
    let pool = tokio::spawn(WorkerPool::new(q.clone(), registry, config(1)).run(shutdown.clone()));
    wait_for(Duration::from_secs(5), "the handler to return", || async {
        returned.load(Ordering::SeqCst) == 1
    })
    .await;
    shutdown.cancel();
    pool.await.unwrap();
    assert_eq!(cancelled.load(Ordering::SeqCst), 0, "the handler was cancelled");
    assert_eq!(lease_lost_total(), lost_before, "a lost lease was counted");
    assert_eq!(state_of(&db.pool, id).await.as_deref(), Some("completed"));
}

fn lease_lost_total() -> u64 {
    racklift_metrics::global()
        .queue_lease_lost
        .with_label_values(&[racklift_metrics::job_kind("own")])
        .get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_jobs_while_heartbeats_hold_their_leases() {
    let db = TestDb::new().await;
    let q = short_lease(&db.pool);
    for _ in 0..3 {
        enqueue(&q, &sleeper(1_500)).await;
    }
    let shutdown = CancellationToken::new();
    let pool = tokio::spawn(
        WorkerPool::new(
            q.clone(),
            Registry::new().register("sleep", sleep_handler),
            config(3),
        )
        .run(shutdown.clone()),
    );
    wait_for(Duration::from_secs(5), "three running jobs", || async {
        count(&db.pool, "SELECT count(*) FROM jobs WHERE state = 'running'").await == 3
    })
    .await;
    shutdown.cancel();
    // The drain lasts longer than two lease lifetimes; a rescuer running meanwhile must find nothing.
    let mut rescued = 0;
    while !pool.is_finished() {
        let r = q.rescue(10).await.unwrap();
        rescued += r.retried + r.dead_lettered;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pool.await.unwrap();
    assert_eq!(rescued, 0, "no lease expired during the drain");
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM jobs_completed WHERE attempts = 1").await,
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_retried_then_dead_lettered() {
    let db = TestDb::new().await;
    let q = short_lease(&db.pool);
    enqueue(&q, &job("boom").with_max_attempts(3)).await;
    let registry = Registry::new().register("boom", |_ctx: JobContext| async {
        if true {
            panic!("handler bug");
        }
        HandlerResult::Ok(Outcome::Complete)
    });
    let shutdown = CancellationToken::new();
    let config = WorkerConfig {
        poll_interval: Duration::from_millis(20),
        ..config(1)
    };
    let pool = tokio::spawn(WorkerPool::new(q.clone(), registry, config).run(shutdown.clone()));
    wait_for(Duration::from_secs(10), "the dead letter", || async {
        count(&db.pool, "SELECT count(*) FROM dead_letters").await == 1
    })
    .await;
    shutdown.cancel();
    pool.await.unwrap();
    let (attempts, last_error, class): (i32, String, Option<String>) =
        sqlx::query_as("SELECT attempts, last_error, error_class FROM dead_letters")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(attempts, 3);
    assert!(last_error.contains("handler bug"));
    assert_eq!(class.as_deref(), Some("panic"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pools_run_each_job_exactly_once() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tx = db.pool.begin().await.unwrap();
    let jobs: Vec<NewJob> = (0..500).map(|_| job("k")).collect();
    q.enqueue_batch(&mut tx, &jobs).await.unwrap();
    tx.commit().await.unwrap();
    let shutdown = CancellationToken::new();
    let mut pools = Vec::new();
    for _ in 0..2 {
        let runs = runs.clone();
        let registry = Registry::new().register("k", move |_ctx: JobContext| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { HandlerResult::Ok(Outcome::Complete) }
        });
        pools.push(tokio::spawn(
            WorkerPool::new(q.clone(), registry, config(50)).run(shutdown.clone()),
        ));
    }
    wait_for(Duration::from_secs(20), "all jobs completed", || async {
        count(&db.pool, "SELECT count(*) FROM jobs_completed").await == 500
    })
    .await;
    shutdown.cancel();
    for p in pools {
        p.await.unwrap();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 500);
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM jobs_completed WHERE attempts <> 1"
        )
        .await,
        0
    );
}

/// A handler slot is freed when the handler returns, not when its outcome is written: with concurrency 1, a
/// second job runs while the first one's completion is held up in the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_job_runs_while_the_last_outcome_is_still_being_written() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<i64>();
    let release_first = Arc::new(tokio::sync::Notify::new());
    let release = release_first.clone();
    let registry = Registry::new().register("k", move |ctx: JobContext| {
        let started_tx = started_tx.clone();
        let release = release.clone();
        async move {
            let first = ctx.job.payload::<serde_json::Value>().unwrap()["first"] == true;
            started_tx.send(ctx.job.id).unwrap();
            if first {
                release.notified().await;
            }
            HandlerResult::Ok(Outcome::Complete)
        }
    });
    let shutdown = CancellationToken::new();
    let pool = tokio::spawn(WorkerPool::new(q.clone(), registry, config(1)).run(shutdown.clone()));
    let first = enqueue(
        &q,
        &NewJob::new("k", &serde_json::json!({ "first": true })).unwrap(),
    )
    .await
    .id();
    assert_eq!(started.recv().await, Some(first));
    // Hold the first job's row so its completion statement waits, then let its handler return.
    let mut lock = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(first)
        .execute(&mut *lock)
        .await
        .unwrap();
    release_first.notify_one();
    wait_for(Duration::from_secs(10), "the completion to wait on the row lock", || async {
        count(
            &db.pool,
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM jobs%'",
        )
        .await
            == 1
    })
    .await;
    let second = enqueue(&q, &job("k")).await.id();
    let ran = tokio::time::timeout(Duration::from_secs(10), started.recv()).await;
    assert_eq!(
        ran.ok().flatten(),
        Some(second),
        "the second job must run while the first one's outcome is unwritten"
    );
    assert_eq!(state_of(&db.pool, first).await.as_deref(), Some("running"));
    lock.rollback().await.unwrap();
    wait_for(Duration::from_secs(10), "both jobs completed", || async {
        count(&db.pool, "SELECT count(*) FROM jobs_completed").await == 2
    })
    .await;
    shutdown.cancel();
    pool.await.unwrap();
}

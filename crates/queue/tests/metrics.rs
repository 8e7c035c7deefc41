//! The queue's metrics: what the worker pool and the fenced writes count, and the gauges read at scrape time.
//! Metrics are process-wide, so each test uses kinds of its own and compares before and after.

mod common;

use std::time::Duration;

use common::*;
use racklift_queue::{Failure, HandlerResult, JobContext, Outcome, Registry, WorkerConfig, WorkerPool};
use racklift_testdb::{TestDb, wait_for};
use tokio_util::sync::CancellationToken;

fn leases(kind: &str) -> u64 {
    racklift_metrics::global()
        .queue_leases
        .with_label_values(&[kind])
        .get()
}

fn durations(kind: &str, outcome: &str) -> (u64, f64) {
    let h = racklift_metrics::global()
        .job_duration
        .with_label_values(&[kind, outcome]);
    (h.get_sample_count(), h.get_sample_sum())
}

fn counter(vec: &racklift_metrics::prometheus::IntCounterVec, labels: &[&str]) -> u64 {
    vec.with_label_values(labels).get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_a_job_counts_its_lease_and_its_duration() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let kind = "metrics.run";
    let (leased_before, (timed_before, _)) = (leases(kind), durations(kind, "complete"));
    let registry = Registry::new().register(kind, |_ctx: JobContext| async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        HandlerResult::Ok(Outcome::Complete)
    });
    let shutdown = CancellationToken::new();
    let pool = tokio::spawn(
        WorkerPool::new(
            q.clone(),
            registry,
            WorkerConfig {
                concurrency: 2,
                poll_interval: Duration::from_millis(100),
                ..WorkerConfig::default()
            },
        )
        .run(shutdown.clone()),
    );
    let id = enqueue(&q, &job(kind)).await.id();
    wait_for(Duration::from_secs(10), "the job to complete", || async {
        state_of(&db.pool, id).await.as_deref() == Some("completed")
    })
    .await;
    shutdown.cancel();
    pool.await.unwrap();

    assert_eq!(leases(kind), leased_before + 1);
    let (timed, seconds) = durations(kind, "complete");
    assert_eq!(timed, timed_before + 1);
    assert!(seconds >= 0.02, "the handler slept 20 ms: {seconds}");
    // Counters of the pool's kinds exist from the start, so the first increase is visible to `rate`.
    let text = racklift_metrics::render(&racklift_metrics::global().registry);
    for name in [
        "racklift_queue_lease_lost_total",
        "racklift_queue_fence_rejections_total",
        "racklift_queue_retries_total",
    ] {
        assert!(
            text.contains(&format!("{name}{{kind=\"{kind}\"}} 0")),
            "{name}: {text}"
        );
    }
}

#[tokio::test]
async fn retries_dead_letters_and_fence_rejections_are_counted_per_kind() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let m = racklift_metrics::global();
    let kind = "metrics.fail";
    let before = (
        counter(&m.queue_retries, &[kind]),
        counter(&m.dead_letters_opened, &[kind, "bmc_auth"]),
        counter(&m.queue_fence_rejections, &[kind]),
    );
    let mut conn = db.pool.acquire().await.unwrap();

    let id = enqueue(&q, &job(kind)).await.id();
    let held = q.lease(&[kind], 1, "a").await.unwrap().remove(0);
    q.fail(&mut conn, held.job_ref(), &Failure::retryable("busy"))
        .await
        .unwrap();
    assert_eq!(counter(&m.queue_retries, &[kind]), before.0 + 1);

    make_due(&db.pool, id).await;
    let held = q.lease(&[kind], 1, "a").await.unwrap().remove(0);
    let fatal = Failure::fatal("401").with_error_class("bmc_auth");
    q.fail(&mut conn, held.job_ref(), &fatal).await.unwrap();
    assert_eq!(counter(&m.dead_letters_opened, &[kind, "bmc_auth"]), before.1 + 1);

    // The job is gone: every further write under that fence is refused, and each refusal is counted.
    assert!(q.complete(&mut conn, held.job_ref()).await.is_err());
    assert!(
        q.snooze(&mut conn, held.job_ref(), racklift_queue::RunAt::Now)
            .await
            .is_err()
    );
    assert_eq!(counter(&m.queue_fence_rejections, &[kind]), before.2 + 2);
    // A heartbeat that finds its lease gone is a lease loss for the pool to count, not a refused write.
    assert!(q.heartbeat(held.job_ref()).await.is_err());
    assert_eq!(counter(&m.queue_fence_rejections, &[kind]), before.2 + 2);
}

#[tokio::test]
async fn gauges_are_sampled_from_the_tables_with_zeros_for_known_kinds() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    enqueue(&q, &job("metrics.depth")).await;
    enqueue(&q, &job("metrics.depth")).await;
    let dead = enqueue(&q, &job("metrics.dead")).await.id();
    let held = q.lease(&["metrics.dead"], 1, "a").await.unwrap().remove(0);
    assert_eq!(held.id, dead);
    let mut conn = db.pool.acquire().await.unwrap();
    q.fail(&mut conn, held.job_ref(), &Failure::fatal("x"))
        .await
        .unwrap();
    // Due a while ago: the lag gauge measures from `run_at`.
    sqlx::query("UPDATE jobs SET run_at = now() - interval '90 seconds' WHERE kind = 'metrics.depth'")
        .execute(&db.pool)
        .await
        .unwrap();

    q.sample_gauges(&["metrics.idle"]).await.unwrap();
    let m = racklift_metrics::global();
    let depth = |kind: &str, state: &str| m.queue_jobs.with_label_values(&[kind, state]).get();
    assert_eq!(depth("metrics.depth", "queued"), 2.0);
    assert_eq!(depth("metrics.depth", "running"), 0.0);
    assert_eq!(depth("metrics.idle", "queued"), 0.0);
    let lag = m.queue_oldest_due.with_label_values(&["metrics.depth"]).get();
    assert!((89.0..600.0).contains(&lag), "oldest due job waited {lag} s");
    assert_eq!(m.queue_oldest_due.with_label_values(&["metrics.idle"]).get(), 0.0);
    assert_eq!(
        m.dead_letters_open.with_label_values(&["metrics.dead"]).get(),
        1.0
    );

    // Triaged and drained: the series stay, at zero.
    sqlx::query("UPDATE dead_letters SET triage_status = 'discarded'")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("DELETE FROM jobs").execute(&db.pool).await.unwrap();
    q.sample_gauges(&[]).await.unwrap();
    assert_eq!(depth("metrics.depth", "queued"), 0.0);
    assert_eq!(
        m.dead_letters_open.with_label_values(&["metrics.dead"]).get(),
        0.0
    );
}

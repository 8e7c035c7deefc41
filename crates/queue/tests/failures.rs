//! Failures: durable backoff with full jitter, dead letters on exhaustion and on fatal errors, snoozes, rescue,
//! and a holder cut off from PostgreSQL.

mod common;
#[path = "failures/partition.rs"]
mod partition;

use std::time::Duration;

use common::*;
use racklift_queue::{Backoff, FailOutcome, Failure, Queue, QueueConfig, RunAt};
use racklift_testdb::TestDb;
use sqlx::PgPool;

/// Seconds from now until the job is due, on the database's clock.
async fn due_in(pool: &PgPool, id: i64) -> f64 {
    sqlx::query_scalar("SELECT extract(epoch FROM run_at - now())::float8 FROM jobs WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn retries_are_spaced_by_exponential_backoff_with_full_jitter_inside_bounds() {
    let db = TestDb::new().await;
    let backoff = Backoff {
        base: Duration::from_secs(10),
        cap: Duration::from_secs(60),
    };
    let q = Queue::new(
        db.pool.clone(),
        QueueConfig {
            backoff,
            ..QueueConfig::default()
        },
    );
    let mut spreads = Vec::new();
    // Many jobs through attempts 1..=4: each delay lies in [0, ceiling(attempt)] and the delays spread out.
    for n in 0..25 {
        // A kind per job, so that an earlier job whose jittered delay was near zero is not leased instead.
        let kind = format!("k{n}");
        let id = enqueue(&q, &job(&kind).with_max_attempts(10)).await.id();
        for attempt in 1..=4u32 {
            make_due(&db.pool, id).await;
            let held = q.lease(&[kind.as_str()], 1, "a").await.unwrap().remove(0);
            assert_eq!(held.attempts as u32, attempt);
            let mut conn = db.pool.acquire().await.unwrap();
            let out = q
                .fail(&mut conn, held.job_ref(), &Failure::retryable("bmc timeout"))
                .await
                .unwrap();
            let FailOutcome::Retried { delay } = out else {
                panic!("expected a retry, got {out:?}")
            };
            let ceiling = backoff.ceiling(attempt);
            assert!(delay <= ceiling, "attempt {attempt}: {delay:?} > {ceiling:?}");
            let due = due_in(&db.pool, id).await;
            assert!(
                due <= ceiling.as_secs_f64() + 0.5 && due >= delay.as_secs_f64() - 1.0,
                "due in {due}s"
            );
            spreads.push((attempt, delay));
        }
    }
    // Full jitter: the window grows with the attempt and is actually used (not a fixed delay).
    for attempt in 1..=4u32 {
        let delays: Vec<Duration> = spreads
            .iter()
            .filter(|(a, _)| *a == attempt)
            .map(|(_, d)| *d)
            .collect();
        let (min, max) = (delays.iter().min().unwrap(), delays.iter().max().unwrap());
        assert!(
            *max - *min > backoff.ceiling(attempt) / 4,
            "attempt {attempt} delays barely vary: {min:?}..{max:?}"
        );
    }
    // The history keeps every attempt's error.
    let history: i32 = sqlx::query_scalar("SELECT max(jsonb_array_length(errors)) FROM jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(history, 4);
}

#[tokio::test]
async fn a_retry_after_hint_overrides_the_backoff() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let id = enqueue(&q, &job("k")).await.id();
    let held = q.lease(&["k"], 1, "a").await.unwrap().remove(0);
    let mut conn = db.pool.acquire().await.unwrap();
    let failure = Failure::retryable("busy").with_retry_in(Duration::from_secs(120));
    q.fail(&mut conn, held.job_ref(), &failure).await.unwrap();
    let due = due_in(&db.pool, id).await;
    assert!((119.0..=121.0).contains(&due), "due in {due}s");
}

#[tokio::test]
async fn exhausted_attempts_move_the_job_to_dead_letters_with_its_history() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let id = enqueue(&q, &job("k").with_max_attempts(3).with_resource_key("server/a"))
        .await
        .id();
    let mut last = None;
    for attempt in 1..=3 {
        make_due(&db.pool, id).await;
        let held = q.lease(&["k"], 1, "a").await.unwrap().remove(0);
        let mut conn = db.pool.acquire().await.unwrap();
        let failure = Failure::retryable(format!("error {attempt}"))
            .with_error_class("bmc_5xx")
            .with_context(serde_json::json!({ "server": "a", "state": "AttachMedia" }));
        last = Some(q.fail(&mut conn, held.job_ref(), &failure).await.unwrap());
    }
    let Some(FailOutcome::DeadLettered { dead_letter_id }) = last else {
        panic!("expected a dead letter: {last:?}")
    };
    assert_eq!(state_of(&db.pool, id).await, None, "the job left the jobs table");
    let (job_id, reason, first, last_err, attempts, history, context, triage): (i64, String, String, String, i32, i32, serde_json::Value, String) =
        sqlx::query_as(
            "SELECT job_id, reason, first_error, last_error, attempts, jsonb_array_length(errors), context, triage_status
             FROM dead_letters WHERE id = $1",
        )
        .bind(dead_letter_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        (job_id, reason.as_str(), attempts, history),
        (id, "exhausted", 3, 3)
    );
    assert_eq!((first.as_str(), last_err.as_str()), ("error 1", "error 3"));
    assert_eq!(context["state"], "AttachMedia");
    assert_eq!(triage, "open");
    // The resource is free again once its job is dead.
    assert!(matches!(
        enqueue(&q, &job("k").with_resource_key("server/a")).await,
        racklift_queue::Enqueued::Created(_)
    ));
}

#[tokio::test]
async fn a_fatal_error_dead_letters_at_once() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    enqueue(&q, &job("k").with_max_attempts(10)).await;
    let held = q.lease(&["k"], 1, "a").await.unwrap().remove(0);
    let mut conn = db.pool.acquire().await.unwrap();
    let out = q
        .fail(&mut conn, held.job_ref(), &Failure::fatal("401 from BMC"))
        .await
        .unwrap();
    assert!(matches!(out, FailOutcome::DeadLettered { .. }));
    let (reason, attempts): (String, i32) = sqlx::query_as("SELECT reason, attempts FROM dead_letters")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!((reason.as_str(), attempts), ("fatal", 1));
}

#[tokio::test]
async fn snooze_requeues_without_counting_an_attempt() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let id = enqueue(&q, &job("k").with_max_attempts(2)).await.id();
    for _ in 0..5 {
        let held = q.lease(&["k"], 1, "a").await.unwrap().remove(0);
        assert_eq!(held.attempts, 1, "snoozes do not use up attempts");
        let mut conn = db.pool.acquire().await.unwrap();
        q.snooze(&mut conn, held.job_ref(), RunAt::In(Duration::from_secs(30)))
            .await
            .unwrap();
        let due = due_in(&db.pool, id).await;
        assert!((29.0..=31.0).contains(&due));
        make_due(&db.pool, id).await;
    }
}

#[tokio::test]
async fn the_rescuer_retries_expired_leases_and_dead_letters_a_poison_job() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    // A poison job: every worker that takes it dies (its lease simply expires). It must not loop forever.
    let poison = enqueue(&q, &job("k").with_max_attempts(3)).await.id();
    let mut rescued = Vec::new();
    for _ in 0..3 {
        make_due(&db.pool, poison).await;
        let held = q.lease(&["k"], 1, "doomed-worker").await.unwrap().remove(0);
        assert_eq!(held.id, poison);
        expire_lease(&db.pool, poison).await;
        rescued.push(q.rescue(100).await.unwrap());
    }
    assert_eq!(rescued.iter().map(|r| r.retried).sum::<u64>(), 2);
    assert_eq!(rescued.last().unwrap().dead_lettered, 1);
    let (reason, last_error, class): (String, String, Option<String>) =
        sqlx::query_as("SELECT reason, last_error, error_class FROM dead_letters WHERE job_id = $1")
            .bind(poison)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(reason, "exhausted");
    assert!(last_error.contains("doomed-worker"), "{last_error}");
    assert_eq!(class.as_deref(), Some("lease_expired"));
    // A live lease is never rescued.
    let healthy = enqueue(&q, &job("k").with_max_attempts(3)).await.id();
    let held = q.lease(&["k"], 1, "b").await.unwrap().remove(0);
    assert_eq!(held.id, healthy);
    assert_eq!(q.rescue(100).await.unwrap(), Default::default());
    assert_eq!(state_of(&db.pool, healthy).await.as_deref(), Some("running"));
}

#[tokio::test]
async fn completed_jobs_are_purged_after_retention_and_dead_letters_stay() {
    let db = TestDb::new().await;
    let q = Queue::new(
        db.pool.clone(),
        QueueConfig {
            completed_retention: Duration::from_secs(60),
            ..QueueConfig::default()
        },
    );
    for _ in 0..3 {
        enqueue(&q, &job("k")).await;
    }
    let mut conn = db.pool.acquire().await.unwrap();
    let held = q.lease(&["k"], 3, "a").await.unwrap();
    q.complete(&mut conn, held[0].job_ref()).await.unwrap();
    q.complete(&mut conn, held[1].job_ref()).await.unwrap();
    q.fail(&mut conn, held[2].job_ref(), &Failure::fatal("x"))
        .await
        .unwrap();
    assert_eq!(
        q.purge_completed().await.unwrap(),
        0,
        "young completed jobs are kept"
    );
    sqlx::query("UPDATE jobs_completed SET finished_at = now() - interval '2 minutes' WHERE id = $1")
        .bind(held[0].id)
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(q.purge_completed().await.unwrap(), 1);
    assert_eq!(state_of(&db.pool, held[0].id).await, None, "the old one is gone");
    assert_eq!(state_of(&db.pool, held[1].id).await.as_deref(), Some("completed"));
    let live: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(live, 0, "completed and dead-lettered jobs leave the jobs table");
    let dead: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_letters")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(dead, 1);

    // With zero retention a completed job is deleted on completion.
    let q0 = Queue::new(
        db.pool.clone(),
        QueueConfig {
            completed_retention: Duration::ZERO,
            ..QueueConfig::default()
        },
    );
    let id = enqueue(&q0, &job("z")).await.id();
    let held = q0.lease(&["z"], 1, "a").await.unwrap().remove(0);
    q0.complete(&mut conn, held.job_ref()).await.unwrap();
    assert_eq!(state_of(&db.pool, id).await, None);
}

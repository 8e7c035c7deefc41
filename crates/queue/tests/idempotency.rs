//! Request idempotency keys: remembered for the retention window beyond their job's life, one job however many
//! copies of a request race, refused for another request, free again once expired, pruned by the pool.

mod common;

use std::time::Duration;

use common::*;
use racklift_queue::{
    Enqueued, HandlerResult, JobContext, JobId, Outcome, Queue, QueueConfig, QueueError, Registry,
    RequestKey, WorkerConfig, WorkerPool,
};
use racklift_testdb::{TestDb, wait_for};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

fn request(scope: &str, key: &str, fingerprint: &str) -> RequestKey {
    RequestKey {
        scope: scope.to_owned(),
        key: key.to_owned(),
        fingerprint: fingerprint.to_owned(),
    }
}

async fn enqueue_once(q: &Queue, request: &RequestKey) -> Result<Enqueued, QueueError> {
    let mut tx = q.pool().begin().await.unwrap();
    let out = q.enqueue_once(&mut tx, request, &job("k")).await;
    tx.commit().await.unwrap();
    out
}

/// Runs the job to completion, so that only the key table can still remember it.
async fn complete(q: &Queue, id: JobId) {
    let held = q.lease(&["k"], 1, "w").await.unwrap().remove(0);
    assert_eq!(held.id, id);
    let mut conn = q.pool().acquire().await.unwrap();
    q.complete(&mut conn, held.job_ref()).await.unwrap();
}

/// Makes a key's retention run out a second ago, as if it had been claimed that long before.
async fn expire(pool: &PgPool, scope: &str, key: &str) {
    let n = sqlx::query(
        "UPDATE idempotency_keys SET created_at = now() - interval '25 hours',
                                     expires_at = now() - interval '1 second'
         WHERE scope = $1 AND key = $2",
    )
    .bind(scope)
    .bind(key)
    .execute(pool)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(n, 1, "the key {scope}/{key} is stored");
}

async fn jobs_made(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM jobs_completed)")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[derive(Debug, PartialEq)]
enum Expect {
    /// The first request's job.
    SameJob,
    Refused,
    NewJob,
}

#[tokio::test]
async fn a_key_is_remembered_after_its_job_finished_and_only_for_the_same_request() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let first = enqueue_once(&q, &request("bmc-action/a", "k1", "power_on"))
        .await
        .unwrap();
    assert!(matches!(first, Enqueued::Created(_)));
    complete(&q, first.id()).await;

    let cases = [
        ("bmc-action/a", "k1", "power_on", Expect::SameJob),
        ("bmc-action/a", "k1", "power_off", Expect::Refused),
        // The first request is still what the key answers to after a refusal.
        ("bmc-action/a", "k1", "power_on", Expect::SameJob),
        // Scopes do not collide: another server may use the same key for the same action.
        ("bmc-action/b", "k1", "power_on", Expect::NewJob),
        ("bmc-action/a", "k2", "power_on", Expect::NewJob),
    ];
    for (scope, key, fingerprint, expect) in cases {
        let got = enqueue_once(&q, &request(scope, key, fingerprint)).await;
        let what = format!("{scope} {key} {fingerprint}: {got:?}");
        match expect {
            Expect::SameJob => assert_eq!(got.unwrap(), Enqueued::Existing(first.id()), "{what}"),
            Expect::Refused => assert!(
                matches!(&got, Err(QueueError::IdempotencyKeyReused { existing, key: k, scope: s })
                    if *existing == first.id() && k == key && s == scope),
                "{what}"
            ),
            Expect::NewJob => {
                assert!(
                    matches!(got, Ok(Enqueued::Created(id)) if id != first.id()),
                    "{what}"
                )
            }
        }
    }
    assert_eq!(jobs_made(&db.pool).await, 3);
}

#[tokio::test]
async fn a_key_is_kept_for_the_configured_retention_and_free_again_after_it() {
    let db = TestDb::new().await;
    let q = Queue::new(
        db.pool.clone(),
        QueueConfig {
            idempotency_retention: Duration::from_secs(90),
            ..QueueConfig::default()
        },
    );
    let first = enqueue_once(&q, &request("s", "k", "a")).await.unwrap().id();
    let kept: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM expires_at - created_at)::float8 FROM idempotency_keys WHERE key = 'k'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(kept, 90.0);
    complete(&q, first).await;

    // Expired and not yet pruned: the key is taken over, for another request too, with a fresh retention.
    expire(&db.pool, "s", "k").await;
    let second = enqueue_once(&q, &request("s", "k", "b")).await.unwrap();
    assert!(
        matches!(second, Enqueued::Created(id) if id != first),
        "{second:?}"
    );
    let (job_id, fingerprint, live): (JobId, String, bool) = sqlx::query_as(
        "SELECT job_id, fingerprint, expires_at > now() + interval '80 seconds' FROM idempotency_keys
         WHERE key = 'k'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((job_id, fingerprint.as_str(), live), (second.id(), "b", true));
    assert_eq!(
        enqueue_once(&q, &request("s", "k", "b")).await.unwrap(),
        Enqueued::Existing(second.id())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_with_one_key_make_one_job() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    // Every request reaches its claim before any of them may write one.
    let mut gate = db.hold_writes("idempotency_keys").await;
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                // One resource key, as the BMC actions have: a second job would also have been refused as busy.
                let job = job("k").with_resource_key("server/a");
                let mut tx = q.pool().begin().await.unwrap();
                let out = q
                    .enqueue_once(&mut tx, &request("s", "k", "a"), &job)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                out
            })
        })
        .collect();
    gate.wait_for_writers(12, Duration::from_secs(10)).await;
    gate.open().await;
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    let created: Vec<_> = outcomes
        .iter()
        .filter(|o| matches!(o, Enqueued::Created(_)))
        .collect();
    assert_eq!(created.len(), 1, "{outcomes:?}");
    let id = created[0].id();
    assert!(outcomes.iter().all(|o| o.id() == id), "{outcomes:?}");
    assert_eq!(jobs_made(&db.pool).await, 1);
}

#[tokio::test]
async fn a_busy_resource_or_a_rollback_leaves_the_key_unclaimed() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let holder = enqueue(&q, &job("k").with_resource_key("server/a")).await.id();

    let mut tx = db.pool.begin().await.unwrap();
    let busy = q
        .enqueue_once(
            &mut tx,
            &request("s", "k", "a"),
            &job("k").with_resource_key("server/a"),
        )
        .await;
    assert!(
        matches!(busy, Err(QueueError::ResourceBusy { existing, .. }) if existing == holder),
        "{busy:?}"
    );
    // The caller's transaction is still usable, and committing it keeps no claim without a job.
    let other = q.enqueue(&mut tx, &job("x")).await.unwrap();
    tx.commit().await.unwrap();
    assert!(matches!(other, Enqueued::Created(_)));

    let mut tx = db.pool.begin().await.unwrap();
    q.enqueue_once(&mut tx, &request("s", "k2", "a"), &job("k"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let keys: i64 = sqlx::query_scalar("SELECT count(*) FROM idempotency_keys")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(keys, 0);

    // Once the resource is free, a retry with the key makes its job.
    complete(&q, holder).await;
    let mut tx = db.pool.begin().await.unwrap();
    let made = q
        .enqueue_once(
            &mut tx,
            &request("s", "k", "a"),
            &job("k").with_resource_key("server/a"),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(matches!(made, Enqueued::Created(_)), "{made:?}");
}

#[tokio::test]
async fn purging_deletes_expired_keys_only() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    for key in ["old-1", "old-2", "young"] {
        enqueue_once(&q, &request("s", key, "a")).await.unwrap();
    }
    expire(&db.pool, "s", "old-1").await;
    expire(&db.pool, "s", "old-2").await;
    assert_eq!(q.purge_request_keys().await.unwrap(), 2);
    assert_eq!(q.purge_request_keys().await.unwrap(), 0);
    let left: Vec<String> = sqlx::query_scalar("SELECT key FROM idempotency_keys")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, ["young"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pools_maintenance_prunes_expired_keys() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    enqueue_once(&q, &request("s", "old", "a")).await.unwrap();
    enqueue_once(&q, &request("s", "young", "a")).await.unwrap();
    expire(&db.pool, "s", "old").await;
    let config = WorkerConfig {
        rescue_interval: Duration::from_millis(20),
        purge_interval: Duration::from_millis(20),
        ..WorkerConfig::default()
    };
    let registry = Registry::new().register("other", |_ctx: JobContext| async {
        HandlerResult::Ok(Outcome::Complete)
    });
    let shutdown = CancellationToken::new();
    let pool = tokio::spawn(WorkerPool::new(q.clone(), registry, config).run(shutdown.clone()));
    wait_for(
        Duration::from_secs(10),
        "the expired key to be pruned",
        || async {
            let keys: Vec<String> = sqlx::query_scalar("SELECT key FROM idempotency_keys")
                .fetch_all(&db.pool)
                .await
                .unwrap();
            keys == ["young"]
        },
    )
    .await;
    shutdown.cancel();
    pool.await.unwrap();
}

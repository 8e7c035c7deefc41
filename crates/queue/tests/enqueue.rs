//! Enqueue: idempotency collapse, one live job per resource, batches, transactions.

mod common;

use std::time::Duration;

use common::*;
use racklift_queue::{Enqueued, NewJob, QueueError, RunAt};
use racklift_testdb::TestDb;

#[tokio::test]
async fn same_idempotency_key_while_live_returns_the_existing_job() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let first = enqueue(&q, &job("k").with_idempotency_key("deployment/1/0")).await;
    let second = enqueue(&q, &job("k").with_idempotency_key("deployment/1/0")).await;
    assert!(matches!(first, Enqueued::Created(_)));
    assert_eq!(second, Enqueued::Existing(first.id()));

    // Still live while running.
    let held = q.lease(&["k"], 1, "a").await.unwrap().remove(0);
    assert_eq!(
        enqueue(&q, &job("k").with_idempotency_key("deployment/1/0")).await,
        Enqueued::Existing(held.id)
    );

    // Once finished, the key is free again.
    let mut conn = db.pool.acquire().await.unwrap();
    q.complete(&mut conn, held.job_ref()).await.unwrap();
    let third = enqueue(&q, &job("k").with_idempotency_key("deployment/1/0")).await;
    assert!(matches!(third, Enqueued::Created(id) if id != first.id()));
}

#[tokio::test]
async fn one_live_job_per_resource_key() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let first = enqueue(&q, &job("k").with_resource_key("server/a")).await.id();
    let mut tx = db.pool.begin().await.unwrap();
    let err = q
        .enqueue(&mut tx, &job("k").with_resource_key("server/a"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, QueueError::ResourceBusy { existing, ref resource_key } if existing == first && resource_key == "server/a")
    );
    // The refusal left the caller's transaction usable.
    let other = q
        .enqueue(&mut tx, &job("k").with_resource_key("server/b"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(matches!(other, Enqueued::Created(_)));

    // The unique partial index is the enforcement, not this crate's code.
    let raw = sqlx::query("INSERT INTO jobs (kind, resource_key) VALUES ('k', 'server/a')")
        .execute(&db.pool)
        .await;
    assert!(
        raw.unwrap_err()
            .as_database_error()
            .unwrap()
            .is_unique_violation()
    );

    let held = q.lease(&["k"], 10, "a").await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    for j in held {
        q.complete(&mut conn, j.job_ref()).await.unwrap();
    }
    assert!(matches!(
        enqueue(&q, &job("k").with_resource_key("server/a")).await,
        Enqueued::Created(_)
    ));
}

#[tokio::test]
async fn a_job_enqueued_in_a_rolled_back_transaction_never_exists() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let mut tx = db.pool.begin().await.unwrap();
    let id = q
        .enqueue(&mut tx, &job("k").with_resource_key("server/a"))
        .await
        .unwrap()
        .id();
    tx.rollback().await.unwrap();
    assert_eq!(state_of(&db.pool, id).await, None);
    assert!(q.lease(&["k"], 10, "a").await.unwrap().is_empty());
    // Nor does it hold its resource key.
    assert!(matches!(
        enqueue(&q, &job("k").with_resource_key("server/a")).await,
        Enqueued::Created(_)
    ));
}

#[tokio::test]
async fn batch_enqueue_reports_created_existing_and_busy() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let live = enqueue(&q, &job("k").with_idempotency_key("i1")).await.id();
    let holder = enqueue(&q, &job("k").with_resource_key("r1")).await.id();
    let batch = vec![
        job("k"),
        job("k"),
        job("k").with_idempotency_key("i1"),
        job("k").with_resource_key("r1"),
        job("k").with_idempotency_key("i2"),
        job("k").with_idempotency_key("i2"),
    ];
    let mut tx = db.pool.begin().await.unwrap();
    let out = q.enqueue_batch(&mut tx, &batch).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(out.created.len(), 3, "two keyless and one i2");
    let mut existing = out.existing.clone();
    existing.sort();
    assert_eq!(existing[0], ("i1".to_string(), live));
    assert_eq!(existing[1].0, "i2");
    assert!(out.created.contains(&existing[1].1));
    assert_eq!(out.busy, vec![("r1".to_string(), holder)]);
}

#[tokio::test]
async fn jobs_are_not_leased_before_run_at_and_by_priority_then_age() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let later = enqueue(&q, &job("k").with_run_at(RunAt::In(Duration::from_secs(3600))))
        .await
        .id();
    let low = enqueue(&q, &job("k")).await.id();
    let high = enqueue(&q, &job("k").with_priority(5)).await.id();
    assert_eq!(q.lease(&["k"], 1, "a").await.unwrap()[0].id, high);
    assert_eq!(q.lease(&["k"], 1, "a").await.unwrap()[0].id, low);
    assert!(
        q.lease(&["k"], 10, "a").await.unwrap().is_empty(),
        "job {later} is not due yet"
    );
    let other_kind = NewJob::new("other", &serde_json::json!({ "x": 1 })).unwrap();
    let other = enqueue(&q, &other_kind).await.id();
    let leased = q.lease(&["k"], 10, "a").await.unwrap();
    assert!(leased.is_empty(), "kinds filter the lease");
    let j = q.lease(&["other"], 10, "a").await.unwrap().remove(0);
    assert_eq!(j.id, other);
    assert_eq!(
        j.payload::<serde_json::Value>().unwrap(),
        serde_json::json!({ "x": 1 })
    );
}

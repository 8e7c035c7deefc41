//! Fenced writes: a holder whose lease was taken over is refused and told, whatever it tries to write.

mod common;

use common::*;
use racklift_queue::{Failure, QueueError, RunAt};
use racklift_testdb::TestDb;

#[tokio::test]
async fn stale_holder_cannot_complete_retry_snooze_or_dead_letter_after_takeover() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let id = enqueue(&q, &job("k")).await.id();

    let stale = q.lease(&["k"], 1, "a").await.unwrap().remove(0);
    expire_lease(&db.pool, id).await;
    let rescued = q.rescue(10).await.unwrap();
    assert_eq!(rescued.retried, 1);
    make_due(&db.pool, id).await;
    let fresh = q.lease(&["k"], 1, "b").await.unwrap().remove(0);
    assert_eq!(fresh.id, id);
    assert!(fresh.fence > stale.fence, "a newer lease carries a larger fence");
    assert_eq!(fresh.attempts, 2);

    let mut conn = db.pool.acquire().await.unwrap();
    let lost =
        |r: Result<(), QueueError>| matches!(r, Err(QueueError::LeaseLost { job_id, .. }) if job_id == id);
    assert!(lost(q.complete(&mut conn, stale.job_ref()).await));
    assert!(lost(
        q.fail(&mut conn, stale.job_ref(), &Failure::retryable("x"))
            .await
            .map(drop)
    ));
    assert!(lost(q.snooze(&mut conn, stale.job_ref(), RunAt::Now).await));
    assert!(lost(
        q.dead_letter(&mut conn, stale.job_ref(), "x", &Failure::fatal("x"))
            .await
            .map(drop)
    ));
    assert!(lost(q.heartbeat(stale.job_ref()).await));

    // The rightful holder is untouched by all of that.
    assert_eq!(state_of(&db.pool, id).await.as_deref(), Some("running"));
    q.heartbeat(fresh.job_ref()).await.unwrap();
    q.complete(&mut conn, fresh.job_ref()).await.unwrap();
    assert_eq!(state_of(&db.pool, id).await.as_deref(), Some("completed"));
    // Once the job is gone, a renewal says it ended rather than that someone else holds it.
    assert!(matches!(
        q.heartbeat(fresh.job_ref()).await,
        Err(QueueError::JobEnded { job_id, .. }) if job_id == id
    ));
}

#[tokio::test]
async fn revoke_moves_the_fence_so_the_holder_is_refused() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let id = enqueue(&q, &job("k")).await.id();
    let held = q.lease(&["k"], 1, "a").await.unwrap().remove(0);
    let mut conn = db.pool.acquire().await.unwrap();
    assert!(q.revoke(&mut conn, id).await.unwrap());
    assert!(matches!(
        q.heartbeat(held.job_ref()).await,
        Err(QueueError::LeaseLost { .. })
    ));
    assert!(matches!(
        q.complete(&mut conn, held.job_ref()).await,
        Err(QueueError::LeaseLost { .. })
    ));
    let again = q.lease(&["k"], 1, "b").await.unwrap().remove(0);
    assert_eq!(
        again.attempts, 1,
        "a revoked attempt is not counted against the job"
    );
    assert!(again.fence > held.fence);
}

#[tokio::test]
async fn fences_only_grow_across_jobs_and_leases() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    for _ in 0..20 {
        enqueue(&q, &job("k")).await;
    }
    let mut last = 0;
    for _ in 0..4 {
        let mut batch = q.lease(&["k"], 5, "a").await.unwrap();
        batch.sort_by_key(|j| j.fence);
        for j in batch {
            assert!(j.fence > last);
            last = j.fence;
        }
    }
}

#[tokio::test]
async fn outcome_written_inside_the_callers_transaction_rolls_back_with_it() {
    let db = TestDb::new().await;
    let q = queue(&db.pool);
    let id = enqueue(&q, &job("k")).await.id();
    let held = q.lease(&["k"], 1, "a").await.unwrap().remove(0);
    let mut tx = db.pool.begin().await.unwrap();
    q.complete(&mut tx, held.job_ref()).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(state_of(&db.pool, id).await.as_deref(), Some("running"));
    let mut tx = db.pool.begin().await.unwrap();
    q.complete(&mut tx, held.job_ref()).await.unwrap();
    q.enqueue(&mut tx, &job("next")).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(state_of(&db.pool, id).await.as_deref(), Some("completed"));
    assert_eq!(q.lease(&["next"], 5, "a").await.unwrap().len(), 1);
}

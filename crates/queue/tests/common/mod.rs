//! Shared helpers for the queue's tests against a real PostgreSQL.

#![allow(dead_code)]

use racklift_queue::{Enqueued, JobId, NewJob, Queue, QueueConfig};
use sqlx::PgPool;

pub fn queue(pool: &PgPool) -> Queue {
    Queue::new(pool.clone(), QueueConfig::default())
}

pub fn job(kind: &str) -> NewJob {
    NewJob::new(kind, &serde_json::json!({})).unwrap()
}

pub async fn enqueue(q: &Queue, job: &NewJob) -> Enqueued {
    let mut tx = q.pool().begin().await.unwrap();
    let out = q.enqueue(&mut tx, job).await.unwrap();
    tx.commit().await.unwrap();
    out
}

/// The job's state: queued or running in `jobs`, completed once it moved to `jobs_completed`.
pub async fn state_of(pool: &PgPool, id: JobId) -> Option<String> {
    sqlx::query_scalar(
        "SELECT state FROM jobs WHERE id = $1 UNION ALL SELECT 'completed' FROM jobs_completed WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await
    .unwrap()
}

/// Pretends the lease holder went silent: its lease is made to have expired a second ago.
pub async fn expire_lease(pool: &PgPool, id: JobId) {
    sqlx::query("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
}

/// Makes a queued job due now, whatever backoff it was given.
pub async fn make_due(pool: &PgPool, id: JobId) {
    sqlx::query("UPDATE jobs SET run_at = now() WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
}

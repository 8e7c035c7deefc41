//! Every SQL statement of the queue, in one place. Each write by a lease holder is conditional on its fence and
//! on the job still running, and callers check how many rows it touched.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor, Row};

use crate::job::{Fence, JobId, LeasedJob};

/// The NOTIFY channel that wakes idle workers; the payload is the job kind.
pub const CHANNEL: &str = "racklift_jobs";

pub(crate) struct InsertRow<'a> {
    pub kind: &'a str,
    pub payload: &'a serde_json::Value,
    pub priority: i16,
    pub run_at: (Option<DateTime<Utc>>, i64),
    pub max_attempts: i32,
    pub idempotency_key: Option<&'a str>,
    pub resource_key: Option<&'a str>,
}

/// Inserts one job unless a live job already has its idempotency or resource key; `None` means it was not
/// inserted. `ON CONFLICT DO NOTHING` (rather than catching a unique violation) keeps the caller's transaction
/// usable.
pub(crate) async fn insert_job(conn: &mut PgConnection, row: &InsertRow<'_>) -> sqlx::Result<Option<JobId>> {
    sqlx::query_scalar(
        "INSERT INTO jobs (kind, payload, priority, run_at, max_attempts, idempotency_key, resource_key)
         VALUES ($1, $2, $3, COALESCE($4, now() + $5 * interval '1 millisecond'), $6, $7, $8)
         ON CONFLICT DO NOTHING
         RETURNING id",
    )
    .bind(row.kind)
    .bind(row.payload)
    .bind(row.priority)
    .bind(row.run_at.0)
    .bind(row.run_at.1)
    .bind(row.max_attempts)
    .bind(row.idempotency_key)
    .bind(row.resource_key)
    .fetch_optional(conn)
    .await
}

/// Inserts many jobs in one statement; returns (id, idempotency key, resource key) of those inserted.
pub(crate) async fn insert_jobs(
    conn: &mut PgConnection,
    rows: &[InsertRow<'_>],
) -> sqlx::Result<Vec<(JobId, Option<String>, Option<String>)>> {
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind).collect();
    let payloads: Vec<&serde_json::Value> = rows.iter().map(|r| r.payload).collect();
    let priorities: Vec<i16> = rows.iter().map(|r| r.priority).collect();
    let run_at_abs: Vec<Option<DateTime<Utc>>> = rows.iter().map(|r| r.run_at.0).collect();
    let run_at_ms: Vec<i64> = rows.iter().map(|r| r.run_at.1).collect();
    let max_attempts: Vec<i32> = rows.iter().map(|r| r.max_attempts).collect();
    let idem: Vec<Option<&str>> = rows.iter().map(|r| r.idempotency_key).collect();
    let res: Vec<Option<&str>> = rows.iter().map(|r| r.resource_key).collect();
    let out = sqlx::query(
        "INSERT INTO jobs (kind, payload, priority, run_at, max_attempts, idempotency_key, resource_key)
         SELECT k, p, pr, COALESCE(ra, now() + rm * interval '1 millisecond'), ma, ik, rk
         FROM unnest($1::text[], $2::jsonb[], $3::int2[], $4::timestamptz[], $5::int8[], $6::int4[],
                     $7::text[], $8::text[]) AS t(k, p, pr, ra, rm, ma, ik, rk)
         ON CONFLICT DO NOTHING
         RETURNING id, idempotency_key, resource_key",
    )
    .bind(kinds)
    .bind(payloads)
    .bind(priorities)
    .bind(run_at_abs)
    .bind(run_at_ms)
    .bind(max_attempts)
    .bind(idem)
    .bind(res)
    .fetch_all(conn)
    .await?;
    out.into_iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect()
}

pub(crate) async fn live_by_idempotency_key(
    conn: &mut PgConnection,
    key: &str,
) -> sqlx::Result<Option<JobId>> {
    sqlx::query_scalar("SELECT id FROM jobs WHERE idempotency_key = $1 AND state IN ('queued', 'running')")
        .bind(key)
        .fetch_optional(conn)
        .await
}

pub(crate) async fn live_by_resource_key(conn: &mut PgConnection, key: &str) -> sqlx::Result<Option<JobId>> {
    sqlx::query_scalar("SELECT id FROM jobs WHERE resource_key = $1 AND state IN ('queued', 'running')")
        .bind(key)
        .fetch_optional(conn)
        .await
}

/// Claims a request's idempotency key for `retention_ms`, or takes over one whose retention has run out; `true`
/// when this transaction now holds it. A conflicting claim that is not yet committed makes this statement wait
/// for it, so concurrent requests with one key are decided one by one: the first claims, the others then find
/// its row. `job_id` stays NULL until [`bind_request_key`] names the job, in the same transaction.
pub(crate) async fn claim_request_key(
    conn: &mut PgConnection,
    scope: &str,
    key: &str,
    fingerprint: &str,
    retention_ms: i64,
) -> sqlx::Result<bool> {
    let claimed: Option<bool> = sqlx::query_scalar(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, expires_at)
         VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')
         ON CONFLICT (scope, key) DO UPDATE
             SET fingerprint = EXCLUDED.fingerprint, job_id = NULL, created_at = now(),
                 expires_at = EXCLUDED.expires_at
             WHERE idempotency_keys.expires_at <= now()
         RETURNING true",
    )
    .bind(scope)
    .bind(key)
    .bind(fingerprint)
    .bind(retention_ms)
    .fetch_optional(conn)
    .await?;
    Ok(claimed.is_some())
}

/// Names the job a claimed key made. Only the claiming transaction sees the row without a job.
pub(crate) async fn bind_request_key(
    conn: &mut PgConnection,
    scope: &str,
    key: &str,
    job_id: JobId,
) -> sqlx::Result<u64> {
    sqlx::query("UPDATE idempotency_keys SET job_id = $3 WHERE scope = $1 AND key = $2 AND job_id IS NULL")
        .bind(scope)
        .bind(key)
        .bind(job_id)
        .execute(conn)
        .await
        .map(|r| r.rows_affected())
}

/// Gives a claimed key back when its request made no job (the resource was busy), so the caller's transaction
/// stays usable and a later retry may claim it.
pub(crate) async fn release_request_key(
    conn: &mut PgConnection,
    scope: &str,
    key: &str,
) -> sqlx::Result<u64> {
    sqlx::query("DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2 AND job_id IS NULL")
        .bind(scope)
        .bind(key)
        .execute(conn)
        .await
        .map(|r| r.rows_affected())
}

/// The job and fingerprint a key is held for, while its retention lasts.
pub(crate) async fn request_key(
    conn: &mut PgConnection,
    scope: &str,
    key: &str,
) -> sqlx::Result<Option<(Option<JobId>, String)>> {
    sqlx::query_as(
        "SELECT job_id, fingerprint FROM idempotency_keys
         WHERE scope = $1 AND key = $2 AND expires_at > now()",
    )
    .bind(scope)
    .bind(key)
    .fetch_optional(conn)
    .await
}

/// Deletes up to `limit` idempotency keys whose retention has run out; returns how many. The outer predicate is
/// repeated so that a key a request took over meanwhile (a fresh `expires_at`) is re-checked and kept.
pub(crate) async fn purge_request_keys<'c>(conn: impl PgExecutor<'c>, limit: i64) -> sqlx::Result<u64> {
    sqlx::query(
        "DELETE FROM idempotency_keys
         WHERE (scope, key) IN (SELECT scope, key FROM idempotency_keys WHERE expires_at <= now() LIMIT $1)
           AND expires_at <= now()",
    )
    .bind(limit)
    .execute(conn)
    .await
    .map(|r| r.rows_affected())
}

/// Wakes idle workers for these kinds once the surrounding transaction commits.
pub(crate) async fn notify_kinds(conn: &mut PgConnection, kinds: &[&str]) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_notify($1, k) FROM unnest($2::text[]) AS k")
        .bind(CHANNEL)
        .bind(kinds)
        .execute(conn)
        .await
        .map(drop)
}

/// Claims up to `limit` due jobs of these kinds in one statement. The LIMIT sits inside the locking subquery so
/// the planner cannot claim more rows than asked, and the picked ids come back as an array so the update finds
/// its rows through the primary key (a join would hash the whole table on every claim). Every claimed job gets a
/// fresh fence from the sequence.
pub const LEASE_SQL: &str = "
    UPDATE jobs j
    SET state = 'running', attempts = j.attempts + 1, fence = nextval('job_fence_seq'),
        lease_expires_at = now() + $3 * interval '1 millisecond', leased_by = $4
    WHERE j.id = ANY(ARRAY(
        SELECT id FROM jobs
        WHERE state = 'queued' AND run_at <= now() AND kind = ANY($1)
        ORDER BY priority DESC, run_at, id
        LIMIT $2
        FOR UPDATE SKIP LOCKED))
    RETURNING j.id, j.kind, j.payload::text AS payload, j.priority, j.attempts, j.max_attempts, j.fence,
              j.resource_key, j.idempotency_key, j.created_at";

/// Columns by position, in `LEASE_SQL`'s `RETURNING` order: a lease decodes hundreds of rows, and looking each
/// column up by name was a visible part of the worker's profile.
impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for LeasedJob {
    fn from_row(row: &'r sqlx::postgres::PgRow) -> sqlx::Result<LeasedJob> {
        Ok(LeasedJob {
            id: row.try_get(0)?,
            kind: row.try_get(1)?,
            payload: row.try_get(2)?,
            priority: row.try_get(3)?,
            attempts: row.try_get(4)?,
            max_attempts: row.try_get(5)?,
            fence: row.try_get(6)?,
            resource_key: row.try_get(7)?,
            idempotency_key: row.try_get(8)?,
            created_at: row.try_get(9)?,
        })
    }
}

pub(crate) async fn lease<'c>(
    conn: impl PgExecutor<'c>,
    kinds: &[&str],
    limit: i64,
    ttl_ms: i64,
    holder: &str,
) -> sqlx::Result<Vec<LeasedJob>> {
    sqlx::query_as(LEASE_SQL)
        .bind(kinds)
        .bind(limit)
        .bind(ttl_ms)
        .bind(holder)
        .fetch_all(conn)
        .await
}

/// Milliseconds until the earliest queued job of `kinds` is due (zero or less: due now); `None` with none queued.
pub(crate) async fn next_due_in_ms<'c>(
    conn: impl PgExecutor<'c>,
    kinds: &[&str],
) -> sqlx::Result<Option<f64>> {
    sqlx::query_scalar(
        "SELECT (extract(epoch FROM run_at - now()) * 1000)::float8 FROM jobs
         WHERE state = 'queued' AND kind = ANY($1) ORDER BY run_at LIMIT 1",
    )
    .bind(kinds)
    .fetch_optional(conn)
    .await
}

/// Extends a lease only while its fence is still current. Zero rows: the lease is gone.
pub(crate) async fn heartbeat<'c>(
    conn: impl PgExecutor<'c>,
    id: JobId,
    fence: Fence,
    ttl_ms: i64,
) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE jobs SET lease_expires_at = now() + $3 * interval '1 millisecond'
         WHERE id = $1 AND fence = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(fence)
    .bind(ttl_ms)
    .execute(conn)
    .await
    .map(|r| r.rows_affected())
}

pub(crate) async fn job_exists<'c>(conn: impl PgExecutor<'c>, id: JobId) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1)")
        .bind(id)
        .fetch_one(conn)
        .await
}

/// The batch completion statement: `$1` job ids, `$2` their fences; returns the ids whose fence was current.
/// Matching ids and fences as two sets is exact: each fence value is issued to one lease of one job only, so a row
/// whose fence is among `$2` holds the very lease named beside it. (A join with `unnest` would make the planner
/// hash the whole table.)
pub(crate) fn complete_sql(keep_completed: bool) -> &'static str {
    if keep_completed {
        "WITH done AS (
             DELETE FROM jobs
             WHERE id = ANY($1::int8[]) AND fence = ANY($2::int8[]) AND state = 'running'
             RETURNING id, kind, payload, priority, attempts, max_attempts, fence, leased_by, idempotency_key,
                       resource_key, errors, created_at)
         INSERT INTO jobs_completed
             SELECT id, kind, payload, priority, attempts, max_attempts, fence, leased_by, idempotency_key,
                    resource_key, errors, created_at, now()
             FROM done
         RETURNING id"
    } else {
        "DELETE FROM jobs
         WHERE id = ANY($1::int8[]) AND fence = ANY($2::int8[]) AND state = 'running'
         RETURNING id"
    }
}

/// Completes many jobs at once; returns the ids whose fence was still current. Completed rows move to
/// `jobs_completed` for retention, or are only deleted when retention is zero.
pub(crate) async fn complete_many<'c>(
    conn: impl PgExecutor<'c>,
    ids: &[JobId],
    fences: &[Fence],
    keep_completed: bool,
) -> sqlx::Result<Vec<JobId>> {
    sqlx::query_scalar(complete_sql(keep_completed))
        .bind(ids)
        .bind(fences)
        .fetch_all(conn)
        .await
}

/// Queues a running job again after `delay_ms`, appending the error to its history. The history keeps 50
/// entries; past that the second-oldest is dropped, so the first error is always kept for the dead letter.
pub(crate) async fn retry<'c>(
    conn: impl PgExecutor<'c>,
    id: JobId,
    fence: Fence,
    delay_ms: i64,
    error: &str,
    class: &str,
) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE jobs
         SET state = 'queued', run_at = now() + $3 * interval '1 millisecond', lease_expires_at = NULL,
             leased_by = NULL,
             errors = (CASE WHEN jsonb_array_length(errors) >= 50 THEN errors - 1 ELSE errors END)
                      || jsonb_build_array(jsonb_build_object(
                             'attempt', attempts, 'at', now(), 'error', $4::text, 'class', $5::text))
         WHERE id = $1 AND fence = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(fence)
    .bind(delay_ms)
    .bind(error)
    .bind(class)
    .execute(conn)
    .await
    .map(|r| r.rows_affected())
}

/// Queues running jobs again without counting the attempt (waits whose condition is not met yet), each at its
/// own time; returns the ids whose fence was still current.
pub(crate) async fn snooze_many<'c>(
    conn: impl PgExecutor<'c>,
    ids: &[JobId],
    fences: &[Fence],
    at: &[Option<DateTime<Utc>>],
    delay_ms: &[i64],
) -> sqlx::Result<Vec<JobId>> {
    sqlx::query_scalar(
        "UPDATE jobs j
         SET state = 'queued', run_at = COALESCE(s.at, now() + s.delay_ms * interval '1 millisecond'),
             attempts = j.attempts - 1, lease_expires_at = NULL, leased_by = NULL
         FROM unnest($1::int8[], $2::int8[], $3::timestamptz[], $4::int8[]) AS s(id, fence, at, delay_ms)
         WHERE j.id = s.id AND j.fence = s.fence AND j.state = 'running'
         RETURNING j.id",
    )
    .bind(ids)
    .bind(fences)
    .bind(at)
    .bind(delay_ms)
    .fetch_all(conn)
    .await
}

pub(crate) struct DeadLetterRow<'a> {
    pub reason: &'a str,
    pub error: &'a str,
    pub class: &'a str,
    pub error_class: Option<&'a str>,
    pub context: &'a serde_json::Value,
}

/// Moves a running job to `dead_letters` in one statement; `None` if the fence was no longer current.
pub(crate) async fn dead_letter<'c>(
    conn: impl PgExecutor<'c>,
    id: JobId,
    fence: Fence,
    row: &DeadLetterRow<'_>,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "WITH moved AS (
             DELETE FROM jobs WHERE id = $1 AND fence = $2 AND state = 'running' RETURNING *
         )
         INSERT INTO dead_letters (job_id, kind, payload, priority, idempotency_key, resource_key, attempts,
                                   max_attempts, fence, reason, error_class, first_error, last_error, errors,
                                   context, job_created_at)
         SELECT id, kind, payload, priority, idempotency_key, resource_key, attempts, max_attempts, fence, $3,
                $6, COALESCE(errors -> 0 ->> 'error', $4), $4,
                errors || jsonb_build_array(jsonb_build_object(
                    'attempt', attempts, 'at', now(), 'error', $4::text, 'class', $5::text)),
                $7, created_at
         FROM moved
         RETURNING id",
    )
    .bind(id)
    .bind(fence)
    .bind(row.reason)
    .bind(row.error)
    .bind(row.class)
    .bind(row.error_class)
    .bind(row.context)
    .fetch_optional(conn)
    .await
}

/// Takes away a running job's lease: a newer fence makes the holder's writes fail and its heartbeat notice, and
/// the job is due again at once. The interrupted attempt is not counted against the job.
pub(crate) async fn revoke<'c>(conn: impl PgExecutor<'c>, id: JobId) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "UPDATE jobs
         SET fence = nextval('job_fence_seq'), state = 'queued', run_at = now(), attempts = attempts - 1,
             lease_expires_at = NULL, leased_by = NULL
         WHERE id = $1 AND state = 'running'
         RETURNING kind",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Makes a queued job due now (an event arrived that its wait was waiting for); returns its kind if it was queued.
pub(crate) async fn wake(conn: &mut PgConnection, id: JobId) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "UPDATE jobs SET run_at = now() WHERE id = $1 AND state = 'queued' AND run_at > now() RETURNING kind",
    )
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Locks up to `limit` running jobs whose lease expired, for the rescuer to retry or dead-letter one by one in
/// the same transaction (the lock plus the fenced writes re-check the predicate: River #1302).
pub(crate) async fn lock_expired(
    conn: &mut PgConnection,
    limit: i64,
) -> sqlx::Result<Vec<(JobId, Fence, i32, i32, Option<String>, String)>> {
    let rows = sqlx::query(
        "SELECT id, fence, attempts, max_attempts, leased_by, kind FROM jobs
         WHERE state = 'running' AND lease_expires_at < now()
         ORDER BY lease_expires_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED",
    )
    .bind(limit)
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok((
                r.try_get(0)?,
                r.try_get(1)?,
                r.try_get(2)?,
                r.try_get(3)?,
                r.try_get(4)?,
                r.try_get(5)?,
            ))
        })
        .collect()
}

/// Deletes up to `limit` completed jobs older than `age_ms`; returns how many.
pub(crate) async fn purge_completed<'c>(
    conn: impl PgExecutor<'c>,
    age_ms: i64,
    limit: i64,
) -> sqlx::Result<u64> {
    sqlx::query(
        "DELETE FROM jobs_completed WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM jobs_completed
             WHERE finished_at < now() - $1 * interval '1 millisecond'
             LIMIT $2))",
    )
    .bind(age_ms)
    .bind(limit)
    .execute(conn)
    .await
    .map(|r| r.rows_affected())
}

/// One (kind, state) group of the jobs table, for the scrape-time gauges.
#[derive(sqlx::FromRow)]
pub(crate) struct JobCount {
    pub kind: String,
    pub state: String,
    pub jobs: i64,
    /// Seconds since the oldest due `queued` job of the group fell due; 0 for other states or none due.
    pub oldest_due_secs: f64,
}

/// Jobs per kind and state, with how long the oldest due queued one has waited. Completed jobs are counted too
/// (the dashboard shows them until retention purges them), which bounds that scan by the retention.
pub(crate) async fn job_counts<'c>(conn: impl PgExecutor<'c>) -> sqlx::Result<Vec<JobCount>> {
    sqlx::query_as(
        "SELECT kind, state, count(*) AS jobs,
                COALESCE(extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'queued' AND run_at <= now())),
                         0)::float8 AS oldest_due_secs
         FROM jobs
         GROUP BY kind, state
         UNION ALL
         SELECT kind, 'completed', count(*), 0 FROM jobs_completed GROUP BY kind",
    )
    .fetch_all(conn)
    .await
}

/// Untriaged dead letters per kind (the partial index `dead_letters_open` covers the predicate).
pub(crate) async fn open_dead_letters<'c>(conn: impl PgExecutor<'c>) -> sqlx::Result<Vec<(String, i64)>> {
    sqlx::query_as("SELECT kind, count(*) FROM dead_letters WHERE triage_status = 'open' GROUP BY kind")
        .fetch_all(conn)
        .await
}

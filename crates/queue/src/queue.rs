//! The queue's operations. Writes that belong with a caller's own writes take a connection (pass `&mut *tx`);
//! lease and heartbeat use the pool, because a lease must commit at once to be seen by others.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgPool};

use crate::backoff::Backoff;
use crate::error::QueueError;
use crate::job::{
    BatchEnqueued, Enqueued, ErrorClass, FailOutcome, Failure, Fence, JobId, LeasedJob, NewJob, RunAt,
};
use crate::sql;

/// Queue-wide settings. Durations carry their unit in the type.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueConfig {
    /// How long a lease lasts without a heartbeat. Heartbeats run every third of it.
    pub lease_ttl: Duration,
    /// Spacing of durable retries.
    pub backoff: Backoff,
    /// How long completed jobs are kept; zero deletes a job the moment it completes.
    pub completed_retention: Duration,
    /// How long a request's idempotency key is remembered ([`Queue::enqueue_once`]): within it a retry finds the
    /// job the key made, finished or not; afterwards the key is free again.
    pub idempotency_retention: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            lease_ttl: Duration::from_secs(30),
            backoff: Backoff::default(),
            completed_retention: Duration::from_secs(24 * 3600),
            idempotency_retention: Duration::from_secs(24 * 3600),
        }
    }
}

/// The identity a lease holder writes with: the job and the fence it was leased under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRef {
    pub id: JobId,
    pub fence: Fence,
    pub attempts: i32,
    pub max_attempts: i32,
    /// The job's kind as a bounded metrics label ([`racklift_metrics::job_kind`]), so the fenced writes can count
    /// per kind without a look-up and the handle stays `Copy`.
    pub(crate) kind: &'static str,
}

impl JobRef {
    /// The job's kind as a metrics label (`other` past the label's cap).
    pub fn kind_label(&self) -> &'static str {
        self.kind
    }
}

impl LeasedJob {
    pub fn job_ref(&self) -> JobRef {
        JobRef {
            id: self.id,
            fence: self.fence,
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            kind: racklift_metrics::job_kind(&self.kind),
        }
    }
}

/// What one rescuer pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RescueReport {
    pub retried: u64,
    pub dead_lettered: u64,
}

#[derive(Clone)]
pub struct Queue {
    pool: PgPool,
    config: Arc<QueueConfig>,
}

pub(crate) fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

fn lease_lost(job: JobRef) -> QueueError {
    QueueError::LeaseLost {
        job_id: job.id,
        fence: job.fence,
    }
}

/// A fenced outcome write (complete, retry, snooze, dead letter) found the job no longer held under this fence:
/// counted, because two holders believing they own one job is what the FenceRejections alert is about.
///
/// The queue's counters (retries, dead letters, rejections) are counted here rather than in the worker pool
/// because handlers that finish a job in their own transaction (`Outcome::Finished`) write through these same
/// methods. They count when the statement succeeds, before the caller commits: a transaction rolled back
/// afterwards over-counts by its writes, which is rare and errs on the side of alerting.
fn fence_rejected(job: JobRef) -> QueueError {
    racklift_metrics::global()
        .queue_fence_rejections
        .with_label_values(&[job.kind])
        .inc();
    lease_lost(job)
}

/// Job states in the table, for the depth gauge: each known kind reports all three, zeros included.
const JOB_STATES: [&str; 3] = ["queued", "running", "completed"];

impl Queue {
    pub fn new(pool: PgPool, config: QueueConfig) -> Queue {
        Queue {
            pool,
            config: Arc::new(config),
        }
    }

    /// The same queue on a new pool of at most `connections` to the same database, opened lazily, with the same
    /// connect options and so the same session bounds (the heartbeats' pool).
    pub fn with_dedicated_pool(&self, connections: u32) -> Queue {
        let options = (*self.pool.connect_options()).clone();
        Queue {
            pool: crate::session::pool_options()
                .max_connections(connections.max(1))
                .connect_lazy_with(options),
            config: self.config.clone(),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Enqueues one job in the caller's transaction. A live job with the same idempotency key is returned instead;
    /// a live job holding the same resource key is an error. Idle workers are woken when the transaction commits.
    pub async fn enqueue(&self, conn: &mut PgConnection, job: &NewJob) -> Result<Enqueued, QueueError> {
        let row = insert_row(job);
        // A conflicting job can finish between the insert and the look-up; then the insert is simply tried again.
        for _ in 0..8 {
            if let Some(id) = sql::insert_job(conn, &row).await? {
                if is_due_now(job.run_at) {
                    sql::notify_kinds(conn, &[&job.kind]).await?;
                }
                return Ok(Enqueued::Created(id));
            }
            match resolve_conflict(conn, job.idempotency_key.as_deref(), job.resource_key.as_deref()).await? {
                Some(Conflict::Existing(id)) => return Ok(Enqueued::Existing(id)),
                Some(Conflict::Busy(existing)) => {
                    let resource_key = job.resource_key.clone().unwrap_or_default();
                    return Err(QueueError::ResourceBusy {
                        resource_key,
                        existing,
                    });
                }
                None => continue,
            }
        }
        Err(QueueError::Database(sqlx::Error::Protocol(
            "enqueue kept conflicting with jobs that finished before they could be read".into(),
        )))
    }

    /// Enqueues many jobs with one insert in the caller's transaction.
    pub async fn enqueue_batch(
        &self,
        conn: &mut PgConnection,
        jobs: &[NewJob],
    ) -> Result<BatchEnqueued, QueueError> {
        let mut out = BatchEnqueued::default();
        let mut pending: Vec<&NewJob> = jobs.iter().collect();
        for _ in 0..8 {
            if pending.is_empty() {
                break;
            }
            let rows: Vec<_> = pending.iter().map(|j| insert_row(j)).collect();
            let inserted = sql::insert_jobs(conn, &rows).await?;
            let mut kinds: Vec<&str> = pending
                .iter()
                .filter(|j| is_due_now(j.run_at))
                .map(|j| j.kind.as_str())
                .collect();
            kinds.sort_unstable();
            kinds.dedup();
            // Which keyed jobs went in: match the returned keys as a multiset (a batch may repeat a key).
            let mut went_in: HashMap<(Option<String>, Option<String>), usize> = HashMap::new();
            for (id, idem, res) in inserted {
                out.created.push(id);
                if idem.is_some() || res.is_some() {
                    *went_in.entry((idem, res)).or_default() += 1;
                }
            }
            let mut retry = Vec::new();
            for job in pending {
                if job.idempotency_key.is_none() && job.resource_key.is_none() {
                    continue;
                }
                let key = (job.idempotency_key.clone(), job.resource_key.clone());
                if let Some(n) = went_in.get_mut(&key).filter(|n| **n > 0) {
                    *n -= 1;
                    continue;
                }
                match resolve_conflict(conn, job.idempotency_key.as_deref(), job.resource_key.as_deref())
                    .await?
                {
                    Some(Conflict::Existing(id)) => out
                        .existing
                        .push((job.idempotency_key.clone().unwrap_or_default(), id)),
                    Some(Conflict::Busy(id)) => {
                        out.busy.push((job.resource_key.clone().unwrap_or_default(), id))
                    }
                    None => retry.push(job),
                }
            }
            if !kinds.is_empty() {
                sql::notify_kinds(conn, &kinds).await?;
            }
            pending = retry;
        }
        Ok(out)
    }

    /// Claims up to `limit` due jobs of these kinds for `holder`, each with a fresh fencing token.
    pub async fn lease(
        &self,
        kinds: &[&str],
        limit: usize,
        holder: &str,
    ) -> Result<Vec<LeasedJob>, QueueError> {
        let ttl = millis(self.config.lease_ttl);
        Ok(sql::lease(&self.pool, kinds, limit as i64, ttl, holder).await?)
    }

    /// How long until the earliest queued job of `kinds` is due (zero if one is due now); `None` with none queued.
    pub async fn next_due(&self, kinds: &[&str]) -> Result<Option<Duration>, QueueError> {
        let ms = sql::next_due_in_ms(&self.pool, kinds).await?;
        Ok(ms.map(|ms| Duration::from_secs_f64(ms.max(0.0) / 1000.0)))
    }

    /// Extends the lease while `job`'s fence is current. Otherwise `JobEnded` when the job has left the table
    /// (an outcome was written under its fence) and `LeaseLost` when it is still there under another holder or
    /// none. A renewal that waited on the holder's own finishing transaction sees the first.
    pub async fn heartbeat(&self, job: JobRef) -> Result<(), QueueError> {
        if sql::heartbeat(&self.pool, job.id, job.fence, millis(self.config.lease_ttl)).await? == 1 {
            return Ok(());
        }
        // A statement of its own, so it sees what committed while the renewal waited for the row.
        if sql::job_exists(&self.pool, job.id).await? {
            Err(lease_lost(job))
        } else {
            Err(QueueError::JobEnded {
                job_id: job.id,
                fence: job.fence,
            })
        }
    }

    /// Completes a job in the caller's transaction, fenced.
    pub async fn complete(&self, conn: &mut PgConnection, job: JobRef) -> Result<(), QueueError> {
        let done = sql::complete_many(conn, &[job.id], &[job.fence], self.keep_completed()).await?;
        if done.len() == 1 {
            Ok(())
        } else {
            Err(fence_rejected(job))
        }
    }

    /// Completes many jobs in one statement; returns those whose fence was still current.
    pub async fn complete_many(
        &self,
        conn: &mut PgConnection,
        jobs: &[(JobId, Fence)],
    ) -> Result<Vec<JobId>, QueueError> {
        let (ids, fences): (Vec<_>, Vec<_>) = jobs.iter().copied().unzip();
        Ok(sql::complete_many(conn, &ids, &fences, self.keep_completed()).await?)
    }

    /// Snoozes many jobs in one statement, each until its own time; returns those whose fence was still current.
    pub async fn snooze_many(
        &self,
        conn: &mut PgConnection,
        jobs: &[(JobId, Fence, RunAt)],
    ) -> Result<Vec<JobId>, QueueError> {
        let ids: Vec<JobId> = jobs.iter().map(|j| j.0).collect();
        let fences: Vec<Fence> = jobs.iter().map(|j| j.1).collect();
        let (at, delay_ms): (Vec<_>, Vec<_>) = jobs.iter().map(|j| j.2.to_sql()).unzip();
        Ok(sql::snooze_many(conn, &ids, &fences, &at, &delay_ms).await?)
    }

    /// Records a failed attempt: a retryable failure with attempts left is queued again after a durable backoff
    /// with full jitter; a fatal one, or the last attempt's, moves the job to `dead_letters` in the same statement.
    pub async fn fail(
        &self,
        conn: &mut PgConnection,
        job: JobRef,
        failure: &Failure,
    ) -> Result<FailOutcome, QueueError> {
        match failure.class {
            ErrorClass::Fatal => self.dead_letter(conn, job, "fatal", failure).await,
            ErrorClass::Retryable if job.attempts >= job.max_attempts => {
                self.dead_letter(conn, job, "exhausted", failure).await
            }
            ErrorClass::Retryable => {
                let attempt = job.attempts.max(1) as u32;
                let delay = failure
                    .retry_in
                    .unwrap_or_else(|| self.config.backoff.sample(attempt));
                let class = failure.error_class.as_deref().unwrap_or(failure.class.as_str());
                match sql::retry(conn, job.id, job.fence, millis(delay), &failure.message, class).await? {
                    1 => {
                        racklift_metrics::global()
                            .queue_retries
                            .with_label_values(&[job.kind])
                            .inc();
                        Ok(FailOutcome::Retried { delay })
                    }
                    _ => Err(fence_rejected(job)),
                }
            }
        }
    }

    /// Moves a running job to `dead_letters` with `reason`, whatever attempts it has left.
    pub async fn dead_letter(
        &self,
        conn: &mut PgConnection,
        job: JobRef,
        reason: &str,
        failure: &Failure,
    ) -> Result<FailOutcome, QueueError> {
        let row = sql::DeadLetterRow {
            reason,
            error: &failure.message,
            class: failure.class.as_str(),
            error_class: failure.error_class.as_deref(),
            context: &failure.context,
        };
        match sql::dead_letter(conn, job.id, job.fence, &row).await? {
            Some(dead_letter_id) => {
                let class = racklift_metrics::error_class(row.error_class.unwrap_or(row.class));
                racklift_metrics::global()
                    .dead_letters_opened
                    .with_label_values(&[job.kind, class])
                    .inc();
                Ok(FailOutcome::DeadLettered { dead_letter_id })
            }
            None => Err(fence_rejected(job)),
        }
    }

    /// Queues a running job again at `until` without counting the attempt (a wait that is not met yet).
    pub async fn snooze(&self, conn: &mut PgConnection, job: JobRef, until: RunAt) -> Result<(), QueueError> {
        let (at, delay_ms) = until.to_sql();
        let snoozed = sql::snooze_many(conn, &[job.id], &[job.fence], &[at], &[delay_ms]).await?;
        if snoozed.len() == 1 {
            Ok(())
        } else {
            Err(fence_rejected(job))
        }
    }

    /// Takes the lease away from whoever holds job `id` (its heartbeat notices and cancels the handler) and makes
    /// the job due again. Returns whether the job was running.
    pub async fn revoke(&self, conn: &mut PgConnection, id: JobId) -> Result<bool, QueueError> {
        match sql::revoke(&mut *conn, id).await? {
            Some(kind) => {
                sql::notify_kinds(conn, &[&kind]).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Makes a queued job due now and wakes the workers (an event its wait was waiting for arrived).
    pub async fn wake(&self, conn: &mut PgConnection, id: JobId) -> Result<bool, QueueError> {
        match sql::wake(conn, id).await? {
            Some(kind) => {
                sql::notify_kinds(conn, &[&kind]).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// One rescuer pass: jobs whose lease expired (their worker died or stalled) are retried with backoff, or
    /// dead-lettered when their attempts are spent, so a job that keeps killing its worker cannot loop forever.
    pub async fn rescue(&self, limit: usize) -> Result<RescueReport, QueueError> {
        let mut tx = self.pool.begin().await?;
        let mut report = RescueReport::default();
        for (id, fence, attempts, max_attempts, holder, kind) in
            sql::lock_expired(&mut tx, limit as i64).await?
        {
            let job = JobRef {
                id,
                fence,
                attempts,
                max_attempts,
                kind: racklift_metrics::job_kind(&kind),
            };
            let holder = holder.as_deref().unwrap_or("unknown");
            let failure = Failure::retryable(format!("lease expired: worker {holder} stopped heartbeating"))
                .with_error_class("lease_expired");
            match self.fail(&mut tx, job, &failure).await? {
                FailOutcome::Retried { .. } => report.retried += 1,
                FailOutcome::DeadLettered { .. } => report.dead_lettered += 1,
            }
        }
        tx.commit().await?;
        Ok(report)
    }

    /// Deletes completed jobs older than the retention, in bounded batches; returns how many.
    pub async fn purge_completed(&self) -> Result<u64, QueueError> {
        let age = millis(self.config.completed_retention);
        let mut total = 0;
        loop {
            let n = sql::purge_completed(&self.pool, age, 1000).await?;
            total += n;
            if n < 1000 {
                return Ok(total);
            }
        }
    }

    fn keep_completed(&self) -> bool {
        !self.config.completed_retention.is_zero()
    }

    /// Reads the queue's gauges from the tables and sets them: `racklift_queue_jobs{kind,state}`,
    /// `racklift_queue_oldest_due_seconds{kind}` and `racklift_dead_letters_open{kind}`. Every kind in `kinds`
    /// (the ones this process knows) reports zeros rather than nothing, so a dashboard shows an empty queue as
    /// empty and alerts see the series before the first job. Called at scrape time; two cheap GROUP BY
    /// statements.
    pub async fn sample_gauges(&self, kinds: &[&str]) -> Result<(), QueueError> {
        let counts = sql::job_counts(&self.pool).await?;
        let open = sql::open_dead_letters(&self.pool).await?;
        let label = racklift_metrics::job_kind;
        let known: BTreeSet<&'static str> = kinds
            .iter()
            .map(|&k| label(k))
            .chain(counts.iter().map(|c| label(c.kind.as_str())))
            .chain(open.iter().map(|(k, _)| label(k.as_str())))
            .collect();
        let mut depth: BTreeMap<(&str, &str), f64> = BTreeMap::new();
        let mut lag: BTreeMap<&str, f64> = BTreeMap::new();
        let mut dead: BTreeMap<&str, f64> = BTreeMap::new();
        for &kind in &known {
            for state in JOB_STATES {
                depth.insert((kind, state), 0.0);
            }
            lag.insert(kind, 0.0);
            dead.insert(kind, 0.0);
        }
        // Several kinds may share the `other` label: their counts add up and the worst lag wins.
        for c in &counts {
            let kind = label(c.kind.as_str());
            if let Some(&state) = JOB_STATES.iter().find(|s| **s == c.state) {
                *depth.entry((kind, state)).or_default() += c.jobs as f64;
            }
            let waited = lag.entry(kind).or_default();
            *waited = waited.max(c.oldest_due_secs);
        }
        for (kind, n) in &open {
            *dead.entry(label(kind.as_str())).or_default() += *n as f64;
        }
        let m = racklift_metrics::global();
        racklift_metrics::set_gauges(
            &m.queue_jobs,
            depth.into_iter().map(|((k, s), v)| (vec![k, s], v)),
        );
        racklift_metrics::set_gauges(&m.queue_oldest_due, lag.into_iter().map(|(k, v)| (vec![k], v)));
        racklift_metrics::set_gauges(&m.dead_letters_open, dead.into_iter().map(|(k, v)| (vec![k], v)));
        Ok(())
    }
}

enum Conflict {
    Existing(JobId),
    Busy(JobId),
}

async fn resolve_conflict(
    conn: &mut PgConnection,
    idempotency_key: Option<&str>,
    resource_key: Option<&str>,
) -> Result<Option<Conflict>, QueueError> {
    if let Some(key) = idempotency_key
        && let Some(id) = sql::live_by_idempotency_key(conn, key).await?
    {
        return Ok(Some(Conflict::Existing(id)));
    }
    if let Some(key) = resource_key
        && let Some(id) = sql::live_by_resource_key(conn, key).await?
    {
        return Ok(Some(Conflict::Busy(id)));
    }
    Ok(None)
}

fn insert_row(job: &NewJob) -> sql::InsertRow<'_> {
    sql::InsertRow {
        kind: &job.kind,
        payload: &job.payload,
        priority: job.priority,
        run_at: job.run_at.to_sql(),
        max_attempts: job.max_attempts,
        idempotency_key: job.idempotency_key.as_deref(),
        resource_key: job.resource_key.as_deref(),
    }
}

fn is_due_now(run_at: RunAt) -> bool {
    match run_at {
        RunAt::Now => true,
        RunAt::In(d) => d.is_zero(),
        RunAt::At(_) => false,
    }
}

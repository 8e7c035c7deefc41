//! Batched outcomes: handlers that simply finished or snoozed hand their (job, fence) to one task that writes
//! everything waiting in one fenced statement per outcome. Under load batches grow by themselves; idle, an outcome
//! is written at once. Each handler still learns whether its own write was accepted. Wait steps that find nothing
//! new snooze by the thousand in a fleet, so their snoozes share statements (and commits) like completions do.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::error::QueueError;
use crate::job::{Fence, JobId, RunAt};
use crate::queue::{JobRef, Queue};

/// The largest batch one flush writes.
const MAX_BATCH: usize = 5000;
/// How long a batch of only snoozes waits for company, and how many it waits for at most.
const SNOOZE_LINGER: Duration = Duration::from_millis(20);
const SNOOZE_BATCH: usize = 64;

struct Request {
    id: JobId,
    fence: Fence,
    kind: &'static str,
    /// `None` completes the job; a time snoozes it until then.
    snooze: Option<RunAt>,
    /// Told whether the write was accepted.
    done: oneshot::Sender<bool>,
}

#[derive(Clone)]
pub(crate) struct Completer {
    tx: mpsc::Sender<Request>,
}

impl Completer {
    /// Starts the completer task; it ends when every `Completer` clone is dropped and its queue is empty.
    pub(crate) fn start(queue: Queue, concurrent_flushes: usize) -> (Completer, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(MAX_BATCH * 2);
        let task = tokio::spawn(run(queue, rx, concurrent_flushes.max(1)));
        (Completer { tx }, task)
    }

    /// Completes the job; `false` when its fence was no longer current (or the write kept failing, in which case
    /// the lease runs out and the rescuer runs the job again: at least once, never lost).
    pub(crate) async fn complete(&self, job: JobRef) -> bool {
        self.submit(job, None).await
    }

    /// Queues the job again at `until` without counting the attempt; `false` as for [`Completer::complete`].
    pub(crate) async fn snooze(&self, job: JobRef, until: RunAt) -> bool {
        self.submit(job, Some(until)).await
    }

    async fn submit(&self, job: JobRef, snooze: Option<RunAt>) -> bool {
        let (done, accepted) = oneshot::channel();
        let request = Request {
            id: job.id,
            fence: job.fence,
            kind: job.kind,
            snooze,
            done,
        };
        if self.tx.send(request).await.is_err() {
            return false;
        }
        accepted.await.unwrap_or(false)
    }
}

async fn run(queue: Queue, mut rx: mpsc::Receiver<Request>, concurrent_flushes: usize) {
    let flushes = Arc::new(Semaphore::new(concurrent_flushes));
    let mut in_flight = tokio::task::JoinSet::new();
    while let Some(first) = rx.recv().await {
        // A free flush first, then the batch: whatever arrives while the last statement is in flight joins this
        // batch. Collected the other way round, the batch would hold only what came in the same instant as
        // `first`, and busy pools would alternate between full statements and statements of a few jobs, each
        // paying for its own commit.
        let Ok(permit) = flushes.clone().acquire_owned().await else {
            break;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(req) => batch.push(req),
                Err(_) => break,
            }
        }
        // A few snoozes and nothing else: wait a moment for more. A snoozed job is not due for a while anyway, and
        // a fleet's wait polls trickle in a few per millisecond, so without this nearly every poll paid for its own
        // statement and commit. Completions never wait: once one is in the batch it is written at once.
        if batch.len() < SNOOZE_BATCH && batch.iter().all(|r| r.snooze.is_some()) {
            let until = tokio::time::Instant::now() + SNOOZE_LINGER;
            while batch.len() < SNOOZE_BATCH {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(req)) => {
                        let completion = req.snooze.is_none();
                        batch.push(req);
                        if completion {
                            break;
                        }
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }
        let queue = queue.clone();
        in_flight.spawn(async move {
            let (snoozes, completions): (Vec<Request>, Vec<Request>) =
                batch.into_iter().partition(|r| r.snooze.is_some());
            if !completions.is_empty() {
                flush(&queue, completions).await;
            }
            if !snoozes.is_empty() {
                flush(&queue, snoozes).await;
            }
            drop(permit);
        });
        while in_flight.try_join_next().is_some() {}
    }
    while in_flight.join_next().await.is_some() {}
}

/// Writes one batch of a single outcome (all completions or all snoozes) and tells each handler its answer.
async fn flush(queue: &Queue, batch: Vec<Request>) {
    let mut delay = Duration::from_millis(50);
    // Retried for up to half a lease: the outcomes are known and the leases still held, so a database restarting
    // or failing over for a few seconds should not send every job of the batch through lease expiry.
    let budget = queue.config().lease_ttl / 2;
    let started = std::time::Instant::now();
    for attempt in 1.. {
        match write(queue, &batch).await {
            Ok(mut accepted) => {
                accepted.sort_unstable();
                for request in batch {
                    let ok = accepted.binary_search(&request.id).is_ok();
                    if !ok {
                        racklift_metrics::global()
                            .queue_fence_rejections
                            .with_label_values(&[request.kind])
                            .inc();
                        tracing::warn!(
                            job_id = request.id,
                            fence = request.fence,
                            "outcome rejected: the lease was no longer held"
                        );
                    }
                    let _ = request.done.send(ok);
                }
                return;
            }
            Err(error) => {
                tracing::warn!(jobs = batch.len(), attempt, error = %error.report(),
                    "writing a batch of outcomes failed");
                if started.elapsed() + delay >= budget {
                    break;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
        }
    }
    for request in batch {
        let _ = request.done.send(false);
    }
}

async fn write(queue: &Queue, batch: &[Request]) -> Result<Vec<JobId>, QueueError> {
    let mut conn = queue.pool().acquire().await?;
    if batch.first().is_some_and(|r| r.snooze.is_some()) {
        let jobs: Vec<(JobId, Fence, RunAt)> = batch
            .iter()
            .filter_map(|r| r.snooze.map(|until| (r.id, r.fence, until)))
            .collect();
        queue.snooze_many(&mut conn, &jobs).await
    } else {
        let jobs: Vec<(JobId, Fence)> = batch.iter().map(|r| (r.id, r.fence)).collect();
        queue.complete_many(&mut conn, &jobs).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use racklift_testdb::{TestDb, wait_for};

    use super::*;
    use crate::{NewJob, QueueConfig};

    /// Hands one completion straight to the completer's channel; returns once it is in the channel.
    async fn send(completer: &Completer, job: JobRef) -> oneshot::Receiver<bool> {
        let (done, accepted) = oneshot::channel();
        let request = Request {
            id: job.id,
            fence: job.fence,
            kind: job.kind,
            snooze: None,
            done,
        };
        assert!(completer.tx.send(request).await.is_ok());
        accepted
    }

    /// With one statement in flight, outcomes that arrive while it runs are written together in the next one, even
    /// when the first of them arrived alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn outcomes_that_arrive_during_a_flush_share_the_next_statement() {
        let db = TestDb::new().await;
        let queue = Queue::new(db.pool.clone(), QueueConfig::default());
        let mut conn = db.pool.acquire().await.unwrap();
        for _ in 0..5 {
            let job = NewJob::new("k", &serde_json::json!({})).unwrap();
            queue.enqueue(&mut conn, &job).await.unwrap();
        }
        drop(conn);
        let jobs: Vec<JobRef> = queue
            .lease(&["k"], 5, "test")
            .await
            .unwrap()
            .iter()
            .map(|j| j.job_ref())
            .collect();
        assert_eq!(jobs.len(), 5);
        let (completer, task) = Completer::start(queue.clone(), 1);

        // The first completion waits on a row lock, so its statement stays in flight.
        let mut lock = db.pool.begin().await.unwrap();
        sqlx::query("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE")
            .bind(jobs[0].id)
            .execute(&mut *lock)
            .await
            .unwrap();
        let mut answers = vec![send(&completer, jobs[0]).await];
        wait_for(Duration::from_secs(10), "the first completion to wait on the row lock", || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM jobs%'",
            )
            .fetch_one(&db.pool)
            .await
            .unwrap();
            waiting == 1
        })
        .await;
        // The second arrives alone and is taken off the channel; the other three come after it.
        answers.push(send(&completer, jobs[1]).await);
        let capacity = completer.tx.max_capacity();
        wait_for(
            Duration::from_secs(10),
            "the completer to take the second outcome",
            || async { completer.tx.capacity() == capacity },
        )
        .await;
        for job in &jobs[2..] {
            answers.push(send(&completer, *job).await);
        }
        lock.rollback().await.unwrap();
        for answer in answers {
            assert_eq!(answer.await, Ok(true));
        }
        drop(completer);
        task.await.unwrap();

        // One transaction stamps one `now()`: the four later completions were one statement.
        let ids: Vec<JobId> = jobs[1..].iter().map(|j| j.id).collect();
        let statements: i64 =
            sqlx::query_scalar("SELECT count(DISTINCT finished_at) FROM jobs_completed WHERE id = ANY($1)")
                .bind(&ids)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(statements, 1);
    }
}

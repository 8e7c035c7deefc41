//! Per-job heartbeats. Each job that outlives a third of its lease gets its own heartbeat task, so a busy or
//! blocked handler cannot starve it, and it keeps running while the pool drains, until the job's outcome is
//! written.
//!
//! The task is started lazily: one watcher per leased batch sleeps until the first renewal is due and only then
//! spawns heartbeats for the jobs of its batch still running. Most jobs end long before that, so they cost no
//! task and no timer of their own; the watcher itself ends as soon as its whole batch is done.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::context::LeaseClock;
use crate::error::QueueError;
use crate::queue::{JobRef, Queue};

/// One leased job's liveness, shared by the task running it and its heartbeat.
pub(crate) struct Liveness {
    pub(crate) job: JobRef,
    pub(crate) lease: LeaseClock,
    /// Fired when the lease is lost; the handler sees it as `JobContext::cancel`.
    pub(crate) cancel: CancellationToken,
    /// Set before `cancel` fires, so the runner knows not to write an outcome.
    lost: AtomicBool,
    /// Set by the runner once the outcome is written; the heartbeat ends. A flag and a `Notify` rather than a
    /// second cancellation token: every job sets it, and a token's cancel takes a lock that nothing here needs.
    done: AtomicBool,
    done_signal: Notify,
}

impl Liveness {
    pub(crate) fn new(job: JobRef, lease: LeaseClock) -> Liveness {
        Liveness {
            job,
            lease,
            cancel: CancellationToken::new(),
            lost: AtomicBool::new(false),
            done: AtomicBool::new(false),
            done_signal: Notify::new(),
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    fn mark_lost(&self) {
        racklift_metrics::global()
            .queue_lease_lost
            .with_label_values(&[self.job.kind])
            .inc();
        self.lost.store(true, Ordering::Release);
        self.cancel.cancel();
    }

    /// The outcome is written (or discarded): no more renewals.
    pub(crate) fn finish(&self) {
        self.done.store(true, Ordering::Release);
        self.done_signal.notify_waiters();
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Resolves once [`Liveness::finish`] has run (at once if it already has).
    async fn finished(&self) {
        let signal = self.done_signal.notified();
        tokio::pin!(signal);
        // Registered before the flag is read, so a `finish` between the two still wakes this waiter.
        signal.as_mut().enable();
        if !self.is_done() {
            signal.await;
        }
    }
}

/// Counts a batch's unfinished jobs so its watcher can stop early.
pub(crate) struct Batch {
    running: AtomicUsize,
    all_done: Notify,
}

impl Batch {
    pub(crate) fn new(jobs: usize) -> Arc<Batch> {
        Arc::new(Batch {
            running: AtomicUsize::new(jobs),
            all_done: Notify::new(),
        })
    }

    pub(crate) fn job_finished(&self) {
        if self.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            // `notify_one` stores a permit, so a watcher that has not started waiting yet still sees it.
            self.all_done.notify_one();
        }
    }
}

/// Watches one leased batch: when the first renewal falls due, starts a heartbeat for every job still running.
pub(crate) async fn watch_batch(
    queue: Queue,
    jobs: Vec<Arc<Liveness>>,
    batch: Arc<Batch>,
    first_renewal: Instant,
    tracker: TaskTracker,
) {
    tokio::select! {
        _ = batch.all_done.notified() => return,
        _ = tokio::time::sleep_until(first_renewal.into()) => {}
    }
    for job in jobs {
        if !job.is_done() {
            tracker.spawn(run(queue.clone(), job));
        }
    }
}

/// How long before its lease runs out a holder that could not renew it lets go: a fifth of the lease, at most
/// 3 s. The lease is the only thing keeping a second holder away from the job's BMC, so the handler is stopped,
/// and its connection to the BMC closed, while this holder's lease still stands: the database's expiry is never
/// earlier than this clock's, and an abandoned connection is gone within the Redfish client's linger (2 s).
pub(crate) fn let_go_margin(ttl: Duration) -> Duration {
    (ttl / 5).min(Duration::from_secs(3))
}

/// When a holder that has not renewed since lets go of `job`.
fn let_go_at(job: &Liveness, margin: Duration) -> tokio::time::Instant {
    job.lease
        .deadline()
        .checked_sub(margin)
        .unwrap_or_else(Instant::now)
        .into()
}

/// Renews the lease now and then every third of its time to live. When the fence is no longer current, or no
/// renewal succeeds before [`let_go_margin`] of the lease is left (a renewal that hangs counts as failed), it
/// marks the lease lost and fires the job's cancellation.
async fn run(queue: Queue, job: Arc<Liveness>) {
    let ttl = queue.config().lease_ttl;
    let interval = ttl / 3;
    let margin = let_go_margin(ttl);
    let mut next = Instant::now();
    let running_out = |job: &Liveness| {
        tracing::warn!(
            job_id = job.job.id,
            fence = job.job.fence,
            "lease could not be renewed before it ran out; cancelling the handler"
        );
        job.mark_lost();
    };
    loop {
        tokio::select! {
            _ = job.finished() => return,
            _ = tokio::time::sleep_until(next.into()) => {}
            _ = tokio::time::sleep_until(let_go_at(&job, margin)) => return running_out(&job),
        }
        let sent = Instant::now();
        let renewed = tokio::select! {
            renewed = queue.heartbeat(job.job) => renewed,
            _ = tokio::time::sleep_until(let_go_at(&job, margin)) => {
                if job.is_done() {
                    return;
                }
                return running_out(&job);
            }
        };
        match renewed {
            Ok(()) => {
                job.lease.extend_to(sent + ttl);
                next = sent + interval;
            }
            // The outcome was written while this renewal was in flight; nothing was lost.
            Err(_) if job.is_done() => return,
            // Every write that removes a running job is fenced, and the rescuer only takes leases that have run
            // out (the database's expiry is never before this clock's). With time left, the job was ended by its
            // own handler, in a transaction that committed while this renewal waited for the row: the handler is
            // returning, nothing was lost, and cancelling it would only misreport a loss.
            Err(QueueError::JobEnded { .. }) if !job.lease.remaining().is_zero() => {
                tracing::debug!(
                    job_id = job.job.id,
                    fence = job.job.fence,
                    "job ended by its handler; renewals stop"
                );
                return;
            }
            Err(QueueError::LeaseLost { .. } | QueueError::JobEnded { .. }) => {
                tracing::warn!(
                    job_id = job.job.id,
                    fence = job.job.fence,
                    "lease lost; cancelling the handler"
                );
                job.mark_lost();
                return;
            }
            Err(error) => {
                tracing::debug!(job_id = job.job.id, fence = job.job.fence, error = %error, "heartbeat failed; retrying");
                next = Instant::now() + Duration::from_millis(500).min(interval);
            }
        }
    }
}

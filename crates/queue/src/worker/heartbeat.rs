//! The per-job heartbeat: its own task, so a busy or blocked handler cannot starve it, and it keeps running while
//! the pool drains, until the job's outcome is written.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::context::LeaseClock;
use crate::error::QueueError;
use crate::queue::{JobRef, Queue};

/// Renews the lease every third of its time to live. When the fence is no longer current, or renewals keep
/// failing until the holder's own deadline passes, it marks the lease lost and fires the job's cancellation.
pub(crate) async fn run(
    queue: Queue,
    job: JobRef,
    lease: LeaseClock,
    cancel: CancellationToken,
    lost: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let ttl = queue.config().lease_ttl;
    let interval = ttl / 3;
    let mut next = Instant::now() + interval;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(next.into()) => {}
        }
        let sent = Instant::now();
        match queue.heartbeat(job).await {
            Ok(()) => {
                lease.extend_to(sent + ttl);
                next = sent + interval;
            }
            Err(QueueError::LeaseLost { .. }) => {
                tracing::warn!(
                    job_id = job.id,
                    fence = job.fence,
                    "lease lost; cancelling the handler"
                );
                lost.store(true, Ordering::Release);
                cancel.cancel();
                return;
            }
            Err(error) => {
                if lease.remaining().is_zero() {
                    tracing::warn!(job_id = job.id, fence = job.fence, error = %error,
                        "lease could not be renewed before it ran out; cancelling the handler");
                    lost.store(true, Ordering::Release);
                    cancel.cancel();
                    return;
                }
                tracing::debug!(job_id = job.id, fence = job.fence, error = %error, "heartbeat failed; retrying");
                next = Instant::now() + Duration::from_millis(500).min(interval);
            }
        }
    }
}

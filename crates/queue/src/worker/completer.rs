//! Batched completion: handlers that simply finished hand their (job, fence) to one task that completes
//! everything waiting in one fenced statement. Under load batches grow by themselves; idle, a completion is
//! written at once. Each handler still learns whether its own completion was accepted.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::job::{Fence, JobId};
use crate::queue::{JobRef, Queue};

/// The largest batch one statement completes.
const MAX_BATCH: usize = 5000;

/// (job, fence, kind label, where to say whether the completion was accepted)
type Request = (JobId, Fence, &'static str, oneshot::Sender<bool>);

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
        let (done, accepted) = oneshot::channel();
        if self.tx.send((job.id, job.fence, job.kind, done)).await.is_err() {
            return false;
        }
        accepted.await.unwrap_or(false)
    }
}

async fn run(queue: Queue, mut rx: mpsc::Receiver<Request>, concurrent_flushes: usize) {
    let flushes = Arc::new(Semaphore::new(concurrent_flushes));
    let mut in_flight = tokio::task::JoinSet::new();
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(req) => batch.push(req),
                Err(_) => break,
            }
        }
        let Ok(permit) = flushes.clone().acquire_owned().await else {
            break;
        };
        let queue = queue.clone();
        in_flight.spawn(async move {
            flush(&queue, batch).await;
            drop(permit);
        });
        while in_flight.try_join_next().is_some() {}
    }
    while in_flight.join_next().await.is_some() {}
}

async fn flush(queue: &Queue, batch: Vec<Request>) {
    let pairs: Vec<(JobId, Fence)> = batch.iter().map(|(id, fence, _, _)| (*id, *fence)).collect();
    let mut delay = Duration::from_millis(50);
    for attempt in 1..=5 {
        let result = async {
            let mut conn = queue.pool().acquire().await?;
            queue.complete_many(&mut conn, &pairs).await
        }
        .await;
        match result {
            Ok(mut accepted) => {
                accepted.sort_unstable();
                for (id, fence, kind, done) in batch {
                    let ok = accepted.binary_search(&id).is_ok();
                    if !ok {
                        racklift_metrics::global()
                            .queue_fence_rejections
                            .with_label_values(&[kind])
                            .inc();
                        tracing::warn!(
                            job_id = id,
                            fence,
                            "completion rejected: the lease was no longer held"
                        );
                    }
                    let _ = done.send(ok);
                }
                return;
            }
            Err(error) => {
                tracing::warn!(jobs = pairs.len(), attempt, error = %error, "completing a batch failed");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
    }
    for (_, _, _, done) in batch {
        let _ = done.send(false);
    }
}

//! The worker pool: leases jobs in batches, runs each with its own heartbeat once it runs long enough to need one, writes the outcome fenced, rescues
//! expired leases and purges old completed jobs. Stateless: any number of pools may run against one database.

mod completer;
mod context;
mod heartbeat;
mod slots;
mod wake;

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub use context::{Handler, HandlerFuture, HandlerResult, JobContext, LeaseClock, Outcome};

use crate::job::{Failure, LeasedJob};
use crate::queue::{JobRef, Queue};
use completer::Completer;
use heartbeat::{Batch, Liveness};
use slots::{Slot, Slots};

/// Handlers by job kind.
#[derive(Clone, Default)]
pub struct Registry {
    handlers: HashMap<String, Arc<dyn Handler>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn register(mut self, kind: impl Into<String>, handler: impl Handler) -> Registry {
        self.handlers.insert(kind.into(), Arc::new(handler));
        self
    }

    pub fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self.handlers.keys().cloned().collect();
        kinds.sort();
        kinds
    }
}

/// Pool settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkerConfig {
    /// Handlers run at once. As many jobs again may be leased whose handler has returned and whose outcome is
    /// still being written (see `slots.rs`).
    pub concurrency: usize,
    /// The most jobs one lease statement claims.
    pub batch: usize,
    /// The fallback poll when no notification arrives (jittered ±50%).
    pub poll_interval: Duration,
    /// How often this pool looks for expired leases (jittered ±50%).
    pub rescue_interval: Duration,
    /// How often this pool purges completed jobs and idempotency keys past their retention.
    pub purge_interval: Duration,
    /// Completion statements in flight at once. One: since leasing no longer waits for completions (see
    /// `slots.rs`), a second statement in flight only split the outcomes into smaller batches, which cost
    /// PostgreSQL more per job (measured with `racklift bench queue --completer-flushes 1|2`).
    pub completer_flushes: usize,
    /// This pool's name in `jobs.leased_by`; defaults to host, process id and a random suffix.
    pub holder: String,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: 100,
            batch: 100,
            poll_interval: Duration::from_secs(1),
            rescue_interval: Duration::from_secs(5),
            purge_interval: Duration::from_secs(60),
            completer_flushes: 1,
            holder: default_holder(),
        }
    }
}

fn default_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!(
        "{}:{}:{:04x}",
        host.trim(),
        std::process::id(),
        rand::random::<u16>()
    )
}

/// Connections reserved for lease renewals. Handlers share the main pool, and a thousand of them waiting for a
/// connection must not starve the renewals that keep their own leases alive.
const HEARTBEAT_CONNECTIONS: u32 = 2;

struct Shared {
    queue: Queue,
    /// The same queue on its own small pool, used only by heartbeats.
    heartbeats: Queue,
    registry: Registry,
    completer: Completer,
}

pub struct WorkerPool {
    queue: Queue,
    registry: Registry,
    config: WorkerConfig,
}

impl WorkerPool {
    pub fn new(queue: Queue, registry: Registry, config: WorkerConfig) -> WorkerPool {
        zero_counters(&registry.kinds());
        WorkerPool {
            queue,
            registry,
            config,
        }
    }

    /// Runs until `shutdown` fires, then stops leasing and drains: in-flight jobs finish (their heartbeats keep
    /// their leases alive meanwhile) and their outcomes are written before this returns.
    pub async fn run(self, shutdown: CancellationToken) {
        let WorkerPool {
            queue,
            registry,
            config,
        } = self;
        let kinds = registry.kinds();
        let (completer, completer_task) = Completer::start(queue.clone(), config.completer_flushes);
        let shared = Arc::new(Shared {
            heartbeats: queue.with_dedicated_pool(HEARTBEAT_CONNECTIONS),
            queue: queue.clone(),
            registry,
            completer,
        });
        let wake = Arc::new(Notify::new());
        let background = CancellationToken::new();
        let listener = tokio::spawn(wake::listen(
            queue.pool().clone(),
            kinds.iter().cloned().collect::<HashSet<_>>(),
            wake.clone(),
            background.clone(),
        ));
        let maintenance = tokio::spawn(maintain(queue.clone(), config.clone(), background.clone()));
        let tracker = TaskTracker::new();
        tracing::info!(holder = %config.holder, concurrency = config.concurrency, kinds = ?kinds, "worker pool started");

        fetch_loop(&shared, &config, &kinds, &wake, &tracker, &shutdown).await;

        tracing::info!(in_flight = tracker.len(), "worker pool draining");
        tracker.close();
        tracker.wait().await;
        drop(shared);
        let _ = completer_task.await;
        background.cancel();
        let _ = listener.await;
        let _ = maintenance.await;
        tracing::info!("worker pool stopped");
    }
}

async fn fetch_loop(
    shared: &Arc<Shared>,
    config: &WorkerConfig,
    kinds: &[String],
    wake: &Notify,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) {
    let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
    let slots = Slots::new(config.concurrency);
    let mut db_backoff = Duration::from_millis(100);
    loop {
        let first = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            slot = slots.acquire() => slot,
        };
        let mut permits = vec![first];
        take_free_slots(&slots, &mut permits, config.batch);
        // Busy and only a few slots free: wait a moment for more to free up, so a claim is a real batch rather
        // than a trickle of tiny statements. An idle pool has every slot free and never waits here.
        let batch = config.batch.max(1).min(config.concurrency.max(1));
        if permits.len() < batch / 4 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            take_free_slots(&slots, &mut permits, config.batch);
        }
        let wanted = permits.len();
        let leased_at = Instant::now();
        match shared.queue.lease(&kinds, wanted, &config.holder).await {
            Ok(jobs) => {
                db_backoff = Duration::from_millis(100);
                let got = jobs.len();
                spawn_batch(shared, jobs, leased_at, &mut permits, tracker);
                if got == wanted {
                    continue;
                }
            }
            Err(error) => {
                tracing::warn!(error = %error.report(), "leasing failed; backing off");
                drop(permits);
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wake::jittered(db_backoff)) => {}
                }
                db_backoff = (db_backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        }
        drop(permits);
        let idle = idle_until_due(shared, config, &kinds).await;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = wake.notified() => {}
            _ = tokio::time::sleep(idle) => {}
        }
    }
}

/// How long an idle pool sleeps: until the earliest queued job is due, when that is sooner than the fallback poll.
/// A snoozed job (a wait step polling its BMC) then runs on time rather than up to a poll period late. Enqueues
/// and early wake-ups still arrive by notification. The floor lets jobs falling due close together be leased in
/// one statement, and keeps a due job another pool holds locked from turning this into a busy loop. A fleet's
/// wait polls fall due a few per millisecond: at 20 ms a lease took about six of them (30,000 leases and as many
/// next-due reads in a 1,000-server run); 50 ms makes the batches larger, and a poll due every few seconds does
/// not notice the difference.
async fn idle_until_due(shared: &Shared, config: &WorkerConfig, kinds: &[&str]) -> Duration {
    const FLOOR: Duration = Duration::from_millis(50);
    let fallback = wake::jittered(config.poll_interval);
    match shared.queue.next_due(kinds).await {
        Ok(Some(due)) => due.clamp(FLOOR, fallback.max(FLOOR)),
        Ok(None) => fallback,
        Err(error) => {
            tracing::debug!(error = %error, "reading the next due time failed; polling");
            fallback
        }
    }
}

/// Starts one task per leased job, and the batch's heartbeat watcher.
fn spawn_batch(
    shared: &Arc<Shared>,
    jobs: Vec<LeasedJob>,
    leased_at: Instant,
    permits: &mut Vec<Slot>,
    tracker: &TaskTracker,
) {
    if jobs.is_empty() {
        return;
    }
    let ttl = shared.queue.config().lease_ttl;
    let batch = Batch::new(jobs.len());
    let mut watched = Vec::with_capacity(jobs.len());
    count_leases(&jobs);
    for (job, permit) in jobs.into_iter().zip(permits.drain(..)) {
        let job_ref = job.job_ref();
        let liveness = Arc::new(Liveness::new(job_ref, LeaseClock::new(leased_at + ttl)));
        watched.push(liveness.clone());
        tracker.spawn(run_job(shared.clone(), job, liveness, batch.clone(), permit));
    }
    tracker.spawn(heartbeat::watch_batch(
        shared.heartbeats.clone(),
        watched,
        batch,
        leased_at + ttl / 3,
        tracker.clone(),
    ));
}

/// Counts a batch's leases per kind, one counter update per kind rather than per job.
fn count_leases(jobs: &[LeasedJob]) {
    let leases = &racklift_metrics::global().queue_leases;
    let mut rest = jobs;
    while let Some(first) = rest.first() {
        let same = rest.iter().take_while(|j| j.kind == first.kind).count();
        leases
            .with_label_values(&[racklift_metrics::job_kind(&first.kind)])
            .inc_by(same as u64);
        rest = &rest[same..];
    }
}

/// Creates this pool's per-kind counters at zero, so the first lease, loss or retry after a start is an increase
/// that `rate` and `increase` see, not the appearance of a series.
fn zero_counters(kinds: &[String]) {
    let m = racklift_metrics::global();
    for kind in kinds {
        let kind = [racklift_metrics::job_kind(kind)];
        for counter in [
            &m.queue_leases,
            &m.queue_lease_lost,
            &m.queue_fence_rejections,
            &m.queue_retries,
        ] {
            counter.with_label_values(&kind).inc_by(0);
        }
    }
}

/// The `outcome` label of `racklift_job_duration_seconds`: what the handler returned, or that its lease was lost
/// meanwhile (its outcome is then discarded).
fn outcome_label(result: &HandlerResult, lost: bool) -> &'static str {
    match result {
        _ if lost => "lease_lost",
        Ok(Outcome::Complete) => "complete",
        Ok(Outcome::Snooze(_)) => "snooze",
        Ok(Outcome::Finished) => "finished",
        Err(_) => "failed",
    }
}

fn take_free_slots(slots: &Slots, permits: &mut Vec<Slot>, batch: usize) {
    while permits.len() < batch.max(1) {
        match slots.try_acquire() {
            Some(slot) => permits.push(slot),
            None => break,
        }
    }
}

async fn run_job(
    shared: Arc<Shared>,
    job: LeasedJob,
    liveness: Arc<Liveness>,
    batch: Arc<Batch>,
    mut slot: Slot,
) {
    let job_ref = job.job_ref();
    let span = tracing::info_span!("job", job_id = job.id, kind = %job.kind, fence = job.fence, attempt = job.attempts);
    let Some(handler) = shared.registry.handlers.get(&job.kind).cloned() else {
        // Leases only ask for registered kinds; reaching this is a bug, and the rescuer will retry the job.
        tracing::error!(parent: &span, "no handler registered for this kind");
        liveness.finish();
        batch.job_finished();
        return;
    };
    let ctx = JobContext {
        job,
        cancel: liveness.cancel.clone(),
        lease: liveness.lease.clone(),
        queue: shared.queue.clone(),
    };
    let started = Instant::now();
    let cancel = liveness.cancel.clone();
    let running = AssertUnwindSafe(handler.run(ctx))
        .catch_unwind()
        .instrument(span.clone());
    // A lost lease stops the handler where it is, whatever it awaits: a BMC or Incus call still open when the
    // next holder starts would be a second request to that server at once. Dropped, the call's connection closes
    // (and a Redfish call's slot is held until it has). A handler that finishes first is not interrupted.
    let finished = tokio::select! {
        biased;
        finished = running => Some(finished),
        () = cancel.cancelled() => None,
    };
    let result = match finished {
        None => Err(Failure::retryable("the lease was lost; the handler was stopped")),
        Some(Ok(result)) => result,
        Some(Err(panic)) => Err(
            Failure::retryable(format!("handler panicked: {}", panic_message(&panic)))
                .with_error_class("panic"),
        ),
    };
    let elapsed = started.elapsed();
    slot.handler_returned();
    racklift_metrics::global()
        .job_duration
        .with_label_values(&[job_ref.kind, outcome_label(&result, liveness.is_lost())])
        .observe(elapsed.as_secs_f64());
    let duration_ms = elapsed.as_millis() as u64;
    // The outcome is written under the job's span; `instrument` (not `enter`) because it awaits. The heartbeat,
    // if one started, keeps the lease until then.
    write_outcome(&shared, job_ref, &result, &liveness, duration_ms)
        .instrument(span)
        .await;
    liveness.finish();
    batch.job_finished();
}

async fn write_outcome(
    shared: &Shared,
    job_ref: JobRef,
    result: &HandlerResult,
    liveness: &Liveness,
    duration_ms: u64,
) {
    let queue = &shared.queue;
    if liveness.is_lost() {
        tracing::warn!(
            duration_ms,
            "job ended after its lease was lost; its outcome is discarded"
        );
    } else {
        let written = match result {
            Ok(Outcome::Complete) => {
                if shared.completer.complete(job_ref).await {
                    Ok(())
                } else {
                    Err(crate::QueueError::LeaseLost {
                        job_id: job_ref.id,
                        fence: job_ref.fence,
                    })
                }
            }
            // The rarer outcomes are boxed: their sqlx futures are kilobytes, and inlined they would make every
            // job's task that large, to be copied at each spawn.
            Ok(Outcome::Snooze(until)) => {
                if shared.completer.snooze(job_ref, *until).await {
                    Ok(())
                } else {
                    Err(crate::QueueError::LeaseLost {
                        job_id: job_ref.id,
                        fence: job_ref.fence,
                    })
                }
            }
            Ok(Outcome::Finished) => Ok(()),
            Err(failure) => {
                // Retried while the lease holds: a database failing over for a few seconds must not cost the job
                // its lease (and an attempt) when the worker is alive and the outcome known.
                let budget = queue.config().lease_ttl / 2;
                let started = std::time::Instant::now();
                let mut delay = Duration::from_millis(100);
                loop {
                    let attempt: Result<(), crate::QueueError> = Box::pin(async {
                        let mut conn = queue.pool().acquire().await?;
                        let outcome = queue.fail(&mut conn, job_ref, failure).await?;
                        tracing::info!(duration_ms, error = %failure.message, ?outcome, "job failed");
                        Ok(())
                    })
                    .await;
                    match attempt {
                        Err(e)
                            if e.is_transient_database()
                                && !liveness.is_lost()
                                && started.elapsed() + delay < budget =>
                        {
                            tracing::warn!(duration_ms, error = %e.report(), "job outcome not written yet; retrying");
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(Duration::from_secs(1));
                        }
                        other => break other,
                    }
                }
            }
        };
        match written {
            Ok(()) => tracing::debug!(duration_ms, "job done"),
            Err(error) => tracing::warn!(duration_ms, error = %error.report(), "job outcome not written"),
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".to_string()
    }
}

/// The rescuer and retention (completed jobs, expired idempotency keys), on jittered timers. Every pool runs
/// them; SKIP LOCKED, fenced writes and re-checked purge predicates make concurrent passes safe.
async fn maintain(queue: Queue, config: WorkerConfig, stop: CancellationToken) {
    let mut next_purge = Instant::now() + wake::jittered(config.purge_interval);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wake::jittered(config.rescue_interval)) => {}
        }
        loop {
            match queue.rescue(100).await {
                Ok(report) if report.retried + report.dead_lettered > 0 => {
                    tracing::info!(
                        retried = report.retried,
                        dead_lettered = report.dead_lettered,
                        "rescued jobs whose lease expired"
                    );
                    if report.retried + report.dead_lettered < 100 {
                        break;
                    }
                }
                Ok(_) => break,
                Err(error) => {
                    tracing::warn!(error = %error, "rescuer pass failed");
                    break;
                }
            }
        }
        if Instant::now() >= next_purge {
            next_purge = Instant::now() + wake::jittered(config.purge_interval);
            if !queue.config().completed_retention.is_zero() {
                match queue.purge_completed().await {
                    Ok(n) if n > 0 => tracing::info!(purged = n, "purged completed jobs past retention"),
                    Ok(_) => {}
                    Err(error) => tracing::warn!(error = %error, "purging completed jobs failed"),
                }
            }
            match queue.purge_request_keys().await {
                Ok(n) if n > 0 => tracing::info!(purged = n, "purged idempotency keys past retention"),
                Ok(_) => {}
                Err(error) => tracing::warn!(error = %error, "purging idempotency keys failed"),
            }
        }
    }
}

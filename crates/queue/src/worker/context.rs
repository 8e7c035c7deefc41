//! What a handler gets and returns.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::job::{Failure, LeasedJob, RunAt};
use crate::queue::{JobRef, Queue};

/// How a handler finished a job that did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the pool completes the job, fenced.
    Complete,
    /// Not yet (a wait whose condition is unmet): queue again at this time without counting an attempt.
    Snooze(RunAt),
    /// The handler already completed, snoozed or failed the job itself, in its own transaction together with its
    /// domain writes (a state transition and the next step's enqueue). The pool writes nothing.
    Finished,
}

pub type HandlerResult = Result<Outcome, Failure>;
pub type HandlerFuture = Pin<Box<dyn Future<Output = HandlerResult> + Send + 'static>>;

/// A job handler. Any `Fn(JobContext) -> impl Future<Output = HandlerResult>` is one.
pub trait Handler: Send + Sync + 'static {
    fn run(&self, ctx: JobContext) -> HandlerFuture;
}

impl<F, Fut> Handler for F
where
    F: Fn(JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn run(&self, ctx: JobContext) -> HandlerFuture {
        Box::pin(self(ctx))
    }
}

/// Everything a handler needs about its job and lease.
#[derive(Clone)]
pub struct JobContext {
    pub job: LeasedJob,
    /// Fires when the lease is lost (rescued, revoked, or not renewable before it nearly ran out): stop at once,
    /// and make no further BMC call or write for this job. The pool drops the handler's future when it fires, so
    /// whatever the handler awaits then is abandoned; watching it matters only between awaits.
    pub cancel: CancellationToken,
    pub lease: LeaseClock,
    pub queue: Queue,
}

impl JobContext {
    pub fn job_ref(&self) -> JobRef {
        self.job.job_ref()
    }
}

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// The holder's own view of when its lease ends, on the monotonic clock. It is deliberately pessimistic: it is
/// measured from when the lease or heartbeat statement was *sent*, so the database's expiry is never earlier.
/// A handler asks it before a BMC mutation whether the lease outlives the call's deadline (invariant 3).
#[derive(Clone, Debug)]
pub struct LeaseClock(Arc<AtomicU64>);

impl LeaseClock {
    pub fn new(deadline: Instant) -> LeaseClock {
        let clock = LeaseClock(Arc::new(AtomicU64::new(0)));
        clock.extend_to(deadline);
        clock
    }

    pub(crate) fn extend_to(&self, deadline: Instant) {
        let nanos = deadline.saturating_duration_since(*EPOCH).as_nanos() as u64;
        self.0.store(nanos, Ordering::Release);
    }

    pub fn deadline(&self) -> Instant {
        *EPOCH + Duration::from_nanos(self.0.load(Ordering::Acquire))
    }

    pub fn remaining(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// Whether the lease, as far as this holder can tell, lasts at least `needed` longer.
    pub fn outlasts(&self, needed: Duration) -> bool {
        self.remaining() > needed
    }
}

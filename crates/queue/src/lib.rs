//! racklift's durable job queue on PostgreSQL.
//!
//! Every lease carries a fencing token from one database sequence; every write a lease holder makes (complete,
//! retry, snooze, dead-letter) is conditional on that token and on the job still running, and is checked by
//! `rows_affected`, so a worker that lost its lease is refused and told. Retries are durable (`run_at` in the
//! future, with full jitter); exhausted or fatal jobs move to `dead_letters` in the same statement. A request's
//! idempotency key is remembered for a retention window, beyond its job's life ([`Queue::enqueue_once`]). The
//! queue knows nothing about servers or BMCs.

mod backoff;
mod error;
mod idempotency;
mod job;
mod queue;
pub mod session;
mod sql;
pub mod worker;

pub use backoff::Backoff;
pub use error::QueueError;
pub use idempotency::RequestKey;
pub use job::{
    BatchEnqueued, Enqueued, ErrorClass, FailOutcome, Failure, Fence, JobId, JobPayload, LeasedJob, NewJob,
    RunAt,
};
pub use queue::{JobRef, Queue, QueueConfig, RescueReport};
pub use session::SessionBounds;
pub use sql::{CHANNEL, LEASE_SQL};
pub use worker::{
    Handler, HandlerResult, JobContext, LeaseClock, Outcome, Registry, WorkerConfig, WorkerPool,
};

/// The statement that completes a batch of jobs, exported so the benchmark's raw-SQL bound runs exactly it.
pub fn complete_sql(keep_completed: bool) -> &'static str {
    sql::complete_sql(keep_completed)
}

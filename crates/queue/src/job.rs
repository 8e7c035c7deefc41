//! The queue's vocabulary: what is enqueued, what a lease hands out, how a job may end.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::QueueError;

pub type JobId = i64;
/// A fencing token: drawn from one database sequence at every lease, so a newer lease always holds a larger one.
pub type Fence = i64;

/// When a job becomes due. Relative times are measured on the database's clock, so a worker whose clock is off
/// cannot schedule early or late.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunAt {
    #[default]
    Now,
    In(Duration),
    At(DateTime<Utc>),
}

impl RunAt {
    /// (absolute time, delay in milliseconds); exactly one is used by the SQL, the other is ignored.
    pub(crate) fn to_sql(self) -> (Option<DateTime<Utc>>, i64) {
        match self {
            RunAt::Now => (None, 0),
            RunAt::In(d) => (None, d.as_millis().min(i64::MAX as u128) as i64),
            RunAt::At(t) => (Some(t), 0),
        }
    }
}

/// A job to enqueue. Built with [`NewJob::new`] and the `with_*` methods.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub kind: String,
    pub payload: serde_json::Value,
    pub priority: i16,
    pub run_at: RunAt,
    pub max_attempts: i32,
    /// While a live job has this key, enqueueing again returns that job instead of adding one.
    pub idempotency_key: Option<String>,
    /// At most one live job per resource key (a server, a cluster).
    pub resource_key: Option<String>,
}

impl NewJob {
    pub fn new(kind: impl Into<String>, payload: &impl Serialize) -> Result<NewJob, QueueError> {
        Ok(NewJob {
            kind: kind.into(),
            payload: serde_json::to_value(payload).map_err(QueueError::Payload)?,
            priority: 0,
            run_at: RunAt::Now,
            max_attempts: 10,
            idempotency_key: None,
            resource_key: None,
        })
    }
    pub fn with_priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }
    pub fn with_run_at(mut self, run_at: RunAt) -> Self {
        self.run_at = run_at;
        self
    }
    pub fn with_max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
    pub fn with_resource_key(mut self, key: impl Into<String>) -> Self {
        self.resource_key = Some(key.into());
        self
    }
}

/// A job kind's contract in one place: the payload is a named type and the kind's name a constant beside it, so
/// whoever enqueues and whoever handles the job cannot disagree on either.
pub trait JobPayload: Serialize + DeserializeOwned {
    const KIND: &'static str;

    /// A job of this kind carrying this payload, with the defaults of [`NewJob::new`].
    fn new_job(&self) -> NewJob {
        NewJob::new(Self::KIND, self).expect("a payload type serialises to a JSON object")
    }
}

/// The result of enqueueing one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    Created(JobId),
    /// A live job with the same idempotency key already existed; this is it.
    Existing(JobId),
}

impl Enqueued {
    pub fn id(self) -> JobId {
        match self {
            Enqueued::Created(id) | Enqueued::Existing(id) => id,
        }
    }
}

/// The result of a batch enqueue. Jobs without keys are always created; keyed ones are reported by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchEnqueued {
    pub created: Vec<JobId>,
    /// (idempotency key, the live job that already had it)
    pub existing: Vec<(String, JobId)>,
    /// (resource key, the live job that holds it)
    pub busy: Vec<(String, JobId)>,
}

/// A job as handed out by a lease. Every write its holder makes names the `fence`.
#[derive(Debug, Clone)]
pub struct LeasedJob {
    pub id: JobId,
    pub kind: String,
    /// The payload as JSON text; decoded by the handler into its own type.
    pub payload: String,
    pub priority: i16,
    /// 1-based: this lease is attempt number `attempts`.
    pub attempts: i32,
    pub max_attempts: i32,
    pub fence: Fence,
    pub resource_key: Option<String>,
    pub idempotency_key: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl LeasedJob {
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, QueueError> {
        serde_json::from_str(&self.payload).map_err(QueueError::Payload)
    }

    /// Whether this attempt was the last one the job is allowed.
    pub fn attempts_exhausted(&self) -> bool {
        self.attempts >= self.max_attempts
    }
}

/// Whether an error is worth another attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    Retryable,
    Fatal,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Retryable => "retryable",
            ErrorClass::Fatal => "fatal",
        }
    }
}

/// A failed attempt as recorded in the job's error history and, at the end, in its dead letter.
#[derive(Debug, Clone)]
pub struct Failure {
    pub message: String,
    pub class: ErrorClass,
    /// A caller-defined class name kept in the dead letter for triage (e.g. `bmc_timeout`, `redfish_4xx`).
    pub error_class: Option<String>,
    /// Domain context kept in the dead letter: server, state, Redfish message id, last observed facts.
    pub context: serde_json::Value,
    /// Overrides the backoff for this retry (e.g. a BMC's Retry-After).
    pub retry_in: Option<Duration>,
}

impl Failure {
    pub fn retryable(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            class: ErrorClass::Retryable,
            error_class: None,
            context: serde_json::Value::Object(Default::default()),
            retry_in: None,
        }
    }
    pub fn fatal(message: impl Into<String>) -> Failure {
        Failure {
            class: ErrorClass::Fatal,
            ..Failure::retryable(message)
        }
    }
    pub fn with_error_class(mut self, class: impl Into<String>) -> Self {
        self.error_class = Some(class.into());
        self
    }
    pub fn with_context(mut self, context: serde_json::Value) -> Self {
        self.context = context;
        self
    }
    pub fn with_retry_in(mut self, delay: Duration) -> Self {
        self.retry_in = Some(delay);
        self
    }
}

/// What became of a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// Queued again, due after this delay.
    Retried { delay: Duration },
    /// Moved to `dead_letters` with this id.
    DeadLettered { dead_letter_id: i64 },
}

use crate::job::{Fence, JobId};

/// Errors at the queue's boundary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The job's lease is no longer this holder's: it expired and was rescued, was revoked, or the job already
    /// finished. The holder must stop and write nothing more for this job.
    #[error("lease on job {job_id} with fence {fence} is no longer held")]
    LeaseLost { job_id: JobId, fence: Fence },
    /// A renewal found the job gone from the table: an outcome was written under its fence. While the lease
    /// still holds, only its holder can have written it (a handler ending its job in its own transaction).
    #[error("job {job_id} with fence {fence} has ended")]
    JobEnded { job_id: JobId, fence: Fence },
    /// Another live job already holds this resource key (one live job per server or cluster).
    #[error("resource {resource_key} is busy with live job {existing}")]
    ResourceBusy { resource_key: String, existing: JobId },
    /// The idempotency key was given, within its retention, to a request other than this one (another
    /// server, action or parameters). Answering with `existing` would hand the caller an unrelated job.
    #[error("idempotency key {key:?} in scope {scope} was used for another request (job {existing})")]
    IdempotencyKeyReused {
        scope: String,
        key: String,
        existing: JobId,
    },
    /// The payload could not be encoded or decoded.
    #[error("job payload")]
    Payload(#[source] serde_json::Error),
    #[error("queue database statement")]
    Database(#[source] sqlx::Error),
}

impl QueueError {
    /// The message with every source after it, for logs: `queue database statement` alone cannot tell a standby
    /// refusing a write from a connection reset.
    pub fn report(&self) -> String {
        let mut out = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            out.push_str(": ");
            out.push_str(&s.to_string());
            source = s.source();
        }
        out
    }

    /// A database error another attempt may get past (the server restarting, failing over, refusing for a moment).
    pub fn is_transient_database(&self) -> bool {
        matches!(self, QueueError::Database(_))
    }
}

impl From<sqlx::Error> for QueueError {
    fn from(e: sqlx::Error) -> Self {
        QueueError::Database(e)
    }
}

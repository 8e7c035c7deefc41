//! Idempotency keys of requests, remembered for a retention window.
//!
//! A job's own `idempotency_key` is unique among live jobs only: right for the queue's internal keys (a
//! deployment step per transition), wrong for a client's retry, which may come after its job has finished, or
//! race other copies of itself while the job finishes. [`Queue::enqueue_once`] claims the key in
//! `idempotency_keys` in the caller's transaction, before the job is inserted, so the claim and the job commit
//! or vanish together, and concurrent claims of one key wait for the first to commit and then find its job.

use crate::error::QueueError;
use crate::job::{Enqueued, NewJob};
use crate::queue::{Queue, millis};
use crate::sql;
use sqlx::PgConnection;

/// A request's idempotency key: the client's `key` within a `scope`, and a `fingerprint` of what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestKey {
    /// Keys are unique within a scope only, so unrelated callers cannot collide by accident (for ad-hoc BMC
    /// actions: `bmc-action/<server>`).
    pub scope: String,
    /// The key as the client sent it.
    pub key: String,
    /// A digest of the request (server, action, parameters). The same key with another fingerprint is refused
    /// rather than answered with an unrelated job.
    pub fingerprint: String,
}

impl Queue {
    /// Enqueues `job` for a request with an idempotency key, in the caller's transaction. While the key is
    /// remembered (`QueueConfig::idempotency_retention` from its first use), the same request gets the job the
    /// key made, `Existing`, whether that job is queued, running or finished; another request with the key is
    /// `IdempotencyKeyReused`. A busy resource (`ResourceBusy`) gives the key back, so a retry may claim it.
    pub async fn enqueue_once(
        &self,
        conn: &mut PgConnection,
        request: &RequestKey,
        job: &NewJob,
    ) -> Result<Enqueued, QueueError> {
        let retention = millis(self.config().idempotency_retention);
        let (scope, key) = (request.scope.as_str(), request.key.as_str());
        // A holder that rolled back lets the next claim in; a key that expired and was pruned between the
        // claim and the look-up is claimed on the next turn. Both are rare, so a few turns suffice.
        for _ in 0..8 {
            if sql::claim_request_key(conn, scope, key, &request.fingerprint, retention).await? {
                let enqueued = match self.enqueue(conn, job).await {
                    Ok(enqueued) => enqueued,
                    Err(busy @ QueueError::ResourceBusy { .. }) => {
                        if sql::release_request_key(conn, scope, key).await? != 1 {
                            return Err(lost_claim(request));
                        }
                        return Err(busy);
                    }
                    Err(e) => return Err(e),
                };
                if sql::bind_request_key(conn, scope, key, enqueued.id()).await? != 1 {
                    return Err(lost_claim(request));
                }
                return Ok(enqueued);
            }
            match sql::request_key(conn, scope, key).await? {
                Some((Some(existing), fingerprint)) if fingerprint == request.fingerprint => {
                    return Ok(Enqueued::Existing(existing));
                }
                Some((Some(existing), _)) => {
                    return Err(QueueError::IdempotencyKeyReused {
                        scope: request.scope.clone(),
                        key: request.key.clone(),
                        existing,
                    });
                }
                // A claim without its job is seen by the claiming transaction only, and `enqueue_once` never
                // returns before binding or releasing it.
                Some((None, _)) => return Err(lost_claim(request)),
                None => continue,
            }
        }
        Err(QueueError::Database(sqlx::Error::Protocol(format!(
            "idempotency key {key:?} in scope {scope} kept changing hands while it was claimed"
        ))))
    }

    /// Deletes idempotency keys whose retention has run out, in bounded batches; returns how many. A key past its
    /// retention is free whether or not it was purged yet (a claim takes it over); purging keeps the table small.
    pub async fn purge_request_keys(&self) -> Result<u64, QueueError> {
        let mut total = 0;
        loop {
            let n = sql::purge_request_keys(self.pool(), 1000).await?;
            total += n;
            if n < 1000 {
                return Ok(total);
            }
        }
    }
}

/// The claim this transaction made is not there as it left it: nothing else writes a claimed row before commit.
fn lost_claim(request: &RequestKey) -> QueueError {
    QueueError::Database(sqlx::Error::Protocol(format!(
        "the claim on idempotency key {:?} in scope {} changed inside its own transaction",
        request.key, request.scope
    )))
}

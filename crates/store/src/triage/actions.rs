//! The triage actions: retry (from the failed state or an earlier trigger), cancel (with or without the clean
//! up) and discard; bulk retry (in `bulk`) is a retry per item.
//!
//! Each action is one transaction that first claims the dead letter with a conditional update
//! (`… WHERE triage_status = 'open'`): of two operators acting on the same item, the second finds it claimed and
//! gets [`TriageError::AlreadyTriaged`], and a failure anywhere later (the server busy, the deployment moved on)
//! rolls the claim back. The deployment row is locked and rewritten fenced on its `seq`, and the step job is
//! enqueued in the same transaction, so a retry is either entirely done or not at all. Every action is recorded
//! in `triage_actions` with who did it and why.
//!
//! Cancel of a failed deployment reuses the state table: with the clean up, the machine is resumed in `Cancel`
//! (eject, power off, then `WaitCancel -> Canceled`) by an ordinary step job; without it, the machine is marked
//! `Canceled` on the spot and the server left as the failure left it. A deployment that is still live (its step
//! job died in the queue rather than failing the deployment) goes through the same `request_cancel` path as the
//! API's cancel, plus a step job if none is left to decide it.

use chrono::Utc;
use racklift_deploy::triage::{cancel_failed, resume_cancel};
use racklift_deploy::{Machine, ResumeError, State, resume_at};
use racklift_queue::{Enqueued, NewJob, Queue, QueueError};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::PgConnection;

use super::TriageStatus;
use crate::catalog::ApiToken;
use crate::deployments::{DeploymentRecord, lock_deployment, queue_error, request_cancel_in, step_job};
use crate::servers::{ServerStatus, set_status};
use crate::{Store, StoreError};

/// Why a triage action was refused. Each has a stable [`TriageError::code`] for the API and bulk reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TriageError {
    #[error("dead letter {id} not found")]
    NotFound { id: i64 },
    #[error("dead letter {id} was already triaged ({status})")]
    AlreadyTriaged { id: i64, status: String },
    #[error("dead letter {id} names no deployment that still exists")]
    NoDeployment { id: i64 },
    #[error("deployment {deployment_id} is not server {server}'s newest; a later deployment supersedes it")]
    Superseded { deployment_id: i64, server: String },
    #[error("deployment {deployment_id} already ended {state}; there is nothing to retry or cancel")]
    Finished { deployment_id: i64, state: String },
    #[error("server {server} has live job {job_id}; try again when it ends")]
    ServerBusy { server: String, job_id: i64 },
    #[error("cannot resume deployment {deployment_id}")]
    Resume {
        deployment_id: i64,
        #[source]
        source: ResumeError,
    },
    #[error("from_state only applies to a failed deployment: {why}")]
    FromStateNotAllowed { why: &'static str },
    #[error("{action} is not supported for {operation:?} dead letters")]
    Unsupported {
        action: &'static str,
        operation: Option<String>,
    },
    #[error("store")]
    Store(#[from] StoreError),
}

impl TriageError {
    pub fn code(&self) -> &'static str {
        match self {
            TriageError::NotFound { .. } => "not_found",
            TriageError::AlreadyTriaged { .. } => "already_triaged",
            TriageError::NoDeployment { .. } => "deployment_not_found",
            TriageError::Superseded { .. } => "superseded",
            TriageError::Finished { .. } => "deployment_finished",
            TriageError::ServerBusy { .. } => "server_busy",
            TriageError::Resume { .. } => "invalid_resume_state",
            TriageError::FromStateNotAllowed { .. } => "from_state_not_allowed",
            TriageError::Unsupported { .. } => "unsupported_operation",
            TriageError::Store(StoreError::Stale { .. }) => "stale",
            TriageError::Store(StoreError::Conflict { .. }) => "conflict",
            TriageError::Store(StoreError::NotFound { .. }) => "not_found",
            TriageError::Store(_) => "internal",
        }
    }
}

impl From<sqlx::Error> for TriageError {
    fn from(e: sqlx::Error) -> Self {
        TriageError::Store(StoreError::Db(e))
    }
}

/// What a retry enqueued.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Retried {
    pub dead_letter_id: i64,
    pub operation: Option<String>,
    pub server: Option<String>,
    pub job_id: i64,
    pub deployment_id: Option<i64>,
    /// The state the deployment resumes in (unchanged for a live one).
    pub state: Option<String>,
    pub seq: Option<i64>,
    pub action_id: i64,
}

/// What a cancel did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Canceled {
    pub dead_letter_id: i64,
    pub deployment_id: i64,
    /// `Cancel` (clean up running), `Canceled` (marked without clean up), or the live state a cancel was
    /// requested in.
    pub state: String,
    pub job_id: Option<i64>,
    pub skip_cleanup: bool,
    pub action_id: i64,
}

/// The dead letter as claimed: what the action needs of it.
#[derive(sqlx::FromRow)]
struct Claimed {
    id: i64,
    kind: String,
    operation: Option<String>,
    server: Option<String>,
    deployment_id: Option<i64>,
    payload: Value,
    resource_key: Option<String>,
    max_attempts: i32,
}

/// Moves an open dead letter to `status` in `tx`; the row stays locked until the transaction ends.
async fn claim(
    tx: &mut PgConnection,
    id: i64,
    status: TriageStatus,
    actor: &ApiToken,
    note: &str,
) -> Result<Claimed, TriageError> {
    let claimed: Option<Claimed> = sqlx::query_as(
        "UPDATE dead_letters SET triage_status = $2, triaged_by = $3, triage_note = $4, triaged_at = now() \
         WHERE id = $1 AND triage_status = 'open' \
         RETURNING id, kind, operation, server, \
           CASE WHEN coalesce(context ->> 'deployment_id', payload ->> 'deployment_id') ~ '^[0-9]{1,18}$' \
                THEN coalesce(context ->> 'deployment_id', payload ->> 'deployment_id')::bigint END AS deployment_id, \
           payload, resource_key, max_attempts",
    )
    .bind(id)
    .bind(status.as_str())
    .bind(&actor.name)
    .bind(note)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(c) = claimed {
        return Ok(c);
    }
    let status: Option<String> = sqlx::query_scalar("SELECT triage_status FROM dead_letters WHERE id = $1")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    Err(match status {
        Some(status) => TriageError::AlreadyTriaged { id, status },
        None => TriageError::NotFound { id },
    })
}

pub(super) async fn record_action(
    tx: &mut PgConnection,
    dead_letter_id: Option<i64>,
    action: &str,
    actor: &ApiToken,
    reason: &str,
    detail: &Value,
    bulk_id: Option<i64>,
) -> Result<i64, TriageError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO triage_actions (dead_letter_id, action, actor, actor_role, reason, detail, bulk_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(dead_letter_id)
    .bind(action)
    .bind(&actor.name)
    .bind(actor.role.as_str())
    .bind(reason)
    .bind(detail)
    .bind(bulk_id)
    .fetch_one(&mut *tx)
    .await?)
}

fn busy(e: QueueError) -> TriageError {
    match e {
        QueueError::ResourceBusy {
            resource_key,
            existing,
        } => TriageError::ServerBusy {
            server: resource_key.trim_start_matches("server/").to_owned(),
            job_id: existing,
        },
        other => TriageError::Store(queue_error(other)),
    }
}

/// The dead letter's deployment, locked, and only if it is still the server's newest: retrying or canceling an
/// old deployment behind a newer one would undo the operator's later decision.
async fn deployment_of(tx: &mut PgConnection, c: &Claimed) -> Result<DeploymentRecord, TriageError> {
    let id = c.deployment_id.ok_or(TriageError::NoDeployment { id: c.id })?;
    let record = match lock_deployment(tx, id).await {
        Err(StoreError::NotFound { .. }) => return Err(TriageError::NoDeployment { id: c.id }),
        other => other?,
    };
    let newest: i64 = sqlx::query_scalar("SELECT max(id) FROM deployments WHERE server = $1")
        .bind(&record.server)
        .fetch_one(&mut *tx)
        .await?;
    if newest != record.id {
        return Err(TriageError::Superseded {
            deployment_id: record.id,
            server: record.server,
        });
    }
    Ok(record)
}

/// Rewrites a finished deployment's machine, fenced on the `seq` it was read with.
async fn rewrite_finished(
    tx: &mut PgConnection,
    record: &DeploymentRecord,
    next: &Machine,
    cancel: Option<Value>,
) -> Result<(), TriageError> {
    let done = sqlx::query(
        "UPDATE deployments SET machine = $3, state = $4, seq = $5, finished_at = $6, \
         last_error = CASE WHEN $6 IS NULL THEN NULL ELSE last_error END, cancel = coalesce($7, cancel), \
         updated_at = now() WHERE id = $1 AND seq = $2 AND finished_at IS NOT NULL",
    )
    .bind(record.id)
    .bind(record.seq())
    .bind(serde_json::to_value(next).expect("machines serialise"))
    .bind(next.state.name())
    .bind(next.seq as i64)
    .bind(next.finished_at)
    .bind(cancel)
    .execute(&mut *tx)
    .await
    // A deployment requested for the server since the newest-check: it is live, and it wins.
    .map_err(StoreError::on_unique(
        "running deployment on server",
        &record.server,
    ))?;
    if done.rows_affected() != 1 {
        return Err(StoreError::Stale {
            what: "deployment",
            name: record.id.to_string(),
        }
        .into());
    }
    Ok(())
}

/// Other open dead letters of the same deployment (an older failure never triaged) are answered by this action:
/// they are marked resolved, pointing at it, so the list does not offer a second retry of the same deployment.
async fn resolve_siblings(
    tx: &mut PgConnection,
    c: &Claimed,
    record: &DeploymentRecord,
    actor: &ApiToken,
) -> Result<(), TriageError> {
    sqlx::query(
        "UPDATE dead_letters SET triage_status = 'resolved', triaged_by = $4, triaged_at = now(), \
         triage_note = 'answered by the triage of dead letter ' || $3 \
         WHERE triage_status = 'open' AND server = $1 AND operation = 'deployment' AND id <> $3 \
           AND coalesce(context ->> 'deployment_id', payload ->> 'deployment_id') = $2::text",
    )
    .bind(&record.server)
    .bind(record.id)
    .bind(c.id)
    .bind(&actor.name)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

fn finished(record: &DeploymentRecord) -> TriageError {
    TriageError::Finished {
        deployment_id: record.id,
        state: record.deployment.machine.state.name().to_owned(),
    }
}

impl Store {
    /// Retries an open dead letter: a failed deployment resumes in `from_state` (default: the state it failed
    /// in) with a fresh budget and a new step job; a live deployment whose step died in the queue gets a new step
    /// job where it stands; a BMC action is enqueued again.
    pub async fn retry_dead_letter(
        &self,
        queue: &Queue,
        id: i64,
        actor: &ApiToken,
        reason: &str,
        from_state: Option<State>,
    ) -> Result<Retried, TriageError> {
        self.retry_in_bulk(queue, id, actor, reason, from_state, None)
            .await
    }

    pub(super) async fn retry_in_bulk(
        &self,
        queue: &Queue,
        id: i64,
        actor: &ApiToken,
        reason: &str,
        from_state: Option<State>,
        bulk_id: Option<i64>,
    ) -> Result<Retried, TriageError> {
        let mut tx = self.pool.begin().await?;
        let c = claim(&mut tx, id, TriageStatus::Retried, actor, reason).await?;
        let mut out = match c.operation.as_deref() {
            Some("deployment") => retry_deployment(&mut tx, queue, &c, actor, reason, from_state).await?,
            Some("bmc_action") if from_state.is_some() => {
                return Err(TriageError::FromStateNotAllowed {
                    why: "a BMC action has no states",
                });
            }
            Some("bmc_action") => retry_job(&mut tx, queue, &c, actor, reason).await?,
            _ => {
                return Err(TriageError::Unsupported {
                    action: "retry",
                    operation: c.operation,
                });
            }
        };
        let detail = json!({ "job_id": out.job_id, "deployment_id": out.deployment_id, "state": out.state,
                             "from_state": from_state.map(State::name), "seq": out.seq });
        out.action_id = record_action(&mut tx, Some(id), "retry", actor, reason, &detail, bulk_id).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// Marks an open dead letter discarded: looked at, nothing to do. The deployment stays as it is.
    pub async fn discard_dead_letter(
        &self,
        id: i64,
        actor: &ApiToken,
        note: &str,
    ) -> Result<i64, TriageError> {
        let mut tx = self.pool.begin().await?;
        let c = claim(&mut tx, id, TriageStatus::Discarded, actor, note).await?;
        let action_id = record_action(&mut tx, Some(c.id), "discard", actor, note, &json!({}), None).await?;
        tx.commit().await?;
        Ok(action_id)
    }

    /// Cancels the deployment of an open dead letter (see the module documentation for the three cases).
    pub async fn cancel_dead_letter(
        &self,
        queue: &Queue,
        id: i64,
        actor: &ApiToken,
        reason: &str,
        skip_cleanup: bool,
    ) -> Result<Canceled, TriageError> {
        let mut tx = self.pool.begin().await?;
        let c = claim(&mut tx, id, TriageStatus::Canceled, actor, reason).await?;
        if c.operation.as_deref() != Some("deployment") {
            return Err(TriageError::Unsupported {
                action: "cancel",
                operation: c.operation,
            });
        }
        let record = deployment_of(&mut tx, &c).await?;
        let machine = &record.deployment.machine;
        let now = Utc::now();
        let cancel = json!({ "skip_cleanup": skip_cleanup });
        let event = json!({ "by": actor.name, "role": actor.role.as_str(), "reason": reason,
                            "skip_cleanup": skip_cleanup, "dead_letter_id": c.id });
        let (state, job_id) = if !record.is_finished() {
            let live = request_cancel_in(
                &mut tx,
                queue,
                &record.server,
                skip_cleanup,
                Some(reason),
                &actor.name,
            )
            .await?;
            // The dead step left nothing to decide the cancel: give it a step where the machine stands.
            let job_id = match super::live_job_in(&mut *tx, &record.server).await? {
                Some(job) => job.id,
                None => queue
                    .enqueue(&mut tx, &step_job(live.id, &live.server, live.seq() as u64))
                    .await
                    .map_err(busy)?
                    .id(),
            };
            (machine.state, Some(job_id))
        } else if machine.state != State::Failed {
            return Err(finished(&record));
        } else if skip_cleanup {
            let next = cancel_failed(machine, now).map_err(|source| TriageError::Resume {
                deployment_id: record.id,
                source,
            })?;
            rewrite_finished(&mut tx, &record, &next, Some(cancel)).await?;
            set_status(
                &mut *tx,
                &record.server,
                ServerStatus::Unregistered,
                "deployment canceled",
            )
            .await?;
            sqlx::query("DELETE FROM media_reads WHERE deployment_id = $1")
                .bind(record.id)
                .execute(&mut *tx)
                .await?;
            crate::events::insert(
                &mut *tx,
                &record.server,
                Some(record.id),
                "canceled",
                None,
                &event,
            )
            .await?;
            (next.state, None)
        } else {
            let next = resume_cancel(machine, now).map_err(|source| TriageError::Resume {
                deployment_id: record.id,
                source,
            })?;
            rewrite_finished(&mut tx, &record, &next, Some(cancel)).await?;
            set_status(
                &mut *tx,
                &record.server,
                ServerStatus::Deploying,
                next.state.name(),
            )
            .await?;
            let job = queue
                .enqueue(&mut tx, &step_job(record.id, &record.server, next.seq))
                .await
                .map_err(busy)?;
            crate::events::insert(
                &mut *tx,
                &record.server,
                Some(record.id),
                "cancel_requested",
                None,
                &event,
            )
            .await?;
            (next.state, Some(job.id()))
        };
        resolve_siblings(&mut tx, &c, &record, actor).await?;
        let detail = json!({ "deployment_id": record.id, "state": state.name(), "job_id": job_id,
                             "skip_cleanup": skip_cleanup });
        let action_id = record_action(&mut tx, Some(c.id), "cancel", actor, reason, &detail, None).await?;
        tx.commit().await?;
        Ok(Canceled {
            dead_letter_id: c.id,
            deployment_id: record.id,
            state: state.name().to_owned(),
            job_id,
            skip_cleanup,
            action_id,
        })
    }
}

async fn retry_deployment(
    tx: &mut PgConnection,
    queue: &Queue,
    c: &Claimed,
    actor: &ApiToken,
    reason: &str,
    from_state: Option<State>,
) -> Result<Retried, TriageError> {
    let record = deployment_of(tx, c).await?;
    let machine = &record.deployment.machine;
    let seq = if !record.is_finished() {
        if from_state.is_some() {
            return Err(TriageError::FromStateNotAllowed {
                why: "the deployment is still live (its step job died in the queue) and resumes where it stands",
            });
        }
        machine.seq
    } else if machine.state != State::Failed {
        return Err(finished(&record));
    } else {
        let failed = machine.failure.as_ref().map(|f| f.state);
        let to = from_state.or(failed).ok_or(TriageError::Resume {
            deployment_id: record.id,
            source: ResumeError::NoFailure,
        })?;
        let next = resume_at(machine, to, Utc::now()).map_err(|source| TriageError::Resume {
            deployment_id: record.id,
            source,
        })?;
        rewrite_finished(tx, &record, &next, None).await?;
        set_status(
            &mut *tx,
            &record.server,
            ServerStatus::Deploying,
            next.state.name(),
        )
        .await?;
        next.seq
    };
    let state = if record.is_finished() {
        from_state.or(machine.failure.as_ref().map(|f| f.state))
    } else {
        Some(machine.state)
    };
    let job = queue
        .enqueue(tx, &step_job(record.id, &record.server, seq))
        .await
        .map_err(busy)?;
    resolve_siblings(tx, c, &record, actor).await?;
    let event = json!({ "by": actor.name, "role": actor.role.as_str(), "reason": reason, "dead_letter_id": c.id,
                        "state": state.map(State::name), "seq": seq, "job_id": job.id() });
    crate::events::insert(
        &mut *tx,
        &record.server,
        Some(record.id),
        "triage_retry",
        None,
        &event,
    )
    .await?;
    Ok(Retried {
        dead_letter_id: c.id,
        operation: c.operation.clone(),
        server: Some(record.server.clone()),
        job_id: job.id(),
        deployment_id: Some(record.id),
        state: state.map(|s| s.name().to_owned()),
        seq: Some(seq as i64),
        action_id: 0,
    })
}

/// Enqueues the dead job again as it was (BMC actions state desired state, so re-running one is harmless). The
/// idempotency key names the dead letter, so the retry is one live job however often it is asked for.
async fn retry_job(
    tx: &mut PgConnection,
    queue: &Queue,
    c: &Claimed,
    actor: &ApiToken,
    reason: &str,
) -> Result<Retried, TriageError> {
    let mut job = NewJob::new(c.kind.clone(), &c.payload).map_err(|e| TriageError::Store(queue_error(e)))?;
    job.resource_key = c.resource_key.clone();
    job.idempotency_key = Some(format!("triage/{}", c.id));
    job.max_attempts = c.max_attempts.max(1);
    let enqueued = queue.enqueue(tx, &job).await.map_err(busy)?;
    let job_id = match enqueued {
        Enqueued::Created(id) | Enqueued::Existing(id) => id,
    };
    if let Some(server) = &c.server {
        let event = json!({ "by": actor.name, "role": actor.role.as_str(), "reason": reason,
                            "dead_letter_id": c.id, "job_id": job_id, "action": c.payload.get("action") });
        crate::events::insert(&mut *tx, server, None, "triage_retry", None, &event).await?;
    }
    Ok(Retried {
        dead_letter_id: c.id,
        operation: c.operation.clone(),
        server: c.server.clone(),
        job_id,
        deployment_id: None,
        state: None,
        seq: None,
        action_id: 0,
    })
}

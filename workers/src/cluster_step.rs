//! The `cluster.step` job: one lease advances one cluster operation (rolling update or reboot) as far as it can
//! go without waiting.
//!
//! Each pass polls every member's Incus API, asks `racklift_deploy::rolling_run::decide_run` what to do, and does
//! it. A trigger is persisted before the server sees it (the run fenced on the operation's `seq`, then the
//! cluster's fence moved up to this job's token), so a retry or another worker re-enters the step rather than
//! issuing a second one blind; waits are re-derived from the next poll. The run's end (completed, paused,
//! failed, canceled) commits with the job's own outcome in one transaction.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use racklift_bmc_access::incus::{ActError, ClusterCheckError, IncusAccess};
use racklift_deploy::Config;
use racklift_deploy::rolling::RollingStep;
use racklift_deploy::rolling_run::explain::run_failure_sentence;
use racklift_deploy::rolling_run::{
    MemberFacts, RollingRun, RunDecision, RunSettings, decide_run, step_name,
};
use racklift_queue::{Failure, HandlerResult, JobContext, JobRef, Outcome, RunAt};
use racklift_store::{
    ClusterOperation, ClusterStep, OperationStatus, RunUpdate, Store, StoreError, queue_error,
};
use serde::Serialize;

/// What every cluster step shares.
#[derive(Clone)]
pub struct ClusterStepHandler {
    pub store: Store,
    pub config: Arc<Config>,
    pub incus: Arc<IncusAccess>,
    /// The members' BMCs, read for what they report of a rebooting member's boots.
    pub clients: racklift_bmc_access::ClientCache,
}

/// Transitions one lease makes before it goes back through the queue, so a run that keeps moving cannot hold
/// a lease indefinitely.
const MAX_TRIGGERS_PER_LEASE: u32 = 10;

/// How long a lease watches a rebooting server go down before leaving the rest to the polls.
const REBOOT_WATCH_SECS: u64 = 120;

/// What triage needs about a failed run: the dead letter's `operation`, `server` and `state` filter columns,
/// and the rest for the detail view.
#[derive(Debug, Serialize)]
struct RunFailureContext<'a> {
    operation: &'static str,
    cluster: &'a str,
    operation_id: i64,
    server: &'a str,
    /// The step the run ended in, in the `state` column triage filters by.
    state: Option<&'static str>,
    observed: String,
    reason: &'a str,
    first_error: Option<&'a str>,
    last_error: Option<&'a str>,
    /// For people: cluster, server, state, what it waited for, why the run ended and what was seen last.
    sentence: &'a str,
}

/// Where a run ended, for its dead letter.
struct Ended {
    server: String,
    step: Option<RollingStep>,
    observed: String,
    sentence: String,
}

/// How a lease ends.
enum End {
    Snooze(chrono::DateTime<Utc>),
    Finish {
        status: OperationStatus,
        reason: Option<String>,
        failed: Option<Ended>,
    },
}

impl ClusterStepHandler {
    pub async fn run(self, ctx: JobContext) -> HandlerResult {
        let payload: ClusterStep = ctx
            .job
            .payload()
            .map_err(|e| Failure::fatal(format!("cluster step payload: {e}")))?;
        match self.advance(&ctx, payload.operation_id).await {
            Ok(outcome) => Ok(outcome),
            Err(StoreError::Stale { what, name }) => {
                tracing::info!(operation_id = payload.operation_id, what, name = %name,
                    "cluster step stopped: a newer holder moved on");
                Ok(Outcome::Finished)
            }
            Err(e) => Err(Failure::retryable(format!(
                "cluster operation {}: {}",
                payload.operation_id,
                crate::deploy_step::error_chain(&e)
            ))
            .with_error_class("database")),
        }
    }

    async fn advance(&self, ctx: &JobContext, id: i64) -> Result<Outcome, StoreError> {
        let store = &self.store;
        let job = ctx.job_ref();
        let mut op = store.cluster_operation(id).await?;
        if !op.status.is_live() || (op.status == OperationStatus::Paused && !op.cancel_requested) {
            // Ended or paused already (a duplicate or late job): nothing to drive.
            let mut conn = store.pool().acquire().await?;
            ctx.queue.complete(&mut conn, job).await.map_err(queue_error)?;
            return Ok(Outcome::Finished);
        }
        let cluster = store.cluster(&op.cluster).await?;
        let cfg = &self.config.rolling;
        let settings = RunSettings {
            post_restore_delay_secs: cluster.post_restore_delay_secs,
            health_gate_timeout_secs: cfg.health_gate_timeout_secs,
        };
        let mut triggers = MAX_TRIGGERS_PER_LEASE;
        let end = loop {
            if ctx.cancel.is_cancelled() {
                return Ok(Outcome::Finished);
            }
            let mut run = op.run.clone();
            if op.cancel_requested && !run.canceling {
                run.cancel();
            }
            if op.pause_requested && !run.canceling {
                break End::Finish {
                    status: OperationStatus::Paused,
                    reason: Some("paused by an operator".into()),
                    failed: None,
                };
            }
            let mut endpoints = store.cluster_endpoints(&op.cluster).await?;
            match self.incus.learn_cluster_certificate(&endpoints).await {
                Ok(Some(sha256)) => {
                    if store.record_cluster_certificate(&op.cluster, &sha256).await? {
                        tracing::info!(cluster = %op.cluster, certificate = %sha256, "cluster certificate pinned");
                    }
                    endpoints = store.cluster_endpoints(&op.cluster).await?;
                }
                Ok(None) => {}
                Err(ClusterCheckError::CertificateRefused(refusal)) => {
                    break End::Finish {
                        status: OperationStatus::Paused,
                        reason: Some(format!(
                            "no certificate can be trusted for the cluster's members: {refusal}; \
                             `racklift cluster repin` once the cause is understood"
                        )),
                        failed: None,
                    };
                }
                // A member that cannot be read now is reported by the poll below; learning is retried next tick.
                Err(e) => {
                    tracing::debug!(cluster = %op.cluster, error = %e, "cluster certificate not learned yet")
                }
            }
            let polled = self.incus.poll_run(&endpoints, &run).await;
            let mut facts: BTreeMap<String, MemberFacts> = polled
                .iter()
                .map(|p| (p.server.clone(), p.facts.clone()))
                .collect();
            self.read_bmc_boot(&run, &mut facts, job.fence).await;
            let now = Utc::now();
            let (next, decision) = decide_run(&run, &facts, now, cfg, &settings);
            match decision {
                RunDecision::Wait { until } => {
                    if next != op.run {
                        op = self.save(&op, &next).await?;
                    }
                    break End::Snooze(until);
                }
                RunDecision::Completed => {
                    op.run = next;
                    let status = if op.run.canceling {
                        OperationStatus::Canceled
                    } else {
                        OperationStatus::Completed
                    };
                    break End::Finish {
                        status,
                        reason: op.run.canceling.then(|| "canceled by an operator".to_owned()),
                        failed: None,
                    };
                }
                RunDecision::Pause { reason } => {
                    op.run = next;
                    break End::Finish {
                        status: OperationStatus::Paused,
                        reason: Some(reason),
                        failed: None,
                    };
                }
                RunDecision::Fail {
                    server,
                    step,
                    state,
                    reason,
                } => {
                    op.run = next;
                    let sentence = run_failure_sentence(
                        &op.cluster,
                        op.run.kind.operation(),
                        &server,
                        state,
                        step,
                        &reason,
                        facts.get(&server),
                    );
                    break End::Finish {
                        status: OperationStatus::Failed,
                        reason: Some(reason),
                        failed: Some(Ended {
                            server,
                            step,
                            observed: state.def().label.to_owned(),
                            sentence,
                        }),
                    };
                }
                RunDecision::Trigger { server, step } => {
                    if triggers == 0 {
                        op = self.save(&op, &next).await?;
                        break End::Snooze(now);
                    }
                    triggers -= 1;
                    // The trigger is recorded before the server sees it, and the cluster's fence moved to this
                    // token: a worker that lost its lease since cannot issue it.
                    op = self.save(&op, &next).await?;
                    store.advance_cluster_fence(&op.cluster, job.fence).await?;
                    let Some(target) = polled.iter().find(|p| p.server == server) else {
                        break End::Snooze(now);
                    };
                    if !ctx.lease.outlasts(
                        Duration::from_secs(cfg.incus_call_timeout_secs)
                            .min(ctx.queue.config().lease_ttl / 2),
                    ) {
                        return Ok(Outcome::Finished);
                    }
                    let started = Instant::now();
                    let acted = tokio::select! {
                        acted = self.incus.act(target, step, job.fence, cluster.restore_mode.incus_mode()) => acted,
                        _ = ctx.cancel.cancelled() => return Ok(Outcome::Finished),
                    };
                    let duration_ms = started.elapsed().as_millis() as u64;
                    racklift_metrics::global()
                        .cluster_step_duration
                        .with_label_values(&[step_name(step)])
                        .observe(duration_ms as f64 / 1000.0);
                    let mut run = op.run.clone();
                    if step == RollingStep::Reboot && acted.is_ok() {
                        // Accepted: recorded before the watch below, so a worker stopping during it leaves a
                        // reboot the next holder waits for, not one it takes as never sent.
                        if let Some(s) = run.servers.iter_mut().find(|s| s.name == server) {
                            s.reboot_unconfirmed = false;
                        }
                        op = self.save(&op, &run).await?;
                        run = op.run.clone();
                    }
                    let Some(s) = run.servers.iter_mut().find(|s| s.name == server) else {
                        break End::Snooze(now);
                    };
                    // A reboot whose call got no answer may have started all the same: watched like an
                    // accepted one, and taken as failed only when the server is not seen going down.
                    let unanswered = acted.as_ref().is_err_and(ActError::unanswered);
                    let watch = step == RollingStep::Reboot && (acted.is_ok() || unanswered);
                    let down = if watch {
                        let limit = Duration::from_secs(cfg.reboot_timeout_secs.min(REBOOT_WATCH_SECS));
                        tokio::select! {
                            down = self.incus.watch_down(target, limit) => down,
                            _ = ctx.cancel.cancelled() => return Ok(Outcome::Finished),
                        }
                    } else {
                        false
                    };
                    match acted {
                        Ok(operation) => {
                            tracing::info!(cluster = %op.cluster, server = %server, step = step_name(step),
                                fence = job.fence, duration_ms, "cluster step triggered");
                            s.operation = operation;
                            s.went_down |= down;
                        }
                        Err(_) if down => {
                            tracing::info!(cluster = %op.cluster, server = %server, step = step_name(step),
                                fence = job.fence, duration_ms, "reboot call unanswered, the server went down");
                            s.went_down = true;
                            s.reboot_unconfirmed = false;
                        }
                        Err(e) => {
                            let text = crate::deploy_step::error_chain(&e);
                            tracing::warn!(cluster = %op.cluster, server = %server, step = step_name(step),
                                fence = job.fence, duration_ms, error = %text, "cluster step trigger failed");
                            s.trigger_failed(&text, Utc::now(), cfg);
                        }
                    }
                    op = self.save(&op, &run).await?;
                }
            }
        };
        self.end(ctx, job, &op, end).await?;
        Ok(Outcome::Finished)
    }

    /// Reads the BMC of the member whose reboot is owed or under way: its reset time and boot progress are the
    /// reboot's identity from the hardware's side. A BMC that cannot be read leaves the other signals to decide.
    async fn read_bmc_boot(&self, run: &RollingRun, facts: &mut BTreeMap<String, MemberFacts>, fence: i64) {
        let Some(current) = run.current() else {
            return;
        };
        let rebooting = current.update.step == Some(RollingStep::Reboot) && !current.went_down;
        if !(current.update.reboot_pending || rebooting) || run.canceling {
            return;
        }
        let Some(f) = facts.get_mut(&current.name) else {
            return;
        };
        let deadline = Duration::from_secs(self.config.step_call_timeout_secs);
        let read = async {
            let server = self
                .store
                .server(&current.name)
                .await
                .map_err(|e| e.to_string())?;
            let client = self
                .clients
                .client_for(&server, deadline)
                .await
                .map_err(|e| e.to_string())?
                .with_fence(racklift_redfish::Fence(fence));
            client.read_system().await.map_err(|e| e.to_string())
        };
        match read.await {
            Ok(system) => f.bmc_boot = Some(crate::deploy_bmc::boot_of(&system)),
            Err(error) => tracing::debug!(server = %current.name, error = %error,
                "the BMC of a rebooting member could not be read"),
        }
    }

    /// Writes the run (fenced on `seq`) and returns the operation as it now stands.
    async fn save(&self, op: &ClusterOperation, run: &RollingRun) -> Result<ClusterOperation, StoreError> {
        let update = RunUpdate {
            run,
            status: op.status,
            reason: op.status_reason.as_deref(),
            failed_server: None,
            failed_step: None,
        };
        let seq = self.store.save_cluster_run(op, &update, async |_| Ok(())).await?;
        Ok(ClusterOperation {
            run: run.clone(),
            seq,
            ..op.clone()
        })
    }

    /// The lease's end: a snooze through the queue, or the run's end with the job's outcome in one transaction.
    async fn end(
        &self,
        ctx: &JobContext,
        job: JobRef,
        op: &ClusterOperation,
        end: End,
    ) -> Result<(), StoreError> {
        let queue = ctx.queue.clone();
        match end {
            End::Snooze(until) => {
                let mut conn = self.store.pool().acquire().await?;
                queue
                    .snooze(&mut conn, job, RunAt::At(until))
                    .await
                    .map_err(queue_error)
            }
            End::Finish {
                status,
                reason,
                failed,
            } => {
                let failed_step = failed.as_ref().and_then(|f| f.step.map(step_name));
                let update = RunUpdate {
                    run: &op.run,
                    status,
                    reason: reason.as_deref(),
                    failed_server: failed.as_ref().map(|f| f.server.as_str()),
                    failed_step,
                };
                let operation = op.run.kind.operation();
                let failure = failed.as_ref().map(|ended| {
                    let record = op.run.servers.iter().find(|s| s.name == ended.server);
                    let context = RunFailureContext {
                        operation,
                        cluster: &op.cluster,
                        operation_id: op.id,
                        server: &ended.server,
                        state: failed_step,
                        observed: ended.observed.clone(),
                        reason: reason.as_deref().unwrap_or(""),
                        first_error: record.and_then(|r| r.update.first_error.as_deref()),
                        last_error: record.and_then(|r| r.update.last_error.as_deref()),
                        sentence: &ended.sentence,
                    };
                    Failure::fatal(ended.sentence.clone())
                        .with_error_class(operation)
                        .with_context(serde_json::to_value(&context).unwrap_or_default())
                });
                tracing::info!(cluster = %op.cluster, operation_id = op.id, status = status.as_str(),
                    reason = reason.as_deref().unwrap_or(""), "cluster operation ended");
                self.store
                    .save_cluster_run(op, &update, async |c| match &failure {
                        Some(f) => queue
                            .dead_letter(c, job, "rolling_run_failed", f)
                            .await
                            .map(|_| ())
                            .map_err(queue_error),
                        None => queue.complete(c, job).await.map_err(queue_error),
                    })
                    .await
                    .map(|_| ())
            }
        }
    }
}

//! The `deployment.step` job: one lease advances one deployment as far as it can go without waiting.
//!
//! Each pass observes the BMC and the database, asks `racklift_deploy::decide` what to do, and does it. Before a
//! BMC mutation the machine and the server's fence are committed together (invariant 3); after it, the outcome
//! and the job's own next step (snooze, next job, completion or dead letter) commit together, fenced on the
//! deployment's `seq` and the job's token. So a transition costs at most two transactions, and a worker that
//! lost its lease writes nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use racklift_deploy::certificates::CertificateSet;
use racklift_deploy::explain::failure_sentence;
use racklift_deploy::facts::{CancelRequest, MediaProgress};
use racklift_deploy::{Action, Config, Decision, Deployment, Facts, Jitter, Terminal, apply_outcome, decide};
use racklift_queue::{Failure, HandlerResult, JobContext, JobRef, Outcome, Queue, RunAt};
use racklift_redfish::{BmcClient, SlotRef};
use racklift_store::{
    ApiFacts, DeploymentRecord, DeploymentStep, Server, Store, StoreError, queue_error, step_job,
};
use serde::Serialize;
use serde_json::{Value, json};

use crate::deploy_bmc::{self, ActContext};

/// What every deployment step shares.
#[derive(Clone)]
pub struct DeployStep {
    pub store: Store,
    pub config: Arc<Config>,
    /// The IncusOS certificates secure boot enrolls ([`CertificateSet::incusos`] in production).
    pub certificates: Arc<CertificateSet>,
    /// BMC clients kept across leases (connection pools, discovered resource paths).
    pub clients: racklift_bmc_access::ClientCache,
}

#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Access(racklift_bmc_access::AccessError),
}

/// Close re-observations one lease makes before it snoozes through the queue anyway (at real hardware's catch
/// poll of 2 s, 20 s of watching), so a transition that never comes cannot hold a lease indefinitely.
const MAX_CLOSE_WATCHES_PER_LEASE: u32 = 10;

/// How long to pause in-process before observing again, when a snooze of `snooze` is short enough to be a close
/// watch and the lease has close watches left; `None` sends the job through the queue.
fn watch_closely(snooze: chrono::TimeDelta, watches_left: u32, cfg: &Config) -> Option<Duration> {
    (watches_left > 0 && snooze <= cfg.catch_poll()).then(|| snooze.to_std().unwrap_or_default())
}

/// How the lease ends.
enum End {
    Snooze(chrono::DateTime<Utc>),
    Finished(Terminal),
}

impl DeployStep {
    pub async fn run(self, ctx: JobContext) -> HandlerResult {
        let payload: DeploymentStep = ctx
            .job
            .payload()
            .map_err(|e| Failure::fatal(format!("deployment step payload: {e}")))?;
        match self.advance(&ctx, payload.deployment_id).await {
            Ok(outcome) => Ok(outcome),
            // Someone newer moved the deployment or took the lease: write nothing more.
            Err(StepError::Store(StoreError::Stale { what, name })) => {
                tracing::info!(deployment_id = payload.deployment_id, what, name = %name,
                    "step stopped: a newer holder moved on");
                Ok(Outcome::Finished)
            }
            Err(StepError::Access(e)) => Err(Failure::retryable(format!(
                "deployment {}: {}",
                payload.deployment_id,
                error_chain(&e)
            ))
            .with_error_class("bmc_config")),
            Err(StepError::Store(e)) => Err(Failure::retryable(format!(
                "deployment {}: {}",
                payload.deployment_id,
                error_chain(&e)
            ))
            .with_error_class("database")),
        }
    }

    async fn advance(&self, ctx: &JobContext, deployment_id: i64) -> Result<Outcome, StepError> {
        let store = &self.store;
        let job = ctx.job_ref();
        let mut stored = store.deployment(deployment_id).await?;
        // One observation per lease, labelled by the state it started in; recorded on return, whichever way.
        let _step_timer = racklift_metrics::global()
            .deploy_step_duration
            .with_label_values(&[stored.deployment.machine.state.name()])
            .start_timer();
        if stored.is_finished() {
            self.finish_job(ctx, job, &stored, None).await?;
            return Ok(Outcome::Finished);
        }
        let (server, api) = store.step_context(deployment_id).await?;
        // The first pass uses what was just read; later passes (after a BMC call) read it again.
        let mut fresh = Some(api);
        let call = Duration::from_secs(self.config.step_call_timeout_secs);
        let client = match self.clients.client_for(&server, call).await {
            Ok(client) => client.with_fence(racklift_redfish::Fence(job.fence)),
            Err(e) => {
                // Pre-flight checked the BMC settings; they changed since. Retried (the operator may fix them),
                // then dead-lettered with the reason.
                return Err(StepError::Access(e));
            }
        };
        let mut slot: Option<SlotRef> = stored
            .media_slot
            .as_ref()
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok());
        let mut d = stored.deployment.clone();
        let mut events: Vec<(String, Option<i64>, Value)> = Vec::new();
        let mut last_error: Option<Value> = None;
        let mut budget = self.config.max_transitions_per_tick.max(1);
        let mut close_watches = MAX_CLOSE_WATCHES_PER_LEASE;
        let end = loop {
            if ctx.cancel.is_cancelled() {
                return Ok(Outcome::Finished);
            }
            let facts = self
                .observe(&client, &mut slot, &stored, &server, &d, fresh.take())
                .await?;
            let now = Utc::now();
            let step = decide(&d, &facts, now, &self.config);
            if let Some(t) = step.transition {
                events.push(("transition".into(), Some(job.fence), json!(t)));
            }
            d.machine = step.machine;
            let facts_json = serde_json::to_value(&facts).unwrap_or(Value::Null);
            match step.decision {
                Decision::Continue => {
                    budget -= 1;
                    if budget == 0 {
                        break (End::Snooze(now), facts_json);
                    }
                }
                // A wait watching a brief transition (a server powering on before its firmware resets itself)
                // must see the moment it passes. Through the queue, a busy fleet's pickup delay can exceed
                // the whole window, so the lease is kept and the wait re-observed here.
                Decision::Snooze { until }
                    if let Some(pause) = watch_closely(until - now, close_watches, &self.config) =>
                {
                    close_watches -= 1;
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = ctx.cancel.cancelled() => return Ok(Outcome::Finished),
                    }
                }
                Decision::Snooze { until } => break (End::Snooze(until), facts_json),
                Decision::Retry { at } => break (End::Snooze(at), facts_json),
                Decision::Finished(t) => break (End::Finished(t), facts_json),
                Decision::Act {
                    action,
                    call_deadline_secs,
                } => {
                    let deadline = Duration::from_secs(call_deadline_secs);
                    // A call may outlive one lease period (attach media takes minutes); heartbeats renew the lease
                    // while it runs. What must not happen is starting a mutation on a lease about to lapse, so at
                    // least half a lease period (or the whole call, if shorter) has to be left.
                    let needed = deadline.min(ctx.queue.config().lease_ttl / 2);
                    if !ctx.lease.outlasts(needed) {
                        tracing::info!(server = %server.name, deployment_id, "lease too short for the call; deferring");
                        break (End::Snooze(now), facts_json);
                    }
                    // Invariant 3: the machine and the server's fence commit before the BMC sees the call.
                    let machine = d.machine.clone();
                    let fence = job.fence;
                    let name = server.name.clone();
                    store
                        .save_machine(
                            &stored,
                            &machine,
                            &facts_json,
                            None,
                            &std::mem::take(&mut events),
                            async |c| racklift_store::advance_fence(c, &name, fence).await,
                        )
                        .await?;
                    stored.deployment.machine = machine;
                    // These facts are now the deployment's last seen: a pass that ends after the call (which
                    // observes nothing) keeps them, so a failure's sentence can say what was seen.
                    stored.last_facts = Some(facts_json.clone());
                    let Some(slot_ref) = slot.clone() else {
                        // No device could be selected (read failed): the trigger counts a retry.
                        let outcome = racklift_deploy::Outcome::Retryable {
                            error: "no virtual media device could be read".into(),
                        };
                        let step = apply_outcome(&d, &outcome, Utc::now(), &self.config, jitter());
                        d.machine = step.machine;
                        match step.decision {
                            Decision::Finished(t) => break (End::Finished(t), Value::Null),
                            Decision::Retry { at } | Decision::Snooze { until: at } => {
                                break (End::Snooze(at), Value::Null);
                            }
                            _ => break (End::Snooze(Utc::now()), Value::Null),
                        }
                    };
                    let act_ctx = ActContext {
                        certificates: self.certificates.clone(),
                        deadline: Some(deadline),
                        boot_target: ActContext::boot_target_of(stored.boot_target.as_deref()),
                    };
                    let started = Instant::now();
                    // The commit above took time, and this process may have been paused (SIGSTOP, a VM stall): check
                    // the lease again right before the BMC sees anything.
                    if !ctx.lease.outlasts(needed) || ctx.cancel.is_cancelled() {
                        tracing::warn!(server = %server.name, deployment_id, fence = job.fence,
                            "lease ran short before the BMC call; leaving it to the next holder");
                        return Ok(Outcome::Finished);
                    }
                    let bounded = client.with_deadline(deadline);
                    let acted = tokio::select! {
                        acted = deploy_bmc::act(&bounded, &slot_ref, &action, &act_ctx) => acted,
                        // Lease lost (cancel or takeover): abandon the call; the new holder re-issues it.
                        _ = ctx.cancel.cancelled() => return Ok(Outcome::Finished),
                    };
                    let duration_ms = started.elapsed().as_millis() as u64;
                    if matches!(
                        action,
                        Action::AttachMedia { .. } | Action::Cleanup | Action::CancelCleanup
                    ) && acted.outcome.is_success()
                    {
                        store.drop_media_progress(stored.id).await?;
                    }
                    if let Some(err) = &acted.error {
                        // The BMC may have been reset and renamed its resources: rediscover on the next attempt.
                        self.clients.forget(&server.name);
                        last_error = Some(json!({
                            "state": d.machine.state.name(), "class": err.class, "bmc_status": err.status,
                            "message_id": err.message_id, "message": err.message,
                        }));
                    }
                    events.push((
                        "bmc_call".into(),
                        Some(job.fence),
                        json!({ "action": deploy_bmc::action_name(&action), "outcome": acted.outcome.name(),
                                "error": acted.error.as_ref().map(|e| e.message.clone()),
                                "bmc_status": acted.error.as_ref().and_then(|e| e.status),
                                "duration_ms": duration_ms }),
                    ));
                    let step = apply_outcome(&d, &acted.outcome, Utc::now(), &self.config, jitter());
                    if let Some(t) = step.transition {
                        events.push(("transition".into(), Some(job.fence), json!(t)));
                    }
                    d.machine = step.machine;
                    match step.decision {
                        Decision::Finished(t) => break (End::Finished(t), Value::Null),
                        Decision::Retry { at } | Decision::Snooze { until: at } => {
                            break (End::Snooze(at), Value::Null);
                        }
                        Decision::Continue | Decision::Act { .. } => {
                            budget -= 1;
                            if budget == 0 {
                                break (End::Snooze(Utc::now()), Value::Null);
                            }
                        }
                    }
                }
            }
        };
        let (end, facts_json) = end;
        // A pass that ended on a BMC call's outcome observed nothing after it: the last facts seen stay.
        let facts_json = if facts_json.is_null() {
            stored.last_facts.clone().unwrap_or(Value::Null)
        } else {
            facts_json
        };
        let queue = ctx.queue.clone();
        let machine = d.machine.clone();
        let original_seq = stored.seq();
        // A wait poll that saw nothing new has nothing to record: only the job's next run moves, fenced on its token.
        if let End::Snooze(until) = end
            && machine == stored.deployment.machine
            && events.is_empty()
            && last_error.is_none()
            && Some(&facts_json) == stored.last_facts.as_ref()
        {
            // The pool batches it with other pools' snoozes: one statement and one commit for many polls.
            return Ok(Outcome::Snooze(RunAt::At(until)));
        }
        let record = stored.clone();
        let sentence = machine.failure.as_ref().map(|_| {
            let last: Option<Facts> = serde_json::from_value(facts_json.clone()).ok();
            failure_sentence(&record.server, &machine, last.as_ref())
        });
        if let (Some(sentence), Some(failure)) = (&sentence, &machine.failure) {
            let event = FailedEvent {
                state: failure.state.name(),
                cause: failure.cause.name(),
                sentence,
            };
            events.push((
                "failed".into(),
                Some(job.fence),
                serde_json::to_value(&event).unwrap_or(Value::Null),
            ));
        }
        let context = failure_context(&record, &d, &facts_json, last_error.as_ref(), sentence.as_deref());
        store
            .save_machine(
                &stored,
                &machine,
                &facts_json,
                last_error.as_ref(),
                &events,
                async |c| end_job(&queue, c, job, &record, &machine, original_seq, end, context).await,
            )
            .await?;
        Ok(Outcome::Finished)
    }

    /// The deployment already ended (a duplicate job): complete this one.
    async fn finish_job(
        &self,
        ctx: &JobContext,
        job: JobRef,
        _stored: &DeploymentRecord,
        _t: Option<Terminal>,
    ) -> Result<(), StoreError> {
        let mut conn = self.store.pool().acquire().await?;
        ctx.queue.complete(&mut conn, job).await.map_err(queue_error)
    }

    async fn observe(
        &self,
        client: &BmcClient,
        slot: &mut Option<SlotRef>,
        stored: &DeploymentRecord,
        server: &Server,
        d: &Deployment,
        api: Option<ApiFacts>,
    ) -> Result<Facts, StoreError> {
        let want = deploy_bmc::want_for_machine(&d.machine);
        let observed = deploy_bmc::observe(client, slot.as_ref(), &want).await;
        if slot.is_none()
            && let Some(selected) = &observed.slot
        {
            self.store
                .set_media_slot(stored.id, &Value::String(selected.to_string()))
                .await?;
            *slot = Some(selected.clone());
        }
        let mut facts = observed.facts;
        // Registration, cancel and media reads arrive through the API; read them fresh, in one query.
        let api = match api {
            Some(api) => api,
            None => self.store.step_context(stored.id).await?.1,
        };
        facts.registered = api.registered_at.is_some_and(|at| at >= stored.created_at);
        facts.registration_refused = api.last_refusal.clone();
        facts.cancel = api.cancel.as_ref().map(|c| CancelRequest {
            skip_cleanup: c.get("skip_cleanup").and_then(Value::as_bool).unwrap_or(false),
        });
        if !api.media.is_empty() {
            let own = bmc_host(&server.bmc_address);
            if let Some(bytes_read) = racklift_deploy::ranges::bytes_read_for(&own, &api.media) {
                facts.media_progress = Some(MediaProgress {
                    bytes_read,
                    last_read_at: api.last_read_at,
                });
            }
        }
        Ok(facts)
    }
}

#[allow(clippy::too_many_arguments)]
async fn end_job(
    queue: &Queue,
    conn: &mut sqlx::PgConnection,
    job: JobRef,
    record: &DeploymentRecord,
    machine: &racklift_deploy::Machine,
    original_seq: i64,
    end: End,
    context: Value,
) -> Result<(), StoreError> {
    match end {
        End::Snooze(until) if machine.seq as i64 == original_seq => queue
            .snooze(conn, job, RunAt::At(until))
            .await
            .map_err(queue_error),
        End::Snooze(until) => {
            // A new transition: this job is done and the next step gets its own idempotency key.
            queue.complete(conn, job).await.map_err(queue_error)?;
            let next = step_job(record.id, &record.server, machine.seq).with_run_at(RunAt::At(until));
            queue.enqueue(conn, &next).await.map_err(queue_error)?;
            Ok(())
        }
        End::Finished(Terminal::Failed) => {
            let message = context.get("sentence").and_then(Value::as_str).map_or_else(
                || {
                    format!(
                        "server {}: deployment failed in {}",
                        record.server,
                        machine.state.def().label
                    )
                },
                str::to_owned,
            );
            let class = context
                .pointer("/last_error/class")
                .and_then(Value::as_str)
                .unwrap_or("deployment")
                .to_owned();
            let failure = Failure::fatal(message)
                .with_error_class(class)
                .with_context(context);
            queue
                .dead_letter(conn, job, "deployment_failed", &failure)
                .await
                .map(|_| ())
                .map_err(queue_error)
        }
        End::Finished(_) => queue.complete(conn, job).await.map_err(queue_error),
    }
}

/// The event a failed deployment ends with: the sentence for people beside the machine-readable state and cause.
#[derive(Serialize)]
struct FailedEvent<'a> {
    state: &'static str,
    cause: &'static str,
    sentence: &'a str,
}

/// What triage needs about a failed deployment.
fn failure_context(
    record: &DeploymentRecord,
    d: &Deployment,
    facts: &Value,
    last_error: Option<&Value>,
    sentence: Option<&str>,
) -> Value {
    json!({
        "operation": "deployment",
        "server": record.server,
        "deployment_id": record.id,
        "state": d.machine.failure.as_ref().map(|f| f.state.name()).unwrap_or(d.machine.state.name()),
        "cause": d.machine.failure.as_ref().map(|f| f.cause.name()),
        "sentence": sentence,
        "first_error": d.machine.first_error,
        "last_error": last_error,
        "last_error_text": d.machine.last_error,
        "retries": d.machine.retries,
        "bios_fallbacks": d.machine.bios_fallbacks,
        "last_facts": facts,
    })
}

/// The host part of a BMC URL: the address its media reads are expected from.
fn bmc_host(address: &str) -> String {
    reqwest_host(address).unwrap_or_default()
}

fn reqwest_host(address: &str) -> Option<String> {
    let rest = address.split_once("://").map(|(_, r)| r).unwrap_or(address);
    let authority = rest.split('/').next()?;
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => authority,
    };
    Some(host.trim_start_matches('[').trim_end_matches(']').to_owned())
}

fn jitter() -> Jitter {
    Jitter::new(rand::random::<f64>())
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Config, Duration, reqwest_host, watch_closely};

    #[test]
    fn only_short_snoozes_are_watched_in_process_and_only_so_often() {
        let cfg = Config::default(); // poll 10 s, catch poll 2 s
        let ms = chrono::TimeDelta::milliseconds;
        for (snooze, left, want) in [
            (ms(2_000), 10, Some(2_000)),
            (ms(500), 1, Some(500)),
            (ms(0), 3, Some(0)),
            (ms(-50), 3, Some(0)), // already due
            (ms(2_001), 10, None), // a regular poll goes through the queue
            (ms(10_000), 10, None),
            (ms(2_000), 0, None), // this lease has watched enough
        ] {
            assert_eq!(
                watch_closely(snooze, left, &cfg),
                want.map(Duration::from_millis),
                "{snooze:?} with {left} left"
            );
        }
    }

    #[test]
    fn bmc_host_is_the_address_media_reads_come_from() {
        for (url, host) in [
            ("http://127.0.0.1:8000/bmc/sim-0001", "127.0.0.1"),
            ("https://bmc.example:443", "bmc.example"),
            ("https://[::1]:8443/x", "::1"),
            ("bmc.example", "bmc.example"),
        ] {
            assert_eq!(reqwest_host(url).as_deref(), Some(host), "{url}");
        }
    }
}

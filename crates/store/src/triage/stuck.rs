//! Live deployments that stopped advancing: each measured against its state's budget by the state table's own
//! numbers (`racklift_deploy::triage::progress`), and against the queue (is any job left to advance it, and is
//! its holder alive).

use chrono::{DateTime, Utc};
use racklift_deploy::triage::{Overdue, Progress, progress};
use racklift_deploy::{Config, Machine};
use serde::Serialize;
use serde_json::Value;

use super::LiveJob;
use crate::{Store, StoreError};

/// A live deployment measured against its state's budget, with the job that should be advancing it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StuckDeployment {
    pub deployment_id: i64,
    pub server: String,
    pub vendor: Option<String>,
    /// The state's time and budgets (`racklift_deploy::triage::Progress`).
    #[schema(value_type = Object)]
    pub progress: Progress,
    /// Why it looks stuck: `state_overdue`, `deadline_passed` (from the state table), `no_live_job`,
    /// `lease_expired`, `not_picked_up` (from the queue). Empty: on track.
    #[schema(value_type = Vec<String>)]
    pub reasons: Vec<&'static str>,
    pub cancel_requested: bool,
    pub updated_at: DateTime<Utc>,
    /// Since the deployment row was last written (a transition, new facts, an error).
    pub last_write_age_secs: i64,
    pub job: Option<LiveJob>,
}

/// A job due this long without being leased has no worker taking its kind.
const NOT_PICKED_UP_SECS: i64 = 60;

impl Store {
    /// Live deployments measured against their state's budget (`cfg` is the state machine's timing), with the
    /// job holding their server. With `all`, on-track ones too; otherwise only those with a reason.
    pub async fn stuck_deployments(
        &self,
        cfg: &Config,
        all: bool,
    ) -> Result<Vec<StuckDeployment>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            id: i64,
            server: String,
            vendor: Option<String>,
            machine: Value,
            cancel_requested: bool,
            updated_at: DateTime<Utc>,
            now: DateTime<Utc>,
            job_id: Option<i64>,
            job_kind: Option<String>,
            job_state: Option<String>,
            run_at: Option<DateTime<Utc>>,
            attempts: Option<i32>,
            max_attempts: Option<i32>,
            fence: Option<i64>,
            leased_by: Option<String>,
            lease_expires_at: Option<DateTime<Utc>>,
            job_created_at: Option<DateTime<Utc>>,
        }
        // One live deployment per server and one live job per server (unique indexes), so this is a row each.
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT d.id, d.server, s.vendor_hint AS vendor, d.machine, d.cancel IS NOT NULL AS cancel_requested, \
                    d.updated_at, now() AS now, j.id AS job_id, j.kind AS job_kind, j.state AS job_state, j.run_at, \
                    j.attempts, j.max_attempts, j.fence, j.leased_by, j.lease_expires_at, \
                    j.created_at AS job_created_at \
             FROM deployments d JOIN servers s ON s.name = d.server \
             LEFT JOIN jobs j ON j.resource_key = 'server/' || d.server AND j.state IN ('queued', 'running') \
             WHERE d.finished_at IS NULL ORDER BY d.updated_at, d.id",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::new();
        for r in rows {
            let machine: Machine =
                serde_json::from_value(r.machine).map_err(|source| StoreError::Corrupt {
                    what: "deployment",
                    source,
                })?;
            let p = progress(&machine, r.now, cfg);
            let job = match (r.job_id, r.job_kind, r.job_state, r.run_at, r.job_created_at) {
                (Some(id), Some(kind), Some(state), Some(run_at), Some(created_at)) => Some(LiveJob {
                    id,
                    kind,
                    state,
                    run_at,
                    attempts: r.attempts.unwrap_or(0),
                    max_attempts: r.max_attempts.unwrap_or(0),
                    fence: r.fence,
                    leased_by: r.leased_by,
                    lease_expires_at: r.lease_expires_at,
                    created_at,
                }),
                _ => None,
            };
            let mut reasons: Vec<&'static str> = p
                .overdue
                .iter()
                .map(|o| match o {
                    Overdue::State => "state_overdue",
                    Overdue::Deadline => "deadline_passed",
                })
                .collect();
            match &job {
                None => reasons.push("no_live_job"),
                Some(j) if j.state == "running" && j.lease_expires_at.is_some_and(|at| at < r.now) => {
                    reasons.push("lease_expired")
                }
                Some(j) if j.state == "queued" && (r.now - j.run_at).num_seconds() > NOT_PICKED_UP_SECS => {
                    reasons.push("not_picked_up")
                }
                Some(_) => {}
            }
            if all || !reasons.is_empty() {
                out.push(StuckDeployment {
                    deployment_id: r.id,
                    server: r.server,
                    vendor: r.vendor,
                    progress: p,
                    reasons,
                    cancel_requested: r.cancel_requested,
                    updated_at: r.updated_at,
                    last_write_age_secs: (r.now - r.updated_at).num_seconds(),
                    job,
                });
            }
        }
        Ok(out)
    }
}

//! Cluster-wide operations: started with their job in one transaction, controlled (cancel, pause, resume), and
//! their run written by the worker holding the job, fenced on `seq`, together with the job's own outcome.

use chrono::{DateTime, Utc};
use racklift_deploy::rolling_run::RollingRun;
use racklift_queue::{JobPayload, NewJob, Queue};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;

use crate::deployments::queue_error;
use crate::{Store, StoreError};

/// Where an operation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperationStatus {
    Running,
    Paused,
    Completed,
    Failed,
    Canceled,
}

impl OperationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            OperationStatus::Running => "running",
            OperationStatus::Paused => "paused",
            OperationStatus::Completed => "completed",
            OperationStatus::Failed => "failed",
            OperationStatus::Canceled => "canceled",
        }
    }

    fn parse(text: &str) -> Result<OperationStatus, StoreError> {
        Ok(match text {
            "running" => OperationStatus::Running,
            "paused" => OperationStatus::Paused,
            "completed" => OperationStatus::Completed,
            "failed" => OperationStatus::Failed,
            "canceled" => OperationStatus::Canceled,
            other => {
                return Err(StoreError::Corrupt {
                    what: "cluster operation status",
                    source: serde::de::Error::custom(format!("unknown status {other:?}")),
                });
            }
        })
    }

    pub fn is_live(self) -> bool {
        matches!(self, OperationStatus::Running | OperationStatus::Paused)
    }
}

/// A cluster-wide operation and its run.
#[derive(Debug, Clone)]
pub struct ClusterOperation {
    pub id: i64,
    pub cluster: String,
    pub status: OperationStatus,
    pub run: RollingRun,
    pub seq: i64,
    pub status_reason: Option<String>,
    pub failed_server: Option<String>,
    pub failed_step: Option<String>,
    pub cancel_requested: bool,
    pub pause_requested: bool,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// The job that drives a cluster operation: one per operation, snoozed between ticks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterStep {
    pub operation_id: i64,
}

impl JobPayload for ClusterStep {
    const KIND: &'static str = "cluster.step";
}

impl ClusterStep {
    /// The live job of `cluster`'s operation.
    pub fn job(&self, cluster: &str) -> NewJob {
        let mut job = self.new_job();
        job.idempotency_key = Some(format!("cluster-operation/{}", self.operation_id));
        job.resource_key = Some(cluster_resource(cluster));
        // A failed step ends the run through the state machine; the queue's attempts only catch a crashing worker.
        job.max_attempts = 5;
        job
    }
}

fn cluster_resource(cluster: &str) -> String {
    format!("cluster/{cluster}")
}

/// The final state a worker writes for an operation, with the reason an operator reads.
#[derive(Debug, Clone)]
pub struct RunUpdate<'a> {
    pub run: &'a RollingRun,
    pub status: OperationStatus,
    pub reason: Option<&'a str>,
    pub failed_server: Option<&'a str>,
    pub failed_step: Option<&'a str>,
}

#[derive(sqlx::FromRow)]
struct OperationRow {
    id: i64,
    cluster: String,
    status: String,
    run: serde_json::Value,
    seq: i64,
    status_reason: Option<String>,
    failed_server: Option<String>,
    failed_step: Option<String>,
    cancel_requested: bool,
    pause_requested: bool,
    requested_by: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
}

const OPERATION_COLUMNS: &str = "id, cluster, status, run, seq, status_reason, failed_server, failed_step, \
                                 cancel_requested, pause_requested, requested_by, created_at, updated_at, finished_at";

impl TryFrom<OperationRow> for ClusterOperation {
    type Error = StoreError;
    fn try_from(r: OperationRow) -> Result<ClusterOperation, StoreError> {
        Ok(ClusterOperation {
            id: r.id,
            cluster: r.cluster,
            status: OperationStatus::parse(&r.status)?,
            run: serde_json::from_value(r.run).map_err(|source| StoreError::Corrupt {
                what: "cluster operation run",
                source,
            })?,
            seq: r.seq,
            status_reason: r.status_reason,
            failed_server: r.failed_server,
            failed_step: r.failed_step,
            cancel_requested: r.cancel_requested,
            pause_requested: r.pause_requested,
            requested_by: r.requested_by,
            created_at: r.created_at,
            updated_at: r.updated_at,
            finished_at: r.finished_at,
        })
    }
}

impl Store {
    /// Starts an operation and enqueues its job in one transaction. With an idempotency key used for this cluster
    /// before, returns that operation (`false`: nothing was created). `Conflict` naming the live operation.
    pub async fn start_cluster_operation(
        &self,
        queue: &Queue,
        cluster: &str,
        run: &RollingRun,
        idempotency_key: Option<&str>,
        by: &str,
    ) -> Result<(ClusterOperation, bool), StoreError> {
        let mut tx = self.pool.begin().await?;
        if let Some(key) = idempotency_key
            && let Some(existing) = operation_by_key(&mut tx, cluster, key).await?
        {
            return Ok((existing, false));
        }
        let row: Option<OperationRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "INSERT INTO cluster_operations (cluster, operation, run, idempotency_key, requested_by) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING {OPERATION_COLUMNS}"
        )))
        .bind(cluster)
        .bind(run.kind.operation())
        .bind(serde_json::to_value(run).expect("runs serialise"))
        .bind(idempotency_key)
        .bind(by)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            if let Some(key) = idempotency_key
                && let Some(existing) = operation_by_key(&mut tx, cluster, key).await?
            {
                return Ok((existing, false));
            }
            let live = live_operation_in(&mut tx, cluster).await?;
            return Err(StoreError::Conflict {
                what: "operation running on cluster",
                name: match live {
                    Some(op) => format!("{cluster} (operation {} {})", op.id, op.run.kind.operation()),
                    None => cluster.to_owned(),
                },
            });
        };
        let op: ClusterOperation = row.try_into()?;
        queue
            .enqueue(&mut tx, &ClusterStep { operation_id: op.id }.job(cluster))
            .await
            .map_err(queue_error)?;
        tx.commit().await?;
        Ok((op, true))
    }

    pub async fn cluster_operation(&self, id: i64) -> Result<ClusterOperation, StoreError> {
        let row: Option<OperationRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {OPERATION_COLUMNS} FROM cluster_operations WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.ok_or_else(|| StoreError::NotFound {
            what: "cluster operation",
            name: id.to_string(),
        })?
        .try_into()
    }

    /// The operation this idempotency key started on the cluster, if any.
    pub async fn cluster_operation_by_key(
        &self,
        cluster: &str,
        key: &str,
    ) -> Result<Option<ClusterOperation>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        operation_by_key(&mut conn, cluster, key).await
    }

    /// The cluster's newest operation, live or not.
    pub async fn latest_cluster_operation(
        &self,
        cluster: &str,
    ) -> Result<Option<ClusterOperation>, StoreError> {
        let row: Option<OperationRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {OPERATION_COLUMNS} FROM cluster_operations WHERE cluster = $1 ORDER BY id DESC LIMIT 1"
        )))
        .bind(cluster)
        .fetch_optional(&self.pool)
        .await?;
        row.map(ClusterOperation::try_from).transpose()
    }

    /// The live operation of the cluster `server` is a member of, if one runs (or is paused): what decides
    /// which components the update catalog offers the server while a restricted update stages.
    pub async fn live_operation_of_member(
        &self,
        server: &str,
    ) -> Result<Option<ClusterOperation>, StoreError> {
        let row: Option<OperationRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {OPERATION_COLUMNS} FROM cluster_operations
             WHERE status IN ('running', 'paused')
               AND cluster = (SELECT cluster FROM cluster_members WHERE server = $1)"
        )))
        .bind(server)
        .fetch_optional(&self.pool)
        .await?;
        row.map(ClusterOperation::try_from).transpose()
    }

    /// Asks the cluster's live operation to cancel (or pause, or resume a paused one) and makes its job due now.
    /// `NotFound` when no operation is live.
    pub async fn request_cluster_control(
        &self,
        queue: &Queue,
        cluster: &str,
        control: OperationControl,
    ) -> Result<ClusterOperation, StoreError> {
        let mut tx = self.pool.begin().await?;
        let set = match control {
            OperationControl::Cancel => "cancel_requested = true",
            OperationControl::Pause => "pause_requested = true",
            OperationControl::Resume => "pause_requested = false, status = 'running', status_reason = NULL",
        };
        let row: Option<OperationRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "UPDATE cluster_operations SET {set}, updated_at = now() \
             WHERE cluster = $1 AND status IN ('running', 'paused') RETURNING {OPERATION_COLUMNS}"
        )))
        .bind(cluster)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            self.cluster(cluster).await?;
            return Err(StoreError::NotFound {
                what: "operation running on cluster",
                name: cluster.to_owned(),
            });
        };
        let op: ClusterOperation = row.try_into()?;
        // A paused operation has no live job: resuming or canceling it enqueues one; a running one is woken.
        let job = ClusterStep { operation_id: op.id }.job(cluster);
        let live: Option<(i64, String)> = sqlx::query_as(
            "SELECT id, state FROM jobs WHERE resource_key = $1 AND state IN ('queued', 'running')",
        )
        .bind(cluster_resource(cluster))
        .fetch_optional(&mut *tx)
        .await?;
        match live {
            Some((id, state)) if state == "queued" => {
                queue.wake(&mut tx, id).await.map_err(queue_error)?;
            }
            Some(_) => {}
            None if control != OperationControl::Pause => {
                queue.enqueue(&mut tx, &job).await.map_err(queue_error)?;
            }
            None => {}
        }
        tx.commit().await?;
        Ok(op)
    }

    /// Writes a worker's run, fenced on the `seq` it read, and in the same transaction the job's own outcome
    /// (`finish`). `Stale` when the operation moved on without this worker.
    pub async fn save_cluster_run<F>(
        &self,
        op: &ClusterOperation,
        update: &RunUpdate<'_>,
        finish: F,
    ) -> Result<i64, StoreError>
    where
        F: AsyncFnOnce(&mut PgConnection) -> Result<(), StoreError>,
    {
        let mut tx = self.pool.begin().await?;
        let ended = !update.status.is_live();
        let done = sqlx::query(
            "UPDATE cluster_operations SET run = $3, status = $4, status_reason = $5, failed_server = $6, \
             failed_step = $7, seq = seq + 1, updated_at = now(), \
             finished_at = CASE WHEN $8 THEN now() ELSE NULL END \
             WHERE id = $1 AND seq = $2 AND status IN ('running', 'paused')",
        )
        .bind(op.id)
        .bind(op.seq)
        .bind(serde_json::to_value(update.run).expect("runs serialise"))
        .bind(update.status.as_str())
        .bind(update.reason)
        .bind(update.failed_server)
        .bind(update.failed_step)
        .bind(ended)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(StoreError::Stale {
                what: "cluster operation",
                name: op.id.to_string(),
            });
        }
        finish(&mut tx).await?;
        tx.commit().await?;
        Ok(op.seq + 1)
    }

    /// Sets `racklift_cluster_operations{operation,status}` and `racklift_cluster_servers_done{cluster,operation}`
    /// at scrape time.
    pub async fn sample_cluster_gauges(&self) -> Result<(), StoreError> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT operation, status, count(*) FROM cluster_operations GROUP BY operation, status",
        )
        .fetch_all(&self.pool)
        .await?;
        let metrics = racklift_metrics::global();
        racklift_metrics::set_gauges(
            &metrics.cluster_operations,
            rows.iter()
                .map(|(op, status, n)| (vec![op.as_str(), status.as_str()], *n as f64)),
        );
        let live: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT cluster, operation, (SELECT count(*) FROM jsonb_array_elements(run -> 'servers') s \
             WHERE (s ->> 'done')::boolean) FROM cluster_operations WHERE status IN ('running', 'paused')",
        )
        .fetch_all(&self.pool)
        .await?;
        racklift_metrics::set_gauges(
            &metrics.cluster_servers_done,
            live.iter()
                .map(|(c, op, n)| (vec![c.as_str(), op.as_str()], *n as f64)),
        );
        Ok(())
    }
}

/// What an operator asks of a live operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationControl {
    Cancel,
    Pause,
    Resume,
}

async fn operation_by_key(
    conn: &mut PgConnection,
    cluster: &str,
    key: &str,
) -> Result<Option<ClusterOperation>, StoreError> {
    let row: Option<OperationRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {OPERATION_COLUMNS} FROM cluster_operations WHERE cluster = $1 AND idempotency_key = $2"
    )))
    .bind(cluster)
    .bind(key)
    .fetch_optional(conn)
    .await?;
    row.map(ClusterOperation::try_from).transpose()
}

async fn live_operation_in(
    conn: &mut PgConnection,
    cluster: &str,
) -> Result<Option<ClusterOperation>, StoreError> {
    let row: Option<OperationRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {OPERATION_COLUMNS} FROM cluster_operations WHERE cluster = $1 AND status IN ('running', 'paused')"
    )))
    .bind(cluster)
    .fetch_optional(conn)
    .await?;
    row.map(ClusterOperation::try_from).transpose()
}

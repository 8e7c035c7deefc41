//! Deployments: created with their first job in one transaction, then advanced by workers with fenced writes.

use chrono::{DateTime, Utc};
use racklift_deploy::{Deployment, Machine, Plan};
use racklift_queue::{JobPayload, NewJob, Queue, QueueError};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::servers::{ServerStatus, set_status};
use crate::{Store, StoreError};

/// A deployment as stored.
#[derive(Debug, Clone, Serialize)]
pub struct DeploymentRecord {
    pub id: i64,
    pub server: String,
    #[serde(skip)]
    pub media_secret: String,
    pub image_id: i64,
    pub token: Uuid,
    pub seed: String,
    pub deployment: Deployment,
    pub media_slot: Option<Value>,
    /// The Redfish `BootSourceOverrideTarget` the media boots with (`Cd`, `Usb`), chosen with the slot at
    /// pre-flight; `None` for deployments made before it was recorded, which boot `Cd`.
    pub boot_target: Option<String>,
    pub cancel: Option<Value>,
    pub last_facts: Option<Value>,
    pub last_error: Option<Value>,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl DeploymentRecord {
    pub fn seq(&self) -> i64 {
        self.deployment.machine.seq as i64
    }

    pub fn is_finished(&self) -> bool {
        self.finished_at.is_some()
    }
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    server: String,
    media_secret: String,
    image_id: i64,
    token: Uuid,
    seed: String,
    plan: Value,
    media_slot: Option<Value>,
    boot_target: Option<String>,
    machine: Value,
    cancel: Option<Value>,
    last_facts: Option<Value>,
    last_error: Option<Value>,
    requested_by: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
}

const COLUMNS: &str = "id, server, media_secret, image_id, token, seed, plan, media_slot, boot_target, machine, cancel, \
                       last_facts, last_error, requested_by, created_at, updated_at, finished_at";

impl TryFrom<Row> for DeploymentRecord {
    type Error = StoreError;
    fn try_from(r: Row) -> Result<DeploymentRecord, StoreError> {
        let corrupt = |source| StoreError::Corrupt {
            what: "deployment",
            source,
        };
        let plan: Plan = serde_json::from_value(r.plan).map_err(corrupt)?;
        let machine: Machine = serde_json::from_value(r.machine).map_err(corrupt)?;
        Ok(DeploymentRecord {
            id: r.id,
            server: r.server,
            media_secret: r.media_secret,
            image_id: r.image_id,
            token: r.token,
            seed: r.seed,
            deployment: Deployment { plan, machine },
            media_slot: r.media_slot,
            boot_target: r.boot_target,
            cancel: r.cancel,
            last_facts: r.last_facts,
            last_error: r.last_error,
            requested_by: r.requested_by,
            created_at: r.created_at,
            updated_at: r.updated_at,
            finished_at: r.finished_at,
        })
    }
}

/// Everything the API resolved for a new deployment.
#[derive(Debug, Clone)]
pub struct NewDeployment {
    pub server: String,
    pub media_secret: String,
    pub image_id: i64,
    pub token: Uuid,
    pub seed: String,
    pub deployment: Deployment,
    pub media_slot: Option<Value>,
    /// The boot override target chosen with the slot (`Cd`, `Usb`).
    pub boot_target: Option<String>,
    pub idempotency_key: Option<String>,
    pub requested_by: String,
    /// The seed archive laid over the image's partition 2 for this deployment.
    pub seed_archive: Vec<u8>,
    /// The token in the seed's provider.yaml: registers this deployment and no other.
    pub registration_token: String,
    /// The hostname the installed server will register with, when its seed names one.
    pub expected_hostname: Option<String>,
    /// The system UUID the BMC reported: the name IncusOS registers under when the seed names no hostname.
    pub bmc_system_uuid: Option<String>,
}

/// The payload of a deployment's step job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeploymentStep {
    pub deployment_id: i64,
}

impl JobPayload for DeploymentStep {
    const KIND: &'static str = "deployment.step";
}

/// The job kind every deployment step runs as.
pub const STEP_KIND: &str = <DeploymentStep as JobPayload>::KIND;

/// The live step job of a deployment: one per server (resource key), one per transition (idempotency key).
pub fn step_job(deployment_id: i64, server: &str, seq: u64) -> NewJob {
    let mut job = DeploymentStep { deployment_id }.new_job();
    job.idempotency_key = Some(format!("deployment/{deployment_id}/{seq}"));
    job.resource_key = Some(format!("server/{server}"));
    // Retries of a step are counted by the state machine; the queue's attempts only catch a crashing worker.
    job.max_attempts = 5;
    job
}

/// The server's deployment made under this idempotency key, if any.
async fn by_idempotency_key(
    conn: &mut PgConnection,
    server: &str,
    key: &str,
) -> Result<Option<DeploymentRecord>, StoreError> {
    let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM deployments WHERE server = $1 AND idempotency_key = $2"
    )))
    .bind(server)
    .bind(key)
    .fetch_optional(conn)
    .await?;
    row.map(DeploymentRecord::try_from).transpose()
}

fn not_found(id: i64) -> StoreError {
    StoreError::NotFound {
        what: "deployment",
        name: id.to_string(),
    }
}

impl Store {
    /// Creates the deployment and enqueues its first step in one transaction. With an idempotency key that was
    /// used for this server before, returns that deployment instead (`false`: nothing was created), also to a
    /// request that raced the one that created it. `Conflict` when another deployment of the server is running.
    pub async fn create_deployment(
        &self,
        queue: &Queue,
        new: &NewDeployment,
    ) -> Result<(DeploymentRecord, bool), StoreError> {
        let mut tx = self.pool.begin().await?;
        if let Some(key) = &new.idempotency_key
            && let Some(existing) = by_idempotency_key(&mut tx, &new.server, key).await?
        {
            return Ok((existing, false));
        }
        let plan = serde_json::to_value(&new.deployment.plan).expect("plans serialise");
        let machine = serde_json::to_value(&new.deployment.machine).expect("machines serialise");
        // `ON CONFLICT DO NOTHING` waits for a racing insert of this server's deployment (`deployments_live`,
        // `deployments_idempotency`) to commit, then lets this transaction read what it made.
        let inserted: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "INSERT INTO deployments (server, media_secret, image_id, token, seed, plan, media_slot, machine, state, \
             seq, idempotency_key, requested_by, seed_archive, registration_token, expected_hostname, bmc_system_uuid, boot_target) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
             ON CONFLICT DO NOTHING RETURNING {COLUMNS}"
        )))
        .bind(&new.server)
        .bind(&new.media_secret)
        .bind(new.image_id)
        .bind(new.token)
        .bind(&new.seed)
        .bind(plan)
        .bind(&new.media_slot)
        .bind(machine)
        .bind(new.deployment.machine.state.name())
        .bind(new.deployment.machine.seq as i64)
        .bind(&new.idempotency_key)
        .bind(&new.requested_by)
        .bind(&new.seed_archive)
        .bind(&new.registration_token)
        .bind(&new.expected_hostname)
        .bind(&new.bmc_system_uuid)
        .bind(&new.boot_target)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = inserted else {
            if let Some(key) = &new.idempotency_key
                && let Some(existing) = by_idempotency_key(&mut tx, &new.server, key).await?
            {
                return Ok((existing, false));
            }
            return Err(StoreError::Conflict {
                what: "running deployment on server",
                name: new.server.clone(),
            });
        };
        let record: DeploymentRecord = row.try_into()?;
        set_status(
            &mut *tx,
            &new.server,
            ServerStatus::Deploying,
            "deployment requested",
        )
        .await?;
        crate::events::insert(
            &mut *tx,
            &new.server,
            Some(record.id),
            "requested",
            None,
            &serde_json::json!({ "by": new.requested_by, "seed": new.seed }),
        )
        .await?;
        queue
            .enqueue(&mut tx, &step_job(record.id, &new.server, 0))
            .await
            .map_err(queue_error)?;
        tx.commit().await?;
        Ok((record, true))
    }

    pub async fn deployment(&self, id: i64) -> Result<DeploymentRecord, StoreError> {
        let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM deployments WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.ok_or_else(|| not_found(id))?.try_into()
    }

    /// The server's newest deployment, running or not.
    pub async fn latest_deployment(&self, server: &str) -> Result<Option<DeploymentRecord>, StoreError> {
        let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM deployments WHERE server = $1 ORDER BY id DESC LIMIT 1"
        )))
        .bind(server)
        .fetch_optional(&self.pool)
        .await?;
        row.map(DeploymentRecord::try_from).transpose()
    }

    /// The deployment created for this server with this idempotency key, if any: lets the API answer a retried
    /// deploy request with the original deployment before re-running its pre-flight checks.
    pub async fn deployment_by_idempotency_key(
        &self,
        server: &str,
        key: &str,
    ) -> Result<Option<DeploymentRecord>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        by_idempotency_key(&mut conn, server, key).await
    }

    /// Records the selected media slot once the worker picked one.
    pub async fn set_media_slot(&self, id: i64, slot: &Value) -> Result<(), StoreError> {
        sqlx::query("UPDATE deployments SET media_slot = $2 WHERE id = $1")
            .bind(id)
            .bind(slot)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Requests cancellation of the server's running deployment and takes the lease from whoever holds its step,
    /// so the holder aborts its BMC call and the next lease decides the cancel. Returns the deployment. The
    /// operator's `reason`, when given, is kept in the `cancel_requested` event for whoever reads the log later.
    pub async fn request_cancel(
        &self,
        queue: &Queue,
        server: &str,
        skip_cleanup: bool,
        reason: Option<&str>,
        by: &str,
    ) -> Result<DeploymentRecord, StoreError> {
        let mut tx = self.pool.begin().await?;
        let record = request_cancel_in(&mut tx, queue, server, skip_cleanup, reason, by).await?;
        tx.commit().await?;
        Ok(record)
    }

    /// Persists a worker's decision: the machine (fenced on the `seq` it read), the facts it saw, and, in the same
    /// transaction, the job's own outcome written by `finish` (which checks the job's fence). `Stale` when the
    /// deployment moved on without this worker.
    pub async fn save_machine<F>(
        &self,
        record: &DeploymentRecord,
        machine: &Machine,
        facts: &Value,
        last_error: Option<&Value>,
        events: &[(String, Option<i64>, Value)],
        finish: F,
    ) -> Result<(), StoreError>
    where
        F: AsyncFnOnce(&mut PgConnection) -> Result<(), StoreError>,
    {
        let mut tx = self.pool.begin().await?;
        let terminal = machine.state.is_terminal();
        let done = sqlx::query(
            "UPDATE deployments SET machine = $3, state = $4, seq = $5, last_facts = $6, \
             last_error = coalesce($7, last_error), updated_at = now(), \
             finished_at = CASE WHEN $8 THEN now() ELSE NULL END \
             WHERE id = $1 AND seq = $2 AND finished_at IS NULL",
        )
        .bind(record.id)
        .bind(record.seq())
        .bind(serde_json::to_value(machine).expect("machines serialise"))
        .bind(machine.state.name())
        .bind(machine.seq as i64)
        .bind(facts)
        .bind(last_error)
        .bind(terminal)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(StoreError::Stale {
                what: "deployment",
                name: record.id.to_string(),
            });
        }
        for (kind, fence, detail) in events {
            crate::events::insert(&mut *tx, &record.server, Some(record.id), kind, *fence, detail).await?;
        }
        if terminal {
            let (status, detail) = match machine.state {
                racklift_deploy::State::Completed => (ServerStatus::Registered, "deployed"),
                racklift_deploy::State::Failed => (ServerStatus::Failed, "deployment failed"),
                _ => (ServerStatus::Unregistered, "deployment canceled"),
            };
            set_status(&mut *tx, &record.server, status, detail).await?;
            sqlx::query("DELETE FROM media_reads WHERE deployment_id = $1 AND $2")
                .bind(record.id)
                .bind(machine.state != racklift_deploy::State::Failed)
                .execute(&mut *tx)
                .await?;
        } else {
            set_status(
                &mut *tx,
                &record.server,
                ServerStatus::Deploying,
                machine.state.name(),
            )
            .await?;
        }
        finish(&mut tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Drops the recorded media read progress of a deployment (attach, cleanup, cancel).
    pub async fn drop_media_progress(&self, deployment_id: i64) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM media_reads WHERE deployment_id = $1")
            .bind(deployment_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Sets `racklift_deployments{state}` from the table, at scrape time. States are the state machine's names,
    /// a fixed set, so they need no cap.
    pub async fn sample_deployment_gauges(&self) -> Result<(), StoreError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT state, count(*) FROM deployments GROUP BY state")
                .fetch_all(&self.pool)
                .await?;
        racklift_metrics::set_gauges(
            &racklift_metrics::global().deployments,
            rows.iter().map(|(state, n)| (vec![state.as_str()], *n as f64)),
        );
        Ok(())
    }

    /// Every gauge read from the database at scrape time, by the API and the workers alike: the queue's (through
    /// its own statements, with zeros for `kinds`) and the deployments'.
    pub async fn sample_gauges(&self, queue: &Queue, kinds: &[&str]) -> Result<(), StoreError> {
        queue.sample_gauges(kinds).await.map_err(queue_error)?;
        self.sample_deployment_gauges().await?;
        self.sample_cluster_gauges().await
    }
}

/// [`Store::request_cancel`] in the caller's transaction, so the triage can record its action beside it.
pub(crate) async fn request_cancel_in(
    tx: &mut PgConnection,
    queue: &Queue,
    server: &str,
    skip_cleanup: bool,
    reason: Option<&str>,
    by: &str,
) -> Result<DeploymentRecord, StoreError> {
    let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE deployments SET cancel = $2, updated_at = now() WHERE server = $1 AND finished_at IS NULL \
         RETURNING {COLUMNS}"
    )))
    .bind(server)
    .bind(serde_json::json!({ "skip_cleanup": skip_cleanup }))
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Err(StoreError::NotFound {
            what: "running deployment on server",
            name: server.to_owned(),
        });
    };
    let record: DeploymentRecord = row.try_into()?;
    let mut event = serde_json::json!({ "by": by, "skip_cleanup": skip_cleanup });
    if let Some(reason) = reason {
        event["reason"] = serde_json::json!(reason);
    }
    crate::events::insert(
        &mut *tx,
        server,
        Some(record.id),
        "cancel_requested",
        None,
        &event,
    )
    .await?;
    wake_step(queue, tx, server, true).await?;
    Ok(record)
}

/// Reads a deployment and locks its row until the caller's transaction ends, so a triage action and a worker's
/// fenced `save_machine` cannot interleave.
pub(crate) async fn lock_deployment(tx: &mut PgConnection, id: i64) -> Result<DeploymentRecord, StoreError> {
    let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM deployments WHERE id = $1 FOR UPDATE"
    )))
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    row.ok_or_else(|| not_found(id))?.try_into()
}

/// Finds the server's live step job and makes it due now; with `revoke`, also takes the lease from its holder.
pub(crate) async fn wake_step(
    queue: &Queue,
    tx: &mut PgConnection,
    server: &str,
    revoke: bool,
) -> Result<(), StoreError> {
    let job: Option<(i64, String)> = sqlx::query_as(
        "SELECT id, state FROM jobs WHERE resource_key = $1 AND state IN ('queued', 'running')",
    )
    .bind(format!("server/{server}"))
    .fetch_optional(&mut *tx)
    .await?;
    match job {
        Some((id, state)) if state == "running" && revoke => {
            queue.revoke(tx, id).await.map_err(queue_error)?;
        }
        Some((id, state)) if state == "queued" => {
            queue.wake(tx, id).await.map_err(queue_error)?;
        }
        _ => {}
    }
    Ok(())
}

/// A fenced queue write that was refused is a stale write; anything else is a database error.
pub fn queue_error(e: QueueError) -> StoreError {
    match e {
        QueueError::LeaseLost { job_id, .. } => StoreError::Stale {
            what: "job",
            name: job_id.to_string(),
        },
        QueueError::ResourceBusy { resource_key, .. } => StoreError::Conflict {
            what: "live job for",
            name: resource_key,
        },
        QueueError::IdempotencyKeyReused { key, existing, .. } => StoreError::IdempotencyKeyReused {
            key,
            existing_job: existing,
        },
        QueueError::Database(e) => StoreError::Db(e),
        other => StoreError::Queue(other),
    }
}

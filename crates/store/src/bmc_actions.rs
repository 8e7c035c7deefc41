//! Ad-hoc BMC actions (power, virtual media) requested through the API: each is a job on the server's resource
//! key, so it never runs beside a deployment step or another action on the same BMC.

use racklift_queue::{Enqueued, JobPayload, Queue, RequestKey};
use serde::{Deserialize, Serialize};

use crate::deployments::queue_error;
use crate::{Store, StoreError};

/// The job kind ad-hoc actions run as.
/// The job kind of [`BmcActionPayload`].
pub const BMC_ACTION_KIND: &str = <BmcActionPayload as JobPayload>::KIND;

/// What an operator asked the BMC to do; desired state, so re-running it is harmless.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum BmcAction {
    PowerOn,
    PowerOff,
    PowerCycle,
    InsertMedia { image_url: String },
    EjectMedia,
}

impl BmcAction {
    pub fn name(&self) -> &'static str {
        match self {
            BmcAction::PowerOn => "power_on",
            BmcAction::PowerOff => "power_off",
            BmcAction::PowerCycle => "power_cycle",
            BmcAction::InsertMedia { .. } => "insert_media",
            BmcAction::EjectMedia => "eject_media",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BmcActionPayload {
    pub server: String,
    #[serde(flatten)]
    pub action: BmcAction,
    pub requested_by: String,
}

impl JobPayload for BmcActionPayload {
    const KIND: &'static str = "bmc.action";
}

/// What an idempotency key of an ad-hoc action is held against: the scope and the request's fingerprint.
///
/// Keys are scoped per server (`bmc-action/<server>`), `:power` and `:media` together: the bulk CLI sends one key
/// to many servers, each of which must get its job, and both endpoints are one line of work on the server's BMC,
/// so one key reused between them is a client's mistake worth refusing. They are not scoped per API token:
/// racklift serves one site, whose tokens are its people and scripts, and the key protects a server from a
/// doubled action whoever retries; two callers who chose one key for one server and the same action asked for
/// the same desired state, and for different ones the fingerprint refuses the second instead of merging them.
/// The fingerprint leaves out `requested_by` for the same reason.
pub fn bmc_action_request_key(payload: &BmcActionPayload, key: &str) -> RequestKey {
    #[derive(Serialize)]
    struct Fingerprinted<'a> {
        scope: &'a str,
        server: &'a str,
        action: &'a BmcAction,
    }
    let scope = format!("bmc-action/{}", payload.server);
    let request = Fingerprinted {
        scope: &scope,
        server: &payload.server,
        action: &payload.action,
    };
    let canonical = serde_json::to_vec(&request).expect("a struct of strings always serialises");
    RequestKey {
        fingerprint: crate::sha256_hex(&canonical),
        scope,
        key: key.to_owned(),
    }
}

impl Store {
    /// Enqueues the action. With an idempotency key, the same request within the queue's idempotency retention
    /// returns the job the key made, live or finished (`false`: nothing was created), however many copies of it
    /// race; the key with another request is `IdempotencyKeyReused`. `Conflict` when a deployment step or
    /// another action holds the server.
    pub async fn enqueue_bmc_action(
        &self,
        queue: &Queue,
        payload: &BmcActionPayload,
        idempotency_key: Option<&str>,
    ) -> Result<(i64, bool), StoreError> {
        let mut job = payload.new_job();
        job.resource_key = Some(format!("server/{}", payload.server));
        job.max_attempts = 5;
        let mut tx = self.pool.begin().await?;
        let enqueued = match idempotency_key {
            Some(key) => {
                let request = bmc_action_request_key(payload, key);
                queue.enqueue_once(&mut tx, &request, &job).await
            }
            None => queue.enqueue(&mut tx, &job).await,
        }
        .map_err(queue_error)?;
        let created = matches!(enqueued, Enqueued::Created(_));
        // A retry is the same request: the log records the one that made the job.
        if created {
            crate::events::insert(
                &mut *tx,
                &payload.server,
                None,
                "bmc_action_requested",
                None,
                &serde_json::json!({ "action": payload.action, "by": payload.requested_by, "job_id": enqueued.id() }),
            )
            .await?;
        }
        tx.commit().await?;
        Ok((enqueued.id(), created))
    }
}

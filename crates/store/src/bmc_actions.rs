//! Ad-hoc BMC actions (power, virtual media) requested through the API: each is a job on the server's resource
//! key, so it never runs beside a deployment step or another action on the same BMC.

use racklift_queue::{Enqueued, NewJob, Queue};
use serde::{Deserialize, Serialize};

use crate::deployments::queue_error;
use crate::{Store, StoreError};

/// The job kind ad-hoc actions run as.
pub const BMC_ACTION_KIND: &str = "bmc.action";

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

impl Store {
    /// Enqueues the action; with the same idempotency key while the first is live, returns that job. `Conflict`
    /// when a deployment step or another action holds the server.
    pub async fn enqueue_bmc_action(
        &self,
        queue: &Queue,
        payload: &BmcActionPayload,
        idempotency_key: Option<&str>,
    ) -> Result<(i64, bool), StoreError> {
        let mut job = NewJob::new(BMC_ACTION_KIND, payload).map_err(queue_error)?;
        job.resource_key = Some(format!("server/{}", payload.server));
        job.idempotency_key = idempotency_key.map(|k| format!("bmc-action/{}/{k}", payload.server));
        job.max_attempts = 5;
        let mut tx = self.pool.begin().await?;
        let enqueued = queue.enqueue(&mut tx, &job).await.map_err(queue_error)?;
        crate::events::insert(
            &mut *tx,
            &payload.server,
            None,
            "bmc_action_requested",
            None,
            &serde_json::json!({ "action": payload.action, "by": payload.requested_by, "job_id": enqueued.id() }),
        )
        .await?;
        tx.commit().await?;
        Ok((enqueued.id(), matches!(enqueued, Enqueued::Created(_))))
    }
}

//! The `bmc.action` job: an operator's ad-hoc power or virtual-media request, fenced like every BMC mutation.

use std::time::Duration;

use racklift_queue::{Failure, HandlerResult, JobContext, Outcome};
use racklift_redfish::{BmcClient, Fence};
use racklift_store::{BmcAction, BmcActionPayload, Store, StoreError};
use serde_json::json;

use crate::deploy_step::error_chain;

#[derive(Clone)]
pub struct BmcActionHandler {
    pub store: Store,
    pub clients: racklift_bmc_access::ClientCache,
    pub call_deadline: Duration,
}

impl BmcActionHandler {
    pub async fn run(self, ctx: JobContext) -> HandlerResult {
        let payload: BmcActionPayload = ctx
            .job
            .payload()
            .map_err(|e| Failure::fatal(format!("BMC action payload: {e}")))?;
        let name = payload.server.clone();
        let what = payload.action.name();
        let context = json!({ "operation": "bmc_action", "server": name, "action": what });
        let failed = |message: String, class: &str, retryable: bool| {
            let f = if retryable {
                Failure::retryable(message)
            } else {
                Failure::fatal(message)
            };
            f.with_error_class(class).with_context(context.clone())
        };
        let server = self
            .store
            .server(&name)
            .await
            .map_err(|e| failed(format!("server {name}: {what}: {e}"), "database", true))?;
        let client = self
            .clients
            .client_for(&server, self.call_deadline)
            .await
            .map_err(|e| failed(format!("{what}: {}", error_chain(&e)), "bmc_config", false))?
            .with_fence(Fence(ctx.job.fence));
        if !ctx
            .lease
            .outlasts(self.call_deadline.min(ctx.queue.config().lease_ttl / 2))
        {
            return Err(failed(
                format!("server {name}: {what}: lease too short"),
                "lease",
                true,
            ));
        }
        // Invariant 3: the server's fence moves to this token before the BMC sees the call.
        match self.store.advance_server_fence(&name, ctx.job.fence).await {
            Ok(()) => {}
            Err(StoreError::Stale { .. }) => {
                return Err(failed(
                    format!("server {name}: {what}: a newer holder owns this BMC"),
                    "stale",
                    false,
                ));
            }
            Err(e) => return Err(failed(format!("server {name}: {what}: {e}"), "database", true)),
        }
        let result = tokio::select! {
            r = execute(&client, &payload.action) => r,
            _ = ctx.cancel.cancelled() => return Ok(Outcome::Finished),
        };
        match result {
            Ok(detail) => {
                let _ = self
                    .store
                    .add_event(
                        &name,
                        None,
                        "bmc_action",
                        Some(ctx.job.fence),
                        &json!({ "action": what, "result": detail }),
                    )
                    .await;
                Ok(Outcome::Complete)
            }
            Err(e) => {
                let class = e.class().as_str();
                let message = format!("server {name}: {what}: {e}");
                let _ = self
                    .store
                    .add_event(
                        &name,
                        None,
                        "bmc_action_failed",
                        Some(ctx.job.fence),
                        &json!({ "action": what, "error": message, "bmc_status": e.status() }),
                    )
                    .await;
                Err(failed(message, class, e.is_retryable()))
            }
        }
    }
}

async fn execute(client: &BmcClient, action: &BmcAction) -> Result<String, racklift_redfish::Error> {
    Ok(match action {
        BmcAction::PowerOn => format!("{:?}", client.power_on().await?),
        BmcAction::PowerOff => format!("{:?}", client.power_off().await?),
        BmcAction::PowerCycle => format!("{:?}", client.force_restart().await?),
        BmcAction::InsertMedia { image_url } => {
            let slot = client.select_cd_slot().await?;
            format!("{:?}", client.insert_media(&slot.slot, image_url).await?)
        }
        BmcAction::EjectMedia => {
            let slot = client.select_cd_slot().await?;
            format!("{:?}", client.eject_media(&slot.slot).await?)
        }
    })
}

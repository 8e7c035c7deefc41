//! The `bmc.action` job: an operator's ad-hoc power or virtual-media request, fenced like every BMC mutation.
//!
//! A media action is done when the slot reads back as asked, not when the BMC answers: an iDRAC can answer
//! InsertMedia 204 and leave its slot empty. So an insert's task monitor, when the BMC hands one out, is followed
//! to its end, then the slot is read back until it holds the image (what the deployment's `WaitMediaAttached`
//! waits for, here within the one lease); an eject is read back until the slot is empty.

use std::time::Duration;

use racklift_queue::{Failure, HandlerResult, JobContext, Outcome};
use racklift_redfish::{BmcClient, ErrorClass, Fence, SlotExpectation, SlotRef, TaskPoll, VirtualMedia};
use racklift_store::{BmcAction, BmcActionPayload, Store, StoreError};
use serde::Serialize;

use crate::deploy_step::error_chain;

/// How long a slot may take to show an insert or an eject once the BMC has answered it (and its task, if any,
/// has ended). Thirty seconds covers an iDRAC that keeps reporting an ejected image for some ten seconds; a slot
/// that shows nothing by then has dropped the request. Capped by the handler's call deadline, the time the lease
/// is checked to outlast before the action starts.
pub const SLOT_CONFIRM_WINDOW: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct BmcActionHandler {
    pub store: Store,
    pub clients: racklift_bmc_access::ClientCache,
    pub call_deadline: Duration,
}

/// The `bmc_action` event: the action and what was done and verified.
#[derive(Serialize)]
struct DoneEvent<'a> {
    action: &'a str,
    result: &'a str,
}

/// The `bmc_action_failed` event.
#[derive(Serialize)]
struct FailedEvent<'a> {
    action: &'a str,
    error: &'a str,
    bmc_status: Option<u16>,
}

/// What the action's dead letter carries for triage.
#[derive(Serialize)]
struct FailureContext<'a> {
    operation: &'static str,
    server: &'a str,
    action: &'a str,
}

impl BmcActionHandler {
    pub async fn run(self, ctx: JobContext) -> HandlerResult {
        let payload: BmcActionPayload = ctx
            .job
            .payload()
            .map_err(|e| Failure::fatal(format!("BMC action payload: {e}")))?;
        let name = payload.server.clone();
        let what = payload.action.name();
        let context = serde_json::to_value(FailureContext {
            operation: "bmc_action",
            server: &name,
            action: what,
        })
        .unwrap_or_default();
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
        let window = SLOT_CONFIRM_WINDOW.min(self.call_deadline);
        let result = tokio::select! {
            r = execute(&client, &payload.action, window) => r,
            _ = ctx.cancel.cancelled() => return Ok(Outcome::Finished),
        };
        match result {
            Ok(detail) => {
                tracing::info!(server = %name, action = what, fence = ctx.job.fence, "BMC action done: {detail}");
                let event = DoneEvent {
                    action: what,
                    result: &detail,
                };
                let _ = self
                    .store
                    .add_event(
                        &name,
                        None,
                        "bmc_action",
                        Some(ctx.job.fence),
                        &serde_json::to_value(&event).unwrap_or_default(),
                    )
                    .await;
                Ok(Outcome::Complete)
            }
            Err(e) => {
                let class = e.class();
                let message = format!("server {name}: {what}: {e}");
                tracing::warn!(server = %name, action = what, fence = ctx.job.fence, class,
                    bmc_status = e.status(), "BMC action failed: {message}");
                let event = FailedEvent {
                    action: what,
                    error: &message,
                    bmc_status: e.status(),
                };
                let _ = self
                    .store
                    .add_event(
                        &name,
                        None,
                        "bmc_action_failed",
                        Some(ctx.job.fence),
                        &serde_json::to_value(&event).unwrap_or_default(),
                    )
                    .await;
                Err(failed(message, class, e.is_retryable()))
            }
        }
    }
}

/// Why an action failed; `Display` names what the BMC answered or what its slot read back.
#[derive(Debug, thiserror::Error)]
enum ActionError {
    #[error("{0}")]
    Redfish(#[from] racklift_redfish::Error),
    #[error("the BMC's insert task {uri} ended in state {state} (messages: {})", listed(.message_ids))]
    TaskFailed {
        uri: String,
        state: String,
        message_ids: Vec<String>,
    },
    #[error(
        "the BMC accepted the {verb} but slot {slot} did not read back {expected} within {} ms ({reads} reads): \
         it reads {}", window.as_millis(), read_back(.media)
    )]
    Unconfirmed {
        verb: &'static str,
        slot: SlotRef,
        expected: String,
        media: Box<VirtualMedia>,
        window: Duration,
        reads: u32,
    },
}

impl ActionError {
    fn class(&self) -> &'static str {
        match self {
            Self::Redfish(e) => e.class().as_str(),
            Self::TaskFailed { .. } => ErrorClass::Rejected.as_str(),
            Self::Unconfirmed { .. } => "media_unconfirmed",
        }
    }

    /// A failed task is the BMC's refusal, as in the client. An unconfirmed slot is not retried either: a BMC
    /// that accepts an insert and drops it (iDRAC's virtual media service wedged, an image its network cannot
    /// reach) drops the next one the same way, and five silent attempts would only delay the operator's answer;
    /// the action is desired state, so asking again once the BMC is looked at is safe.
    fn is_retryable(&self) -> bool {
        match self {
            Self::Redfish(e) => e.is_retryable(),
            Self::TaskFailed { .. } | Self::Unconfirmed { .. } => false,
        }
    }

    fn status(&self) -> Option<u16> {
        match self {
            Self::Redfish(e) => e.status(),
            Self::TaskFailed { .. } | Self::Unconfirmed { .. } => None,
        }
    }
}

/// Runs the action; on success, says what the BMC did and, for media, what the slot read back.
async fn execute(client: &BmcClient, action: &BmcAction, window: Duration) -> Result<String, ActionError> {
    Ok(match action {
        BmcAction::PowerOn => format!("{:?}", client.power_on().await?),
        BmcAction::PowerOff => format!("{:?}", client.power_off().await?),
        BmcAction::PowerCycle => format!("{:?}", client.force_restart().await?),
        BmcAction::InsertMedia { image_url } => {
            let slot = client.select_cd_slot().await?.slot;
            let inserted = client.insert_media(&slot, image_url).await?;
            let task = match &inserted.task {
                None => String::new(),
                Some(monitor) => match client.wait_task(monitor).await {
                    Ok(TaskPoll::Gone) => format!(", task {} forgotten by the BMC", monitor.uri),
                    Ok(_) => format!(", task {} completed", monitor.uri),
                    Err(racklift_redfish::Error::TaskFailed {
                        uri,
                        state,
                        message_ids,
                    }) => {
                        return Err(ActionError::TaskFailed {
                            uri,
                            state,
                            message_ids,
                        });
                    }
                    Err(e) => return Err(e.into()),
                },
            };
            let expected = SlotExpectation::Holds(image_url);
            let verified = confirm(client, &slot, expected, window, "insert").await?;
            format!("{slot} insert: {:?}{task}; verified {verified}", inserted.method)
        }
        BmcAction::EjectMedia => {
            let slot = client.select_cd_slot().await?.slot;
            let ejected = client.eject_media(&slot).await?;
            let verified = confirm(client, &slot, SlotExpectation::Empty, window, "eject").await?;
            format!("{slot} eject: {ejected:?}; verified {verified}")
        }
    })
}

/// Reads `slot` back until it meets `expected`; the sentence of what was verified, or [`ActionError::Unconfirmed`].
async fn confirm(
    client: &BmcClient,
    slot: &SlotRef,
    expected: SlotExpectation<'_>,
    window: Duration,
    verb: &'static str,
) -> Result<String, ActionError> {
    let back = client.verify_media(slot, expected, window).await?;
    if !back.confirmed {
        return Err(ActionError::Unconfirmed {
            verb,
            slot: slot.clone(),
            expected: expected.to_string(),
            media: Box::new(back.media),
            window,
            reads: back.reads,
        });
    }
    Ok(format!(
        "slot {slot} {expected} ({}) after {} read(s)",
        read_back(&back.media),
        back.reads
    ))
}

/// A slot's `Inserted` and `Image` as it reported them.
fn read_back(media: &VirtualMedia) -> String {
    let inserted = media
        .inserted
        .map_or_else(|| "absent".to_owned(), |i| i.to_string());
    let image = media
        .image
        .as_deref()
        .filter(|i| !i.trim().is_empty())
        .unwrap_or("none");
    format!("Inserted: {inserted}, Image: {image}")
}

fn listed(ids: &[String]) -> String {
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn media(body: &str) -> Box<VirtualMedia> {
        Box::new(serde_json::from_str(body).expect("slot"))
    }

    #[test]
    fn failures_name_the_task_or_the_slot_as_read_back() {
        let slot: SlotRef = "system:CD".parse().expect("slot");
        let unconfirmed = |verb, expected: SlotExpectation<'_>, body: &str| ActionError::Unconfirmed {
            verb,
            slot: slot.clone(),
            expected: expected.to_string(),
            media: media(body),
            window: Duration::from_secs(30),
            reads: 60,
        };
        // (error, its message, its class)
        let cases = [
            (
                ActionError::TaskFailed {
                    uri: "/redfish/v1/TaskService/Tasks/7".into(),
                    state: "Exception".into(),
                    message_ids: vec!["IDRAC.2.8.RAC0904".into()],
                },
                "the BMC's insert task /redfish/v1/TaskService/Tasks/7 ended in state Exception \
                 (messages: IDRAC.2.8.RAC0904)",
                "rejected",
            ),
            (
                ActionError::TaskFailed {
                    uri: "/t/1".into(),
                    state: "Killed".into(),
                    message_ids: vec![],
                },
                "the BMC's insert task /t/1 ended in state Killed (messages: none)",
                "rejected",
            ),
            (
                unconfirmed(
                    "insert",
                    SlotExpectation::Holds("http://m/x.img"),
                    r#"{"Image":null,"Inserted":false}"#,
                ),
                "the BMC accepted the insert but slot system:CD did not read back holding http://m/x.img \
                 within 30000 ms (60 reads): it reads Inserted: false, Image: none",
                "media_unconfirmed",
            ),
            (
                unconfirmed("eject", SlotExpectation::Empty, r#"{"Image":"http://m/x.img"}"#),
                "the BMC accepted the eject but slot system:CD did not read back empty within 30000 ms \
                 (60 reads): it reads Inserted: absent, Image: http://m/x.img",
                "media_unconfirmed",
            ),
        ];
        for (error, message, class) in cases {
            assert_eq!(error.to_string(), message);
            assert_eq!(error.class(), class, "{message}");
            assert!(!error.is_retryable(), "{message}");
            assert_eq!(error.status(), None, "{message}");
        }
    }
}

//! Task monitors: `202 Accepted` + `Location`, polled until done.
//!
//! A monitor returns 404 once its final answer has been read, and after a BMC reset, so 404
//! means "consumed or forgotten" rather than failure. A monitor URI is an optimisation: the
//! wait step re-derives the outcome from the resource itself (PowerState, Attributes, Image).

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::client::{BmcClient, Reply};
use crate::error::{Error, Result};
use crate::model::redfish_enum;

redfish_enum!(
    /// `TaskState`.
    TaskState {
        New, Starting, Running, Suspended, Interrupted, Pending, Stopping, Completed, Killed,
        Exception, Service, Cancelling, Cancelled,
    }
);

impl TaskState {
    /// Whether the task ended unsuccessfully.
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            Self::Killed | Self::Exception | Self::Cancelled | Self::Interrupted
        )
    }
}

/// A task monitor handed out by a 202 answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskMonitor {
    /// The monitor URI (from `Location`); persist it, but only as a hint.
    pub uri: String,
    /// `Retry-After` of the answer that created it.
    pub retry_after: Option<Duration>,
}

impl TaskMonitor {
    /// A monitor known only by its URI, persisted from an earlier answer (its `Retry-After`
    /// belonged to that answer and is gone).
    pub fn from_uri(uri: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            retry_after: None,
        }
    }

    /// The monitor of a `202 Accepted` reply with a `Location`.
    pub(crate) fn from_reply(reply: &Reply) -> Option<Self> {
        (reply.status.as_u16() == 202)
            .then(|| reply.location.clone())
            .flatten()
            .map(|uri| Self {
                uri,
                retry_after: reply.retry_after,
            })
    }
}

/// One look at a task monitor.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskPoll {
    /// Still running; look again after `retry_after` (default 2 s).
    Running {
        retry_after: Duration,
        percent: Option<u8>,
    },
    /// Finished; `body` is the final response (often the Task resource), if any.
    Done { status: u16, body: Option<Value> },
    /// 404/410: consumed or forgotten by a BMC reset. Observe the resource instead.
    Gone,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TaskBody {
    #[serde(default)]
    task_state: Option<TaskState>,
    #[serde(default)]
    percent_complete: Option<u8>,
    #[serde(default)]
    messages: Vec<crate::error::ExtendedInfo>,
}

/// The longest pause between two looks at a task monitor while following it: a `Retry-After` is a hint, and a
/// BMC asking for minutes would otherwise spend the whole deadline asleep past the task's end.
const MAX_TASK_POLL_INTERVAL: Duration = Duration::from_secs(5);

impl BmcClient {
    /// Looks at a task monitor once; never waits. A finished Task resource in a failed state
    /// (`Exception`, `Killed`, …) is an [`Error::TaskFailed`].
    pub async fn poll_task(&self, monitor: &TaskMonitor) -> Result<TaskPoll> {
        self.within("poll_task", self.look_at_task(monitor)).await
    }

    /// Follows a task monitor until the task ends, all of it under this handle's deadline (an
    /// [`Error::Deadline`] if it runs out first), waiting the `Retry-After` it is given between looks (at most
    /// 5 s). Ends in [`TaskPoll::Done`], or [`TaskPoll::Gone`] when the monitor forgot the task (a reset): the
    /// caller reads the resource either way. A task that ended badly is an [`Error::TaskFailed`].
    pub async fn wait_task(&self, monitor: &TaskMonitor) -> Result<TaskPoll> {
        self.within("wait_task", async {
            if let Some(first) = monitor.retry_after {
                tokio::time::sleep(first.min(MAX_TASK_POLL_INTERVAL)).await;
            }
            loop {
                match self.look_at_task(monitor).await? {
                    TaskPoll::Running { retry_after, .. } => {
                        tokio::time::sleep(retry_after.min(MAX_TASK_POLL_INTERVAL)).await;
                    }
                    ended => return Ok(ended),
                }
            }
        })
        .await
    }

    async fn look_at_task(&self, monitor: &TaskMonitor) -> Result<TaskPoll> {
        let reply = match self.get(&monitor.uri).await {
            Ok(reply) => reply,
            Err(e) if matches!(e.status(), Some(404 | 410)) => return Ok(TaskPoll::Gone),
            Err(e) => return Err(e),
        };
        interpret(monitor, &reply)
    }
}

/// What a task monitor's answer means: still running (202, or a Task in a running state), failed (a Task in a
/// failed state), else done with whatever body came. Never a decode error: monitors answer with anything from an
/// empty body to the resource the task made.
pub(crate) fn interpret(monitor: &TaskMonitor, reply: &Reply) -> Result<TaskPoll> {
    let body: Option<Value> = serde_json::from_slice(&reply.body).ok();
    let task = body.as_ref().and_then(|b| TaskBody::deserialize(b).ok());
    let state = task.as_ref().and_then(|t| t.task_state.clone());
    let running = reply.status.as_u16() == 202
        || state.as_ref().is_some_and(|s| {
            matches!(
                s,
                TaskState::New | TaskState::Starting | TaskState::Running | TaskState::Pending
            )
        });
    if running {
        return Ok(TaskPoll::Running {
            retry_after: reply.retry_after.unwrap_or(Duration::from_secs(2)),
            percent: task.and_then(|t| t.percent_complete),
        });
    }
    if let (Some(state), Some(task)) = (state, task)
        && state.is_failure()
    {
        return Err(Error::TaskFailed {
            uri: monitor.uri.clone(),
            state: state.to_string(),
            message_ids: task.messages.into_iter().map(|m| m.message_id).collect(),
        });
    }
    Ok(TaskPoll::Done {
        status: reply.status.as_u16(),
        body,
    })
}

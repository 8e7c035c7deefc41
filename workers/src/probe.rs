//! Handlers that do no real work, for benchmarks and queue tests: `noop` completes at once; `sleep` holds its
//! lease for a while (honouring cancellation), like a long BMC step.

use std::time::Duration;

use racklift_queue::{Failure, HandlerResult, JobContext, Outcome, Registry};
use serde::{Deserialize, Serialize};

pub const NOOP: &str = "noop";
pub const SLEEP: &str = "sleep";

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct SleepPayload {
    pub ms: u64,
}

pub fn register(registry: Registry) -> Registry {
    registry.register(NOOP, noop).register(SLEEP, sleep)
}

async fn noop(_ctx: JobContext) -> HandlerResult {
    Ok(Outcome::Complete)
}

async fn sleep(ctx: JobContext) -> HandlerResult {
    let SleepPayload { ms } = ctx
        .job
        .payload()
        .map_err(|e| Failure::fatal(format!("bad sleep payload: {e}")))?;
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(Outcome::Complete),
        _ = ctx.cancel.cancelled() => Err(Failure::retryable("cancelled: lease lost")),
    }
}

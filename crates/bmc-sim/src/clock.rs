//! Scaled time. Every machine timing is nominal and multiplied by the scale, and the BMC reports
//! timestamps on a virtual clock that runs `1 / scale` times faster than the wall clock, so a
//! compressed 40-minute deployment still shows 40 minutes between `LastResetTime`s.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

/// The simulator's clock, shared by every machine.
#[derive(Clone, Debug)]
pub struct Clock {
    scale: f64,
    start: Instant,
    start_wall: DateTime<Utc>,
    cancel: CancellationToken,
}

/// The simulator is shutting down; a machine task should stop.
#[derive(Debug)]
pub struct Stopped;

impl Clock {
    pub fn new(scale: f64, cancel: CancellationToken) -> Clock {
        let scale = if scale.is_finite() && scale > 0.0 {
            scale
        } else {
            1.0
        };
        Clock {
            scale,
            start: Instant::now(),
            start_wall: Utc::now(),
            cancel,
        }
    }

    /// Real duration of a nominal one.
    pub fn scaled(&self, nominal: Duration) -> Duration {
        nominal.mul_f64(self.scale)
    }

    /// The virtual "wall clock" the BMCs report.
    pub fn now(&self) -> DateTime<Utc> {
        let virt = self.start.elapsed().div_f64(self.scale);
        self.start_wall + chrono::Duration::from_std(virt).unwrap_or(chrono::Duration::MAX)
    }

    /// Sleep for a nominal duration; `Err(Stopped)` when the simulator shuts down first.
    pub async fn sleep(&self, nominal: Duration) -> Result<(), Stopped> {
        tokio::select! {
            () = tokio::time::sleep(self.scaled(nominal)) => Ok(()),
            () = self.cancel.cancelled() => Err(Stopped),
        }
    }
}

/// A Redfish `DateTime` with milliseconds, so scaled-down resets stay distinguishable.
pub fn redfish_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

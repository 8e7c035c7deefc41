//! Durable retry spacing: exponential backoff with full jitter, written into `run_at` (never slept in memory).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Exponential backoff with full jitter: attempt `n` (1-based) waits a uniformly random time in
/// `[0, min(cap, base × 2^(n-1))]`. Full jitter spreads a herd of failing jobs (a rack of BMCs that all reset at
/// once) over the whole window instead of re-synchronising them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// The upper bound of the jitter window for a 1-based attempt number.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(62);
        let scaled = self.base.as_millis().saturating_mul(1u128 << doublings);
        Duration::from_millis(scaled.min(self.cap.as_millis()) as u64)
    }

    /// The delay for `attempt`, given a uniform sample `unit` in `[0, 1)`; the caller supplies the randomness
    /// so that tests can pin it.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        self.ceiling(attempt).mul_f64(unit.clamp(0.0, 1.0))
    }

    /// The delay for `attempt` with a fresh random sample.
    pub fn sample(&self, attempt: u32) -> Duration {
        self.delay(attempt, rand::random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_then_caps() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
        };
        let table = [
            (0, 100),
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (40, 1000),
            (u32::MAX, 1000),
        ];
        for (attempt, ms) in table {
            assert_eq!(b.ceiling(attempt), Duration::from_millis(ms), "attempt {attempt}");
        }
    }

    #[test]
    fn delay_stays_inside_the_window() {
        let b = Backoff::default();
        for attempt in 1..20 {
            assert_eq!(b.delay(attempt, 0.0), Duration::ZERO);
            assert_eq!(b.delay(attempt, 1.0), b.ceiling(attempt));
            for _ in 0..100 {
                assert!(b.sample(attempt) <= b.ceiling(attempt));
            }
        }
    }
}

//! Timing and budget configuration.
//!
//! Every default is the value Operations Center ships (see the project's reference notes), so a
//! deployment driven by racklift behaves like one driven by OC unless an operator says otherwise.
//! Durations carry their unit in the field name because the struct is read from TOML/JSON, where
//! a bare number would be ambiguous.

use chrono::TimeDelta;
use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// Timing and budgets of the deployment state machine.
///
/// `#[serde(default)]` lets a configuration file name only the values it overrides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How often a wait state is polled when no event wakes it first.
    pub poll_interval_secs: u64,
    /// Retries a trigger (or a wait falling back to it) gets after its first attempt.
    pub step_retries: u32,
    /// Base of the exponential backoff between trigger retries: `base << (n - 1)`.
    pub retry_backoff_secs: u64,
    /// Cap of the backoff, so a long outage does not push the next attempt out for hours.
    pub retry_backoff_max_secs: u64,
    /// Generic wait timeout; on expiry the wait falls back to its trigger.
    pub step_timeout_secs: u64,
    /// Wait for staged BIOS attributes to be applied by a reset; also bounds the secure boot settle boot.
    pub bios_applied_timeout_secs: u64,
    /// Rounds a BIOS pass may be sent back to its power off, shared by both passes: the power off
    /// succeeds every time, so the per-state counter alone would let verify and apply bounce forever.
    pub bios_fallback_attempts: u32,
    /// Wait for the server to come back up after install stage 1. No fallback: a server that
    /// does not come back cannot be helped by another eject.
    pub reboot_timeout_secs: u64,
    /// Where a BMC reports nothing a reboot could be detected from, "powered on" is accepted
    /// after this long.
    pub reboot_observation_window_secs: u64,
    /// Wait for the installed OS to register itself.
    pub registration_timeout_secs: u64,
    /// A server powered on and not registered this long after the eject booted its installer a second time (the
    /// eject landed after the POST of the stage 1 reboot) and is power-cycled once. It has to cover a healthy
    /// server's POST, boot and registration, and stay under `registration_timeout_secs`.
    pub missed_eject_grace_secs: u64,
    /// A pause of the media reads this long ends install stage 1 (only with `force`).
    pub media_idle_period_secs: u64,
    /// Distinct bytes that must have been read before the idle signal counts; capped at the image size.
    pub media_min_bytes_read: u64,
    /// Floor under the media-idle signal: a BMC that read the image out while the server was
    /// still booting must not end the wait before an installation could have run.
    pub min_install_duration_secs: u64,
    /// Where the BMC reports `LastResetTime` but no `BootProgress`, a reset counts as the end of
    /// stage 1 only this long after the install power-on.
    pub install_reboot_fallback_delay_secs: u64,
    /// How long the server is left running after key enrolment when the firmware does not reboot itself.
    pub secure_boot_settle_secs: u64,
    /// Install stage 1 backstop; fails the deployment rather than guessing.
    pub install_timeout_secs: u64,
    /// The whole deployment; checked before anything else on every decision.
    pub deployment_timeout_secs: u64,
    /// Minimum time after a power-on before a vanished task monitor counts as "applied" and
    /// before the install reboot snapshot is taken.
    pub settle_delay_secs: u64,
    /// "Run until blocked" budget per deployment per lease.
    pub max_transitions_per_tick: u32,
    /// Deadline of the BMC calls of one attempt.
    pub step_call_timeout_secs: u64,
    /// Deadline of attach media: an Upload-mode BMC only answers once it has copied the image.
    pub attach_media_call_timeout_secs: u64,
    /// Deadline of the secure boot step: the key database wipe is one DELETE per entry.
    pub secure_boot_call_timeout_secs: u64,
    /// Deadline of the BMC data refresh.
    pub bmc_data_refresh_timeout_secs: u64,
    /// Ranges kept per media read progress before neighbours are coalesced.
    pub media_max_ranges: usize,
    /// The rolling update / reboot budgets of cluster operations (`[deploy.rolling]`).
    pub rolling: crate::rolling::RollingConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            poll_interval_secs: 10,
            step_retries: 3,
            retry_backoff_secs: 5,
            retry_backoff_max_secs: 120,
            step_timeout_secs: 5 * 60,
            bios_applied_timeout_secs: 10 * 60,
            bios_fallback_attempts: 3,
            reboot_timeout_secs: 15 * 60,
            reboot_observation_window_secs: 5 * 60,
            registration_timeout_secs: 30 * 60,
            missed_eject_grace_secs: 15 * 60,
            media_idle_period_secs: 2 * 60,
            media_min_bytes_read: 500 * 1024 * 1024,
            min_install_duration_secs: 5 * 60,
            install_reboot_fallback_delay_secs: 10 * 60,
            secure_boot_settle_secs: 5 * 60,
            install_timeout_secs: 45 * 60,
            deployment_timeout_secs: 2 * 60 * 60,
            settle_delay_secs: 60,
            max_transitions_per_tick: 10,
            step_call_timeout_secs: 2 * 60,
            attach_media_call_timeout_secs: 20 * 60,
            secure_boot_call_timeout_secs: 15 * 60,
            bmc_data_refresh_timeout_secs: 2 * 60,
            media_max_ranges: 256,
            rolling: crate::rolling::RollingConfig::default(),
        }
    }
}

impl Config {
    /// The timing for simulated hardware running at `scale` (the simulator's time scale): real-hardware durations
    /// shrink with it, never below one second, and timeouts keep a floor so only a real fault trips them.
    pub fn for_simulation(scale: f64) -> Config {
        let d = Config::default();
        let s = |secs: u64| ((secs as f64 * scale).ceil() as u64).max(1);
        Config {
            // The real poll period scaled like everything else, but never below a second: a compressed rack must not
            // poll its simulated BMCs more often per real second than a real rack would be polled per second.
            poll_interval_secs: s(d.poll_interval_secs),
            retry_backoff_secs: s(d.retry_backoff_secs),
            retry_backoff_max_secs: s(d.retry_backoff_max_secs).max(2),
            step_timeout_secs: s(d.step_timeout_secs).max(30),
            bios_applied_timeout_secs: s(d.bios_applied_timeout_secs).max(30),
            reboot_timeout_secs: s(d.reboot_timeout_secs).max(60),
            reboot_observation_window_secs: s(d.reboot_observation_window_secs).max(10),
            registration_timeout_secs: s(d.registration_timeout_secs).max(60),
            missed_eject_grace_secs: s(d.missed_eject_grace_secs).max(15),
            media_idle_period_secs: s(d.media_idle_period_secs).max(2),
            media_min_bytes_read: 1024 * 1024,
            min_install_duration_secs: s(d.min_install_duration_secs),
            install_reboot_fallback_delay_secs: s(d.install_reboot_fallback_delay_secs).max(5),
            secure_boot_settle_secs: s(d.secure_boot_settle_secs).max(2),
            install_timeout_secs: s(d.install_timeout_secs).max(120),
            deployment_timeout_secs: s(d.deployment_timeout_secs).max(600),
            settle_delay_secs: s(d.settle_delay_secs),
            step_call_timeout_secs: s(d.step_call_timeout_secs).max(10),
            attach_media_call_timeout_secs: s(d.attach_media_call_timeout_secs).max(30),
            secure_boot_call_timeout_secs: s(d.secure_boot_call_timeout_secs).max(30),
            bmc_data_refresh_timeout_secs: s(d.bmc_data_refresh_timeout_secs).max(10),
            rolling: d.rolling.for_simulation(scale),
            ..d
        }
    }
}

/// Seconds as a `TimeDelta`, saturating so an absurd configuration cannot panic the decision code.
pub(crate) fn secs(s: u64) -> TimeDelta {
    TimeDelta::try_seconds(i64::try_from(s).unwrap_or(i64::MAX / 1000)).unwrap_or(TimeDelta::MAX)
}

impl Config {
    /// Rejects values that would make the state machine stall or never time out.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("poll_interval_secs", self.poll_interval_secs),
            ("step_timeout_secs", self.step_timeout_secs),
            ("deployment_timeout_secs", self.deployment_timeout_secs),
            ("install_timeout_secs", self.install_timeout_secs),
            ("step_call_timeout_secs", self.step_call_timeout_secs),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        if self.retry_backoff_max_secs < self.retry_backoff_secs {
            return Err(ConfigError::BackoffCapBelowBase {
                base_secs: self.retry_backoff_secs,
                cap_secs: self.retry_backoff_max_secs,
            });
        }
        if self.missed_eject_grace_secs >= self.registration_timeout_secs {
            return Err(ConfigError::GraceNotBelowRegistration {
                grace_secs: self.missed_eject_grace_secs,
                registration_secs: self.registration_timeout_secs,
            });
        }
        self.rolling.validate()?;
        if self.media_max_ranges < 2 {
            return Err(ConfigError::TooFewRanges {
                ranges: self.media_max_ranges,
            });
        }
        Ok(())
    }

    /// Un-jittered backoff before retry number `n` (1-based): `min(base << (n - 1), cap)`.
    pub fn backoff(&self, n: u32) -> TimeDelta {
        let shift = n.saturating_sub(1).min(32);
        let raw = self.retry_backoff_secs.saturating_mul(1u64 << shift);
        secs(raw.min(self.retry_backoff_max_secs))
    }

    pub(crate) fn poll(&self) -> TimeDelta {
        secs(self.poll_interval_secs)
    }

    /// The poll period of a wait that must catch a transition while it happens (a fifth of
    /// the poll period: 2 s against real hardware). Only brief transitions are watched this
    /// closely, so the extra BMC reads are few. Workers sleep through snoozes this short
    /// in-process rather than through the queue, whose round trip can be longer under load.
    pub fn catch_poll(&self) -> TimeDelta {
        self.poll() / 5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_then_caps() {
        let cfg = Config::default();
        let got: Vec<i64> = (1..=7).map(|n| cfg.backoff(n).num_seconds()).collect();
        assert_eq!(got, vec![5, 10, 20, 40, 80, 120, 120]);
        assert_eq!(cfg.backoff(1000).num_seconds(), 120);
    }

    #[test]
    fn partial_config_keeps_defaults() {
        let cfg: Config = serde_json::from_str(r#"{"step_retries": 7}"#).unwrap();
        assert_eq!(cfg.step_retries, 7);
        assert_eq!(cfg.install_timeout_secs, 45 * 60);
        assert!(cfg.validate().is_ok());
    }

    #[test]
    fn unknown_field_is_rejected() {
        assert!(serde_json::from_str::<Config>(r#"{"step_retrys": 7}"#).is_err());
    }

    #[test]
    fn validate_rejects_bad_values() {
        let cfg = Config {
            poll_interval_secs: 0,
            ..Config::default()
        };
        assert_eq!(
            cfg.validate(),
            Err(ConfigError::Zero {
                field: "poll_interval_secs"
            })
        );
        let cfg = Config {
            retry_backoff_max_secs: 1,
            ..Config::default()
        };
        assert!(matches!(
            cfg.validate(),
            Err(ConfigError::BackoffCapBelowBase { .. })
        ));
        let cfg = Config {
            media_max_ranges: 1,
            ..Config::default()
        };
        assert!(matches!(cfg.validate(), Err(ConfigError::TooFewRanges { .. })));
    }
}

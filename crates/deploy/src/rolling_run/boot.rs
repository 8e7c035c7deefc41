//! A member's boot identity: what tells a reboot that happened from one that did not, whoever reads it. The
//! worker that sent the reboot call may stop before it records anything, and a reboot may be over between two
//! polls, so a later reader compares what the server reports of its current boot with what was recorded when the
//! reboot was triggered: the boot time its OS's uptime gives, and its BMC's reset time and boot progress.

use serde::{Deserialize, Serialize};

use super::{MemberFacts, RunServer};
use crate::Time;
use crate::config::secs;
use crate::facts::{BootProgress, Facts};
use crate::reboot::{RebootSignal, RebootWatch};

/// How far the clocks of two workers reading the same server may disagree.
pub const BOOT_CLOCK_SLACK_SECS: u64 = 1;

/// When a server booted, as a window on the reader's clock: its uptime is whole seconds and was read at some
/// moment between sending the request and receiving the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootTime {
    /// The request's sending, less the uptime and the second its fraction may have held.
    pub earliest: Time,
    /// The answer's arrival, less the uptime.
    pub latest: Time,
}

impl BootTime {
    /// The boot `uptime_secs` before a read sent at `sent` and answered at `received`.
    pub fn from_uptime(uptime_secs: u64, sent: Time, received: Time) -> Option<BootTime> {
        let up = chrono::TimeDelta::try_seconds(i64::try_from(uptime_secs).ok()?)?;
        Some(BootTime {
            earliest: sent.checked_sub_signed(up + chrono::TimeDelta::seconds(1))?,
            latest: received.checked_sub_signed(up)?,
        })
    }

    /// This boot came after `before`: it cannot have happened earlier than that one could have, by more than
    /// the clocks of two workers may differ.
    pub fn is_after(&self, before: &BootTime) -> bool {
        self.earliest > before.latest + secs(BOOT_CLOCK_SLACK_SECS)
    }
}

/// What a BMC reports of the host's boots (`LastResetTime`, `BootProgress`), each where it reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BmcBoot {
    pub last_reset_time: Option<Time>,
    pub boot_progress: Option<BootProgress>,
    pub boot_progress_at: Option<Time>,
}

impl BmcBoot {
    fn facts(&self) -> Facts {
        Facts {
            last_reset_time: self.last_reset_time,
            boot_progress: self.boot_progress,
            boot_progress_at: self.boot_progress_at,
            ..Facts::default()
        }
    }

    /// The snapshot a later reading is compared with.
    pub fn anchor(&self, now: Time) -> RebootWatch {
        RebootWatch::anchor(&self.facts(), now)
    }
}

/// Records the member's boot identity as its reboot is triggered.
pub(super) fn record_before_reboot(s: &mut RunServer, f: &MemberFacts, now: Time) {
    s.booted_before_reboot = f.booted;
    s.bmc_before_reboot = f.bmc_boot.map(|b| b.anchor(now));
}

/// The member booted again since its reboot was triggered, by its OS's boot time or its BMC's signals. `false`
/// when neither can tell (not reported then or now): the other signals decide.
pub(super) fn booted_again(s: &RunServer, f: &MemberFacts) -> bool {
    let by_uptime =
        matches!((s.booted_before_reboot, f.booted), (Some(before), Some(now)) if now.is_after(&before));
    let by_bmc = match (&s.bmc_before_reboot, &f.bmc_boot) {
        (Some(watch), Some(now)) => matches!(watch.observe(&now.facts()).0, RebootSignal::Rebooted { .. }),
        _ => false,
    };
    by_uptime || by_bmc
}

//! A missed eject, and its one repair.
//!
//! The reboot that ends install stage 1 leaves the deployment that reboot's POST to get the media out (spec 000,
//! "Ejecting has to be prompt"). When the eject lands later — a hung or busy BMC, a database outage while the
//! installer finished — the firmware hands the still-inserted media to a boot loader again: the installer boots a
//! second time, finds the disk installed and sits there, and the server never registers. The spec leaves such a
//! deployment to its registration timeout; racklift repairs it once.
//!
//! Once the media is out, the deployment knows the server went into a second installer boot when a poll saw the
//! boot after stage 1 reach the OS boot while the media was still reported inserted (the worker reads the
//! system before the media, so the media was in at that moment). Where the BMC reports no boot progress, or the
//! polls missed that moment, a server still powered on and not registered a grace after the eject stands in for
//! it. Either way the server is power-cycled once, with the media out, so it boots the installed system, and the
//! registration wait starts again. A second miss fails the deployment naming this cause.

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::config::{Config, secs};
use crate::decision::Cause;
use crate::facts::{BootProgress, Facts, PowerState};

/// What the deployment learned about the boot that followed the end of install stage 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct EjectRace {
    /// A poll saw that boot reach the OS boot while the media was still inserted.
    pub booted_with_media: bool,
    /// When the media was read back as out.
    pub media_out_at: Option<Time>,
    /// When the server was power-cycled for a missed eject: only ever once.
    pub power_cycled_at: Option<Time>,
}

impl EjectRace {
    /// Taken at the end of stage 1 (a reboot after the installer ran), from the facts that showed it.
    pub(crate) fn after_stage_one(facts: &Facts) -> Self {
        let mut race = Self::default();
        race.observe(facts);
        race
    }

    /// Notes a poll made before the media was seen out.
    pub(crate) fn observe(&mut self, facts: &Facts) {
        let inserted = facts.media.as_ref().is_some_and(|slot| slot.inserted);
        if self.media_out_at.is_none()
            && inserted
            && facts.boot_progress.is_some_and(BootProgress::installer_started)
        {
            self.booted_with_media = true;
        }
    }

    /// Whether the registration wait power-cycles the server now, and why.
    pub(crate) fn repair_due(&self, facts: &Facts, now: Time, cfg: &Config) -> Option<Cause> {
        if self.power_cycled_at.is_some() || facts.power != Some(PowerState::On) {
            return None;
        }
        let out = self.media_out_at?;
        if self.booted_with_media {
            Some(Cause::InstallerBootedAgain)
        } else if now - out >= secs(cfg.missed_eject_grace_secs) {
            Some(Cause::NoRegistrationAfterEject)
        } else {
            None
        }
    }
}

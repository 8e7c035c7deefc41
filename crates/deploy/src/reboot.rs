//! Reboot detection against a snapshot of `LastResetTime` and `BootProgress`.
//!
//! Neither property is reported by every BMC, so the answer has three values: rebooted, not
//! rebooted, and "cannot tell", which callers must treat as "fall through to the next signal",
//! never as "not rebooted".

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::facts::{BootProgress, Facts};

/// A snapshot to compare later observations against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootWatch {
    pub taken_at: Time,
    pub last_reset_time: Option<Time>,
    /// Furthest boot progress seen since the snapshot. A state the boot had already been past
    /// is a new boot; a later state is the same boot making progress.
    pub high_water: Option<BootProgress>,
    /// When the boot entered its high water state (`BootProgress.LastStateTime`), where the BMC says.
    #[serde(default)]
    pub high_water_at: Option<Time>,
    /// A reboot that ended the install wait, so the reboot wait does not look for a second one.
    pub reboot_seen: bool,
}

/// What an observation says about a reboot since the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebootSignal {
    /// The BMC reports neither property, or did not at the snapshot.
    CannotTell,
    NotRebooted,
    /// `installer_ran` is `None` where the BMC reports no boot progress.
    Rebooted {
        installer_ran: Option<bool>,
    },
}

impl RebootWatch {
    /// Takes a snapshot of the current facts.
    pub fn anchor(facts: &Facts, now: Time) -> Self {
        Self {
            taken_at: now,
            last_reset_time: facts.last_reset_time,
            high_water: facts.boot_progress.filter(|p| p.is_ordered()),
            high_water_at: facts
                .boot_progress
                .filter(|p| p.is_ordered())
                .and(facts.boot_progress_at),
            reboot_seen: false,
        }
    }

    /// Compares `facts` with the snapshot; returns the signal and the watch with its high water
    /// mark advanced (the caller decides whether to keep it or re-anchor).
    pub fn observe(&self, facts: &Facts) -> (RebootSignal, RebootWatch) {
        let mut next = *self;
        let reset_changed = match (self.last_reset_time, facts.last_reset_time) {
            (Some(before), Some(now)) => Some(before != now),
            _ => None,
        };
        let progress = facts.boot_progress.filter(|p| p.is_ordered());
        // Back to a state the boot had been past, or the high water state itself entered again later: polls that
        // miss a whole POST still see the second entry's time.
        let regressed = match (self.high_water, progress) {
            (Some(high), Some(p)) if p == high => match (self.high_water_at, facts.boot_progress_at) {
                (Some(before), Some(at)) => Some(at > before),
                _ => Some(false),
            },
            (Some(high), Some(p)) => Some(p < high),
            (None, Some(_)) => Some(false),
            _ => None,
        };
        if let Some(p) = progress {
            match self.high_water {
                Some(high) if p < high => {}
                Some(high) if p == high && self.high_water_at.is_some() => {}
                _ => {
                    next.high_water = Some(p);
                    next.high_water_at = facts.boot_progress_at;
                }
            }
        }
        let signal = match (reset_changed, regressed) {
            (None, None) => RebootSignal::CannotTell,
            (Some(true), _) | (_, Some(true)) => RebootSignal::Rebooted {
                // The boot that ended is the one whose high water the snapshot kept.
                installer_ran: progress.map(|_| self.high_water.is_some_and(BootProgress::installer_started)),
            },
            _ => RebootSignal::NotRebooted,
        };
        (signal, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn t(s: i64) -> Time {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }

    fn facts(lrt: Option<i64>, bp: Option<BootProgress>) -> Facts {
        Facts {
            last_reset_time: lrt.map(t),
            boot_progress: bp,
            ..Facts::default()
        }
    }

    use BootProgress as P;

    #[test]
    fn signals() {
        struct Case {
            name: &'static str,
            snap: Facts,
            now: Facts,
            want: RebootSignal,
        }
        let cases = [
            Case {
                name: "nothing reported",
                snap: facts(None, None),
                now: facts(None, None),
                want: RebootSignal::CannotTell,
            },
            Case {
                name: "reset time appears later",
                snap: facts(None, None),
                now: facts(Some(5), None),
                want: RebootSignal::CannotTell,
            },
            Case {
                name: "same reset time",
                snap: facts(Some(1), None),
                now: facts(Some(1), None),
                want: RebootSignal::NotRebooted,
            },
            Case {
                name: "reset time moved, no progress",
                snap: facts(Some(1), None),
                now: facts(Some(9), None),
                want: RebootSignal::Rebooted { installer_ran: None },
            },
            Case {
                name: "progress moving forward is the same boot",
                snap: facts(None, Some(P::MemoryInitializationStarted)),
                now: facts(None, Some(P::OSBootStarted)),
                want: RebootSignal::NotRebooted,
            },
            Case {
                name: "progress went back during POST: firmware reboot",
                snap: facts(None, Some(P::PCIResourceConfigStarted)),
                now: facts(None, Some(P::PrimaryProcessorInitializationStarted)),
                want: RebootSignal::Rebooted {
                    installer_ran: Some(false),
                },
            },
            Case {
                name: "progress went back after the installer ran",
                snap: facts(Some(1), Some(P::OSRunning)),
                now: facts(Some(1), Some(P::MemoryInitializationStarted)),
                want: RebootSignal::Rebooted {
                    installer_ran: Some(true),
                },
            },
            Case {
                name: "reset moved, progress back at OSRunning",
                snap: facts(Some(1), Some(P::OSRunning)),
                now: facts(Some(2), Some(P::OSRunning)),
                want: RebootSignal::Rebooted {
                    installer_ran: Some(true),
                },
            },
            Case {
                name: "OEM progress is ignored",
                snap: facts(None, Some(P::OSRunning)),
                now: facts(None, Some(P::OEM)),
                want: RebootSignal::CannotTell,
            },
        ];
        for c in cases {
            let w = RebootWatch::anchor(&c.snap, t(0));
            assert_eq!(w.observe(&c.now).0, c.want, "{}", c.name);
        }
    }

    #[test]
    fn the_same_state_entered_again_is_a_new_boot() {
        let at = |state, time: Option<i64>| Facts {
            boot_progress: Some(state),
            boot_progress_at: time.map(t),
            ..Facts::default()
        };
        let cases = [
            (
                "OS boot entered again: the POST in between was missed",
                at(P::OSBootStarted, Some(10)),
                at(P::OSBootStarted, Some(20)),
                RebootSignal::Rebooted {
                    installer_ran: Some(true),
                },
            ),
            (
                "same state, same time",
                at(P::OSBootStarted, Some(10)),
                at(P::OSBootStarted, Some(10)),
                RebootSignal::NotRebooted,
            ),
            (
                "no state time reported",
                at(P::OSBootStarted, None),
                at(P::OSBootStarted, None),
                RebootSignal::NotRebooted,
            ),
            (
                "the time appears only later",
                at(P::OSBootStarted, None),
                at(P::OSBootStarted, Some(20)),
                RebootSignal::NotRebooted,
            ),
            (
                "a later state is the same boot",
                at(P::OSBootStarted, Some(10)),
                at(P::OSRunning, Some(20)),
                RebootSignal::NotRebooted,
            ),
        ];
        for (name, snap, now, want) in cases {
            let w = RebootWatch::anchor(&snap, t(0));
            assert_eq!(w.observe(&now).0, want, "{name}");
        }
        // A time learned later is kept, and a second entry after it is seen.
        let w = RebootWatch::anchor(&at(P::OSBootStarted, None), t(0));
        let (_, w) = w.observe(&at(P::OSBootStarted, Some(20)));
        assert_eq!(w.high_water_at, Some(t(20)));
        assert_eq!(
            w.observe(&at(P::OSBootStarted, Some(30))).0,
            RebootSignal::Rebooted {
                installer_ran: Some(true)
            }
        );
    }

    #[test]
    fn high_water_only_rises() {
        let w = RebootWatch::anchor(&facts(None, Some(P::BusInitializationStarted)), t(0));
        let (_, w) = w.observe(&facts(None, Some(P::OSBootStarted)));
        assert_eq!(w.high_water, Some(P::OSBootStarted));
        let (sig, w2) = w.observe(&facts(None, Some(P::None)));
        assert_eq!(
            sig,
            RebootSignal::Rebooted {
                installer_ran: Some(true)
            }
        );
        assert_eq!(w2.high_water, Some(P::OSBootStarted));
    }
}

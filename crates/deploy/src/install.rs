//! The waits that look for reboots: install stage 1, the reboot after it, and the secure
//! boot settle boot.
//!
//! Install stage 1 ends without the machine being able to report it (the installer returns
//! before networking is up), so several signals are layered and the first to fire wins:
//! registration, a reboot after the installer ran, and (only with `force`) the media read out
//! and gone idle. The overall install timeout is the dispatcher's, and fails rather than guesses.

use crate::Time;
use crate::config::{Config, secs};
use crate::decision::{Action, Cause};
use crate::eject::EjectRace;
use crate::facts::{Facts, PowerState, TransferMethod};
use crate::reboot::{RebootSignal, RebootWatch};
use crate::record::{Machine, Plan};
use crate::table::State;

/// The verdict of one evaluation of a wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WaitEval {
    Met {
        to: State,
        cause: Cause,
    },
    /// A side effect that belongs to the wait itself (powering a halted server on again).
    Act(Action),
    Pending,
    /// Still waiting, but for a moment that has to be caught as it happens rather than found
    /// afterwards: polled at a fraction of the poll period.
    PendingCatch,
}

/// Install stage 1. Updates the reboot snapshot in `m`.
pub(crate) fn wait_install(plan: &Plan, m: &mut Machine, facts: &Facts, now: Time, cfg: &Config) -> WaitEval {
    let done = |cause| WaitEval::Met {
        to: State::DetachMedia,
        cause,
    };
    if facts.registered {
        return done(Cause::Registered);
    }
    let since = now - m.state_entered_at;
    match m.install_watch {
        // The power-on that starts the installation must not be mistaken for the reboot that
        // ends it, so the snapshot waits for the server to be on and a settle delay to pass.
        None => {
            if facts.power == Some(PowerState::On) && since >= secs(cfg.settle_delay_secs) {
                m.install_watch = Some(RebootWatch::anchor(facts, now));
            }
        }
        Some(watch) => {
            let (signal, advanced) = watch.observe(facts);
            match signal {
                // A reinstall's first installer reboot may be IncusOS wiping the same version before it installs:
                // watched again from here, the next installer reboot ends stage 1. Had the installer installed
                // straight away (another version), the media, still in, boots it again and `force_install` has
                // it install once more, so that next reboot comes either way.
                RebootSignal::Rebooted { installer_ran }
                    if plan.reinstall
                        && !m.wipe_reboot_seen
                        && (installer_ran == Some(true)
                            || (installer_ran.is_none()
                                && since >= secs(cfg.install_reboot_fallback_delay_secs))) =>
                {
                    m.wipe_reboot_seen = true;
                    m.install_watch = Some(RebootWatch::anchor(facts, now));
                }
                RebootSignal::Rebooted {
                    installer_ran: Some(true),
                } => {
                    m.install_watch = Some(RebootWatch {
                        reboot_seen: true,
                        ..watch
                    });
                    m.eject = Some(EjectRace::after_stage_one(facts));
                    return done(Cause::RebootDetected);
                }
                // Only here does time decide: without boot progress, a reset this late is
                // taken as the end of stage 1 rather than a firmware reboot during POST.
                RebootSignal::Rebooted { installer_ran: None }
                    if since >= secs(cfg.install_reboot_fallback_delay_secs) =>
                {
                    m.install_watch = Some(RebootWatch {
                        reboot_seen: true,
                        ..watch
                    });
                    m.eject = Some(EjectRace::after_stage_one(facts));
                    return done(Cause::RebootDetected);
                }
                // A firmware reboot (staged BIOS, enrolled keys) before the installer ran:
                // re-anchor so it is not carried into the next comparison.
                RebootSignal::Rebooted { .. } => m.install_watch = Some(RebootWatch::anchor(facts, now)),
                RebootSignal::NotRebooted | RebootSignal::CannotTell => m.install_watch = Some(advanced),
            }
        }
    }
    if media_read_out(plan, m, facts, now, cfg) {
        return done(Cause::MediaReadOut);
    }
    WaitEval::Pending
}

/// Signal 3: enough distinct bytes read, then idle. Reserved for `force`, because a BMC that
/// caches the image reads it out during boot and then goes quiet, which looks the same.
pub(crate) fn media_read_out(plan: &Plan, m: &Machine, facts: &Facts, now: Time, cfg: &Config) -> bool {
    if !plan.force {
        return false;
    }
    // An Upload-mode BMC fetches the whole image before the server boots.
    match &facts.media {
        Some(slot) if slot.transfer_method != Some(TransferMethod::Upload) => {}
        _ => return false,
    }
    let Some(progress) = facts.media_progress else {
        return false;
    };
    let Ok(read) = u64::try_from(progress.bytes_read) else {
        return false;
    };
    let min = cfg
        .media_min_bytes_read
        .min(plan.image_size_bytes.unwrap_or(u64::MAX));
    let Some(last) = progress.last_read_at else {
        return false;
    };
    // Reads that all ended before the install began were a copy at insert (iDRAC reports `TransferMethod: null`
    // yet copies the image when it is inserted): they say nothing about the installer.
    read >= min
        && last >= m.state_entered_at
        && now - last >= secs(cfg.media_idle_period_secs)
        && now - m.state_entered_at >= secs(cfg.min_install_duration_secs)
}

/// The reboot after the media was ejected, measured against the install snapshot: the reboot
/// that ended the install wait has already happened by the time this state is entered.
pub(crate) fn wait_reboot(m: &mut Machine, facts: &Facts, now: Time, cfg: &Config) -> WaitEval {
    let done = |cause| WaitEval::Met {
        to: State::WaitRegistration,
        cause,
    };
    if facts.registered {
        return done(Cause::Registered);
    }
    let cannot_tell = match m.install_watch {
        Some(watch) if watch.reboot_seen => return done(Cause::RebootDetected),
        Some(watch) => {
            let (signal, advanced) = watch.observe(facts);
            if let RebootSignal::Rebooted { .. } = signal {
                m.install_watch = Some(RebootWatch {
                    reboot_seen: true,
                    ..watch
                });
                return done(Cause::RebootDetected);
            }
            m.install_watch = Some(advanced);
            signal == RebootSignal::CannotTell
        }
        None => true,
    };
    match facts.power {
        // A server that halted instead of rebooting is powered on again on every tick.
        Some(PowerState::Off) => WaitEval::Act(Action::PowerOn),
        Some(PowerState::On)
            if cannot_tell && now - m.state_entered_at >= secs(cfg.reboot_observation_window_secs) =>
        {
            done(Cause::ObservationWindowPassed)
        }
        _ => WaitEval::Pending,
    }
}

/// The installed system's registration; a server that booted its installer a second time (a missed eject) is
/// power-cycled once on the way.
pub(crate) fn wait_registration(m: &mut Machine, facts: &Facts, now: Time, cfg: &Config) -> WaitEval {
    if facts.registered {
        return WaitEval::Met {
            to: State::Cleanup,
            cause: Cause::Registered,
        };
    }
    if let Some(race) = m.eject.as_mut()
        && let Some(cause) = race.repair_due(facts, now, cfg)
    {
        race.power_cycled_at = Some(now);
        return WaitEval::Met {
            to: State::PowerOffMissedEject,
            cause,
        };
    }
    WaitEval::Pending
}

/// The boot that lets the firmware pick up enrolled certificates; it may reboot on its own.
pub(crate) fn wait_secure_boot_settled(m: &mut Machine, facts: &Facts, now: Time, cfg: &Config) -> WaitEval {
    let done = |cause| WaitEval::Met {
        to: State::PowerOffSecureBootSettled,
        cause,
    };
    let on = facts.power == Some(PowerState::On);
    match m.settle_watch {
        None if on => m.settle_watch = Some(RebootWatch::anchor(facts, now)),
        // The firmware resets itself a few POST stages after power-on. The snapshot has to be
        // taken between the two: one taken after the self-reset cannot see it, and the wait then
        // sits out the whole settle duration. So until the server is on, it is watched closely.
        None => return WaitEval::PendingCatch,
        Some(watch) => {
            let (signal, advanced) = watch.observe(facts);
            if let RebootSignal::Rebooted { .. } = signal {
                return done(Cause::RebootDetected);
            }
            m.settle_watch = Some(advanced);
        }
    }
    // Not every firmware reboots, so the wait settles itself.
    if on && now - m.state_entered_at >= secs(cfg.secure_boot_settle_secs) {
        return done(Cause::SettleDurationPassed);
    }
    WaitEval::Pending
}

/// Why a wait without a fallback ran out, from what was last observed: what an operator reads on the failed
/// deployment and its dead letter. The install wait says how much of the media was read and whether the server
/// ever restarted; the registration wait passes on the refusal the server got, or says it never called.
pub fn timeout_reason(m: &Machine, plan: &Plan, facts: &Facts, cfg: &Config) -> Option<String> {
    let state = m.state;
    let boot = facts
        .boot_progress
        .map(|b| format!("; boot progress {b}"))
        .unwrap_or_default();
    match state {
        State::WaitInstall => {
            let read = match (&facts.media_progress, plan.image_size_bytes) {
                (Some(p), _) if p.bytes_read < 0 => "media read by several readers".to_owned(),
                (Some(p), Some(size)) if size > 0 => format!(
                    "{} of {size} media bytes read ({} %)",
                    p.bytes_read,
                    p.bytes_read.max(0) as u64 * 100 / size
                ),
                (Some(p), _) => format!("{} media bytes read", p.bytes_read),
                (None, _) => "no media bytes read".to_owned(),
            };
            Some(format!(
                "the installer did not finish within {} s: {read}, no restart seen{boot}. IncusOS installs only \
                 from a seed it can use (one matching target disk, or force_install over an installed one) and \
                 restarts when done",
                cfg.install_timeout_secs
            ))
        }
        State::WaitRegistration => Some(
            match (
                &facts.registration_refused,
                m.eject.and_then(|r| r.power_cycled_at),
            ) {
                (Some(why), _) => format!(
                    "the server's registration was refused: {why} (no registration within {} s)",
                    cfg.registration_timeout_secs
                ),
                (None, Some(_)) => format!(
                    "the server did not register within {} s of being power-cycled with the media out, after it \
                 {}{boot}. It stays as it is for a look at its console",
                    cfg.registration_timeout_secs,
                    if m.eject.is_some_and(|r| r.booted_with_media) {
                        "booted its installer a second time (the eject landed after the POST of the reboot that ended \
                     install stage 1)"
                    } else {
                        "had not registered within the eject grace (its installer may have booted a second time)"
                    }
                ),
                (None, None) => format!(
                    "the installed server did not register within {} s{boot}. IncusOS registers at its seed's \
                 provider server_url with the deployment's token, and stops before that when a seed file does \
                 not parse",
                    cfg.registration_timeout_secs
                ),
            },
        ),
        _ => None,
    }
}

//! Install stage 1 signals and the reboot wait after it.

mod common;

use common::*;
use racklift_deploy::facts::{BootProgress as P, MediaProgress, MediaSlot, PowerState, TransferMethod};
use racklift_deploy::reboot::RebootWatch;
use racklift_deploy::{Action, Cause, Decision, Deployment, Facts, State, decide};

/// Entered `WaitInstall` (the install power-on succeeded) at t(0).
fn installing() -> Deployment {
    at_state(State::WaitInstall, 0)
}

/// Feeds `ticks` (seconds since the install power-on, facts) through `decide`, persisting the
/// machine; returns the first transition's target and cause, with the time it fired.
fn drive(mut d: Deployment, ticks: &[(i64, Facts)]) -> Option<(i64, State, Cause)> {
    for (at, facts) in ticks {
        let step = decide(&d, facts, t(*at), &cfg());
        if let Some(tr) = step.transition {
            return Some((*at, tr.to, tr.cause));
        }
        d.machine = step.machine;
    }
    None
}

#[test]
fn snapshot_waits_for_power_on_and_the_settle_delay() {
    let d = installing();
    let early = decide(
        &d,
        &boot(Some(1), Some(P::MemoryInitializationStarted)),
        t(59),
        &cfg(),
    );
    assert!(early.machine.install_watch.is_none());
    let off = decide(
        &d,
        &Facts {
            last_reset_time: Some(t(1)),
            ..power(PowerState::Off)
        },
        t(61),
        &cfg(),
    );
    assert!(off.machine.install_watch.is_none());
    let taken = decide(
        &d,
        &boot(Some(1), Some(P::MemoryInitializationStarted)),
        t(61),
        &cfg(),
    );
    assert_eq!(taken.machine.install_watch.map(|w| w.taken_at), Some(t(61)));
    assert!(taken.changed, "the snapshot must be persisted");
}

#[test]
fn reboot_after_the_installer_ran_ends_stage_1_promptly() {
    // Well before the minimum install duration: signal 2 must not wait out a duration.
    let got = drive(
        installing(),
        &[
            (60, boot(Some(1), Some(P::OSBootStarted))),
            (70, boot(Some(1), Some(P::OSRunning))),
            (
                200,
                boot(Some(195), Some(P::PrimaryProcessorInitializationStarted)),
            ),
        ],
    );
    assert_eq!(got, Some((200, State::DetachMedia, Cause::RebootDetected)));
}

/// A reinstall (`force_install` over a server seen registered): IncusOS, finding the same version installed,
/// wipes it and reboots before it installs, so the first installer reboot is watched past and the second ends
/// stage 1; an ordinary deployment ends at the first.
#[test]
fn a_reinstall_ends_stage_1_at_the_second_installer_reboot() {
    let ticks = [
        (60, boot(Some(1), Some(P::OSBootStarted))),
        // The installer wiped the same version and rebooted.
        (80, boot(Some(75), Some(P::PrimaryProcessorInitializationStarted))),
        (100, boot(Some(75), Some(P::OSBootStarted))),
        // Installed: the reboot that ends stage 1.
        (
            300,
            boot(Some(290), Some(P::PrimaryProcessorInitializationStarted)),
        ),
    ];
    let mut reinstall = installing();
    reinstall.plan.reinstall = true;
    assert_eq!(
        drive(reinstall, &ticks),
        Some((300, State::DetachMedia, Cause::RebootDetected))
    );
    assert_eq!(
        drive(installing(), &ticks),
        Some((80, State::DetachMedia, Cause::RebootDetected))
    );
}

#[test]
fn firmware_reboot_before_the_installer_re_anchors() {
    let mut d = installing();
    let ticks = [
        (60, boot(Some(1), Some(P::MemoryInitializationStarted))),
        // Firmware picks staged attributes up and resets during POST.
        (80, boot(Some(75), Some(P::PrimaryProcessorInitializationStarted))),
    ];
    for (at, f) in &ticks {
        let step = decide(&d, f, t(*at), &cfg());
        assert!(step.transition.is_none(), "at {at}");
        d.machine = step.machine;
    }
    let watch = d.machine.install_watch.unwrap();
    assert_eq!(
        (watch.taken_at, watch.last_reset_time),
        (t(80), Some(t(75))),
        "re-anchored"
    );
    let got = drive(
        d,
        &[
            (120, boot(Some(75), Some(P::OSRunning))),
            (700, boot(Some(690), Some(P::BusInitializationStarted))),
        ],
    );
    assert_eq!(got, Some((700, State::DetachMedia, Cause::RebootDetected)));
}

#[test]
fn without_boot_progress_the_fallback_delay_decides() {
    let early = drive(
        installing(),
        &[(60, boot(Some(1), None)), (300, boot(Some(290), None))],
    );
    assert_eq!(early, None, "a reset 5 min in may be a firmware reboot");
    let late = drive(
        installing(),
        &[
            (60, boot(Some(1), None)),
            (300, boot(Some(290), None)),
            (650, boot(Some(640), None)),
        ],
    );
    assert_eq!(late, Some((650, State::DetachMedia, Cause::RebootDetected)));
}

#[test]
fn nothing_reported_means_cannot_tell_not_rebooted() {
    let got = drive(installing(), &[(60, on()), (1200, on()), (2000, on())]);
    assert_eq!(got, None);
}

fn forced() -> Deployment {
    let mut d = installing();
    d.plan.force = true;
    d
}

fn read(bytes: i64, last_read: i64, transfer: Option<TransferMethod>) -> Facts {
    Facts {
        media: Some(MediaSlot {
            inserted: true,
            image: Some(IMAGE.into()),
            transfer_method: transfer,
        }),
        media_progress: Some(MediaProgress {
            bytes_read: bytes,
            last_read_at: Some(t(last_read)),
        }),
        ..on()
    }
}

#[test]
fn media_read_out_and_idle() {
    let enough = (600 * MIB) as i64;
    struct C {
        name: &'static str,
        d: Deployment,
        facts: Facts,
        at: i64,
        done: bool,
    }
    let mut small_image = forced();
    small_image.plan.image_size_bytes = Some(100 * MIB);
    let cases = [
        C {
            name: "read out and idle",
            d: forced(),
            facts: read(enough, 400, None),
            at: 520,
            done: true,
        },
        C {
            name: "only with force",
            d: installing(),
            facts: read(enough, 400, None),
            at: 520,
            done: false,
        },
        C {
            name: "not idle long enough",
            d: forced(),
            facts: read(enough, 450, None),
            at: 520,
            done: false,
        },
        C {
            name: "too little read",
            d: forced(),
            facts: read((400 * MIB) as i64, 400, None),
            at: 520,
            done: false,
        },
        C {
            name: "capped at the image size",
            d: small_image,
            facts: read((100 * MIB) as i64, 400, None),
            at: 520,
            done: true,
        },
        C {
            name: "never with Upload",
            d: forced(),
            facts: read(enough, 400, Some(TransferMethod::Upload)),
            at: 520,
            done: false,
        },
        C {
            name: "never when every read came before the install (a copy at insert, not reported as Upload)",
            d: forced(),
            facts: read(enough, -5, None),
            at: 520,
            done: false,
        },
        C {
            name: "cannot tell",
            d: forced(),
            facts: read(-1, 400, None),
            at: 520,
            done: false,
        },
        C {
            name: "no progress recorded (restart)",
            d: forced(),
            facts: Facts {
                media_progress: None,
                ..read(enough, 0, None)
            },
            at: 520,
            done: false,
        },
        C {
            name: "minimum install duration is a floor",
            d: forced(),
            facts: read(enough, 100, None),
            at: 299,
            done: false,
        },
        C {
            name: "floor passed",
            d: forced(),
            facts: read(enough, 100, None),
            at: 300,
            done: true,
        },
    ];
    for c in cases {
        let step = decide(&c.d, &c.facts, t(c.at), &cfg());
        let got = step.transition.map(|tr| (tr.to, tr.cause));
        let want = c.done.then_some((State::DetachMedia, Cause::MediaReadOut));
        assert_eq!(got, want, "{}", c.name);
    }
}

#[test]
fn registration_wins_at_any_time() {
    let step = decide(
        &installing(),
        &Facts {
            registered: true,
            ..power(PowerState::Off)
        },
        t(5),
        &cfg(),
    );
    assert_eq!(step.transition.map(|tr| tr.cause), Some(Cause::Registered));
}

/// `WaitReboot`, entered at t(1000), with an install snapshot taken at t(60).
fn rebooting(lrt: Option<i64>, progress: Option<P>, seen: bool) -> Deployment {
    let mut d = at_state(State::WaitReboot, 1000);
    let mut watch = RebootWatch::anchor(&boot(lrt, progress), t(60));
    watch.reboot_seen = seen;
    d.machine.install_watch = Some(watch);
    d
}

#[test]
fn reboot_wait() {
    let cases = [
        (
            "reboot seen by the install wait",
            rebooting(Some(1), Some(P::OSRunning), true),
            boot(Some(1), Some(P::OSRunning)),
            1001,
            Some(Cause::RebootDetected),
        ),
        (
            "reset time moved",
            rebooting(Some(1), None, false),
            boot(Some(900), None),
            1001,
            Some(Cause::RebootDetected),
        ),
        (
            "not yet",
            rebooting(Some(1), Some(P::OSRunning), false),
            boot(Some(1), Some(P::OSRunning)),
            1001,
            None,
        ),
        (
            "cannot tell: window not passed",
            rebooting(None, None, false),
            on(),
            1000 + 299,
            None,
        ),
        (
            "cannot tell: window passed while on",
            rebooting(None, None, false),
            on(),
            1300,
            Some(Cause::ObservationWindowPassed),
        ),
        (
            "window does not apply where a reboot can be told",
            rebooting(Some(1), None, false),
            boot(Some(1), None),
            1300,
            None,
        ),
        (
            "registered",
            rebooting(Some(1), None, false),
            Facts {
                registered: true,
                ..on()
            },
            1001,
            Some(Cause::Registered),
        ),
    ];
    for (name, d, facts, at, want) in cases {
        let step = decide(&d, &facts, t(at), &cfg());
        if want.is_some() {
            assert_eq!(step.machine.state, State::WaitRegistration, "{name}");
        }
        assert_eq!(step.transition.map(|tr| tr.cause), want, "{name}");
    }
}

#[test]
fn a_halted_server_is_powered_on_again() {
    let d = rebooting(None, None, false);
    let step = decide(&d, &power(PowerState::Off), t(1400), &cfg());
    assert!(matches!(
        step.decision,
        Decision::Act {
            action: Action::PowerOn,
            ..
        }
    ));
    assert_eq!(step.machine.state, State::WaitReboot);
}

#[test]
fn secure_boot_settle_anchors_then_waits() {
    let d = at_state(State::WaitSecureBootSettled, 100);
    let first = decide(&d, &boot(Some(1), Some(P::SetupEntered)), t(110), &cfg());
    assert!(first.machine.settle_watch.is_some() && first.transition.is_none());
    let mut d = d;
    d.machine = first.machine;
    let rebooted = decide(
        &d,
        &boot(Some(1), Some(P::PrimaryProcessorInitializationStarted)),
        t(150),
        &cfg(),
    );
    assert_eq!(
        rebooted.transition.map(|tr| tr.cause),
        Some(Cause::RebootDetected)
    );
}

/// The snapshot must land between the power-on and the firmware's self-reset a few POST stages
/// later, so the wait polls closely until the server is on and at the usual period after.
#[test]
fn secure_boot_settle_watches_the_power_on_closely() {
    let cfg = cfg();
    let d = at_state(State::WaitSecureBootSettled, 100);
    let next_poll = |step: &racklift_deploy::Step, at: i64| match step.decision {
        Decision::Snooze { until } => (until - t(at)).num_milliseconds(),
        ref other => panic!("expected a snooze, got {other:?}"),
    };
    let full = cfg.poll_interval_secs as i64 * 1000;
    let powering = decide(&d, &power(PowerState::PoweringOn), t(100), &cfg);
    assert!(powering.machine.settle_watch.is_none());
    assert_eq!(next_poll(&powering, 100), full / 5, "powering on");
    let off = decide(&d, &power(PowerState::Off), t(100), &cfg);
    assert_eq!(next_poll(&off, 100), full / 5, "not yet on");
    let anchored = decide(&d, &boot(Some(1), Some(P::SetupEntered)), t(101), &cfg);
    assert!(anchored.machine.settle_watch.is_some());
    assert_eq!(next_poll(&anchored, 101), full, "anchored");
}

/// A wait with nowhere to fall back to fails naming what was last seen: how much of the media was read and
/// whether the server restarted, or the refusal its registration got.
#[test]
fn install_and_registration_timeouts_say_what_was_last_seen() {
    let c = cfg();
    let read = |bytes| MediaProgress {
        bytes_read: bytes,
        last_read_at: Some(t(30)),
    };
    let cases: &[(State, u64, Facts, &[&str])] = &[
        (
            State::WaitInstall,
            c.install_timeout_secs,
            Facts {
                power: Some(PowerState::On),
                media_progress: Some(read(3 * 1024 * MIB as i64)),
                ..Facts::default()
            },
            &[
                "installer did not finish",
                "3221225472 of 3221225472 media bytes read (100 %)",
                "no restart seen",
            ],
        ),
        (
            State::WaitInstall,
            c.install_timeout_secs,
            Facts::default(),
            &["no media bytes read"],
        ),
        (
            State::WaitRegistration,
            c.registration_timeout_secs,
            Facts {
                boot_progress: Some(P::OSRunning),
                ..Facts::default()
            },
            &["did not register within", "boot progress OSRunning", "server_url"],
        ),
        (
            State::WaitRegistration,
            c.registration_timeout_secs,
            Facts {
                registration_refused: Some("hostname \"x\" is not the one the seed names".to_owned()),
                ..Facts::default()
            },
            &["registration was refused: hostname \"x\""],
        ),
    ];
    for (state, timeout, facts, wanted) in cases {
        let d = at_state(*state, 0);
        let step = decide(&d, facts, t(*timeout as i64 + 1), &c);
        let failure = step.machine.failure.expect("a failure");
        assert_eq!((failure.state, failure.cause), (*state, Cause::WaitTimeout));
        let error = failure.error.expect("a reason");
        for w in *wanted {
            assert!(error.contains(w), "{state:?}: {error:?} lacks {w:?}");
        }
    }
}

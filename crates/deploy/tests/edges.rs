//! One case per drawn edge of the diagram, plus a check that no drawn edge lacks a case.

mod common;

use std::collections::BTreeSet;

use common::*;
use racklift_deploy::eject::EjectRace;
use racklift_deploy::facts::{BootProgress, CancelRequest, TaskState};
use racklift_deploy::reboot::RebootWatch;
use racklift_deploy::table::{Kind, STATES};
use racklift_deploy::{Deployment, Facts, Jitter, Outcome, State, apply_outcome, decide};

enum Input {
    Decide(Facts),
    Outcome(Outcome),
}

struct Case {
    name: &'static str,
    from: State,
    /// Seconds since the state was entered (the deployment started at t(0), entered at t(100)).
    after: i64,
    setup: fn(&mut Deployment),
    input: Input,
    to: State,
}

fn none(_: &mut Deployment) {}

fn case(name: &'static str, from: State, after: i64, facts: Facts, to: State) -> Case {
    Case {
        name,
        from,
        after,
        setup: none,
        input: Input::Decide(facts),
        to,
    }
}

const STEP_TIMEOUT: i64 = 5 * 60;
const BIOS_TIMEOUT: i64 = 10 * 60;

fn cases() -> Vec<Case> {
    use State as S;
    let cancel = |skip| Facts {
        cancel: Some(CancelRequest { skip_cleanup: skip }),
        ..on()
    };
    vec![
        Case {
            name: "refresh out of retries",
            from: S::RefreshBMCData,
            after: 0,
            setup: |d| d.machine.retries = 3,
            input: Input::Outcome(Outcome::Retryable {
                error: "connection reset".into(),
            }),
            to: S::Failed,
        },
        case("refresh canceled", S::RefreshBMCData, 0, cancel(false), S::Cancel),
        case(
            "check: first pass not applied",
            S::CheckBIOS,
            0,
            bios(Some(false), Some(true)),
            S::PowerOffBIOS,
        ),
        case(
            "check: deferred pending",
            S::CheckBIOS,
            0,
            bios(Some(true), Some(false)),
            S::PowerOffBIOSDeferred,
        ),
        case(
            "check: all match",
            S::CheckBIOS,
            0,
            bios(Some(true), Some(true)),
            S::PowerOffSecureBoot,
        ),
        Case {
            name: "check: no Bios resource, nothing planned",
            from: S::CheckBIOS,
            after: 0,
            setup: |d| {
                d.plan.bios.attributes.clear();
                d.plan.bios.deferred_attributes.clear();
            },
            input: Input::Decide(Facts {
                bios_absent: true,
                ..on()
            }),
            to: S::PowerOffSecureBoot,
        },
        case(
            "check: no Bios resource, attributes planned",
            S::CheckBIOS,
            0,
            Facts {
                bios_absent: true,
                ..on()
            },
            S::Failed,
        ),
        case(
            "power off BIOS: timeout",
            S::WaitPowerOffBIOS,
            STEP_TIMEOUT,
            on(),
            S::PowerOffBIOS,
        ),
        case("power off BIOS: off", S::WaitPowerOffBIOS, 3, off(), S::ApplyBIOS),
        case(
            "BIOS applied: timeout",
            S::WaitBIOSApplied,
            BIOS_TIMEOUT,
            off(),
            S::PowerOffBIOS,
        ),
        case(
            "BIOS applied: task completed",
            S::WaitBIOSApplied,
            5,
            Facts {
                bios_task: Some(TaskState::Completed),
                ..on()
            },
            S::VerifyBIOS,
        ),
        case(
            "verify: not applied",
            S::VerifyBIOS,
            0,
            bios(Some(false), None),
            S::PowerOffBIOS,
        ),
        case(
            "verify: deferred pending",
            S::VerifyBIOS,
            0,
            bios(Some(true), None),
            S::PowerOffBIOSDeferred,
        ),
        case(
            "verify: all match",
            S::VerifyBIOS,
            0,
            bios(Some(true), Some(true)),
            S::PowerOffSecureBoot,
        ),
        case(
            "power off deferred: timeout",
            S::WaitPowerOffBIOSDeferred,
            STEP_TIMEOUT,
            on(),
            S::PowerOffBIOSDeferred,
        ),
        case(
            "power off deferred: off",
            S::WaitPowerOffBIOSDeferred,
            3,
            off(),
            S::ApplyBIOSDeferred,
        ),
        case(
            "deferred applied: timeout",
            S::WaitBIOSAppliedDeferred,
            BIOS_TIMEOUT,
            off(),
            S::PowerOffBIOSDeferred,
        ),
        case(
            "deferred applied: task gone after settle delay",
            S::WaitBIOSAppliedDeferred,
            60,
            Facts {
                bios_task: Some(TaskState::Unavailable),
                ..on()
            },
            S::VerifyBIOSDeferred,
        ),
        case(
            "verify deferred: not applied",
            S::VerifyBIOSDeferred,
            0,
            bios(Some(true), None),
            S::PowerOffBIOSDeferred,
        ),
        case(
            "verify deferred: match",
            S::VerifyBIOSDeferred,
            0,
            bios(Some(true), Some(true)),
            S::PowerOffSecureBoot,
        ),
        case(
            "power off secure boot: timeout",
            S::WaitPowerOffSecureBoot,
            STEP_TIMEOUT,
            on(),
            S::PowerOffSecureBoot,
        ),
        case(
            "power off secure boot: off",
            S::WaitPowerOffSecureBoot,
            3,
            off(),
            S::SecureBoot,
        ),
        Case {
            name: "power off secure boot: off, skipped",
            from: S::WaitPowerOffSecureBoot,
            after: 3,
            setup: |d| d.plan.skip_secure_boot_certificates = true,
            input: Input::Decide(off()),
            to: S::ClearMedia,
        },
        case(
            "media cleared: timeout",
            S::WaitMediaCleared,
            STEP_TIMEOUT,
            media(true, Some("old.iso")),
            S::ClearMedia,
        ),
        Case {
            name: "media cleared, certificates enrolled",
            from: S::WaitMediaCleared,
            after: 3,
            setup: |d| d.machine.secure_boot_written = true,
            input: Input::Decide(media(false, None)),
            to: S::PowerOnSecureBoot,
        },
        case(
            "media cleared, nothing enrolled",
            S::WaitMediaCleared,
            3,
            media(false, None),
            S::AttachMedia,
        ),
        case(
            "settle: timeout while off",
            S::WaitSecureBootSettled,
            BIOS_TIMEOUT,
            off(),
            S::PowerOnSecureBoot,
        ),
        case(
            "settle: duration passed",
            S::WaitSecureBootSettled,
            5 * 60,
            on(),
            S::PowerOffSecureBootSettled,
        ),
        Case {
            name: "settle: firmware rebooted",
            from: S::WaitSecureBootSettled,
            after: 40,
            setup: |d| {
                d.machine.settle_watch = Some(RebootWatch::anchor(&boot(Some(1), None), t(110)));
            },
            input: Input::Decide(boot(Some(130), None)),
            to: S::PowerOffSecureBootSettled,
        },
        case(
            "settled power off: timeout",
            S::WaitPowerOffSecureBootSettled,
            STEP_TIMEOUT,
            on(),
            S::PowerOffSecureBootSettled,
        ),
        case(
            "settled power off: off",
            S::WaitPowerOffSecureBootSettled,
            3,
            off(),
            S::AttachMedia,
        ),
        case(
            "media attached: timeout",
            S::WaitMediaAttached,
            STEP_TIMEOUT,
            media(false, None),
            S::AttachMedia,
        ),
        case(
            "media attached",
            S::WaitMediaAttached,
            3,
            media(true, Some(IMAGE)),
            S::PowerOnInstall,
        ),
        case(
            "installing: registered",
            S::WaitInstall,
            30,
            Facts {
                registered: true,
                ..on()
            },
            S::DetachMedia,
        ),
        case("installing: timeout", S::WaitInstall, 45 * 60, on(), S::Failed),
        case(
            "installing: canceled",
            S::WaitInstall,
            30,
            cancel(false),
            S::Cancel,
        ),
        case(
            "installing: canceled, skip cleanup",
            S::WaitInstall,
            30,
            cancel(true),
            S::Canceled,
        ),
        case(
            "media detached: timeout",
            S::WaitMediaDetached,
            STEP_TIMEOUT,
            media(true, Some(IMAGE)),
            S::DetachMedia,
        ),
        case(
            "media detached",
            S::WaitMediaDetached,
            3,
            media(false, None),
            S::WaitReboot,
        ),
        Case {
            name: "reboot: detected against the install snapshot",
            from: S::WaitReboot,
            after: 20,
            setup: |d| {
                d.machine.install_watch = Some(RebootWatch::anchor(
                    &boot(Some(1), Some(BootProgress::OSRunning)),
                    t(50),
                ));
            },
            input: Input::Decide(boot(Some(110), Some(BootProgress::MemoryInitializationStarted))),
            to: S::WaitRegistration,
        },
        case("reboot: timeout", S::WaitReboot, 15 * 60, off(), S::Failed),
        case(
            "registration",
            S::WaitRegistration,
            30,
            Facts {
                registered: true,
                ..on()
            },
            S::Cleanup,
        ),
        case(
            "registration: timeout",
            S::WaitRegistration,
            30 * 60,
            on(),
            S::Failed,
        ),
        Case {
            name: "registration: the installer booted again with the media in",
            from: S::WaitRegistration,
            after: 3,
            setup: |d| {
                d.machine.eject = Some(EjectRace {
                    booted_with_media: true,
                    media_out_at: Some(t(98)),
                    power_cycled_at: None,
                });
            },
            input: Input::Decide(on()),
            to: S::PowerOffMissedEject,
        },
        Case {
            name: "registration: none within the eject grace",
            from: S::WaitRegistration,
            after: 15 * 60,
            setup: |d| {
                d.machine.eject = Some(EjectRace {
                    booted_with_media: false,
                    media_out_at: Some(t(95)),
                    power_cycled_at: None,
                });
            },
            input: Input::Decide(on()),
            to: S::PowerOffMissedEject,
        },
        case(
            "missed eject power off: timeout",
            S::WaitPowerOffMissedEject,
            STEP_TIMEOUT,
            on(),
            S::PowerOffMissedEject,
        ),
        case(
            "missed eject power off: off",
            S::WaitPowerOffMissedEject,
            3,
            off(),
            S::PowerOnMissedEject,
        ),
        case("cancel: timeout", S::WaitCancel, STEP_TIMEOUT, on(), S::Cancel),
        case("cancel: off", S::WaitCancel, 3, off(), S::Canceled),
    ]
}

fn run(c: &Case) -> Option<State> {
    let mut d = at_state(c.from, 100);
    (c.setup)(&mut d);
    let now = t(100 + c.after);
    let step = match &c.input {
        Input::Decide(f) => decide(&d, f, now, &cfg()),
        Input::Outcome(o) => apply_outcome(&d, o, now, &cfg(), Jitter::NONE),
    };
    step.transition.map(|tr| {
        assert_eq!(tr.from, c.from, "{}", c.name);
        assert_eq!(step.machine.state, tr.to, "{}", c.name);
        assert_eq!(
            step.machine.seq,
            d.machine.seq + 1,
            "{}: seq counts transitions",
            c.name
        );
        tr.to
    })
}

#[test]
fn every_case_takes_its_edge() {
    for c in cases() {
        assert_eq!(run(&c), Some(c.to), "{}", c.name);
        assert!(
            racklift_deploy::table::is_edge(c.from, c.to),
            "{}: not an edge of the table",
            c.name
        );
    }
}

#[test]
fn every_trigger_advances_on_success() {
    for def in STATES.iter().filter(|d| d.kind == Kind::Trigger) {
        let d = at_state(def.state, 100);
        let step = apply_outcome(&d, &Outcome::Succeeded, t(101), &cfg(), Jitter::NONE);
        let next = def.edges[0].to;
        assert_eq!(step.transition.map(|tr| tr.to), Some(next), "{}", def.state);
    }
}

#[test]
fn every_drawn_edge_has_a_case() {
    let mut covered: BTreeSet<(State, State)> = cases().iter().map(|c| (c.from, c.to)).collect();
    for def in STATES.iter().filter(|d| d.kind == Kind::Trigger) {
        covered.insert((def.state, def.edges[0].to));
    }
    let mut missing = Vec::new();
    for def in &STATES {
        for e in def.edges {
            if !covered.contains(&(def.state, e.to)) {
                missing.push(format!("{} --> {}", def.state, e.to));
            }
        }
    }
    assert!(missing.is_empty(), "edges without a test case: {missing:?}");
}

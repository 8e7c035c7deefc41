//! The failure sentence of every way a deployment fails: it names the server, the state, what the state was
//! about, the cause in words and what was seen last, and shows no Rust formatting.

mod common;

use common::*;
use racklift_deploy::eject::EjectRace;
use racklift_deploy::explain::failure_sentence;
use racklift_deploy::facts::{BootProgress, MediaSlot};
use racklift_deploy::{Cause, Deployment, Facts, Jitter, Outcome, State, apply_outcome, decide};

struct Row {
    name: &'static str,
    from: State,
    after: i64,
    setup: fn(&mut Deployment),
    outcome: Option<Outcome>,
    cause: Cause,
    /// Words the sentence must carry beyond the server and the state.
    says: &'static [&'static str],
}

fn none(_: &mut Deployment) {}

fn seen() -> Facts {
    Facts {
        boot_progress: Some(BootProgress::OSBootStarted),
        media: Some(MediaSlot {
            inserted: true,
            image: Some(IMAGE.into()),
            transfer_method: None,
        }),
        ..on()
    }
}

#[test]
fn every_failure_path_has_a_sentence_for_people() {
    let rows = [
        Row {
            name: "install wait without fallback",
            from: State::WaitInstall,
            after: 45 * 60,
            setup: none,
            outcome: None,
            cause: Cause::WaitTimeout,
            says: &[
                "waiting for: install stage 1 done",
                "the wait timed out",
                "the installer did not finish",
                "boot progress OSBootStarted",
            ],
        },
        Row {
            name: "registration wait",
            from: State::WaitRegistration,
            after: 30 * 60,
            setup: none,
            outcome: None,
            cause: Cause::WaitTimeout,
            says: &[
                "waiting for: server registered",
                "did not register",
                "not registered",
            ],
        },
        Row {
            name: "registration after the missed eject repair",
            from: State::WaitRegistration,
            after: 30 * 60,
            setup: |d| {
                d.machine.eject = Some(EjectRace {
                    booted_with_media: true,
                    media_out_at: Some(t(0)),
                    power_cycled_at: Some(t(50)),
                });
            },
            outcome: None,
            cause: Cause::WaitTimeout,
            says: &["power-cycled", "booted its installer a second time"],
        },
        Row {
            name: "a trigger out of retries names the call's error",
            from: State::DetachMedia,
            after: 0,
            setup: |d| d.machine.retries = 3,
            outcome: Some(Outcome::Retryable {
                error: "POST EjectMedia: HTTP 503".into(),
            }),
            cause: Cause::RetriesExhausted,
            says: &["issuing detach media", "ran out of retries", "HTTP 503"],
        },
        Row {
            name: "a refused call",
            from: State::AttachMedia,
            after: 0,
            setup: none,
            outcome: Some(Outcome::Fatal {
                error: "InsertMedia: HTTP 400 PropertyValueNotInList".into(),
            }),
            cause: Cause::NonRetryable,
            says: &[
                "issuing attach media",
                "no retry can fix",
                "PropertyValueNotInList",
            ],
        },
        Row {
            name: "a wait out of fallbacks",
            from: State::WaitMediaDetached,
            after: 5 * 60,
            setup: |d| {
                d.machine.retries = 3;
                // An earlier error the retries got past says nothing about this end.
                d.machine.last_error = Some("detach media: HTTP 503".into());
            },
            outcome: None,
            cause: Cause::RetriesExhausted,
            says: &[
                "waiting for: media ejected",
                "wait for media detached timed out on each of its 4 attempts",
                "media inserted",
            ],
        },
        Row {
            name: "the overall deadline",
            from: State::WaitReboot,
            after: 3 * 60 * 60,
            setup: none,
            outcome: None,
            cause: Cause::DeploymentTimeout,
            says: &["overall deadline", "power On"],
        },
    ];
    for row in rows {
        let mut d = at_state(row.from, 100);
        (row.setup)(&mut d);
        let now = t(100 + row.after);
        let facts = seen();
        let step = match &row.outcome {
            Some(o) => apply_outcome(&d, o, now, &cfg(), Jitter::NONE),
            None => decide(&d, &facts, now, &cfg()),
        };
        assert_eq!(step.machine.state, State::Failed, "{}", row.name);
        let failure = step.machine.failure.as_ref().expect("a failure");
        assert_eq!(failure.cause, row.cause, "{}", row.name);
        let text = failure_sentence("sim-0007", &step.machine, Some(&facts));
        assert!(
            text.starts_with("server sim-0007: deployment failed in "),
            "{}: {text}",
            row.name
        );
        assert!(text.contains(&format!("({})", row.from)), "{}: {text}", row.name);
        assert!(text.contains("Last seen: "), "{}: {text}", row.name);
        for word in row.says {
            assert!(text.contains(word), "{}: {word:?} missing from {text}", row.name);
        }
        for debug in ["Some(", "None", "{ ", "\"", "no error recorded"] {
            assert!(!text.contains(debug), "{}: {debug:?} in {text}", row.name);
        }
        if row.name == "a wait out of fallbacks" {
            assert!(
                !text.contains("HTTP 503"),
                "{}: a recovered error in {text}",
                row.name
            );
        }
    }
}

#[test]
fn cause_names_are_the_stored_names() {
    let all = [
        Cause::ActionSucceeded,
        Cause::ConditionMet,
        Cause::BiosChecked,
        Cause::BiosNotApplied,
        Cause::CertificatesCorrect,
        Cause::NothingToStage,
        Cause::SecureBootSkipped,
        Cause::Registered,
        Cause::RebootDetected,
        Cause::MediaReadOut,
        Cause::ObservationWindowPassed,
        Cause::InstallerBootedAgain,
        Cause::NoRegistrationAfterEject,
        Cause::SettleDurationPassed,
        Cause::WaitTimeout,
        Cause::RetriesExhausted,
        Cause::NonRetryable,
        Cause::BiosFallbacksExhausted,
        Cause::DeploymentTimeout,
        Cause::CancelRequested,
        Cause::CancelSkipCleanup,
    ];
    for cause in all {
        assert_eq!(
            serde_json::to_value(cause).unwrap(),
            serde_json::json!(cause.name())
        );
        let text = cause.to_string();
        assert!(!text.is_empty() && text != cause.name(), "{text}");
    }
}

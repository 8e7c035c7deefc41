//! Fuzz targets of the decoding of BMC answers ([`racklift_redfish::decode_paths`]): bounded runs under the
//! normal test run, the harness and how to run them longer in `crates/fuzz`.
//!
//! - `redfish_body`: any bytes, answered with a success and with error statuses. The corpus holds answers in
//!   the shapes real BMCs send (iDRAC, iLO, XCC, Supermicro and DMTF mockup systems, virtual media collections
//!   and slots, Bios with `@Redfish.Settings`, SecureBoot and its databases, tasks, error bodies) and garbage;
//!   each file is named `<kind>.<what>`, its kind one of [`KINDS`].
//! - `redfish_json`: the same captures, edited (types changed, members removed or added, cut short).
//!
//! Either way nothing panics and every failure is a typed [`Error`] of the expected variant.

use bolero::generator::produce;
use racklift_fuzz::json::{Captures, Edits};
use racklift_fuzz::{corpus, corpus_dir, fuzz_target};
use racklift_redfish::decode_paths::{KINDS, decode_all};
use racklift_redfish::{Error, ErrorClass};
use reqwest::StatusCode;

/// Statuses a body is read with: the success the resource reads expect, a task's 202, a refusal, a busy BMC.
const STATUSES: [StatusCode; 4] = [
    StatusCode::OK,
    StatusCode::ACCEPTED,
    StatusCode::BAD_REQUEST,
    StatusCode::SERVICE_UNAVAILABLE,
];

/// Decodes `body` with `status` as every kind and holds each outcome to the variant it may be.
fn check(status: StatusCode, body: &[u8]) {
    for (kind, outcome) in decode_all(status, body) {
        let Err(e) = outcome else {
            assert!(status.is_success(), "{kind}: an error status read as success");
            continue;
        };
        match &e {
            Error::Status { status: s, .. } => {
                assert!(!status.is_success() && *s == status.as_u16(), "{kind}: {e}");
            }
            Error::Decode { .. } => {
                assert!(status.is_success() && kind != "task", "{kind}: {e}");
                assert_eq!(e.class(), ErrorClass::Protocol);
            }
            // A task that reports a failed state; a system without a reset action.
            Error::TaskFailed { .. } => assert_eq!(kind, "task", "{e}"),
            Error::Unsupported { .. } => assert_eq!(kind, "system", "{e}"),
            other => panic!("{kind}: untyped failure {other:?}"),
        }
    }
}

#[test]
fn redfish_body() {
    fuzz_target!("redfish_body", |input: &[u8]| {
        for status in STATUSES {
            check(status, input);
        }
    });
}

#[test]
fn redfish_json() {
    let captures = Captures::from_corpus(&corpus(&corpus_dir!("redfish_body")));
    assert!(captures.documents.len() > 40, "the captures are missing");
    fuzz_target!("redfish_json", produce::<Edits>(), |input: &Edits| {
        let body = captures.apply(input);
        check(StatusCode::OK, &body);
        check(StatusCode::BAD_REQUEST, &body);
    });
}

/// Each capture decodes as the kind its name says, so the corpus is what BMCs answer, not what fails anyway.
#[test]
fn captures_decode_as_their_kind() {
    let inputs = corpus(&corpus_dir!("redfish_body"));
    assert!(inputs.len() > 50, "{} inputs", inputs.len());
    for (name, body) in &inputs {
        let kind = name.split('.').next().unwrap_or_default();
        let outcome = |status| {
            decode_all(status, body)
                .into_iter()
                .find(|(k, _)| *k == kind.trim_end_matches("-failed"))
                .map(|(_, o)| o)
        };
        match kind {
            "error" => {
                for (k, o) in decode_all(StatusCode::SERVICE_UNAVAILABLE, body) {
                    let e = o.expect_err("an error status");
                    assert!(e.message_id().is_some(), "{name} as {k}: {e}");
                }
            }
            "task-failed" => {
                assert!(
                    matches!(outcome(StatusCode::OK), Some(Err(Error::TaskFailed { .. }))),
                    "{name}"
                );
            }
            "garbage" => {}
            kind => {
                assert!(KINDS.contains(&kind), "{name}: no kind {kind}");
                match outcome(StatusCode::OK) {
                    Some(Ok(())) => {}
                    other => panic!("{name}: {other:?}"),
                }
            }
        }
    }
}

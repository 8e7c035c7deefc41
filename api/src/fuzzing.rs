//! The request bodies of every operation, decoded and checked as the handlers do, for the `api_bodies` fuzz
//! target (`api/tests/fuzz.rs`): not part of the API.

use racklift_store::{NewBiosProfile, NewImage, NewSeed, NewServer, NewToken, ServerUpdate};
use serde::de::DeserializeOwned;

use crate::error::{ApiError, parse_json};
use crate::{bmc_actions, catalog, deploy, registration, triage_actions};

/// What one body type made of an input: accepted, or refused with this error.
pub type Verdict = (&'static str, Result<(), ApiError>);

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    parse_json::<T>(bytes)
}

fn only<T: DeserializeOwned>(name: &'static str, bytes: &[u8]) -> Verdict {
    (name, decode::<T>(bytes).map(|_| ()))
}

/// Every body type's verdict on `bytes`, with the checks that need no database after the decoding.
pub fn request_bodies(bytes: &[u8]) -> Vec<Verdict> {
    vec![
        (
            "NewServer",
            decode::<NewServer>(bytes).and_then(|s| crate::validate::name("name", &s.name)),
        ),
        only::<ServerUpdate>("ServerUpdate", bytes),
        only::<NewToken>("NewToken", bytes),
        (
            "NewSeed",
            decode::<NewSeed>(bytes).and_then(|s| crate::validate::name("name", &s.name)),
        ),
        (
            "NewBiosProfile",
            decode::<NewBiosProfile>(bytes).and_then(|p| catalog::check_profile(&p)),
        ),
        only::<NewImage>("NewImage", bytes),
        only::<catalog::PublicAddress>("PublicAddress", bytes),
        only::<deploy::DeployRequest>("DeployRequest", bytes),
        only::<deploy::CancelRequest>("CancelRequest", bytes),
        (
            "PowerRequest",
            decode::<bmc_actions::PowerRequest>(bytes).map(|r| drop(bmc_actions::power_action(r))),
        ),
        (
            "MediaRequest",
            decode::<bmc_actions::MediaRequest>(bytes).and_then(|r| bmc_actions::media_action(r).map(drop)),
        ),
        only::<registration::Registration>("Registration", bytes),
        only::<triage_actions::RetryBody>("RetryBody", bytes),
        only::<triage_actions::DiscardBody>("DiscardBody", bytes),
        only::<triage_actions::CancelBody>("CancelBody", bytes),
        only::<triage_actions::BulkBody>("BulkBody", bytes),
    ]
}

//! Sentences for people: why a deployment failed, and what a step's outcome was.
//!
//! An operator reads these on the deployment, its events and its dead letter. They name the server, the state,
//! what the state waited for (or issued) and what the BMC showed last, in words; the machine-readable cause
//! travels beside them ([`Cause::name`]).

use std::fmt;

use crate::decision::{Cause, Outcome};
use crate::facts::{BootProgress, Facts, PowerState};
use crate::record::Machine;
use crate::table::{Group, Kind, State};

impl Cause {
    /// The stable name stored and filtered on (the serde name).
    pub fn name(self) -> &'static str {
        match self {
            Cause::ActionSucceeded => "ActionSucceeded",
            Cause::ConditionMet => "ConditionMet",
            Cause::BiosChecked => "BiosChecked",
            Cause::BiosAbsent => "BiosAbsent",
            Cause::BiosNotApplied => "BiosNotApplied",
            Cause::CertificatesCorrect => "CertificatesCorrect",
            Cause::NothingToStage => "NothingToStage",
            Cause::SecureBootSkipped => "SecureBootSkipped",
            Cause::Registered => "Registered",
            Cause::RebootDetected => "RebootDetected",
            Cause::MediaReadOut => "MediaReadOut",
            Cause::ObservationWindowPassed => "ObservationWindowPassed",
            Cause::InstallerBootedAgain => "InstallerBootedAgain",
            Cause::NoRegistrationAfterEject => "NoRegistrationAfterEject",
            Cause::SettleDurationPassed => "SettleDurationPassed",
            Cause::WaitTimeout => "WaitTimeout",
            Cause::RetriesExhausted => "RetriesExhausted",
            Cause::NonRetryable => "NonRetryable",
            Cause::BiosFallbacksExhausted => "BiosFallbacksExhausted",
            Cause::DeploymentTimeout => "DeploymentTimeout",
            Cause::CancelRequested => "CancelRequested",
            Cause::CancelSkipCleanup => "CancelSkipCleanup",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cause::ActionSucceeded => "the call succeeded",
            Cause::ConditionMet => "the condition was met",
            Cause::BiosChecked => "the BIOS attributes were checked",
            Cause::BiosAbsent => "the BMC has no Bios resource",
            Cause::BiosNotApplied => "the BIOS attributes were not in effect",
            Cause::CertificatesCorrect => "the secure boot certificates were already correct",
            Cause::NothingToStage => "nothing was left to stage",
            Cause::SecureBootSkipped => "secure boot certificates were skipped",
            Cause::Registered => "the server registered",
            Cause::RebootDetected => "a reboot was detected",
            Cause::MediaReadOut => "the media was read out and went idle",
            Cause::ObservationWindowPassed => "the reboot observation window passed with the server on",
            Cause::InstallerBootedAgain => "the installer booted a second time with the media still in",
            Cause::NoRegistrationAfterEject => "the server did not register within the grace after the eject",
            Cause::SettleDurationPassed => "the settle duration passed",
            Cause::WaitTimeout => "the wait timed out",
            Cause::RetriesExhausted => "the step ran out of retries",
            Cause::NonRetryable => "the BMC refused in a way no retry can fix",
            Cause::BiosFallbacksExhausted => {
                "the BIOS attributes never took effect within the fallback budget"
            }
            Cause::DeploymentTimeout => "the deployment ran past its overall deadline",
            Cause::CancelRequested => "a cancel was requested",
            Cause::CancelSkipCleanup => "a cancel was requested without clean up",
        })
    }
}

impl Outcome {
    /// The stable name of the outcome's kind, for events and filters (the error has a field of its own).
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Succeeded => "Succeeded",
            Outcome::Accepted { .. } => "Accepted",
            Outcome::Retryable { .. } => "Retryable",
            Outcome::Fatal { .. } => "Fatal",
            Outcome::DeadlineExpired => "DeadlineExpired",
        }
    }
}

impl fmt::Display for BootProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The Redfish names, as the BMC reports them.
        f.write_str(match self {
            BootProgress::None => "None",
            BootProgress::PrimaryProcessorInitializationStarted => "PrimaryProcessorInitializationStarted",
            BootProgress::BusInitializationStarted => "BusInitializationStarted",
            BootProgress::MemoryInitializationStarted => "MemoryInitializationStarted",
            BootProgress::SecondaryProcessorInitializationStarted => {
                "SecondaryProcessorInitializationStarted"
            }
            BootProgress::PCIResourceConfigStarted => "PCIResourceConfigStarted",
            BootProgress::SystemHardwareInitializationComplete => "SystemHardwareInitializationComplete",
            BootProgress::SetupEntered => "SetupEntered",
            BootProgress::OSBootStarted => "OSBootStarted",
            BootProgress::OSRunning => "OSRunning",
            BootProgress::OEM => "OEM",
        })
    }
}

impl fmt::Display for PowerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PowerState::On => "On",
            PowerState::Off => "Off",
            PowerState::PoweringOn => "PoweringOn",
            PowerState::PoweringOff => "PoweringOff",
            PowerState::Paused => "Paused",
        })
    }
}

/// What a state is about: the condition a wait waits for, the call a trigger issues.
pub fn purpose(state: State) -> String {
    let def = state.def();
    match def.kind {
        Kind::Wait => {
            let wanted: Vec<&str> = def
                .edges
                .iter()
                .filter(|e| e.group == Group::Flow && Some(e.to) != def.fallback)
                .filter_map(|e| e.reason)
                .collect();
            match wanted.first() {
                Some(first) => format!("waiting for: {first}"),
                None => format!("waiting ({})", def.label),
            }
        }
        Kind::Trigger => format!("issuing {}", def.label),
        Kind::Decision => format!("reading the BMC for {}", def.label),
        Kind::Terminal => def.label.to_owned(),
    }
}

/// What the BMC and the database showed, in words.
pub fn seen(facts: &Facts) -> String {
    let mut parts = vec![match facts.power {
        Some(p) => format!("power {p}"),
        None => "power state unreadable".to_owned(),
    }];
    if let Some(b) = facts.boot_progress {
        parts.push(format!("boot progress {b}"));
    }
    if let Some(t) = facts.last_reset_time {
        parts.push(format!("last reset {}", t.format("%Y-%m-%dT%H:%M:%SZ")));
    }
    // The image URL can carry the media's access secret: only whether something is inserted is said.
    parts.push(
        match &facts.media {
            Some(slot) if slot.inserted => "media inserted",
            Some(_) => "no media inserted",
            None => "virtual media unreadable",
        }
        .to_owned(),
    );
    parts.push(
        if facts.registered {
            "registered"
        } else {
            "not registered"
        }
        .to_owned(),
    );
    if let Some(why) = &facts.registration_refused {
        parts.push(format!("registration refused: {why}"));
    }
    parts.join(", ")
}

/// The sentence of a failed deployment: server, state, what it was about, why it ended and what was seen last.
/// `facts` are the last observed; without them the sentence says so.
pub fn failure_sentence(server: &str, m: &Machine, facts: Option<&Facts>) -> String {
    let Some(failure) = &m.failure else {
        return format!(
            "server {server}: deployment in {} has not failed",
            m.state.def().label
        );
    };
    let state = failure.state;
    // The failure's own error is the cause; the last error only where the cause is a refused or exhausted call
    // (an earlier error that was retried away says nothing about this end).
    let detail = failure.error.clone().or_else(|| match failure.cause {
        Cause::RetriesExhausted | Cause::NonRetryable => m.last_error.clone(),
        _ => None,
    });
    let seen = facts.map_or_else(|| "nothing observed yet".to_owned(), seen);
    match detail {
        Some(detail) => format!(
            "server {server}: deployment failed in {} ({state}), {}: {}: {detail}. Last seen: {seen}.",
            state.def().label,
            purpose(state),
            failure.cause
        ),
        None => format!(
            "server {server}: deployment failed in {} ({state}), {}: {}. Last seen: {seen}.",
            state.def().label,
            purpose(state),
            failure.cause
        ),
    }
}

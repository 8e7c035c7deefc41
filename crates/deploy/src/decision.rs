//! What the decision function hands back to a worker.

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::facts::AttrValue;
use crate::record::Machine;
use crate::secure_boot::Enrollment;
use crate::table::State;

/// A BMC (or media server) side effect, stated as desired state so it is safe to re-issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Collect the BMC data (system, BIOS, virtual media, secure boot).
    RefreshBmcData,
    /// Ensure powered off, with `ForceOff`: a server in POST or in the installer ignores ACPI.
    PowerOff,
    /// Ensure powered on.
    PowerOn,
    /// Stage these attributes (only those not staged already).
    ApplyBios {
        deferred: bool,
        attributes: Vec<(String, AttrValue)>,
    },
    /// Rewrite the key databases that are not correct; the others are absent from it.
    EnrollSecureBoot { enrollment: Enrollment },
    /// Eject whatever an earlier run left in the selected device.
    ClearMedia,
    /// Insert the installation media and point the next boot at it.
    AttachMedia { image_url: String },
    /// Eject the media and take the boot override back.
    DetachMedia,
    /// Drop media progress and leave the server as installed.
    Cleanup,
    /// Eject the media and cut the power, then drop media progress.
    CancelCleanup,
}

/// Why a transition happened or a deployment ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cause {
    ActionSucceeded,
    ConditionMet,
    /// A check or verification branched on the attribute values.
    BiosChecked,
    /// The BMC has no Bios resource: passed by when no attribute is planned, a failure when one is.
    BiosAbsent,
    BiosNotApplied,
    CertificatesCorrect,
    NothingToStage,
    SecureBootSkipped,
    Registered,
    RebootDetected,
    MediaReadOut,
    ObservationWindowPassed,
    /// The boot after install stage 1 reached the OS boot with the media still in: the installer ran again.
    InstallerBootedAgain,
    /// Powered on and not registered a grace after the eject.
    NoRegistrationAfterEject,
    SettleDurationPassed,
    WaitTimeout,
    RetriesExhausted,
    NonRetryable,
    BiosFallbacksExhausted,
    DeploymentTimeout,
    CancelRequested,
    CancelSkipCleanup,
}

/// Where and why a deployment failed; kept on the record for the dead-letter triage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub state: State,
    pub cause: Cause,
    pub error: Option<String>,
}

/// A state change, for logging and for the edge checks of the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub from: State,
    pub to: State,
    pub cause: Cause,
}

/// The end a deployment reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Terminal {
    Completed,
    Failed,
    Canceled,
}

/// What the worker must do next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// Issue `action` with this call deadline, then report the outcome through [`crate::apply_outcome`].
    Act { action: Action, call_deadline_secs: u64 },
    /// The machine moved on: persist it and decide again at once (run until blocked).
    Continue,
    /// Nothing to do before `until`; re-evaluate then (or on an event).
    Snooze { until: Time },
    /// A trigger is in backoff; attempt it again at `at`.
    Retry { at: Time },
    /// The deployment is over.
    Finished(Terminal),
}

/// One decision plus the machine to persist (in one fenced write) before acting on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub machine: Machine,
    /// Whether `machine` differs from the input; nothing needs writing otherwise.
    pub changed: bool,
    pub transition: Option<Transition>,
    pub decision: Decision,
}

/// How an issued action ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Succeeded,
    /// Succeeded as a task (`202 Accepted` + `Location`): the BMC took the request and runs it
    /// in the background. The monitor URI is kept for the wait that follows as a hint only: it
    /// 404s once consumed or after a BMC reset, so the wait never depends on it.
    Accepted {
        task_monitor: String,
    },
    /// Transport errors, 5xx, 409 busy: worth another attempt.
    Retryable {
        error: String,
    },
    /// Rejected values, unsupported actions: another attempt would fail the same way.
    Fatal {
        error: String,
    },
    /// The call deadline ran out; the outcome is unknown, so the action is issued again.
    DeadlineExpired,
}

impl Outcome {
    /// Whether the action did what it was asked, with or without a task monitor.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Succeeded | Outcome::Accepted { .. })
    }
}

/// Fraction of the backoff cap actually waited, drawn by the caller (full jitter: uniform in
/// `[0, 1]`). Keeping the randomness outside keeps decisions reproducible. Not serde: it is
/// drawn per call, never stored, and a deserialised value would bypass the clamp.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Jitter(f64);

impl Jitter {
    /// Wait the whole cap.
    pub const NONE: Jitter = Jitter(1.0);

    /// Clamps to `[0, 1]`; NaN waits the whole cap.
    pub fn new(fraction: f64) -> Self {
        if fraction.is_nan() {
            Self::NONE
        } else {
            Jitter(fraction.clamp(0.0, 1.0))
        }
    }

    pub fn fraction(self) -> f64 {
        self.0
    }
}

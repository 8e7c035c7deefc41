//! The persisted deployment: an immutable plan and the mutable machine state.
//!
//! They are split because they change at different rates: the plan is snapshotted once when
//! the deployment is requested (so a later catalog change cannot alter a running deployment),
//! while the machine changes on every decision and is what a worker writes back, fenced.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::decision::Failure;
use crate::eject::EjectRace;
use crate::facts::{AttrValue, Fingerprint, KeyDb};
use crate::profile_match::ServerFacts;
use crate::reboot::RebootWatch;
use crate::table::State;

/// BIOS attributes resolved from the matching profiles at request time.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BiosPlan {
    pub attributes: BTreeMap<String, AttrValue>,
    /// Attributes whose prerequisite must be in effect first; applied in a second pass.
    pub deferred_attributes: BTreeMap<String, AttrValue>,
}

/// What the key databases must hold. Built by [`SecureBootPlan::new`] from a certificate set; the
/// fields stay plain data because a stored snapshot is whatever the database holds, and an
/// enrolment takes them only through [`SecureBootPlan::incusos_keys`], which refuses an empty
/// PK, KEK or db.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SecureBootPlan {
    /// Fingerprints of the IncusOS certificates each database must contain; dbx has none today.
    pub incusos: BTreeMap<KeyDb, BTreeSet<Fingerprint>>,
    /// Entries allowed to stay, already layered (see [`crate::secure_boot::layer_allow_lists`]).
    pub allow: BTreeMap<KeyDb, BTreeSet<Fingerprint>>,
}

/// What the deployment request resolved to; never changes afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Plan {
    /// The installation media URL handed to the BMC.
    pub image_url: String,
    pub image_size_bytes: Option<u64>,
    /// The token seed lacks `force_reboot`: only the media read progress can end install stage 1.
    pub force: bool,
    pub skip_secure_boot_certificates: bool,
    /// Names of the BIOS profiles `bios` and `secure_boot` were resolved from, in the order they
    /// were layered (lowest priority first, so a later one wins an attribute both set). The
    /// snapshot alone cannot say where a value came from once the catalog has changed; empty on
    /// plans stored before the names were recorded.
    pub bios_profiles: Vec<String>,
    /// What the profiles were matched on; all unknown on plans stored before the facts were recorded.
    pub bios_matched_on: ServerFacts,
    /// The request said the server needs no BIOS settings, so no matching profile was required.
    pub no_bios_settings: bool,
    pub bios: BiosPlan,
    pub secure_boot: SecureBootPlan,
    /// The seed sets `force_install` over an installation racklift has seen register: IncusOS, finding the very
    /// version it boots from installed, wipes it and reboots before it installs (`internal/install/install.go`,
    /// the same-version check), so the first reboot after the installer ran may not end stage 1.
    pub reinstall: bool,
}

/// Which BIOS passes still have something to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BiosPending {
    pub first: bool,
    /// Only an estimate until the first pass's verification overwrites it: a deferred attribute
    /// is published only once the attribute it depends on is in effect.
    pub deferred: bool,
}

/// The mutable part of a deployment, written back by the worker after every decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub state: State,
    /// Transition counter; the live job's idempotency key is `deployment/<id>/<seq>`.
    pub seq: u64,
    /// Failures counted against the current step's budget; reset when a wait is met.
    pub retries: u32,
    /// BIOS rounds sent back to a power off, shared by both passes and never reset.
    pub bios_fallbacks: u32,
    pub started_at: Time,
    pub state_entered_at: Time,
    /// A trigger in backoff is not attempted again before this.
    pub retry_at: Option<Time>,
    /// The first error is usually the one that describes the actual problem.
    pub first_error: Option<String>,
    pub last_error: Option<String>,
    pub failure: Option<Failure>,
    pub finished_at: Option<Time>,
    pub bios: BiosPending,
    /// Task monitor the BMC handed out for the BIOS apply of the current pass. Persisted so the
    /// wait can poll it after a worker restart, but only a hint: it 404s once consumed or after a
    /// BMC reset, and then the wait falls back to its settle delay. It follows its apply through
    /// the power on into the wait and is dropped on every other transition, so a monitor of an
    /// earlier round never speaks for a later one.
    #[serde(default)]
    pub bios_task_monitor: Option<String>,
    /// Set before the enrolment is issued, so a crash after a partial write still gets the settle boot.
    pub secure_boot_written: bool,
    /// Reboot snapshot of the install wait, carried into the reboot wait.
    pub install_watch: Option<RebootWatch>,
    /// Reboot snapshot of the secure boot settle boot.
    pub settle_watch: Option<RebootWatch>,
    /// The boot after install stage 1 and the eject that had to beat it; set when a reboot ended stage 1.
    #[serde(default)]
    pub eject: Option<EjectRace>,
    /// A reinstall's first installer reboot was taken for IncusOS wiping the same version (see
    /// [`Plan::reinstall`]); the next one ends stage 1.
    #[serde(default)]
    pub wipe_reboot_seen: bool,
}

impl Machine {
    /// A deployment just triggered.
    pub fn new(now: Time) -> Self {
        Self {
            state: State::RefreshBMCData,
            seq: 0,
            retries: 0,
            bios_fallbacks: 0,
            started_at: now,
            state_entered_at: now,
            retry_at: None,
            first_error: None,
            last_error: None,
            failure: None,
            finished_at: None,
            bios: BiosPending::default(),
            bios_task_monitor: None,
            secure_boot_written: false,
            install_watch: None,
            settle_watch: None,
            eject: None,
            wipe_reboot_seen: false,
        }
    }

    pub(crate) fn record_error(&mut self, error: &str) {
        if self.first_error.is_none() {
            self.first_error = Some(error.to_owned());
        }
        self.last_error = Some(error.to_owned());
    }
}

/// A deployment as stored: the plan and the machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployment {
    pub plan: Plan,
    pub machine: Machine,
}

impl Deployment {
    pub fn new(plan: Plan, now: Time) -> Self {
        Self {
            plan,
            machine: Machine::new(now),
        }
    }
}

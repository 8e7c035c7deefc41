//! The installed OS's state in a machine: its phase, what IncusOS keeps across boots, its Incus member state and
//! operations, and its applications.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::register::ClientIdentity;
use crate::seed::SeedFiles;

/// Where the installer / OS is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "phase", content = "detail")]
pub enum OsPhase {
    /// Powered off, or in POST.
    Down,
    /// No bootable device: sits at the end of POST.
    NoBootDevice,
    /// Install stage 1 running from the media.
    Installing,
    /// Stage 1 done, seed without `force_reboot`: waiting for the media to disappear.
    WaitingForEject,
    /// Stage 1 done and the `halt_after_install` fault is set.
    Halted,
    /// The installer booted a second time and found nothing to install.
    InstallerNoTarget,
    /// The installer failed: no seed partition, a seed it cannot read, no matching disk, media unreadable or
    /// removed mid-install.
    InstallFailed(String),
    /// The live image booted without an install seed: it runs from the media and never installs.
    LiveWithoutInstallSeed(String),
    /// The installed OS is booting.
    OsBooting,
    /// The installed OS is running (Incus API up).
    OsRunning,
    /// The installed OS's start-up failed before Incus ran (a seed file it cannot read, a provider it cannot
    /// load, a registration without Incus): the daemon is started again after `Timings::daemon_restart`.
    OsFailed(String),
}

/// The IncusOS side of an installed server.
#[derive(Clone, Debug, Serialize)]
pub struct OsState {
    pub installed: bool,
    pub registered: bool,
    /// The seed the installer left on the disk (without `install.*`), read at every start-up.
    #[serde(skip)]
    pub seed: Option<SeedFiles>,
    /// Its file names, for the truth view.
    pub seed_files: Vec<String>,
    /// The hostname the OS chose at its last start-up.
    pub hostname: Option<String>,
    /// `/etc/machine-id`: 32 hex characters made at the first boot of a fresh install and kept with it
    /// (IncusOS sends it at registration, `internal/state/struct.go:100-112`; its first six characters confirm a
    /// reinstall of the same version, `internal/install/install.go:215-265`).
    pub machine_id: Option<String>,
    /// Set at the end of a successful start-up, until the OS goes down (`cmd/incus-osd/main.go:322-329`).
    pub system_is_ready: bool,
    /// Why the last start-up of the daemon failed (it then exits and systemd starts it again).
    pub startup_error: Option<String>,
    /// The `update-secureboot` files the last start-up check found in its update.
    pub secure_boot_updates: Vec<String>,
    /// The Incus client certificate and key, made at the first boot of the installed OS.
    #[serde(skip)]
    pub identity: Option<ClientIdentity>,
    /// Its certificate (PEM), for the truth view.
    pub client_certificate: Option<String>,
    /// Client certificates Incus trusts (PEM): the one the registration answer carried.
    pub trusted_certificates: Vec<String>,
    /// Why the last registration attempt failed, until one succeeds.
    pub registration_error: Option<String>,
    pub running_version: String,
    pub staged_version: Option<String>,
    /// The update channel (the seed's `update.yaml` `channel`, read at start-up).
    pub channel: String,
    /// What the last update check did, as `GET /os/1.0/system/update` reports it.
    pub update_status: String,
    pub last_check: Option<DateTime<Utc>>,
    /// Where the member is in an evacuation. Incus keeps it in the cluster database, so it survives a reboot.
    pub member: MemberState,
    /// Incus operations (evacuate, restore) this member carried out, by id.
    #[serde(skip)]
    pub operations: BTreeMap<String, IncusOperation>,
    /// The applications the seed's `applications.yaml` installed (`incus` without one), with their versions.
    pub applications: Vec<AppState>,
}

/// A cluster member's evacuation state. Incus records `Evacuated` when an evacuation starts and `Created` (reported
/// `Online`) when a restore starts (`cmd/incusd/api_cluster_evacuation.go`, `evacuateClusterSetState`), so the two
/// transient states here are what the operation is doing, not what the member reports: see [`MemberState::reported`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum MemberState {
    Online,
    /// An evacuation operation is running (reported `Evacuated`).
    Evacuating,
    Evacuated,
    /// A restore operation is running (reported `Online`).
    Restoring,
}

impl MemberState {
    /// The `status` Incus reports for a running member in this state.
    pub fn reported(self) -> &'static str {
        match self {
            MemberState::Online | MemberState::Restoring => "Online",
            MemberState::Evacuating | MemberState::Evacuated => "Evacuated",
        }
    }

    /// Not serving instances because of an evacuation (what the cluster audit counts).
    pub fn in_maintenance(self) -> bool {
        self != MemberState::Online
    }
}

/// `evacuate` or `restore`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberAction {
    Evacuate,
    Restore,
}

/// What an operation ends with when it is not interrupted (decided from the faults when it is created).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planned {
    Succeed,
    Fail,
    /// Stays `Running` until a restore or a reboot of the member ends it.
    Hang,
}

/// One Incus operation: `Running` until it ends (`Success` or `Failure` with `err`).
#[derive(Clone, Debug)]
pub struct IncusOperation {
    pub action: MemberAction,
    /// The member the operation acts on (its hostname).
    pub member: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub planned: Planned,
    /// `None` while running; `Ok` or the failure's text once done.
    pub outcome: Option<Result<(), String>>,
    /// Woken when the operation ends, for `/wait`.
    pub done: Arc<tokio::sync::Notify>,
}

impl IncusOperation {
    /// End the operation (no-op if it has ended already) and wake the waiters.
    pub fn finish(&mut self, outcome: Result<(), String>, now: DateTime<Utc>) {
        if self.outcome.is_none() {
            self.outcome = Some(outcome);
            self.updated_at = now;
            self.done.notify_waiters();
        }
    }
}

/// An installed application and its versions (IncusOS `api.ApplicationState`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AppState {
    pub name: String,
    pub version: String,
    /// Fetched by an update check; applied at the next reboot or restart of the application.
    pub staged_version: Option<String>,
}

impl OsState {
    /// A fresh system on the disk: nothing of an earlier installation survives. `version` is the IncusOS
    /// version the install media carried, when it names one.
    pub fn install_fresh(&mut self, seed: SeedFiles, version: Option<String>) {
        if let Some(version) = version {
            self.running_version = version;
            self.staged_version = None;
        }
        self.installed = true;
        self.registered = false;
        self.seed_files = seed.names().into_iter().map(str::to_owned).collect();
        self.seed = Some(seed);
        self.hostname = None;
        self.machine_id = None;
        self.system_is_ready = false;
        self.startup_error = None;
        self.secure_boot_updates.clear();
        self.identity = None;
        self.client_certificate = None;
        self.trusted_certificates.clear();
        self.registration_error = None;
        self.member = MemberState::Online;
        self.operations.clear();
        self.applications.clear();
    }

    /// The installer wiped the disk (`sgdisk -Z`, the same-version reinstall): nothing is installed any more.
    pub fn wipe(&mut self) {
        self.install_fresh(SeedFiles::default(), None);
        self.installed = false;
        self.seed = None;
        self.seed_files.clear();
    }

    pub fn set_identity(&mut self, identity: ClientIdentity) {
        self.client_certificate = Some(identity.cert_pem.clone());
        self.identity = Some(identity);
    }

    /// The member went down: Incus's operations die with the daemon, and the state recorded in the cluster
    /// database stays (an evacuation in progress had already recorded `Evacuated`, a restore `Online`).
    pub fn interrupted(&mut self, now: DateTime<Utc>) {
        self.system_is_ready = false;
        for op in self.operations.values_mut() {
            op.finish(
                Err("Operation interrupted: the cluster member restarted".to_owned()),
                now,
            );
        }
        self.member = match self.member {
            MemberState::Evacuating | MemberState::Evacuated => MemberState::Evacuated,
            MemberState::Online | MemberState::Restoring => MemberState::Online,
        };
        for app in &mut self.applications {
            if let Some(v) = app.staged_version.take() {
                app.version = v;
            }
        }
    }
}

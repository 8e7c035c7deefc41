//! What `racklift bench chaos` reports: the tally's types, printed as a table by the command and as JSON with
//! `--json`.

use serde::{Deserialize, Serialize};

use super::schedule::{FaultKind, Phase};

/// Everything `racklift bench chaos --json` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChaosReport {
    pub settings: RunSettings,
    /// Per kind: how many the schedule held and how many were injected (the rest came after the work ended).
    pub faults: Vec<FaultTally>,
    pub fault_log: Vec<FaultRecord>,
    pub deployments: DeploymentTally,
    pub late_ejects: Vec<LateEject>,
    pub clusters: ClusterTally,
    pub dead_letters: Vec<DeadLetter>,
    pub mutations: MutationTally,
    pub jobs: JobTally,
    pub recoveries: Vec<Recovery>,
    pub phases: PhaseTimes,
    /// Where the processes' logs are, when they were kept.
    pub logs_dir: Option<String>,
    /// Why racklift did not hold; empty when it did.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSettings {
    pub servers: usize,
    pub workers: usize,
    pub seed: u64,
    pub time_scale: f64,
    pub members: usize,
    pub lease_ttl_ms: u64,
    pub database: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultTally {
    pub kind: FaultKind,
    pub label: String,
    pub planned: usize,
    pub injected: usize,
}

/// One fault as it was injected.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultRecord {
    /// Seconds since the rack was up.
    pub at_secs: f64,
    pub phase: Phase,
    pub kind: FaultKind,
    pub target: String,
    pub detail: String,
}

/// How racklift came back after a process or database fault; `None` where it does not apply or did not happen
/// within the bound.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recovery {
    pub kind: FaultKind,
    pub phase: Phase,
    pub at_secs: f64,
    pub target: String,
    /// The outage: PostgreSQL down, the API killed to started again, a worker stopped or cut off.
    pub down_secs: Option<f64>,
    /// Since it came back: the API answering a request that reads the database.
    pub api_secs: Option<f64>,
    /// Since it came back: PostgreSQL accepting a write.
    pub write_secs: Option<f64>,
    /// Since it came back (or, for a kill, since the replacement started): a worker leasing a job.
    pub lease_secs: Option<f64>,
    /// Since the kill, stop or partition: every job the worker held released to the others.
    pub takeover_secs: Option<f64>,
    pub held_jobs: Option<usize>,
    /// For a partition aimed at a reboot call: at most this long after a member received the call from the worker
    /// it was cut off (the time since the audit read before the one that showed the call).
    pub after_reboot_call_secs: Option<f64>,
}

impl Recovery {
    /// A recovery with nothing measured yet.
    pub(crate) fn of(kind: FaultKind, phase: Phase, at_secs: f64, target: String) -> Recovery {
        Recovery {
            kind,
            phase,
            at_secs,
            target,
            down_secs: None,
            api_secs: None,
            write_secs: None,
            lease_secs: None,
            takeover_secs: None,
            held_jobs: None,
            after_reboot_call_secs: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeploymentTally {
    pub servers: usize,
    pub completed: usize,
    /// Failed on a server given a fault that does not clear itself (none in this mix).
    pub failed_expected: usize,
    pub failed_unexpected: usize,
    pub canceled: usize,
    /// Still running at the phase's bound.
    pub stuck: usize,
    /// Never accepted by the API.
    pub not_started: usize,
    /// Every deployment that did not complete.
    pub not_completed: Vec<ServerOutcome>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerOutcome {
    pub server: String,
    pub state: String,
    /// The deployment's failure or last error, as racklift recorded it.
    pub detail: Option<String>,
    /// Where the simulated machine is, by the simulator's truth.
    pub machine: Option<String>,
    /// The newest events of its deployment, oldest first, on the run's clock (`at_secs` of the fault log).
    pub events: Vec<String>,
}

/// A server given the late eject, and what racklift did about it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LateEject {
    pub server: String,
    pub personality: String,
    /// The installer booted a second time: the eject did land late.
    pub took: bool,
    /// Times the deployment entered `PowerOffMissedEject` (one is the repair).
    pub power_cycles: usize,
    pub state: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClusterTally {
    pub clusters: usize,
    pub members: usize,
    pub completed: usize,
    pub failed: usize,
    pub canceled: usize,
    /// Running or paused at the phase's bound.
    pub stuck: usize,
    pub not_completed: Vec<ClusterOutcome>,
}

#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow)]
pub struct ClusterOutcome {
    pub cluster: String,
    pub status: String,
    pub reason: Option<String>,
    pub failed_server: Option<String>,
    pub failed_step: Option<String>,
}

/// A row of `dead_letters`.
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow)]
pub struct DeadLetter {
    pub job_id: i64,
    pub kind: String,
    pub reason: String,
    pub server: Option<String>,
    pub error_class: Option<String>,
    pub message: Option<String>,
}

/// What the BMCs and Incus APIs saw, from the simulator's audits.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MutationTally {
    pub bmc_mutations: u64,
    /// A mutation carrying a fence older than one the BMC had already accepted.
    pub bmc_stale: usize,
    pub bmc_unfenced: u64,
    /// The most Redfish requests one BMC had in flight at once.
    pub bmc_max_concurrent: u32,
    /// Servers whose BMC saw two requests at once.
    pub bmc_concurrent_servers: Vec<String>,
    /// What was going on when each of those was first seen.
    pub bmc_concurrency: Vec<ConcurrencySeen>,
    pub incus_mutations: u64,
    pub incus_stale: usize,
    pub incus_unfenced: u64,
    /// The most requests one Incus API had in flight at once (reported, not a fault: reads may overlap).
    pub incus_max_concurrent: u32,
    /// The clusters' audits: Incus mutations per member acted on.
    pub cluster_mutations: u64,
    pub cluster_stale: usize,
    pub cluster_unfenced: u64,
    /// The most members of one cluster out for an evacuation at once.
    pub max_evacuated_at_once: u32,
    /// The first few stale mutations, as the simulator recorded them.
    pub stale_examples: Vec<String>,
}

/// A BMC that saw two requests at once, and the run's circumstances then.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConcurrencySeen {
    pub server: String,
    /// When the audit first showed it (polled every second), seconds into the run.
    pub first_seen_secs: Option<f64>,
    /// A worker stopped or cut off from PostgreSQL at that moment (or up to two seconds before), by pid.
    pub during_stop_of: Option<u32>,
    /// The faults injected on the server before then.
    pub faults_before: Vec<String>,
}

/// Whether every job that existed ended completed or dead.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobTally {
    /// Ids drawn from `jobs_id_seq`.
    pub ids_drawn: i64,
    pub completed: i64,
    /// Distinct jobs in `dead_letters`.
    pub dead: i64,
    /// Still in `jobs` at the end.
    pub live: i64,
    /// Ids drawn without a row: inserts that drew an id and wrote nothing (`ON CONFLICT DO NOTHING`, a rolled
    /// back transaction) or ids PostgreSQL skipped after a crash. Not jobs: no job was ever committed with them.
    pub ids_without_row: i64,
    /// Distinct ids seen live during the run (sampled every 200 ms).
    pub observed: usize,
    /// Ids seen live that are neither completed, dead nor live at the end.
    pub lost: Vec<i64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PhaseTimes {
    pub deploy_secs: f64,
    pub deploy_timed_out: bool,
    pub deploy_estimate_secs: f64,
    pub rolling_secs: Option<f64>,
    pub rolling_timed_out: bool,
    pub rolling_estimate_secs: Option<f64>,
    pub total_secs: f64,
}

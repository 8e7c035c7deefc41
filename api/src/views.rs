//! What the API answers: one named type per view, so the OpenAPI document describes exactly what handlers send
//! (the schemas are derived from these types), and no view is assembled from string keys.

use chrono::{DateTime, Utc};
use racklift_store::{BmcAction, DeploymentRecord, ProvisioningToken, Role, Server, ServerStatus, Store};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::ApiError;

/// A server as answered. The password reference is reduced to "set": even a reference tells an attacker where
/// to look.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServerView {
    pub name: String,
    pub bmc_address: String,
    pub bmc_username: String,
    pub bmc_cert_pin: Option<String>,
    pub bmc_insecure: bool,
    pub allow_plain_http: bool,
    pub vendor_hint: Option<String>,
    /// The `Id` of the Redfish ComputerSystem that is this server; null when racklift chooses it.
    #[schema(example = "System.Embedded.1")]
    pub system_id: Option<String>,
    /// `set` when the server has a password reference; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "set")]
    pub bmc_password_ref: Option<&'static str>,
    #[schema(value_type = String, example = "unregistered")]
    pub status: &'static str,
    pub status_detail: String,
    pub registered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl ServerView {
    pub fn of(s: &Server) -> ServerView {
        ServerView {
            name: s.name.clone(),
            bmc_address: s.bmc_address.clone(),
            bmc_username: s.bmc_username.clone(),
            bmc_cert_pin: s.bmc_cert_pin.clone(),
            bmc_insecure: s.bmc_insecure,
            allow_plain_http: s.allow_plain_http,
            vendor_hint: s.vendor_hint.clone(),
            system_id: s.system_id.clone(),
            bmc_password_ref: s.bmc_password_ref.as_ref().map(|_| "set"),
            status: status_name(s.status),
            status_detail: s.status_detail.clone(),
            registered_at: s.registered_at,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

fn status_name(s: ServerStatus) -> &'static str {
    s.as_str()
}

/// A server with its newest deployment.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServerDetail {
    #[serde(flatten)]
    pub server: ServerView,
    pub deployment: Option<DeploymentView>,
}

/// A deployment as answered: the machine's progress plus the media read progress recorded so far.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeploymentView {
    pub id: i64,
    pub server: String,
    /// The deployment state machine's state (spec 000).
    #[schema(example = "WaitInstall")]
    pub state: String,
    pub attempts: u32,
    pub started_at: DateTime<Utc>,
    pub state_entered_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub first_error: Option<String>,
    pub last_error: Option<String>,
    /// Bytes of the image the busiest reader has read.
    pub media_bytes_read: Option<u64>,
    pub media_last_read_at: Option<DateTime<Utc>>,
    pub media_size: Option<u64>,
    /// The virtual media device chosen (as the BMC names it).
    pub media_slot: Option<Value>,
    pub image_id: i64,
    /// The provisioning token the server registers with: shown to operators and admins, `null` to viewers.
    pub token: Option<Uuid>,
    pub seed: String,
    pub force: bool,
    /// Which catalog entries the snapshotted BIOS plan came from; they may have changed since.
    pub bios_profiles: Vec<String>,
    /// What the profiles were matched on: the server's record and its BMC's reports at pre-flight (all unknown
    /// on deployments requested before they were recorded).
    pub bios_matched_on: racklift_deploy::profile_match::ServerFacts,
    /// The request said the server needs no BIOS settings.
    pub no_bios_settings: bool,
    pub cancel: Option<Value>,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    /// Why it failed, once it has.
    pub failure: Option<FailureView>,
}

/// A failed deployment's end: where and why, for machines, and a sentence for people.
#[derive(Debug, Serialize, ToSchema)]
pub struct FailureView {
    /// The state it failed in.
    #[schema(example = "WaitRegistration")]
    pub state: String,
    /// The machine-readable cause.
    #[schema(example = "WaitTimeout")]
    pub cause: String,
    /// The server, the state, what it waited for, why it ended and what the BMC showed last.
    pub reason: String,
}

impl DeploymentView {
    /// The view of `d` as `role` may see it.
    pub async fn of(store: &Store, d: &DeploymentRecord, role: Role) -> Result<DeploymentView, ApiError> {
        let m = &d.deployment.machine;
        let (readers, last_read_at) = store.media_progress(d.id).await?;
        // The API does not know which address the BMC reads from; the largest reader is the useful number.
        let media_bytes_read = readers.values().map(|r| r.total()).max();
        Ok(DeploymentView {
            id: d.id,
            server: d.server.clone(),
            state: m.state.name().to_owned(),
            attempts: m.retries,
            started_at: m.started_at,
            state_entered_at: m.state_entered_at,
            finished_at: d.finished_at,
            first_error: m.first_error.clone(),
            last_error: m.last_error.clone(),
            media_bytes_read,
            media_last_read_at: last_read_at,
            media_size: d.deployment.plan.image_size_bytes,
            media_slot: d.media_slot.clone(),
            image_id: d.image_id,
            token: (role >= Role::Operator).then_some(d.token),
            seed: d.seed.clone(),
            force: d.deployment.plan.force,
            bios_profiles: d.deployment.plan.bios_profiles.clone(),
            bios_matched_on: d.deployment.plan.bios_matched_on.clone(),
            no_bios_settings: d.deployment.plan.no_bios_settings,
            cancel: d.cancel.clone(),
            requested_by: d.requested_by.clone(),
            created_at: d.created_at,
            failure: m.failure.as_ref().map(|f| {
                let last: Option<racklift_deploy::Facts> =
                    d.last_facts.clone().and_then(|v| serde_json::from_value(v).ok());
                FailureView {
                    state: f.state.name().to_owned(),
                    cause: f.cause.name().to_owned(),
                    reason: racklift_deploy::explain::failure_sentence(&d.server, m, last.as_ref()),
                }
            }),
        })
    }
}

/// A provisioning token as listed: its value is a credential, so viewers see that it exists, not what it is.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenView {
    /// The token itself; `null` for viewers.
    pub token: Option<Uuid>,
    pub description: String,
    pub uses_remaining: i32,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

impl TokenView {
    pub fn of(t: &ProvisioningToken, role: Role) -> TokenView {
        TokenView {
            token: (role >= Role::Operator).then_some(t.token),
            description: t.description.clone(),
            uses_remaining: t.uses_remaining,
            expires_at: t.expires_at,
            created_at: t.created_at,
        }
    }
}

/// The public address media URLs are built from.
#[derive(Debug, Serialize, ToSchema)]
pub struct PublicAddressView {
    /// `null` until set.
    #[schema(example = "https://racklift.example.net:8080")]
    pub address: Option<String>,
}

/// An ad-hoc BMC action accepted (202) or found again under its idempotency key (200).
#[derive(Debug, Serialize, ToSchema)]
pub struct BmcActionAccepted {
    pub job_id: i64,
    pub server: String,
    #[schema(value_type = Object)]
    pub action: BmcAction,
}

/// A cluster as answered, with its operation in progress or, when none is, its last one. `Deserialize` too, so
/// a client can decode the answers into this very type.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClusterView {
    pub name: String,
    /// In the order rolling operations take them.
    pub servers: Vec<String>,
    pub post_restore_delay_secs: Option<u64>,
    pub restore_mode: racklift_store::RestoreMode,
    pub created_at: DateTime<Utc>,
    pub operation: Option<ClusterOperationView>,
}

impl ClusterView {
    pub fn of(
        cluster: racklift_store::Cluster,
        op: Option<&racklift_store::ClusterOperation>,
    ) -> ClusterView {
        ClusterView {
            name: cluster.name,
            servers: cluster.members,
            post_restore_delay_secs: cluster.post_restore_delay_secs,
            restore_mode: cluster.restore_mode,
            created_at: cluster.created_at,
            operation: op.map(ClusterOperationView::of),
        }
    }
}

/// A cluster-wide operation: where it stands, `[k/N]`, and what the run decided about each server.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClusterOperationView {
    pub id: i64,
    /// `rolling_update` or `rolling_reboot`.
    #[schema(example = "rolling_reboot")]
    pub operation: String,
    pub status: racklift_store::OperationStatus,
    /// `update` (staging) or `restart` (one server at a time).
    #[schema(example = "restart")]
    pub phase: String,
    /// Servers done, of all: `[k/N]`.
    #[schema(example = "[2/5]")]
    pub progress: String,
    pub done: usize,
    pub total: usize,
    /// What the operation is doing, as an operator reads it: `[3/5] Evacuating server s3`.
    pub status_description: String,
    pub current_server: Option<String>,
    pub current_step: Option<String>,
    /// Servers that still owe a reboot.
    pub pending_reboot: Vec<String>,
    /// Why the operation paused, failed or was canceled.
    pub status_reason: Option<String>,
    pub failed_server: Option<String>,
    pub failed_step: Option<String>,
    pub first_error: Option<String>,
    pub last_error: Option<String>,
    pub os_only: bool,
    pub applications: Vec<String>,
    pub cancel_requested: bool,
    pub pause_requested: bool,
    /// When members may be started: not before a time, inside a daily window.
    pub schedule: racklift_deploy::rolling_window::Schedule,
    /// Set while the schedule holds the next member back: when it may start.
    pub next_start: Option<DateTime<Utc>>,
    pub servers: Vec<ClusterServerView>,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// One server's record in a run (spec 001's per-server update record).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClusterServerView {
    pub name: String,
    pub step: Option<String>,
    pub step_triggered_at: Option<DateTime<Utc>>,
    /// Attempts of the current step, the first included.
    pub attempts: u32,
    pub reboot_pending: bool,
    /// Evacuated before the run, and left so.
    pub kept_evacuated: bool,
    pub done: bool,
    /// Skipped by an operator's retry: done without a restart, its reboot still owed. Absent from the answers
    /// of racklift versions before it, which had no skip.
    #[serde(default)]
    pub skipped: bool,
    pub first_error: Option<String>,
    pub last_error: Option<String>,
}

impl ClusterOperationView {
    pub fn of(op: &racklift_store::ClusterOperation) -> ClusterOperationView {
        use racklift_deploy::rolling_run::{Phase, RunKind, step_name};
        let run = &op.run;
        let (done, total) = run.progress();
        let current = if op.status.is_live() { run.current() } else { None };
        let step = current.and_then(|s| s.update.step).map(step_name);
        let next_start = if op.status.is_live() && !run.canceling {
            run.schedule.next_start(Utc::now())
        } else {
            None
        };
        let status_description = match (op.status, current) {
            (racklift_store::OperationStatus::Running, Some(s))
                if s.update.step.is_none() && next_start.is_some() =>
            {
                let at = next_start.map(|t| t.to_rfc3339()).unwrap_or_default();
                format!(
                    "[{}/{total}] Waiting for the maintenance window to start server {} at {at}",
                    done + 1,
                    s.name
                )
            }
            (racklift_store::OperationStatus::Running, Some(s)) => {
                let doing = match (run.phase, step) {
                    (Phase::Update, _) => "Updating servers".to_owned(),
                    (_, Some("evacuate")) => format!("Evacuating server {}", s.name),
                    (_, Some("reboot")) => format!("Rebooting server {}", s.name),
                    (_, Some("restore")) => format!("Restoring server {}", s.name),
                    _ => format!("Next: server {}", s.name),
                };
                format!("[{}/{total}] {doing}", done + 1)
            }
            (status, _) => format!(
                "[{done}/{total}] {}{}",
                status.as_str(),
                op.status_reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
        };
        let errors = |pick: fn(&racklift_deploy::rolling::ServerUpdate) -> &Option<String>| {
            run.servers.iter().find_map(|s| pick(&s.update).clone())
        };
        let (os_only, applications) = match &run.kind {
            RunKind::Update {
                os_only,
                applications,
            } => (*os_only, applications.clone()),
            RunKind::Reboot => (false, Vec::new()),
        };
        ClusterOperationView {
            id: op.id,
            operation: run.kind.operation().to_owned(),
            status: op.status,
            phase: match run.phase {
                Phase::Update => "update",
                Phase::Restart => "restart",
            }
            .to_owned(),
            progress: format!("[{done}/{total}]"),
            done,
            total,
            status_description,
            current_server: current.map(|s| s.name.clone()),
            current_step: step.map(str::to_owned),
            pending_reboot: run.pending_reboot().into_iter().map(str::to_owned).collect(),
            status_reason: op.status_reason.clone(),
            failed_server: op.failed_server.clone(),
            failed_step: op.failed_step.clone(),
            first_error: errors(|u| &u.first_error),
            last_error: run.servers.iter().rev().find_map(|s| s.update.last_error.clone()),
            os_only,
            applications,
            cancel_requested: op.cancel_requested,
            pause_requested: op.pause_requested,
            schedule: run.schedule.clone(),
            next_start,
            servers: run
                .servers
                .iter()
                .map(|s| ClusterServerView {
                    name: s.name.clone(),
                    step: s.update.step.map(|st| step_name(st).to_owned()),
                    step_triggered_at: s.update.step_triggered_at,
                    attempts: if s.update.step.is_some() {
                        s.update.retries + 1
                    } else {
                        0
                    },
                    reboot_pending: s.update.reboot_pending,
                    kept_evacuated: s.update.keep_evacuated,
                    done: s.done,
                    skipped: s.skipped,
                    first_error: s.update.first_error.clone(),
                    last_error: s.update.last_error.clone(),
                })
                .collect(),
            requested_by: op.requested_by.clone(),
            created_at: op.created_at,
            updated_at: op.updated_at,
            finished_at: op.finished_at,
        }
    }
}

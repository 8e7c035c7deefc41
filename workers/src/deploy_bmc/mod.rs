//! The BMC half of a deployment step: fresh facts in, one action out.
//!
//! `racklift-deploy` decides from [`Facts`] and hands back an [`Action`]; this module is the
//! only place where those meet a real BMC. It stays free of the database and the queue so the
//! deployment handler can wrap it in leases and fenced writes, and so it can be tested against
//! the simulator alone.
//!
//! Two rules shape it. A read that fails leaves its fact unknown (never "off", never "empty"),
//! because an unknown fact keeps a wait waiting while a wrong one could end it early. And every
//! failure is reported as an [`Outcome`] the state machine understands, with a message that
//! names the action and the cause, so a dead letter explains itself without the logs.

mod keys;

use keys::{enroll, entries};
pub use racklift_deploy::certificates::fingerprint_pem;
use std::collections::{BTreeMap, BTreeSet};
use std::error::Error as _;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use racklift_deploy::certificates::CertificateSet;
use racklift_deploy::facts::{AttrValue, BiosFacts, Fingerprint, KeyDb, MediaSlot, PowerState, TaskState};
use racklift_deploy::secure_boot::DbPlan;
use racklift_deploy::{Action, Facts, Machine, Outcome, State};
use racklift_redfish::{
    BmcClient, BootSourceOverrideTarget, ErrorClass, KeyDatabase, SlotRef, TaskMonitor, TaskPoll,
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Which of the slower reads an observation needs. BIOS and key databases take several
/// requests each, and most states never look at them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Want {
    pub bios: bool,
    pub secure_boot: bool,
    /// The task monitor of the BIOS apply being waited for, to fill [`Facts::bios_task`].
    pub bios_task: Option<String>,
}

impl Want {
    /// Every read; for a state the caller cannot classify. No task monitor: only the persisted
    /// machine knows one ([`want_for_machine`]).
    pub const ALL: Want = Want {
        bios: true,
        secure_boot: true,
        bios_task: None,
    };
}

/// The reads the machine's state may branch on, plus the BIOS apply's task monitor in the
/// BIOS waits: the one fact the state alone cannot name, since the monitor URI lives on the
/// persisted machine.
pub fn want_for_machine(machine: &Machine) -> Want {
    let waiting = matches!(
        machine.state,
        State::WaitBIOSApplied | State::WaitBIOSAppliedDeferred
    );
    Want {
        bios_task: machine.bios_task_monitor.clone().filter(|_| waiting),
        ..want_for(machine.state)
    }
}

/// The reads `state` may branch on. Generous on purpose: reading too much only costs time,
/// reading too little makes a decision state count a spurious failure.
pub fn want_for(state: State) -> Want {
    use State as S;
    let bios = matches!(
        state,
        S::RefreshBMCData
            | S::CheckBIOS
            | S::PowerOffBIOS
            | S::WaitPowerOffBIOS
            | S::ApplyBIOS
            | S::PowerOnBIOS
            | S::WaitBIOSApplied
            | S::VerifyBIOS
            | S::PowerOffBIOSDeferred
            | S::WaitPowerOffBIOSDeferred
            | S::ApplyBIOSDeferred
            | S::PowerOnBIOSDeferred
            | S::WaitBIOSAppliedDeferred
            | S::VerifyBIOSDeferred
    );
    let secure_boot = matches!(
        state,
        S::RefreshBMCData
            | S::VerifyBIOSDeferred
            | S::PowerOffSecureBoot
            | S::WaitPowerOffSecureBoot
            | S::SecureBoot
    );
    Want {
        bios,
        secure_boot,
        bios_task: None,
    }
}

/// One observation of a BMC.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    /// `registered`, `media_progress` and `cancel` are left default: they come from the database.
    pub facts: Facts,
    /// The slot `facts.media` describes: the one passed in, or the one just selected (which the
    /// caller persists, so later steps keep using the same device). `None` when none could be
    /// selected.
    pub slot: Option<SlotRef>,
    /// One line per failed read, naming the read and the cause.
    pub errors: Vec<String>,
}

/// Reads fresh facts from the BMC. Never fails as a whole: each failed read is left unknown
/// and listed in [`Observed::errors`].
pub async fn observe(client: &BmcClient, slot: Option<&SlotRef>, want: &Want) -> Observed {
    let started = Instant::now();
    let mut out = Observed::default();
    let note = |what: &str, e: &racklift_redfish::Error, errors: &mut Vec<String>| {
        let cause = describe(e);
        tracing::warn!(
            server = client.server(),
            bmc_status = e.status(),
            class = e.class().as_str(),
            "{what} failed: {cause}"
        );
        errors.push(format!("{what}: {cause}"));
    };

    match client.read_system().await {
        Ok(system) => {
            out.facts.power = system.power_state.as_ref().and_then(|p| same_name(p.as_str()));
            let boot = boot_of(&system);
            out.facts.last_reset_time = boot.last_reset_time;
            out.facts.boot_progress = boot.boot_progress;
            out.facts.boot_progress_at = boot.boot_progress_at;
        }
        Err(e) => note("read system", &e, &mut out.errors),
    }

    // A monitor gives its final answer once and 404s after that, and the wait needs the power on
    // as well as the task done: polled with the power off (or unknown), the one answer that
    // ends the wait could be spent on an observation that cannot use it.
    if let Some(uri) = &want.bios_task
        && out.facts.power == Some(PowerState::On)
    {
        out.facts.bios_task = match client.poll_task(&TaskMonitor::from_uri(uri.as_str())).await {
            Ok(TaskPoll::Running { .. }) => Some(TaskState::Running),
            Ok(TaskPoll::Done { .. }) => Some(TaskState::Completed),
            Ok(TaskPoll::Gone) => Some(TaskState::Unavailable),
            // Not a failed read: the task ended badly, and verification says what stuck.
            Err(e @ racklift_redfish::Error::TaskFailed { .. }) => {
                tracing::warn!(
                    server = client.server(),
                    "BIOS apply task failed: {}",
                    describe(&e)
                );
                Some(TaskState::Failed)
            }
            Err(e) => {
                note("poll BIOS task monitor", &e, &mut out.errors);
                None
            }
        };
    }

    out.slot = match slot {
        Some(slot) => Some(slot.clone()),
        None => match client.select_cd_slot().await {
            Ok(found) => Some(found.slot),
            Err(e) => {
                note("select virtual media slot", &e, &mut out.errors);
                None
            }
        },
    };
    if let Some(slot) = &out.slot {
        match client.read_media(slot).await {
            Ok(media) => {
                out.facts.media = Some(MediaSlot {
                    inserted: media.has_media(),
                    image: media.image.clone().filter(|i| !i.trim().is_empty()),
                    transfer_method: media.transfer_method.as_ref().and_then(|t| same_name(t.as_str())),
                });
            }
            Err(e) => note(&format!("read virtual media {slot}"), &e, &mut out.errors),
        }
    }

    if want.bios {
        // Both halves or neither: without the pending values a verification could not tell
        // "staged, waiting for the reset" from "never staged".
        match client.read_bios().await {
            Ok(bios) => match client.pending_bios_attributes().await {
                Ok(pending) => {
                    out.facts.bios = Some(BiosFacts {
                        current: attributes(&bios.attributes),
                        pending: attributes(&pending),
                    });
                }
                Err(e) => note("read pending BIOS attributes", &e, &mut out.errors),
            },
            // No Bios resource at all: a fact, not a failed read.
            Err(e) if e.class() == ErrorClass::Unsupported => out.facts.bios_absent = true,
            Err(e) => note("read BIOS attributes", &e, &mut out.errors),
        }
    }

    if want.secure_boot {
        match client.read_key_databases().await {
            Ok(dbs) => {
                for db in &dbs {
                    if let Some(id) = same_name::<KeyDb>(&db.database_id) {
                        out.facts
                            .key_dbs
                            .insert(id, entries(db).into_iter().map(|(fp, _)| fp).collect());
                    }
                }
            }
            Err(e) => note("read key databases", &e, &mut out.errors),
        }
    }

    tracing::debug!(
        server = client.server(),
        duration_ms = started.elapsed().as_millis() as u64,
        failed_reads = out.errors.len(),
        "observed BMC"
    );
    out
}

/// What an action needs besides the BMC. No `Default`: an enrolment needs the certificates to
/// put back, and an empty set of them cannot exist.
#[derive(Debug, Clone)]
pub struct ActContext {
    /// The PEMs a secure boot enrolment may add, found by [`fingerprint_pem`] (the plan only
    /// carries fingerprints): the shipped IncusOS set in production.
    pub certificates: Arc<CertificateSet>,
    /// Bound on the whole action (it may take several BMC calls, each with the client's own
    /// deadline); the decision's `call_deadline_secs`. `None`: only the per-call deadlines.
    pub deadline: Option<Duration>,
    /// The boot override that boots the media from its slot, chosen with the slot at pre-flight
    /// (`racklift_redfish::choose_slot`): `Cd` for a CD image in a CD/DVD slot, `Usb` for a disk
    /// image in a USBStick slot.
    pub boot_target: BootSourceOverrideTarget,
}

impl ActContext {
    /// Enrols from `certificates`; no deadline but the per-call ones; boots the media as a CD.
    pub fn new(certificates: Arc<CertificateSet>) -> ActContext {
        ActContext {
            certificates,
            deadline: None,
            boot_target: BootSourceOverrideTarget::Cd,
        }
    }

    /// The boot target a deployment recorded (`Cd`, `Usb`); a deployment made before targets were recorded,
    /// or an unknown value, boots `Cd`, as every deployment did then.
    pub fn boot_target_of(recorded: Option<&str>) -> BootSourceOverrideTarget {
        match recorded.map(BootSourceOverrideTarget::from) {
            Some(t @ (BootSourceOverrideTarget::Cd | BootSourceOverrideTarget::Usb)) => t,
            _ => BootSourceOverrideTarget::Cd,
        }
    }
}

/// A failed BMC action, as a dead letter and a dashboard show it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BmcFailure {
    /// [`ErrorClass::as_str`], or `client` for a mistake on our side (a missing certificate).
    pub class: String,
    pub status: Option<u16>,
    pub message_id: Option<String>,
    /// Names the action and the cause; never credentials.
    pub message: String,
}

/// How an action ended: the outcome for `apply_outcome`, and the failure for the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acted {
    pub outcome: Outcome,
    pub error: Option<BmcFailure>,
}

/// Executes one action against the BMC. `client` must carry the lease's fence: every mutation
/// is refused without one.
pub async fn act(client: &BmcClient, slot: &SlotRef, action: &Action, ctx: &ActContext) -> Acted {
    let started = Instant::now();
    let name = action_name(action);
    let run = execute(client, slot, action, ctx);
    let result = match ctx.deadline {
        Some(deadline) => tokio::time::timeout(deadline, run)
            .await
            .unwrap_or(Err(StepError::ActionDeadline(deadline))),
        None => run.await,
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let err = match result {
        Ok(Done { detail, task_monitor }) => {
            tracing::info!(
                server = client.server(),
                action = name,
                duration_ms,
                "BMC action done: {detail}"
            );
            let outcome = match task_monitor {
                Some(task_monitor) => Outcome::Accepted { task_monitor },
                None => Outcome::Succeeded,
            };
            return Acted { outcome, error: None };
        }
        Err(err) => err,
    };
    let failure = err.failure(name);
    let outcome = if failure.class == ErrorClass::Deadline.as_str() {
        Outcome::DeadlineExpired
    } else if err.is_retryable() {
        Outcome::Retryable {
            error: failure.message.clone(),
        }
    } else {
        Outcome::Fatal {
            error: failure.message.clone(),
        }
    };
    tracing::warn!(
        server = client.server(),
        action = name,
        duration_ms,
        bmc_status = failure.status,
        class = failure.class.as_str(),
        message_id = failure.message_id.as_deref(),
        "BMC action failed: {}",
        failure.message
    );
    Acted {
        outcome,
        error: Some(failure),
    }
}

#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error("{}", describe(.0))]
    Redfish(#[from] racklift_redfish::Error),
    #[error("no PEM supplied for certificate {} to enroll into {db:?}", .fingerprint.0)]
    MissingCertificate { db: KeyDb, fingerprint: Fingerprint },
    #[error("the BMC does not expose key database {0:?}")]
    NoDatabase(KeyDb),
    #[error("action deadline of {} ms exceeded", .0.as_millis())]
    ActionDeadline(Duration),
}

impl StepError {
    fn is_retryable(&self) -> bool {
        match self {
            Self::Redfish(e) => e.is_retryable(),
            Self::ActionDeadline(_) => true,
            Self::MissingCertificate { .. } | Self::NoDatabase(_) => false,
        }
    }

    fn failure(&self, action: &str) -> BmcFailure {
        let (class, status, message_id) = match self {
            Self::Redfish(e) => (e.class().as_str(), e.status(), e.message_id().map(str::to_owned)),
            Self::MissingCertificate { .. } => (ErrorClass::Client.as_str(), None, None),
            Self::NoDatabase(_) => (ErrorClass::Unsupported.as_str(), None, None),
            Self::ActionDeadline(_) => (ErrorClass::Deadline.as_str(), None, None),
        };
        BmcFailure {
            class: class.to_owned(),
            status,
            message_id,
            message: format!("{action}: {self}"),
        }
    }
}

type Step<T = ()> = Result<T, StepError>;

/// What a successful action did.
struct Done {
    /// For the log line `act` writes.
    detail: String,
    /// The task monitor the BMC answered with, where the state machine waits on it (a BIOS apply).
    task_monitor: Option<String>,
}

impl From<String> for Done {
    fn from(detail: String) -> Self {
        Done {
            detail,
            task_monitor: None,
        }
    }
}

/// Runs the action; on success, says what the BMC did.
async fn execute(client: &BmcClient, slot: &SlotRef, action: &Action, ctx: &ActContext) -> Step<Done> {
    let target = &ctx.boot_target;
    let detail = match action {
        Action::RefreshBmcData => refresh(client, slot).await?,
        Action::PowerOff => format!("{:?}", client.power_off().await?),
        Action::PowerOn => format!("{:?}", client.power_on().await?),
        Action::ApplyBios { attributes, .. } => {
            let body: Map<String, Value> = attributes
                .iter()
                .map(|(k, v)| (k.clone(), attr_json(v)))
                .collect();
            if body.is_empty() {
                return Ok(Done::from("nothing to stage".to_owned()));
            }
            let staged = client.stage_bios_attributes(body).await?;
            let task_monitor = staged.task.map(|t| t.uri);
            return Ok(Done {
                detail: format!(
                    "staged at {} (apply on reset: {}, task: {task_monitor:?})",
                    staged.written_to, staged.apply_time_on_reset,
                ),
                task_monitor,
            });
        }
        Action::EnrollSecureBoot { enrollment } => enroll(client, enrollment, &ctx.certificates).await?,
        Action::ClearMedia => format!("{slot} eject: {:?}", client.eject_media(slot).await?),
        Action::AttachMedia { image_url } => {
            let inserted = client.insert_media(slot, image_url).await?;
            // Which override the BMC took matters later: a continuous one keeps booting the media.
            let boot = client.set_boot_override(target.clone(), None).await?;
            format!(
                "{slot} insert: {:?}, boot override {target} accepted {} (reported {:?})",
                inserted.method,
                boot.accepted,
                boot.reported.map(|r| r.to_string())
            )
        }
        Action::DetachMedia => {
            let eject = client.eject_media(slot).await?;
            let cleared = client.clear_boot_override(target.clone()).await?;
            format!("{slot} eject: {eject:?}, boot override cleared: {cleared}")
        }
        // Media progress lives in the database; the installed server is left as it is.
        Action::Cleanup => "nothing to do on the BMC".into(),
        Action::CancelCleanup => {
            // The power goes off even when the eject fails: a cancelled install must stop
            // writing disks whatever state the media is in.
            let eject = client.eject_media(slot).await;
            let cleared = client.clear_boot_override(target.clone()).await;
            let power = client.power_off().await?;
            format!(
                "{slot} eject: {:?}, override cleared: {}, {power:?}",
                eject?, cleared?
            )
        }
    };
    Ok(detail.into())
}

/// The decision state only needs to know the BMC answers; the facts themselves are observed
/// again before the next decision. Resources a BMC simply lacks are not failures here.
async fn refresh(client: &BmcClient, slot: &SlotRef) -> Step<String> {
    client.read_system().await?;
    client.read_media(slot).await?;
    let tolerate_missing = |r: racklift_redfish::Result<()>| match r {
        Err(e) if e.class() == ErrorClass::Unsupported => {
            tracing::debug!(server = client.server(), "refresh: {}", describe(&e));
            Ok(())
        }
        other => other,
    };
    tolerate_missing(client.read_bios().await.map(drop))?;
    tolerate_missing(client.read_secure_boot().await.map(drop))?;
    Ok("system, media, BIOS and secure boot readable".into())
}

/// The action's name in logs, events and errors.
pub fn action_name(action: &Action) -> &'static str {
    match action {
        Action::RefreshBmcData => "refresh BMC data",
        Action::PowerOff => "power off",
        Action::PowerOn => "power on",
        Action::ApplyBios { deferred: false, .. } => "apply BIOS",
        Action::ApplyBios { deferred: true, .. } => "apply deferred BIOS",
        Action::EnrollSecureBoot { .. } => "enroll secure boot keys",
        Action::ClearMedia => "clear media",
        Action::AttachMedia { .. } => "attach media",
        Action::DetachMedia => "detach media",
        Action::Cleanup => "cleanup",
        Action::CancelCleanup => "cancel cleanup",
    }
}

/// The error and its source chain: redfish errors keep the cause (a refused connection, a TLS
/// alert) out of their own `Display`, and a dead letter without it explains nothing. URLs lose
/// any user-info, so credentials never reach a message.
fn describe(e: &racklift_redfish::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let _ = write!(text, ": {s}");
        source = s.source();
    }
    redact_userinfo(&text)
}

fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let authority_end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == ')')
            .unwrap_or(tail.len());
        match tail[..authority_end].rfind('@') {
            Some(at) => {
                out.push_str("***");
                rest = &tail[at..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

/// The deployment's copy of a Redfish enum, matched by wire name. A value this crate does not
/// know (a newer schema's) stays unknown: it cannot be ordered, so it must not count as progress.
/// What a ComputerSystem reports of the host's boots: its reset time and boot progress, where it has them.
pub fn boot_of(system: &racklift_redfish::SystemInfo) -> racklift_deploy::rolling_run::BmcBoot {
    racklift_deploy::rolling_run::BmcBoot {
        last_reset_time: system.last_reset_time,
        boot_progress: system
            .boot_progress
            .as_ref()
            .and_then(|p| p.last_state.as_ref())
            .and_then(|s| same_name(s.as_str())),
        boot_progress_at: system.boot_progress.as_ref().and_then(|p| p.last_state_time),
    }
}

fn same_name<T: DeserializeOwned>(name: &str) -> Option<T> {
    serde_json::from_value(Value::String(name.to_owned())).ok()
}

/// Attributes the deployment can compare. Floats, nulls and structures have no
/// [`AttrValue`]; no BIOS profile can ask for them, so they are left out.
fn attributes(map: &Map<String, Value>) -> BTreeMap<String, AttrValue> {
    map.iter()
        .filter_map(|(k, v)| {
            let v = match v {
                Value::Bool(b) => AttrValue::Bool(*b),
                Value::Number(n) => AttrValue::Int(n.as_i64()?),
                Value::String(s) => AttrValue::Text(s.clone()),
                _ => return None,
            };
            Some((k.clone(), v))
        })
        .collect()
}

fn attr_json(v: &AttrValue) -> Value {
    match v {
        AttrValue::Bool(b) => Value::Bool(*b),
        AttrValue::Int(i) => Value::from(*i),
        AttrValue::Text(s) => Value::String(s.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_redacted() {
        assert_eq!(
            redact_userinfo("error sending request for url (https://root:calvin@10.0.0.1/redfish/v1)"),
            "error sending request for url (https://***@10.0.0.1/redfish/v1)"
        );
        assert_eq!(
            redact_userinfo("GET http://h/x: HTTP 503"),
            "GET http://h/x: HTTP 503"
        );
    }
}

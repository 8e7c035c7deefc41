//! The installed IncusOS starting up, in the order of IncusOS's `cmd/incus-osd/main.go` (`main`, `run`,
//! `startup`), from the seed the installer left on its disk. File:line references are to `lxc/incus-os`
//! `incus-osd/` at the commit the conformance table of the crate's README names.
//!
//! One run of the daemon ([`daemon`]):
//!
//! 1. The seeds are read (`main.go:691-696, 786-813`): a `network`, `provider`, `update`, `incus` or
//!    `applications` file that does not decode, or an `operations-center` provider without a URL or a token, fails
//!    the start-up. A fresh install makes its `/etc/machine-id` now.
//! 2. A registered server reports its network configuration (`network-config-changed`,
//!    `internal/systemd/networkd.go:190-206`); network, storage and services take [`Timings::registration_delay`].
//! 3. The blocking start-up update check, before any application runs and before registration (`main.go:820-823`,
//!    `internal/update/update.go:23-227`): the provider is loaded without a client certificate while no Incus
//!    exists (`provider_operations_center.go:429-450`), the listing's selected update gives the applications
//!    (`<name>.raw.gz`, type `application`) and the OS; a newer OS is applied and the server reboots at once,
//!    before registering (`update.go:570-586`). A failure ends the check and start-up goes on (`update.go:139-211`).
//!    `check_frequency: never` skips it once Incus is installed (`update.go:41-55`).
//! 4. Applications start: Incus is initialised on its first start (its `server.crt` made now, the `incus` seed's
//!    preseed certificates trusted, `main.go:826, 1235-1293`) and its listener serves. No Incus, no certificate.
//! 5. If not registered, `Register` runs once, with `server.crt` as client certificate when Incus exists
//!    (`main.go:837-849`); the answer's certificate needs Incus to be trusted (`provider_operations_center.go:
//!    175-191`).
//! 6. The system is ready: `system-is-ready` goes to the provider (`main.go:322-329`).
//!
//! Any start-up error makes the daemon sleep 15 s and exit 1, and systemd starts it again (`main.go:186-194`,
//! `incus-osd.service` `Restart=always`): the whole sequence runs again after [`Timings::daemon_restart`], update
//! check included, for as long as the server runs.
//!
//! Without an `operations-center` provider the provider is `images` (`main.go:786, 799-801`), whose server is
//! on the internet: the simulator has none, and stands for it as an image server that offers exactly the
//! running release, so the seed's applications are installed at the running version and nothing registers
//! (`ErrRegistrationUnsupported`).
//!
//! `PUT :self` ([`notify`]) goes out only while registered, asynchronously, up to five attempts 30 s apart
//! (`provider_operations_center.go:80-123`); a machine that goes down drops the attempts left.
//!
//! Incus's own listener starts with Incus: each server has its own port on `127.0.0.1` (`incus_listener`), and
//! `connection_url` is `https://127.0.0.1:<port>`, where a real server sends `https://<management address>:8443`.
//!
//! [`Timings::registration_delay`]: crate::Timings::registration_delay
//! [`Timings::daemon_restart`]: crate::Timings::daemon_restart

use std::sync::Arc;
use std::time::Duration;

use crate::bmc::Bmc;
use crate::driver::{self, Halt, current};
use crate::incus_listener;
use crate::machine::{AppState, OsPhase, OsState};
use crate::os_update::{self, CheckError, Offered, UpdateFile};
use crate::register::{
    self, ClientIdentity, OperationsCenter, RegisterError, ServerPost, ServerPut, ServerSelfUpdate,
};

/// Attempts of a request that gets no answer (IncusOS `tryRequest`), one second apart.
const SEND_ATTEMPTS: u32 = 5;

/// Attempts of one `PUT :self`, and the time between them (`provider_operations_center.go:103-123`).
const SELF_UPDATE_ATTEMPTS: u32 = 5;
const SELF_UPDATE_INTERVAL: Duration = Duration::from_secs(30);

/// The causes of `PUT :self` this IncusOS sends (`oc@v0.8.1 shared/api/provisioning_server.go` constants).
pub const SYSTEM_IS_READY: &str = "system-is-ready";
pub const NETWORK_CONFIG_CHANGED: &str = "network-config-changed";
pub const SYSTEM_REBOOT_TRIGGERED: &str = "system-reboot-triggered";
pub const SYSTEM_SHUTDOWN_TRIGGERED: &str = "system-shutdown-triggered";
pub const OS_UPDATE_APPLIED: &str = "os-update-applied";
pub const APPLICATION_UPDATE_APPLIED: &str = "application-update-applied";

/// The applications that are Incus (their `server.crt` is the server's certificate, `app_incus.go:182-215`).
pub fn is_incus(name: &str) -> bool {
    name == "incus" || name.starts_with("incus-lts-")
}

/// What start-up found in the seed on the disk.
struct Startup {
    hostname: String,
    provider: Option<OperationsCenter>,
    /// Client certificates the Incus preseed trusts, applied when Incus is first initialised.
    preseed_certificates: Vec<String>,
    /// The update channel `update.yaml` names, if it does.
    channel: Option<String>,
    /// `update.yaml`'s `check_frequency` is `never`.
    never: bool,
    /// The applications `applications.yaml` installs (`incus` without one).
    applications: Vec<String>,
}

/// Read the installed seed, or why the daemon stops.
fn read_seed(bmc: &Bmc, generation: u64) -> Result<Result<Startup, String>, Halt> {
    let m = current(bmc, generation)?;
    let Some(seed) = &m.os.seed else {
        return Ok(Ok(Startup {
            hostname: bmc.uuid.clone(),
            provider: None,
            preseed_certificates: Vec::new(),
            channel: None,
            never: false,
            applications: vec!["incus".to_owned()],
        }));
    };
    let network = match seed.network() {
        Ok(n) => n,
        Err(e) => return Ok(Err(e.to_string())),
    };
    // IncusOS's default hostname is the machine's SMBIOS product UUID, the one the BMC reports as the System UUID.
    let hostname = network
        .and_then(|n| n.hostname())
        .unwrap_or_else(|| bmc.uuid.clone());
    let provider = match seed.provider() {
        Ok(None) => None,
        Ok(Some(p)) => match OperationsCenter::from_provider(&p) {
            Ok(oc) => oc,
            Err(e) => return Ok(Err(e.to_string())),
        },
        Err(e) => return Ok(Err(e.to_string())),
    };
    // Incus is initialised from its seed; a file it cannot read fails the start-up as well.
    let preseed_certificates = match seed.incus() {
        Ok(incus) => incus.map(|i| i.preseed_certificates()).unwrap_or_default(),
        Err(e) => return Ok(Err(e.to_string())),
    };
    let (channel, never) = match seed.update() {
        Ok(update) => (
            update
                .as_ref()
                .map(|u| u.channel.clone())
                .filter(|c| !c.is_empty()),
            update.is_some_and(|u| u.check_frequency == "never"),
        ),
        Err(e) => return Ok(Err(e.to_string())),
    };
    let applications = match seed.applications() {
        Ok(Some(a)) if !a.applications.is_empty() => a.applications.into_iter().map(|a| a.name).collect(),
        Ok(_) => vec!["incus".to_owned()],
        Err(e) => return Ok(Err(e.to_string())),
    };
    Ok(Ok(Startup {
        hostname,
        provider,
        preseed_certificates,
        channel,
        never,
        applications,
    }))
}

/// The `operations-center` provider of the installed seed, if it names one that loads.
pub fn seeded_provider(os: &OsState) -> Option<OperationsCenter> {
    os.seed
        .as_ref()
        .and_then(|seed| seed.provider().ok().flatten())
        .and_then(|p| OperationsCenter::from_provider(&p).ok().flatten())
}

/// How one run of the daemon ended.
enum Run {
    Ready,
    /// The start-up check applied a newer OS and rebooted the machine.
    Rebooting,
    Failed(String),
}

/// The installed OS has booted: run the daemon until a start-up succeeds (systemd restarts it after each failure).
pub async fn start(bmc: &Arc<Bmc>, generation: u64) -> Result<(), Halt> {
    loop {
        current(bmc, generation)?.counters.daemon_starts += 1;
        match daemon(bmc, generation).await? {
            Run::Ready | Run::Rebooting => return Ok(()),
            Run::Failed(why) => {
                {
                    let mut m = current(bmc, generation)?;
                    tracing::info!(server = %bmc.name, error = %why, "the installed OS's start-up failed");
                    // Incus, once started, is a service of its own and keeps running while the daemon restarts.
                    if m.phase != OsPhase::OsRunning {
                        m.phase = OsPhase::OsFailed(why.clone());
                    }
                    m.os.startup_error = Some(why);
                }
                bmc.shared.clock.sleep(bmc.shared.timings.daemon_restart).await?;
            }
        }
    }
}

/// One run of the daemon's start-up (see the module documentation).
async fn daemon(bmc: &Arc<Bmc>, generation: u64) -> Result<Run, Halt> {
    let startup = match read_seed(bmc, generation)? {
        Ok(s) => s,
        Err(why) => return Ok(Run::Failed(why)),
    };
    let registered = {
        let mut m = current(bmc, generation)?;
        m.os.hostname = Some(startup.hostname.clone());
        if let Some(channel) = &startup.channel {
            m.os.channel = channel.clone();
        }
        if m.os.machine_id.is_none() {
            m.os.machine_id = Some(uuid::Uuid::new_v4().simple().to_string());
        }
        m.os.registered
    };
    if registered {
        notify(bmc, NETWORK_CONFIG_CHANGED);
    }
    bmc.shared
        .clock
        .sleep(bmc.shared.timings.registration_delay)
        .await?;
    match &startup.provider {
        Some(oc) => {
            if let Checked::Rebooting = startup_check(bmc, generation, oc, &startup).await? {
                return Ok(Run::Rebooting);
            }
        }
        None => install_running_release(bmc, generation, &startup)?,
    }
    if let Err(why) = start_applications(bmc, generation, &startup)? {
        return Ok(Run::Failed(why));
    }
    if !registered
        && let Some(oc) = &startup.provider
        && let Err(why) = register(bmc, generation, oc, &startup.hostname).await?
    {
        return Ok(Run::Failed(why));
    }
    {
        let mut m = current(bmc, generation)?;
        m.os.system_is_ready = true;
        m.os.startup_error = None;
    }
    notify(bmc, SYSTEM_IS_READY);
    Ok(Run::Ready)
}

/// What the start-up check did.
enum Checked {
    Done,
    Rebooting,
}

/// The start-up update check (`update.go:23-227` with `isStartupCheck`): Secure Boot key files, then each
/// application of the install list, then the OS, all from the one update the listing selects. Its outcome is
/// written to the machine as it goes (an application installed before the OS failed stays installed).
async fn startup_check(
    bmc: &Arc<Bmc>,
    generation: u64,
    oc: &OperationsCenter,
    startup: &Startup,
) -> Result<Checked, Halt> {
    let (identity, running, channel, incus_installed) = {
        let m = current(bmc, generation)?;
        (
            m.os.identity.clone(),
            m.os.running_version.clone(),
            m.os.channel.clone(),
            m.os.applications.iter().any(|a| is_incus(&a.name)),
        )
    };
    if startup.never && incus_installed {
        return Ok(Checked::Done);
    }
    let outcome = check_and_install(
        bmc,
        generation,
        oc,
        identity.as_ref(),
        &channel,
        (&running, None),
        &startup.applications,
        CheckKind::Startup,
    )
    .await?;
    let mut m = current(bmc, generation)?;
    m.os.last_check = Some(bmc.shared.clock.now());
    match outcome {
        Ok(Some(version)) => {
            // The OS files are staged: the server reboots into them at once, before registering.
            m.os.staged_version = Some(version);
            m.os.update_status = "Update applied, rebooting".to_owned();
            drop(m);
            notify(bmc, OS_UPDATE_APPLIED);
            notify(bmc, SYSTEM_REBOOT_TRIGGERED);
            let mut m = current(bmc, generation)?;
            driver::restart(bmc, &mut m);
            Ok(Checked::Rebooting)
        }
        Ok(None) => {
            m.os.update_status = "Update check complete".to_owned();
            Ok(Checked::Done)
        }
        Err(e) => {
            tracing::info!(server = %bmc.name, error = %error_chain(&e), "the start-up update check failed");
            m.os.update_status = format!("Update check failed: {}", error_chain(&e));
            Ok(Checked::Done)
        }
    }
}

/// Which check runs: IncusOS runs the same `Checker` for both, `isStartupCheck` only deciding what follows an OS
/// update (`internal/update/update.go:540-575`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CheckKind {
    /// At start-up: a newer OS is rebooted into at once.
    Startup,
    /// Asked for through `POST /os/1.0/system/update/:check` (`isUserRequested`): a newer OS is staged and waits for
    /// a reboot (`needs_reboot`; the simulated IncusOS has `auto_reboot` off).
    Requested,
}

/// The network side of one update check (`update.go:137-211`, `checkDownloadUpdate`); the applications it installs
/// are recorded at once, with their new version (`update.go:605-616`). `(running, next)` are the running OS and
/// the one already staged for the next boot: an update at either is no OS update (`update.go:400-410`). Returns the
/// newer OS version whose files were downloaded, if any.
#[allow(clippy::too_many_arguments)]
async fn check_and_install(
    bmc: &Arc<Bmc>,
    generation: u64,
    oc: &OperationsCenter,
    identity: Option<&ClientIdentity>,
    channel: &str,
    (running, next): (&str, Option<&str>),
    applications: &[String],
    kind: CheckKind,
) -> Result<Result<Option<String>, CheckError>, Halt> {
    let request = |source| CheckError::Request {
        path: String::new(),
        source,
    };
    let http = match identity {
        Some(identity) => register::client(oc, identity),
        None => register::anonymous_client(oc),
    };
    let http = match http {
        Ok(h) => h,
        Err(e) => return Ok(Err(request(e))),
    };
    if kind == CheckKind::Startup {
        current(bmc, generation)?.counters.startup_update_checks += 1;
    }
    let (update, files) = match os_update::selected(&http, oc, channel, running).await {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(Ok(None)),
        Err(e) => return Ok(Err(e)),
    };
    // Secure Boot keys come first; the simulated firmware takes no key update from the OS, so they are noted.
    current(bmc, generation)?.os.secure_boot_updates = os_update::secure_boot_files(&files)
        .iter()
        .map(|f| f.filename.clone())
        .collect();
    for name in applications {
        let Some(file) = os_update::application_file(&files, name) else {
            continue;
        };
        let installed = {
            let m = current(bmc, generation)?;
            m.os.applications
                .iter()
                .find(|a| a.name == *name)
                .map(|a| a.version.clone())
        };
        match os_update::compare(&update.version, installed.as_deref()) {
            Offered::Same => continue,
            Offered::NotNewer => {
                return Ok(Err(CheckError::NotNewer {
                    what: name.clone(),
                    installed: installed.unwrap_or_default(),
                    offered: update.version.clone(),
                }));
            }
            Offered::Newer => {}
        }
        if let Err(e) = os_update::download(&http, oc, &update.uuid, file, running).await {
            return Ok(Err(e));
        }
        {
            let mut m = current(bmc, generation)?;
            let app = AppState {
                name: name.clone(),
                version: update.version.clone(),
                staged_version: None,
            };
            match m.os.applications.iter_mut().find(|a| a.name == *name) {
                Some(existing) => *existing = app,
                None => m.os.applications.push(app),
            }
        }
        notify(bmc, APPLICATION_UPDATE_APPLIED);
    }
    let os: Vec<UpdateFile> = match os_update::os_files(&files) {
        None => return Ok(Ok(None)),
        Some(Err(kind)) => return Ok(Err(CheckError::MissingOsFile(kind))),
        Some(Ok(os)) => os.into_iter().cloned().collect(),
    };
    if next == Some(update.version.as_str()) {
        return Ok(Ok(None));
    }
    match os_update::compare(&update.version, Some(running)) {
        Offered::Same => return Ok(Ok(None)),
        Offered::NotNewer => {
            return Ok(Err(CheckError::NotNewer {
                what: "OS".to_owned(),
                installed: running.to_owned(),
                offered: update.version.clone(),
            }));
        }
        Offered::Newer => {}
    }
    for file in &os {
        if let Err(e) = os_update::download(&http, oc, &update.uuid, file, running).await {
            return Ok(Err(e));
        }
    }
    Ok(Ok(Some(update.version)))
}

/// `POST /os/1.0/system/update/:check` (`update.go:126-227` run with `isUserRequested`): the start-up check's
/// selection, downloads and version rules, against the installed seed's provider; the install list is the
/// installed applications. Applications are updated at once and `application-update-applied` sent; a newer OS is
/// staged, `os-update-applied` sent, and the machine keeps running until a reboot (`update.go:540-575`). The
/// outcome goes to the update state's `status` (`update.go:190-204`); `Ok(Err)` is a failed check, its status.
pub async fn requested_check(bmc: &Arc<Bmc>, oc: &OperationsCenter) -> Result<Result<(), String>, Halt> {
    let (generation, identity, running, next, channel, applications) = {
        let m = bmc.machine();
        (
            m.boot_gen,
            m.os.identity.clone(),
            m.os.running_version.clone(),
            m.os.staged_version.clone(),
            m.os.channel.clone(),
            m.os.applications
                .iter()
                .map(|a| a.name.clone())
                .collect::<Vec<_>>(),
        )
    };
    let outcome = check_and_install(
        bmc,
        generation,
        oc,
        identity.as_ref(),
        &channel,
        (&running, next.as_deref()),
        &applications,
        CheckKind::Requested,
    )
    .await?;
    let mut m = current(bmc, generation)?;
    m.os.last_check = Some(bmc.shared.clock.now());
    match outcome {
        Ok(Some(version)) => {
            m.os.update_status = format!("IncusOS has been updated to version {version}");
            m.os.staged_version = Some(version);
            drop(m);
            notify(bmc, OS_UPDATE_APPLIED);
            Ok(Ok(()))
        }
        Ok(None) => {
            m.os.update_status = "Update check completed".to_owned();
            Ok(Ok(()))
        }
        Err(e) => {
            let status = format!("Update check failed: {}", error_chain(&e));
            m.os.update_status = status.clone();
            Ok(Err(status))
        }
    }
}

/// The `images` provider stands for an image server offering the running release: the install list is
/// installed at the running version (see the module documentation).
fn install_running_release(bmc: &Bmc, generation: u64, startup: &Startup) -> Result<(), Halt> {
    let mut m = current(bmc, generation)?;
    let version = m.os.running_version.clone();
    for name in &startup.applications {
        if !m.os.applications.iter().any(|a| a.name == *name) {
            m.os.applications.push(AppState {
                name: name.clone(),
                version: version.clone(),
                staged_version: None,
            });
        }
    }
    Ok(())
}

/// The installed applications start; Incus is initialised on its first start. `Ok(Err)` fails the start-up.
fn start_applications(bmc: &Bmc, generation: u64, startup: &Startup) -> Result<Result<(), String>, Halt> {
    {
        let mut m = current(bmc, generation)?;
        if !m.os.applications.iter().any(|a| is_incus(&a.name)) {
            return Ok(Ok(()));
        }
        if m.os.identity.is_none() {
            for cert in &startup.preseed_certificates {
                if !m.os.trusted_certificates.contains(cert) {
                    m.os.trusted_certificates.push(cert.clone());
                }
            }
            match ClientIdentity::generate(&startup.hostname) {
                Ok(id) => m.os.set_identity(id),
                Err(e) => return Ok(Err(format!("generating the Incus certificate: {e}"))),
            }
        }
        m.phase = OsPhase::OsRunning;
    }
    incus_listener::ensure(bmc);
    Ok(Ok(()))
}

/// `Register` (`provider_operations_center.go:128-199`): the full `ServerPost`, `server.crt` presented when Incus
/// exists, the answer's certificate trusted by Incus. `Ok(Err)` fails the start-up.
async fn register(
    bmc: &Arc<Bmc>,
    generation: u64,
    oc: &OperationsCenter,
    hostname: &str,
) -> Result<Result<(), String>, Halt> {
    // The machine has its address whether Incus runs or not; the port is the one Incus serves on.
    let Some(port) = incus_listener::ensure(bmc) else {
        return Err(Halt::Stopped);
    };
    let (identity, machine_id) = {
        let m = current(bmc, generation)?;
        (m.os.identity.clone(), m.os.machine_id.clone().unwrap_or_default())
    };
    let body = ServerPost {
        put: ServerPut::default(),
        name: hostname.to_owned(),
        connection_url: format!("https://127.0.0.1:{port}"),
        system_uuid: bmc.uuid.clone(),
        machine_id,
    };
    let outcome = attempt(bmc, generation, oc, identity.as_ref(), &body).await?;
    let mut m = current(bmc, generation)?;
    let failed = match outcome {
        Ok(certificate) if certificate.is_empty() => None,
        Ok(_) if m.os.identity.is_none() => {
            Some("no primary application to trust the provider's certificate".to_owned())
        }
        Ok(certificate) if m.os.trusted_certificates.contains(&certificate) => {
            Some("adding the provider's certificate: Certificate already in trust store".to_owned())
        }
        Ok(certificate) => {
            m.os.trusted_certificates.push(certificate);
            None
        }
        Err(e) => Some(error_chain(&e)),
    };
    match failed {
        None => {
            m.os.registered = true;
            m.os.registration_error = None;
            Ok(Ok(()))
        }
        Some(why) => {
            m.os.registration_error = Some(why.clone());
            Ok(Err(format!("registering: {why}")))
        }
    }
}

/// One run of the daemon's registration: the request, retried while it gets no answer.
async fn attempt(
    bmc: &Bmc,
    generation: u64,
    oc: &OperationsCenter,
    identity: Option<&ClientIdentity>,
    body: &ServerPost,
) -> Result<Result<String, RegisterError>, Halt> {
    let client = match identity {
        Some(identity) => register::client(oc, identity),
        None => register::anonymous_client(oc),
    };
    let client = match client {
        Ok(c) => c,
        Err(e) => return Ok(Err(e)),
    };
    let mut sent = 0;
    loop {
        sent += 1;
        current(bmc, generation)?.counters.registration_attempts += 1;
        let outcome = register::register(&client, oc, body).await;
        if sent >= SEND_ATTEMPTS || !matches!(outcome, Err(RegisterError::Send(_))) {
            return Ok(outcome);
        }
        bmc.shared.clock.sleep(Duration::from_secs(1)).await?;
    }
}

/// `PUT {server_url}/1.0/provisioning/servers/:self` with `cause`, in the background: only while registered, up
/// to five attempts 30 s apart, the attempts left dropped when the machine goes down in between (a reboot notice
/// can be lost, as on a real server).
pub fn notify(bmc: &Arc<Bmc>, cause: &str) {
    let (oc, identity, generation) = {
        let m = bmc.machine();
        if !m.os.registered {
            return;
        }
        let Some(oc) = seeded_provider(&m.os) else {
            return;
        };
        (oc, m.os.identity.clone(), m.boot_gen)
    };
    // The machine's address, whether Incus serves there yet or not.
    let Some(port) = incus_listener::ensure(bmc) else {
        return;
    };
    let body = ServerSelfUpdate {
        connection_url: format!("https://127.0.0.1:{port}"),
        cause: cause.to_owned(),
    };
    let bmc = bmc.clone();
    tokio::spawn(async move {
        let http = match &identity {
            Some(identity) => register::client(&oc, identity),
            None => register::anonymous_client(&oc),
        };
        let Ok(http) = http else {
            return;
        };
        for sent in 1..=SELF_UPDATE_ATTEMPTS {
            bmc.machine().counters.self_update_attempts += 1;
            match register::put_self(&http, &oc, &body).await {
                Ok(()) => {
                    *bmc.machine()
                        .counters
                        .self_updates
                        .entry(body.cause.clone())
                        .or_default() += 1;
                    return;
                }
                Err(e) if sent == SELF_UPDATE_ATTEMPTS => {
                    tracing::warn!(server = %bmc.name, cause = %body.cause, error = %error_chain(&e),
                        "the provider was not told");
                    return;
                }
                Err(_) => {}
            }
            if bmc.shared.clock.sleep(SELF_UPDATE_INTERVAL).await.is_err()
                || bmc.machine().boot_gen != generation
            {
                return;
            }
        }
    });
}

/// The error and its causes on one line, for the truth view.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

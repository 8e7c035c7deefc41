//! The installed IncusOS starting up and registering itself, from the seed the installer left on its disk
//! (IncusOS `cmd/incus-osd/main.go`, `startup`).
//!
//! At start-up the daemon reads the `network` seed (for the hostname) and the `provider` seed; a file that does
//! not decode, or an `operations-center` provider without a URL or a token, stops the daemon before Incus
//! starts ([`OsPhase::OsFailed`]). Otherwise Incus runs, with its client certificate (made at the first boot),
//! and the daemon registers with the provider if it has not yet. A failed registration makes the daemon exit
//! and systemd start it again (`Restart=on-failure`), so it is retried after [`Timings::daemon_restart`], for as
//! long as the server runs; a request that gets no answer is first retried five times a second apart
//! (`tryRequest`).
//!
//! Incus's own listener starts with Incus: each server has its own port on `127.0.0.1` (`incus_listener`), and
//! `connection_url` is `https://127.0.0.1:<port>`, where a real server sends `https://<management address>:8443`.
//!
//! [`Timings::daemon_restart`]: crate::Timings::daemon_restart

use std::time::Duration;

use crate::bmc::Bmc;
use crate::driver::{Halt, current};
use crate::incus_listener;
use crate::machine::{AppState, OsPhase};
use crate::register::{self, ClientIdentity, OperationsCenter, RegisterError, ServerPost};

/// Attempts of a request that gets no answer (IncusOS `tryRequest`), one second apart.
const SEND_ATTEMPTS: u32 = 5;

/// What start-up found in the seed on the disk.
struct Startup {
    hostname: String,
    provider: Option<OperationsCenter>,
    /// Client certificates the Incus preseed trusts, applied when Incus is first initialised.
    preseed_certificates: Vec<String>,
    /// The update channel `update.yaml` names, if it does.
    channel: Option<String>,
    /// The applications `applications.yaml` installs (`incus` without one).
    applications: Vec<String>,
}

/// Read the installed seed: the hostname and the provider, or why the daemon stops.
fn read_seed(bmc: &Bmc, generation: u64) -> Result<Result<Startup, String>, Halt> {
    let m = current(bmc, generation)?;
    let Some(seed) = &m.os.seed else {
        return Ok(Ok(Startup {
            hostname: bmc.uuid.clone(),
            provider: None,
            preseed_certificates: Vec::new(),
            channel: None,
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
    let channel = match seed.update() {
        Ok(update) => update.map(|u| u.channel).filter(|c| !c.is_empty()),
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
        applications,
    }))
}

/// The installed OS has booted: start the daemon, then register until it succeeds.
pub async fn start(bmc: &Bmc, generation: u64) -> Result<(), Halt> {
    let shared = bmc.shared.clone();
    let startup = match read_seed(bmc, generation)? {
        Ok(s) => s,
        Err(why) => {
            current(bmc, generation)?.phase = OsPhase::OsFailed(why);
            return Ok(());
        }
    };
    let (registered, identity) = {
        let mut m = current(bmc, generation)?;
        m.phase = OsPhase::OsRunning;
        // systemd writes /etc/machine-id at the first boot of the installed system.
        m.os.machine_id
            .get_or_insert_with(|| uuid::Uuid::new_v4().simple().to_string());
        m.os.hostname = Some(startup.hostname.clone());
        if let Some(channel) = startup.channel {
            m.os.channel = channel;
        }
        if m.os.identity.is_none() {
            // First boot: Incus is initialised (its preseed applied) and makes its certificate.
            for cert in startup.preseed_certificates {
                if !m.os.trusted_certificates.contains(&cert) {
                    m.os.trusted_certificates.push(cert);
                }
            }
            let version = m.os.running_version.clone();
            m.os.applications = startup
                .applications
                .iter()
                .map(|name| AppState {
                    name: name.clone(),
                    version: version.clone(),
                    staged_version: None,
                })
                .collect();
            match ClientIdentity::generate(&startup.hostname) {
                Ok(id) => m.os.set_identity(id),
                Err(e) => {
                    m.phase = OsPhase::OsFailed(format!("generating the Incus client certificate: {e}"));
                    return Ok(());
                }
            }
        }
        (m.os.registered, m.os.identity.clone())
    };
    let Some(port) = incus_listener::ensure(bmc) else {
        return Ok(());
    };
    if registered {
        return Ok(());
    }
    let (Some(oc), Some(identity)) = (startup.provider, identity) else {
        return Ok(());
    };
    let body = ServerPost {
        name: startup.hostname,
        connection_url: format!("https://127.0.0.1:{port}"),
    };
    shared.clock.sleep(shared.timings.registration_delay).await?;
    loop {
        let outcome = attempt(bmc, generation, &oc, &identity, &body).await?;
        {
            let mut m = current(bmc, generation)?;
            match outcome {
                Ok(certificate) => {
                    if !certificate.is_empty() && !m.os.trusted_certificates.contains(&certificate) {
                        m.os.trusted_certificates.push(certificate);
                    }
                    m.os.registered = true;
                    m.os.registration_error = None;
                    return Ok(());
                }
                Err(e) => m.os.registration_error = Some(error_chain(&e)),
            }
        }
        shared.clock.sleep(shared.timings.daemon_restart).await?;
    }
}

/// One run of the daemon's registration: the request, retried while it gets no answer.
async fn attempt(
    bmc: &Bmc,
    generation: u64,
    oc: &OperationsCenter,
    identity: &ClientIdentity,
    body: &ServerPost,
) -> Result<Result<String, RegisterError>, Halt> {
    let client = match register::client(oc, identity) {
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

/// The error and its causes on one line, for the truth view.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

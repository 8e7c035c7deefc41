//! `deploy_bmc` against the BMC simulator, one test per vendor personality: observation,
//! each kind of action, and how BMC failures become state-machine outcomes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use racklift_bmc_sim::{Faults, Personality, PersonalityChoice, Sim, SimConfig, SimHandle};
use racklift_deploy::certificates::{CertificateSet, INCUSOS};
use racklift_deploy::facts::{AttrValue, Fingerprint, KeyDb, PowerState, TaskState};
use racklift_deploy::record::{BiosPlan, SecureBootPlan};
use racklift_deploy::secure_boot::plan_enrollment;
use racklift_deploy::{
    Action, Config, Decision, Deployment, Jitter, Machine, Outcome, Plan, State, apply_outcome, decide,
};
use racklift_redfish::{
    BmcClient, BmcConfig, BootSourceOverrideEnabled, BootSourceOverrideTarget, Credentials, Fence,
    RetryPolicy, SlotRef, TlsMode,
};
use racklift_workers::deploy_bmc::{
    ActContext, Acted, Observed, Want, act, fingerprint_pem, observe, want_for, want_for_machine,
};

const PASSWORD_PROBE: &str = "not-the-password-xyzzy";

async fn start(personality: Personality) -> SimHandle {
    Sim::start(SimConfig::new(1, PersonalityChoice::Single(personality)).with_time_scale(0.001))
        .await
        .expect("simulator starts")
}

fn config(sim: &SimHandle) -> BmcConfig {
    let (user, pass) = sim.credentials();
    let mut config = BmcConfig::new(
        sim.name(0),
        sim.bmc_url(0),
        Credentials::new(user, pass),
        TlsMode::WebPkiRoots,
    );
    config.call_deadline = Duration::from_secs(10);
    config.retry = RetryPolicy {
        max_retries: 2,
        min_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    };
    config
}

fn client(sim: &SimHandle) -> BmcClient {
    BmcClient::new(config(sim)).expect("client").with_fence(Fence(1))
}

/// Serves any path as a small image; Upload BMCs copy the whole image at insert.
async fn image_server() -> String {
    let app = axum::Router::new().fallback(|| async { vec![0u8; 64 << 10] });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind image server");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// Observes until `holds` (no fixed sleeps: a condition with a deadline); returns the match.
async fn observe_until(
    c: &BmcClient,
    slot: &SlotRef,
    what: &str,
    holds: impl Fn(&Observed) -> bool,
) -> Observed {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let observed = observe(c, Some(slot), &Want::default()).await;
        if holds(&observed) {
            return observed;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {observed:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn act_ok(c: &BmcClient, slot: &SlotRef, action: Action, ctx: &ActContext) {
    let acted = act(c, slot, &action, ctx).await;
    assert!(acted.outcome.is_success(), "{action:?}: {acted:?}");
}

async fn scenario(personality: Personality) {
    let sim = start(personality).await;
    let c = client(&sim);
    let ctx = shipped_ctx();

    let first = observe(&c, None, &Want::ALL).await;
    assert!(first.errors.is_empty(), "{personality:?}: {:?}", first.errors);
    assert!(first.facts.power.is_some(), "{personality:?}");
    assert!(first.facts.media.is_some(), "{personality:?}");
    assert!(first.facts.bios.is_some(), "{personality:?}");
    let slot = first.slot.clone().expect("a CD slot is selected");
    let again = observe(&c, Some(&slot), &Want::default()).await;
    assert_eq!(again.slot.as_ref(), Some(&slot));
    assert!(again.facts.bios.is_none() && again.facts.key_dbs.is_empty());

    act_ok(&c, &slot, Action::RefreshBmcData, &ctx).await;
    act_ok(&c, &slot, Action::PowerOn, &ctx).await;
    observe_until(&c, &slot, "power on", |o| o.facts.power == Some(PowerState::On)).await;
    act_ok(&c, &slot, Action::PowerOff, &ctx).await;
    observe_until(&c, &slot, "power off", |o| o.facts.power == Some(PowerState::Off)).await;
    act_ok(&c, &slot, Action::PowerOff, &ctx).await;

    let staged = Action::ApplyBios {
        deferred: false,
        attributes: vec![("ProcVirtualization".into(), AttrValue::Text("Disabled".into()))],
    };
    act_ok(&c, &slot, staged, &ctx).await;
    let bios = observe(&c, Some(&slot), &Want::ALL)
        .await
        .facts
        .bios
        .expect("bios");
    assert_eq!(
        bios.pending.get("ProcVirtualization"),
        Some(&AttrValue::Text("Disabled".into())),
        "{personality:?}"
    );

    act_ok(&c, &slot, Action::ClearMedia, &ctx).await;
    let image_url = format!("{}/{}.iso", image_server().await, sim.name(0));
    let attach = Action::AttachMedia {
        image_url: image_url.clone(),
    };
    act_ok(&c, &slot, attach, &ctx).await;
    observe_until(&c, &slot, "media attached", |o| {
        o.facts
            .media
            .as_ref()
            .is_some_and(|m| m.inserted && m.image.as_deref() == Some(image_url.as_str()))
    })
    .await;
    let boot = c.read_boot().await.expect("boot");
    assert_eq!(boot.target, Some(BootSourceOverrideTarget::Cd), "{personality:?}");

    act_ok(&c, &slot, Action::DetachMedia, &ctx).await;
    observe_until(&c, &slot, "media detached", |o| {
        o.facts.media.as_ref().is_some_and(|m| !m.inserted)
    })
    .await;
    let boot = c.read_boot().await.expect("boot");
    assert!(
        boot.enabled == Some(BootSourceOverrideEnabled::Disabled)
            || boot.target != Some(BootSourceOverrideTarget::Cd),
        "{personality:?}: {boot:?}"
    );
    act_ok(&c, &slot, Action::Cleanup, &ctx).await;

    // 5xx: retryable, with the status and the action in the message.
    sim.set_faults(
        0,
        Faults {
            status: Some(503),
            ..Default::default()
        },
    );
    let acted = act(&c, &slot, &Action::PowerOn, &ctx).await;
    let Outcome::Retryable { error } = &acted.outcome else {
        panic!("{personality:?}: 503 must be retryable: {acted:?}");
    };
    assert!(
        error.starts_with("power on: ") && error.contains("503"),
        "{error}"
    );
    let failure = acted.error.expect("failure");
    assert_eq!((failure.class.as_str(), failure.status), ("busy", Some(503)));
    let blind = observe(&c, Some(&slot), &Want::ALL).await;
    assert_eq!(blind.facts.power, None, "a failed read stays unknown");
    assert_eq!(blind.facts.media, None);
    assert!(
        blind.errors.iter().any(|e| e.starts_with("read system: ")),
        "{:?}",
        blind.errors
    );
    sim.set_faults(0, Faults::default());

    // Wrong credentials: fatal, and the password never shows.
    let mut wrong = config(&sim);
    wrong.credentials = Credentials::new("admin", PASSWORD_PROBE);
    let wrong = BmcClient::new(wrong).expect("client").with_fence(Fence(1));
    let acted = act(&wrong, &slot, &Action::PowerOff, &ctx).await;
    assert_fatal(&acted, "auth", "power off: ");
    assert_eq!(acted.error.as_ref().and_then(|f| f.status), Some(401));
    assert!(!format!("{acted:?}").contains(PASSWORD_PROBE));

    secure_boot(personality, &sim, &c, &slot).await;
}

fn assert_fatal(acted: &Acted, class: &str, prefix: &str) {
    let Outcome::Fatal { error } = &acted.outcome else {
        panic!("expected a fatal outcome: {acted:?}");
    };
    assert!(error.starts_with(prefix), "{error}");
    assert_eq!(
        acted.error.as_ref().map(|f| f.class.as_str()),
        Some(class),
        "{acted:?}"
    );
}

/// The shipped IncusOS certificates, as the workers run with them.
fn shipped_ctx() -> ActContext {
    ActContext::new(Arc::new(CertificateSet::incusos()))
}

/// The fingerprints a database holds, as a set.
fn held(o: &Observed, db: KeyDb) -> BTreeSet<Fingerprint> {
    o.facts.key_dbs.get(&db).into_iter().flatten().cloned().collect()
}

/// The mutations the BMC received after the first `skip`, as "METHOD path".
fn mutations_since(sim: &SimHandle, skip: usize) -> Vec<String> {
    sim.audit(0).mutation_log[skip..]
        .iter()
        .map(|m| format!("{} {}", m.method, m.path))
        .collect()
}

/// Enrols the shipped set the way the secure boot state does (judged from a fresh observation), then
/// rewrites db alone after it was tampered with. Where the BMC has no key databases (HPE, Lenovo) the
/// enrolment is fatal before any mutation; a worker lacking a PEM the plan needs refuses before any too.
async fn secure_boot(personality: Personality, sim: &SimHandle, c: &BmcClient, slot: &SlotRef) {
    let shipped = CertificateSet::incusos();
    let plan = SecureBootPlan::new(&shipped, &[]);
    let keys = plan.incusos_keys().expect("the shipped keys");
    let ctx = shipped_ctx();
    let before = observe(c, Some(slot), &Want::ALL).await;
    let has_dbs = !matches!(personality, Personality::Hpe | Personality::Lenovo);
    assert_eq!(
        !before.facts.key_dbs.is_empty(),
        has_dbs,
        "{personality:?}: {before:?}"
    );
    let enrollment = plan_enrollment(&before.facts.key_dbs, &keys, &plan.allow);
    let mark = sim.audit(0).mutation_log.len();
    if !has_dbs {
        let acted = act(c, slot, &Action::EnrollSecureBoot { enrollment }, &ctx).await;
        assert_fatal(&acted, "unsupported", "enroll secure boot keys: ");
        assert_eq!(
            mutations_since(sim, mark),
            Vec::<String>::new(),
            "{personality:?}"
        );
        return;
    }
    let fp = fingerprint_pem;
    let microsoft_kek = fp(racklift_bmc_sim::MICROSOFT_KEK_CA_2011);
    let microsoft_uefi = fp(racklift_bmc_sim::MICROSOFT_UEFI_CA_2011);
    let windows_pca = fp(racklift_bmc_sim::MICROSOFT_WINDOWS_PCA_2011);
    assert!(
        held(&before, KeyDb::Db).contains(&windows_pca),
        "{personality:?}: factory db"
    );

    // A worker without the 2026 db certificate refuses before touching anything.
    let partial = CertificateSet::from_pems(
        INCUSOS
            .iter()
            .filter(|c| c.name != "incusos-secureboot-DB-2026-R1")
            .map(|c| (c.db, c.name, c.pem)),
    )
    .expect("PK, KEK and db are still there");
    let action = Action::EnrollSecureBoot {
        enrollment: enrollment.clone(),
    };
    let acted = act(c, slot, &action, &ActContext::new(Arc::new(partial))).await;
    assert_fatal(&acted, "client", "enroll secure boot keys: no PEM supplied");
    assert_eq!(
        mutations_since(sim, mark),
        Vec::<String>::new(),
        "{personality:?}"
    );

    act_ok(c, slot, action.clone(), &ctx).await;
    let after = observe(c, Some(slot), &Want::ALL).await;
    let incusos = |db| keys.get(db).clone();
    let with = |db, extra: &[&Fingerprint]| -> BTreeSet<Fingerprint> {
        incusos(db)
            .into_iter()
            .chain(extra.iter().map(|f| (*f).clone()))
            .collect()
    };
    assert_eq!(held(&after, KeyDb::PK), incusos(KeyDb::PK), "{personality:?}: PK");
    assert_eq!(
        held(&after, KeyDb::KEK),
        with(KeyDb::KEK, &[&microsoft_kek]),
        "{personality:?}: KEK"
    );
    assert_eq!(
        held(&after, KeyDb::Db),
        with(KeyDb::Db, &[&microsoft_uefi]),
        "{personality:?}: db"
    );
    assert_eq!(held(&after, KeyDb::Dbx), BTreeSet::new(), "{personality:?}: dbx");
    assert_eq!(
        sim.secure_boot_mode(0),
        "UserMode",
        "{personality:?}: a PK was enrolled"
    );
    assert!(plan_enrollment(&after.facts.key_dbs, &keys, &plan.allow).is_empty());

    // A replay of the same enrolment finds nothing left to do.
    let mark = sim.audit(0).mutation_log.len();
    act_ok(c, slot, action, &ctx).await;
    assert_eq!(
        mutations_since(sim, mark),
        Vec::<String>::new(),
        "{personality:?}: replay"
    );

    // Someone adds the Windows PCA back to db: only db is judged wrong, and only db is written.
    c.enroll_certificate("db", racklift_bmc_sim::MICROSOFT_WINDOWS_PCA_2011)
        .await
        .expect("enrol into db");
    let tampered = observe(c, Some(slot), &Want::ALL).await;
    let enrollment = plan_enrollment(&tampered.facts.key_dbs, &keys, &plan.allow);
    let written: Vec<KeyDb> = enrollment.dbs().iter().map(|(db, _)| *db).collect();
    assert_eq!(written, [KeyDb::Db], "{personality:?}");
    let mark = sim.audit(0).mutation_log.len();
    act_ok(c, slot, Action::EnrollSecureBoot { enrollment }, &ctx).await;
    let touched = mutations_since(sim, mark);
    assert_eq!(
        touched.len(),
        1,
        "{personality:?}: one DELETE of the PCA: {touched:?}"
    );
    assert!(
        touched[0].starts_with("DELETE ") && touched[0].contains("/db/Certificates/"),
        "{touched:?}"
    );
    assert!(
        touched
            .iter()
            .all(|m| !m.contains("/KEK/") && !m.contains("/PK/")),
        "{touched:?}"
    );
    let fixed = observe(c, Some(slot), &Want::ALL).await;
    assert_eq!(
        held(&fixed, KeyDb::Db),
        with(KeyDb::Db, &[&microsoft_uefi]),
        "{personality:?}"
    );
    assert_eq!(
        held(&fixed, KeyDb::KEK),
        with(KeyDb::KEK, &[&microsoft_kek]),
        "{personality:?}"
    );
}

#[tokio::test]
async fn generic() {
    scenario(Personality::Generic).await;
}

#[tokio::test]
async fn dell() {
    scenario(Personality::Dell).await;
}

#[tokio::test]
async fn hpe() {
    scenario(Personality::Hpe).await;
}

#[tokio::test]
async fn lenovo() {
    scenario(Personality::Lenovo).await;
}

#[tokio::test]
async fn supermicro() {
    scenario(Personality::Supermicro).await;
}

#[test]
fn wants_and_fingerprints() {
    assert_eq!(
        want_for(State::CheckBIOS),
        Want {
            bios: true,
            secure_boot: false,
            bios_task: None,
        }
    );
    assert_eq!(
        want_for(State::SecureBoot),
        Want {
            bios: false,
            secure_boot: true,
            bios_task: None,
        }
    );
    assert_eq!(want_for(State::RefreshBMCData), Want::ALL);
    assert_eq!(want_for(State::WaitInstall), Want::default());
    // The monitor is polled in the BIOS waits only, where it can end the wait.
    let monitor = "/redfish/v1/TaskService/TaskMonitors/1";
    for (state, polled) in [
        (State::WaitBIOSApplied, true),
        (State::WaitBIOSAppliedDeferred, true),
        (State::PowerOnBIOS, false),
        (State::VerifyBIOS, false),
    ] {
        let mut m = Machine::new(Utc::now());
        m.state = state;
        m.bios_task_monitor = Some(monitor.to_owned());
        let want = want_for_machine(&m);
        assert_eq!(want.bios_task.as_deref(), polled.then_some(monitor), "{state}");
        assert_eq!(
            (want.bios, want.secure_boot),
            (want_for(state).bios, want_for(state).secure_boot)
        );
        m.bios_task_monitor = None;
        assert_eq!(want_for_machine(&m), want_for(state), "{state}");
    }
    // SHA-256 of the DER ("hello"), as `openssl x509 -fingerprint -sha256` shows it.
    let pem = "-----BEGIN CERTIFICATE-----\naGVs\nbG8=\n-----END CERTIFICATE-----\n";
    assert_eq!(
        fingerprint_pem(pem).0,
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
}

/// One BIOS pass on every personality, driven the way the deployment step drives it: the apply's
/// outcome carries the task monitor into the machine (only Dell-like BMCs answer with one), the
/// wait polls it once the power is on, and its one final answer ends the wait well before the
/// settle delay; after that the monitor reads as gone.
async fn bios_pass(personality: Personality) {
    let sim = start(personality).await;
    let c = client(&sim);
    let ctx = shipped_ctx();
    let cfg = Config::default();
    let slot = observe(&c, None, &Want::default()).await.slot.expect("slot");
    let plan = Plan {
        bios: BiosPlan {
            attributes: [(
                "ProcVirtualization".to_owned(),
                AttrValue::Text("Disabled".into()),
            )]
            .into(),
            ..BiosPlan::default()
        },
        ..Plan::default()
    };
    let mut d = Deployment::new(plan, Utc::now());
    let tasks = personality == Personality::Dell;

    act_ok(&c, &slot, Action::PowerOff, &ctx).await;
    observe_until(&c, &slot, "power off", |o| o.facts.power == Some(PowerState::Off)).await;
    d.machine.state = State::ApplyBIOS;
    let facts = observe(&c, Some(&slot), &want_for_machine(&d.machine))
        .await
        .facts;
    let step = decide(&d, &facts, Utc::now(), &cfg);
    let Decision::Act { action, .. } = step.decision else {
        panic!("{personality:?}: expected the apply: {step:?}");
    };
    d.machine = step.machine;
    let acted = act(&c, &slot, &action, &ctx).await;
    assert!(acted.outcome.is_success(), "{personality:?}: {acted:?}");
    assert_eq!(
        matches!(acted.outcome, Outcome::Accepted { .. }),
        tasks,
        "{personality:?}: {acted:?}"
    );
    d.machine = apply_outcome(&d, &acted.outcome, Utc::now(), &cfg, Jitter::NONE).machine;
    assert_eq!(d.machine.state, State::PowerOnBIOS);
    let monitor = d.machine.bios_task_monitor.clone();
    assert_eq!(monitor.is_some(), tasks, "{personality:?}");

    // Still off: the wait's observation leaves the monitor's one final answer unspent.
    let mut early = d.machine.clone();
    early.state = State::WaitBIOSApplied;
    let off = observe(&c, Some(&slot), &want_for_machine(&early)).await;
    assert_eq!(off.facts.bios_task, None, "{personality:?}: {:?}", off.errors);

    act_ok(&c, &slot, Action::PowerOn, &ctx).await;
    d.machine = apply_outcome(&d, &Outcome::Succeeded, Utc::now(), &cfg, Jitter::NONE).machine;
    assert_eq!(d.machine.state, State::WaitBIOSApplied);
    assert_eq!(d.machine.bios_task_monitor, monitor, "carried into the wait");
    let on = observe_until(&c, &slot, "power on", |o| o.facts.power == Some(PowerState::On)).await;
    assert!(on.errors.is_empty(), "{personality:?}: {:?}", on.errors);
    let deadline = Instant::now() + Duration::from_secs(10);
    let ended_by = loop {
        let observed = observe(&c, Some(&slot), &want_for_machine(&d.machine)).await;
        assert!(
            observed.errors.is_empty(),
            "{personality:?}: {:?}",
            observed.errors
        );
        let step = decide(&d, &observed.facts, Utc::now(), &cfg);
        if step.machine.state != State::WaitBIOSApplied || !tasks {
            d.machine = step.machine;
            break observed.facts.bios_task;
        }
        assert!(Instant::now() < deadline, "{personality:?}: task never completed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    if !tasks {
        // Nothing to poll: only the settle delay (a minute) can end the wait.
        assert_eq!((ended_by, d.machine.state), (None, State::WaitBIOSApplied));
        return;
    }
    assert_eq!(ended_by, Some(TaskState::Completed), "{personality:?}");
    assert_eq!(d.machine.state, State::VerifyBIOS);
    assert_eq!(d.machine.bios_task_monitor, None, "dropped once the wait is over");

    // Consumed: the monitor 404s from now on, which the wait reads as "unavailable".
    let again = Want {
        bios_task: monitor,
        ..Want::default()
    };
    let gone = observe(&c, Some(&slot), &again).await;
    assert_eq!(
        gone.facts.bios_task,
        Some(TaskState::Unavailable),
        "{:?}",
        gone.errors
    );
    let facts = observe(&c, Some(&slot), &want_for_machine(&d.machine))
        .await
        .facts;
    let step = decide(&d, &facts, Utc::now(), &cfg);
    assert_eq!(
        step.machine.state,
        State::PowerOffSecureBoot,
        "the attribute is in effect"
    );
}

#[tokio::test]
async fn bios_pass_generic() {
    bios_pass(Personality::Generic).await;
}

#[tokio::test]
async fn bios_pass_dell() {
    bios_pass(Personality::Dell).await;
}

#[tokio::test]
async fn bios_pass_hpe() {
    bios_pass(Personality::Hpe).await;
}

#[tokio::test]
async fn bios_pass_lenovo() {
    bios_pass(Personality::Lenovo).await;
}

#[tokio::test]
async fn bios_pass_supermicro() {
    bios_pass(Personality::Supermicro).await;
}

#[tokio::test]
async fn a_hanging_bmc_is_a_deadline_expiry() {
    let sim = start(Personality::Generic).await;
    let c = client(&sim);
    let slot = observe(&c, None, &Want::default()).await.slot.expect("slot");
    sim.set_faults(
        0,
        Faults {
            hang: true,
            ..Default::default()
        },
    );
    let short_call = c.with_deadline(Duration::from_millis(200));
    let acted = act(&short_call, &slot, &Action::PowerOff, &shipped_ctx()).await;
    assert_eq!(acted.outcome, Outcome::DeadlineExpired, "{acted:?}");
    let short_action = ActContext {
        deadline: Some(Duration::from_millis(200)),
        ..shipped_ctx()
    };
    let acted = act(&c, &slot, &Action::DetachMedia, &short_action).await;
    assert_eq!(acted.outcome, Outcome::DeadlineExpired, "{acted:?}");
    assert_eq!(acted.error.map(|f| f.class), Some("deadline".to_owned()));
}

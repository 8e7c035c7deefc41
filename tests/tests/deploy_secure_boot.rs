//! Secure boot end to end: after a deployment through the API, the worker pool and the simulated rack, every BMC
//! that lets Redfish write its key databases holds exactly the IncusOS certificates plus the allow-listed
//! Microsoft CAs it was shipped with; what is not allow-listed (the Windows PCA, the vendor PK, the factory dbx)
//! is gone, and a database that was right already (a pre-seeded KEK) received no request at all.

use std::collections::BTreeSet;
use std::time::Duration;

use racklift_bmc_sim::{MICROSOFT_KEK_CA_2011, MICROSOFT_UEFI_CA_2011, MICROSOFT_WINDOWS_PCA_2011};
use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_deploy::State;
use racklift_deploy::certificates::{INCUSOS, fingerprint_pem};
use racklift_deploy::facts::{Fingerprint, KeyDb};
use racklift_tests::rack::Rack;
use serde_json::json;

fn fingerprints<'a>(pems: impl IntoIterator<Item = &'a str>) -> BTreeSet<Fingerprint> {
    pems.into_iter().map(fingerprint_pem).collect()
}

fn incusos(db: KeyDb) -> impl Iterator<Item = &'static str> {
    INCUSOS.iter().filter(move |c| c.db == db).map(|c| c.pem)
}

/// Enrols `pem` into database `db` of server `i` through its Redfish API, as an operator would.
async fn seed_entry(rack: &Rack, i: usize, db: &str, pem: &str) {
    let (user, pass) = rack.sim.credentials();
    let system = if rack.sim.personality(i) == Personality::Generic {
        "437XR1138R2"
    } else {
        "1"
    };
    let url = format!(
        "{}/redfish/v1/Systems/{system}/SecureBoot/SecureBootDatabases/{db}/Certificates",
        rack.sim.bmc_url(i)
    );
    let r = rack
        .http
        .post(url)
        .basic_auth(user, Some(pass))
        .json(&json!({"CertificateString": pem, "CertificateType": "PEM"}))
        .send()
        .await
        .expect("enrol");
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_databases_end_as_incusos_plus_the_allow_list_and_a_correct_kek_is_left_alone() {
    let rack = Rack::start(5, PersonalityChoice::Mix, 0.002).await;
    // Server 0 (generic) had IncusOS's KEK enrolled beforehand: its KEK (the Microsoft KEK CA 2011 and IncusOS's)
    // is correct already, while PK and db are not.
    assert_eq!(rack.sim.personality(0), Personality::Generic);
    let kek = INCUSOS
        .iter()
        .find(|c| c.db == KeyDb::KEK)
        .expect("the IncusOS KEK");
    seed_entry(&rack, 0, "KEK", kek.pem).await;
    let marks: Vec<usize> = (0..rack.sim.len())
        .map(|i| rack.sim.audit(i).mutation_log.len())
        .collect();
    let factory: Vec<_> = (0..rack.sim.len()).map(|i| rack.sim.key_databases(i)).collect();

    rack.deploy_all().await;

    let want = |db: KeyDb, allowed: &[&'static str]| -> BTreeSet<Fingerprint> {
        fingerprints(incusos(db).chain(allowed.iter().copied()))
    };
    for i in 0..rack.sim.len() {
        let name = rack.sim.name(i).to_owned();
        let personality = rack.sim.personality(i);
        let d = rack.wait_finished(&name, Duration::from_secs(90)).await;
        assert_eq!(
            d.deployment.machine.state,
            State::Completed,
            "{name} ({personality:?}): {:?}\n{}",
            d.deployment.machine.failure,
            rack.event_log(&name).await
        );
        let now = rack.sim.key_databases(i);
        if matches!(personality, Personality::Hpe | Personality::Lenovo) {
            // Skipped (the demo request sets the flag): the factory databases stay as they were.
            assert_eq!(now, factory[i], "{name} ({personality:?})");
            continue;
        }
        let held = |db: &str| -> BTreeSet<Fingerprint> {
            now[db]
                .iter()
                .map(|e| {
                    if e.starts_with("-----BEGIN") {
                        fingerprint_pem(e)
                    } else {
                        Fingerprint(e.to_ascii_lowercase())
                    }
                })
                .collect()
        };
        let case = format!("{name} ({personality:?})");
        assert_eq!(held("PK"), want(KeyDb::PK, &[]), "{case}: PK");
        assert_eq!(
            held("KEK"),
            want(KeyDb::KEK, &[MICROSOFT_KEK_CA_2011]),
            "{case}: KEK"
        );
        assert_eq!(
            held("db"),
            want(KeyDb::Db, &[MICROSOFT_UEFI_CA_2011]),
            "{case}: db"
        );
        assert_eq!(held("dbx"), BTreeSet::new(), "{case}: dbx");
        assert!(
            !held("db").contains(&fingerprint_pem(MICROSOFT_WINDOWS_PCA_2011)),
            "{case}: the Windows PCA is not allow-listed"
        );
        assert_eq!(rack.sim.secure_boot_mode(i), "UserMode", "{case}");

        let audit = rack.sim.audit(i);
        let touched: Vec<String> = audit.mutation_log[marks[i]..]
            .iter()
            .filter(|m| m.path.contains("/SecureBootDatabases/"))
            .map(|m| format!("{} {}", m.method, m.path))
            .collect();
        let on = |db: &str| {
            touched
                .iter()
                .filter(|m| m.contains(&format!("/SecureBootDatabases/{db}/")))
                .count()
        };
        assert!(
            on("PK") >= 1 && on("db") >= 3,
            "{case}: PK (empty in setup mode) and db were rewritten: {touched:?}"
        );
        if i == 0 {
            assert_eq!(
                on("KEK"),
                0,
                "{case}: the correct KEK was left alone: {touched:?}"
            );
        } else {
            assert_eq!(
                on("KEK"),
                1,
                "{case}: one POST of IncusOS's KEK, nothing deleted: {touched:?}"
            );
        }
        assert!(
            audit.mutation_log.len() < racklift_bmc_sim::MUTATION_LOG_CAP,
            "{case}: the log is complete"
        );
    }
    rack.stop().await;
}

/// The pre-flight reads the BMC: an HPE-like or Lenovo-like server asked to enrol certificates is refused
/// up front with a 422 naming the flag; with the flag it is accepted and deploys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn servers_without_writable_key_databases_are_refused_unless_the_flag_is_set() {
    let rack = Rack::start(5, PersonalityChoice::Mix, 0.002).await;
    for i in [2, 3] {
        let name = rack.sim.name(i).to_owned();
        assert!(matches!(
            rack.sim.personality(i),
            Personality::Hpe | Personality::Lenovo
        ));
        let r = rack
            .deploy(&name, json!({"skip_secure_boot_certificates": false}))
            .await;
        assert_eq!(r.status(), 422, "{name}");
        let body: serde_json::Value = r.json().await.expect("an error body");
        assert_eq!(body["error"]["code"], "secure_boot_keys_not_writable", "{body}");
        assert_eq!(body["error"]["field"], "skip_secure_boot_certificates", "{body}");
        assert!(
            rack.store.latest_deployment(&name).await.expect("read").is_none(),
            "{name}"
        );

        let r = rack
            .deploy(&name, json!({"skip_secure_boot_certificates": true}))
            .await;
        assert_eq!(r.status(), 202, "{name}");
        let d = rack.wait_finished(&name, Duration::from_secs(90)).await;
        assert_eq!(
            d.deployment.machine.state,
            State::Completed,
            "{name}: {:?}",
            d.deployment.machine.failure
        );
    }
    rack.stop().await;
}

//! BIOS, secure boot, task monitors, sessions and auth.

use std::time::Duration;

use racklift_bmc_sim::Faults;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{self, Client, wait_for};

const LONG: Duration = Duration::from_secs(20);

async fn power_cycle_and_wait(c: &Client, sys: &Value) {
    let link = sys["@odata.id"].as_str().unwrap();
    let before = c.get(link).await["LastResetTime"].as_str().map(str::to_owned);
    c.reset(sys, "On").await;
    if before.is_some() {
        c.reset(sys, "ForceRestart").await;
    }
    wait_for("reset applied", LONG, || async {
        let s = c.get(link).await;
        let t = s["LastResetTime"].as_str().map(str::to_owned);
        (s["PowerState"] == "On" && t.is_some() && t != before).then_some(())
    })
    .await;
}

#[tokio::test]
async fn bios_values_are_staged_and_applied_at_the_next_reset_deferred_ones_a_pass_later() {
    let sim = common::start(1, "generic").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let bios_link = sys["Bios"]["@odata.id"].as_str().unwrap();
    let bios = c.get(bios_link).await;
    assert!(
        bios["Attributes"].get("SriovGlobalEnable").is_none(),
        "deferred attribute hidden until its prerequisite holds"
    );
    let settings = bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"]
        .as_str()
        .unwrap();
    let (status, _, body) = c
        .patch(
            settings,
            json!({"Attributes": {"IommuSupport": "Enabled", "SriovGlobalEnable": "Enabled"}}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(c.get(settings).await["Attributes"]["IommuSupport"], "Enabled");
    assert_eq!(
        c.get(bios_link).await["Attributes"]["IommuSupport"],
        "Disabled",
        "not before the reset"
    );

    power_cycle_and_wait(&c, &sys).await;
    let bios = c.get(bios_link).await;
    assert_eq!(bios["Attributes"]["IommuSupport"], "Enabled");
    assert_eq!(
        bios["Attributes"]["SriovGlobalEnable"], "Disabled",
        "deferred value rejected in the same pass"
    );
    let msg = &bios["@Redfish.Settings"]["Messages"][0];
    assert_eq!(msg["MessageId"], "Base.1.8.SettingsFailed");
    assert_eq!(msg["RelatedProperties"][0], "/Attributes/SriovGlobalEnable");

    c.patch(settings, json!({"Attributes": {"SriovGlobalEnable": "Enabled"}}))
        .await;
    power_cycle_and_wait(&c, &sys).await;
    assert_eq!(
        c.get(bios_link).await["Attributes"]["SriovGlobalEnable"],
        "Enabled"
    );

    let (status, _, _) = c.patch(settings, json!({"Attributes": {"NoSuchThing": 1}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, _) =
        c.patch(settings, json!({"Attributes": {"ProcTurboMode": "Disabled"}, "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}})).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "generic advertises no apply times"
    );
}

#[tokio::test]
async fn dell_bios_task_monitor_runs_until_the_reset_then_answers_once_then_404() {
    let sim = common::start(1, "dell").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let bios = c.get(sys["Bios"]["@odata.id"].as_str().unwrap()).await;
    let settings = bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"]
        .as_str()
        .unwrap();
    let (status, headers, _) = c
        .patch(settings, json!({"Attributes": {"ProcTurboMode": "Disabled"}, "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let monitor = headers["location"].to_str().unwrap().to_owned();
    assert_eq!(
        c.send(reqwest::Method::GET, &monitor, None, None).await.0,
        StatusCode::ACCEPTED
    );
    power_cycle_and_wait(&c, &sys).await;
    let (status, _, task) = c.send(reqwest::Method::GET, &monitor, None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(task["TaskState"], "Completed");
    assert_eq!(
        c.send(reqwest::Method::GET, &monitor, None, None).await.0,
        StatusCode::NOT_FOUND,
        "consumed"
    );
    let task_link = task["@odata.id"].as_str().unwrap();
    assert_eq!(c.get(task_link).await["TaskState"], "Completed");
}

#[tokio::test]
async fn hpe_secure_boot_reset_is_a_task_and_forgotten_after_a_bmc_reset() {
    let sim = common::start(1, "hpe").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let sb = c.get(sys["SecureBoot"]["@odata.id"].as_str().unwrap()).await;
    let target = sb["Actions"]["#SecureBoot.ResetKeys"]["target"].as_str().unwrap();
    let (status, headers, _) = c.post(target, json!({"ResetKeysType": "DeleteAllKeys"})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let monitor = headers["location"].to_str().unwrap().to_owned();
    let http = reqwest::Client::new();
    let reset = format!("{}/servers/{}/bmc-reset", sim.control_url(), sim.name(0));
    assert!(http.post(reset).send().await.unwrap().status().is_success());
    assert_eq!(
        c.send(reqwest::Method::GET, &monitor, None, None).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        c.get(sb["@odata.id"].as_str().unwrap()).await["SecureBootMode"],
        "SetupMode"
    );
}

#[tokio::test]
async fn forget_task_monitors_fault_answers_404() {
    let sim = common::start(1, "dell").await;
    let c = Client::new(&sim);
    sim.set_faults(
        0,
        Faults {
            forget_task_monitors: true,
            ..Faults::default()
        },
    );
    let sys = c.system(&sim.bmc_url(0)).await;
    let bios = c.get(sys["Bios"]["@odata.id"].as_str().unwrap()).await;
    let settings = bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"]
        .as_str()
        .unwrap();
    let (status, headers, _) = c
        .patch(settings, json!({"Attributes": {"ProcTurboMode": "Disabled"}}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let monitor = headers["location"].to_str().unwrap();
    assert_eq!(
        c.send(reqwest::Method::GET, monitor, None, None).await.0,
        StatusCode::NOT_FOUND
    );
}

/// PK has one owner, and its presence is the mode: deleting it enters setup mode, enrolling one
/// (after the old one is gone) leaves it for user mode, a second one is refused.
#[tokio::test]
async fn platform_key_decides_the_mode() {
    let sim = common::start(1, "dell").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let sb_link = sys["SecureBoot"]["@odata.id"].as_str().unwrap().to_owned();
    let sb = c.get(&sb_link).await;
    assert_eq!(sb["SecureBootMode"], "DeployedMode");
    let dbs = c
        .get(sb["SecureBootDatabases"]["@odata.id"].as_str().unwrap())
        .await;
    let pk_link = dbs["Members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["@odata.id"].as_str().unwrap())
        .find(|l| l.ends_with("/PK"))
        .unwrap()
        .to_owned();
    let certs_link = format!("{pk_link}/Certificates");
    let vendor_pk = sim.key_databases(0)["PK"].clone();
    assert_eq!(vendor_pk.len(), 1);
    assert!(vendor_pk[0].starts_with("-----BEGIN CERTIFICATE-----"));
    let enroll =
        json!({"CertificateString": racklift_bmc_sim::MICROSOFT_KEK_CA_2011, "CertificateType": "PEM"});

    let (status, _, body) = c.post(&certs_link, enroll.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["@Message.ExtendedInfo"][0]["MessageId"]
            .as_str()
            .is_some_and(|id| id.ends_with("PropertyValueConflict")),
        "{body}"
    );

    let members = c.get(&certs_link).await["Members"].clone();
    let entry = members[0]["@odata.id"].as_str().unwrap();
    assert_eq!(
        c.send(reqwest::Method::DELETE, entry, None, None).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(c.get(&sb_link).await["SecureBootMode"], "SetupMode");
    assert_eq!(c.get(&sb_link).await["SecureBootCurrentBoot"], "Disabled");

    let (status, _, _) = c.post(&certs_link, enroll).await;
    assert_eq!(status, StatusCode::CREATED);
    let sb = c.get(&sb_link).await;
    assert_eq!(sb["SecureBootMode"], "UserMode");
    assert_eq!(sb["SecureBootCurrentBoot"], "Enabled");
    // The reference copy is read-only and still holds the vendor's key.
    assert_eq!(
        c.post(
            &format!("{pk_link}Default/Certificates"),
            json!({"CertificateString": vendor_pk[0]})
        )
        .await
        .0,
        StatusCode::METHOD_NOT_ALLOWED
    );
    let audit = sim.audit(0);
    let methods: Vec<&str> = audit.mutation_log.iter().map(|m| m.method.as_str()).collect();
    assert_eq!(methods, ["POST", "DELETE", "POST", "POST"], "{audit:?}");
    assert!(
        audit.mutation_log.iter().all(|m| m.path.contains("/SecureBoot/")),
        "{audit:?}"
    );
}

#[tokio::test]
async fn secure_boot_databases_enroll_delete_and_reset() {
    let sim = common::start(1, "generic").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let sb = c.get(sys["SecureBoot"]["@odata.id"].as_str().unwrap()).await;
    let dbs = c
        .get(sb["SecureBootDatabases"]["@odata.id"].as_str().unwrap())
        .await;
    let db_link = dbs["Members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["@odata.id"].as_str().unwrap())
        .find(|l| l.ends_with("/db"))
        .unwrap();
    let db = c.get(db_link).await;
    assert_eq!(db["DatabaseId"], "db");
    let certs_link = db["Certificates"]["@odata.id"].as_str().unwrap();
    let certs = c.get(certs_link).await;
    assert_eq!(certs["@Redfish.SupportedCertificates"], json!(["PEM"]));
    let before = certs["Members"].as_array().unwrap().len();
    // Factory db: the Microsoft UEFI CA 2011 and the Windows Production PCA 2011.
    let factory: Vec<String> = sim.key_databases(0)["db"].clone();
    assert_eq!(
        factory,
        [
            racklift_bmc_sim::MICROSOFT_UEFI_CA_2011,
            racklift_bmc_sim::MICROSOFT_WINDOWS_PCA_2011
        ]
    );
    assert_eq!(before, 2);
    // What is not one DER certificate is refused, as firmware does.
    let stand_in = "-----BEGIN CERTIFICATE-----\nTUlJQw==\n-----END CERTIFICATE-----\n";
    let (status, _, body) = c
        .post(
            certs_link,
            json!({"CertificateString": stand_in, "CertificateType": "PEM"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let pem = racklift_bmc_sim::MICROSOFT_KEK_CA_2011;
    let (status, headers, _) = c
        .post(
            certs_link,
            json!({"CertificateString": pem, "CertificateType": "PEM"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let entry = headers["location"].to_str().unwrap().to_owned();
    assert_eq!(c.get(&entry).await["CertificateString"], pem);
    assert_eq!(
        c.get(certs_link).await["Members"].as_array().unwrap().len(),
        before + 1
    );
    assert_eq!(
        c.send(reqwest::Method::DELETE, &entry, None, None).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        c.send(reqwest::Method::DELETE, &entry, None, None).await.0,
        StatusCode::NOT_FOUND
    );
    let target = sb["Actions"]["#SecureBoot.ResetKeys"]["target"].as_str().unwrap();
    assert_eq!(
        c.post(target, json!({"ResetKeysType": "DeleteAllKeys"})).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        c.get(sb["@odata.id"].as_str().unwrap()).await["SecureBootMode"],
        "SetupMode"
    );
    assert_eq!(c.get(certs_link).await["Members"].as_array().unwrap().len(), 0);
    assert_eq!(
        c.post(target, json!({"ResetKeysType": "ResetAllKeysToDefault"}))
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        c.get(certs_link).await["Members"].as_array().unwrap().len(),
        before
    );
    let (status, _, _) = c
        .patch(
            sb["@odata.id"].as_str().unwrap(),
            json!({"SecureBootEnable": true}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn auth_is_required_except_for_the_service_root_and_sessions_work() {
    let sim = common::start(1, "generic").await;
    let http = reqwest::Client::new();
    let base = sim.bmc_url(0);
    assert_eq!(
        http.get(format!("{base}/redfish/v1"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        http.get(format!("{base}/redfish/v1/Systems"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::UNAUTHORIZED
    );
    let wrong = http
        .get(format!("{base}/redfish/v1/Systems"))
        .basic_auth("admin", Some("nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let login = http
        .post(format!("{base}/redfish/v1/SessionService/Sessions"))
        .json(&json!({"UserName": "admin", "Password": "password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::CREATED);
    let token = login.headers()["x-auth-token"].to_str().unwrap().to_owned();
    let location = login.headers()["location"].to_str().unwrap().to_owned();
    let ok = http
        .get(format!("{base}/redfish/v1/Systems"))
        .header("X-Auth-Token", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let del = http
        .delete(format!("{}{location}", sim.base_url()))
        .header("X-Auth-Token", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), StatusCode::NO_CONTENT);
    let gone = http
        .get(format!("{base}/redfish/v1/Systems"))
        .header("X-Auth-Token", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn tls_serves_the_reported_self_signed_certificate() {
    let config = racklift_bmc_sim::SimConfig::new(1, "generic".parse().unwrap()).with_tls(true);
    let sim = racklift_bmc_sim::Sim::start(config).await.unwrap();
    assert!(sim.bmc_url(0).starts_with("https://"));
    assert!(sim.cert_pem().unwrap().contains("BEGIN CERTIFICATE"));
    let http = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let r = http
        .get(format!("{}/redfish/v1", sim.bmc_url(0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let strict = reqwest::Client::new();
    assert!(
        strict
            .get(format!("{}/redfish/v1", sim.bmc_url(0)))
            .send()
            .await
            .is_err(),
        "untrusted by default"
    );
}

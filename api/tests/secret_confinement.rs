//! BMC password references are confined to the secrets directory and the secret prefix. Against a running API and
//! a BMC on loopback that records every connection and byte: each reference outside the rules is refused with a
//! 422 naming `bmc_password_ref`, when the server is registered and again at the deploy pre-flight for a row
//! stored past the API's checks (by an older version, or by hand); no answer names a host path; the API answers
//! `/metrics` while the pre-flight runs (a FIFO or `/dev/zero` must not hold it); and nothing reaches the BMC.
//! A server with a good reference shows the same BMC would have received the password.

mod common;

use std::time::Duration;

use common::{ADMIN, Api, OPERATOR, code, field};
use racklift_bmc_sim::recorder::RecordingBmc;
use racklift_store::NewServer;
use reqwest::Method;
use serde_json::{Value, json};

/// Generous against a loaded machine: what is checked is that neither request waits on the secret's read.
const ANSWERED_WITHIN: Duration = Duration::from_secs(20);

fn mkfifo(path: &std::path::Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The deploy request and a `/metrics` scrape at once; both must be answered.
async fn deploy_beside_metrics(api: &Api, name: &str, token: &str) -> (u16, Value) {
    let deploy = async {
        let r = api
            .req(
                Method::POST,
                &format!("/1.0/provisioning/servers/{name}:deploy"),
                Some(OPERATOR),
            )
            .json(&json!({ "token": token, "seed": "web" }));
        common::read(r.send().await.expect("deploy request")).await
    };
    let metrics = async { api.req(Method::GET, "/metrics", None).send().await };
    let (deployed, metrics) = tokio::time::timeout(ANSWERED_WITHIN, async { tokio::join!(deploy, metrics) })
        .await
        .unwrap_or_else(|_| panic!("{name}: the deploy and /metrics were not both answered in time"));
    let metrics = metrics.expect("metrics request");
    assert_eq!(metrics.status().as_u16(), 200, "{name}: /metrics");
    deployed
}

/// An answer about a reference: 422 naming `bmc_password_ref`, with one of the reference codes, and no host path
/// or file contents in it.
fn assert_refused(what: &str, (status, v): &(u16, Value), api: &Api) {
    assert_eq!(
        (*status, field(v)),
        (422, Some("bmc_password_ref")),
        "{what}: {v}"
    );
    assert!(
        [
            "bad_password_ref",
            "outside_secrets_dir",
            "bmc_password_unreadable"
        ]
        .contains(&code(v)),
        "{what}: {v}"
    );
    let text = v.to_string();
    for leak in [
        api.dirs.base.display().to_string(),
        "/etc/".to_owned(),
        "/proc/".to_owned(),
        "/dev/".to_owned(),
        "not-for-bmcs".to_owned(),
    ] {
        assert!(!text.contains(&leak), "{what}: the answer shows {leak:?}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn references_outside_the_rules_never_reach_a_bmc() {
    let api = Api::start().await;
    let secrets = api.dirs.secrets();
    std::fs::write(api.dirs.base.join("outside"), "not-for-bmcs").unwrap();
    std::os::unix::fs::symlink(api.dirs.base.join("outside"), secrets.join("link-out")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", secrets.join("zero")).unwrap();
    mkfifo(&secrets.join("fifo"));
    std::fs::write(secrets.join("huge"), vec![b'x'; 1024 * 1024]).unwrap();
    let (token, _) = common::deploy_catalog(&api, 4096).await;
    common::set_public_address(&api).await;
    let bmc = RecordingBmc::start().await.expect("recording BMC");

    // (reference, whether registering it is accepted: only a variable not set yet is).
    let cases = [
        ("file:../x", false),
        ("file:/etc/passwd", false),
        ("file:/proc/self/environ", false),
        ("file:link-out", false),
        ("file:fifo", false),
        ("file:zero", false),
        ("file:huge", false),
        ("env:DATABASE_URL", false),
        ("env:HOME", false),
        ("env:RACKLIFT_SECRET_UNSET", true),
    ];
    for (i, (reference, accepted)) in cases.into_iter().enumerate() {
        let name = format!("c{i}");
        let body = json!({ "name": name, "bmc_address": bmc.url, "bmc_username": "root",
                           "bmc_password_ref": reference, "allow_plain_http": true });
        let created = api.call(Method::POST, "/1.0/servers", ADMIN, Some(body)).await;
        if accepted {
            assert_eq!(created.0, 201, "{reference}: {}", created.1);
        } else {
            assert_refused(&format!("registering {reference}"), &created, &api);
            // The row an older version (or SQL by hand) could have left: the pre-flight refuses it too.
            api.store
                .create_server(&NewServer {
                    name: name.clone(),
                    bmc_address: bmc.url.clone(),
                    bmc_username: "root".into(),
                    bmc_password_ref: Some(reference.into()),
                    bmc_cert_pin: None,
                    bmc_insecure: false,
                    allow_plain_http: true,
                    vendor_hint: None,
                    system_id: None,
                })
                .await
                .expect("store the row directly");
        }
        let deployed = deploy_beside_metrics(&api, &name, &token).await;
        assert_refused(&format!("deploying {reference}"), &deployed, &api);
        assert_eq!(bmc.seen(), (0, 0), "{reference} reached the BMC");
    }

    // A good reference to the same BMC: its password is sent (and the BMC, hanging up, fails the pre-flight).
    std::fs::write(secrets.join("good"), "the-good-password\n").unwrap();
    let body = json!({ "name": "good", "bmc_address": bmc.url, "bmc_username": "root",
                       "bmc_password_ref": "file:good", "allow_plain_http": true });
    let (s, v) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(body)).await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = deploy_beside_metrics(&api, "good", &token).await;
    assert_eq!((s, code(&v)), (502, "bmc_unreachable"), "{v}");
    let head = String::from_utf8_lossy(&bmc.heads()).to_lowercase();
    assert!(head.contains("authorization: basic "), "{head}");
    api.stop().await;
}

/// A reference that is allowed but does not resolve (yet) is registered, and the pre-flight says what is wrong
/// with it; a change of a server's reference is held to the same rules as a new one.
#[tokio::test]
async fn a_reference_is_checked_when_changed_and_resolved_at_pre_flight() {
    let api = Api::start().await;
    let (token, _) = common::deploy_catalog(&api, 4096).await;
    common::set_public_address(&api).await;
    let body = json!({ "name": "later", "bmc_address": "http://127.0.0.1:9", "bmc_username": "root",
                       "bmc_password_ref": "file:rack-a/later", "allow_plain_http": true });
    let (s, v) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(body)).await;
    assert_eq!(s, 201, "a file not provisioned yet is accepted: {v}");
    let (s, v) = deploy_beside_metrics(&api, "later", &token).await;
    assert_eq!((s, code(&v)), (422, "bmc_password_unreadable"), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("bmc_password_ref"),
        "{v}"
    );

    for (reference, expected) in [
        ("file:/etc/shadow", "bad_password_ref"),
        ("env:PATH", "bad_password_ref"),
        ("hunter2", "bad_password_ref"),
    ] {
        let (s, v) = api
            .call(
                Method::PATCH,
                "/1.0/servers/later",
                ADMIN,
                Some(json!({ "bmc_password_ref": reference })),
            )
            .await;
        assert_eq!(
            (s, code(&v), field(&v)),
            (422, expected, Some("bmc_password_ref")),
            "{reference}: {v}"
        );
    }
    let (s, v) = api
        .call(
            Method::PATCH,
            "/1.0/servers/later",
            ADMIN,
            Some(json!({ "bmc_password_ref": "env:RACKLIFT_SECRET_RACK_A" })),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    api.stop().await;
}

//! The update catalog end to end: an admin publishes files lying in the images directory; a registered server's
//! simulated IncusOS, presenting its own client certificate over TLS 1.3 and trusting exactly the API's
//! certificate, lists, fetches and verifies them, and stages the version; a tampered file is refused; callers
//! without a registered certificate or a token get 403 in the Incus envelope; downloads honour Range.

mod common;

use std::time::Duration;

use common::{ADMIN, Api, VIEWER, code, field, read, wait_for};
use racklift_bmc_sim::register::{self, ClientIdentity, OperationsCenter, RegisterError};
use racklift_bmc_sim::seed::Provider;
use racklift_bmc_sim::{Personality, PersonalityChoice, Sim, SimConfig, SimHandle};
use racklift_media::SeedFiles;
use racklift_media::seed::{Manager, SeedConfig};
use racklift_store::NewServer;
use reqwest::Method;
use serde_json::{Value, json};

const VERSION: &str = "202612010000";

fn sha256(data: &[u8]) -> String {
    racklift_store::sha256_hex(data)
}

/// Writes the update's files into the images directory and publishes them; returns the update's uuid and the
/// files' paths.
async fn publish(api: &Api, files: &[(&str, Vec<u8>)]) -> (String, Vec<std::path::PathBuf>) {
    let dir = api.dirs.images().join(VERSION);
    std::fs::create_dir_all(&dir).unwrap();
    let mut paths = Vec::new();
    let mut listed = Vec::new();
    for (name, data) in files {
        let path = dir.join(name);
        std::fs::write(&path, data).unwrap();
        let c = racklift_api::update_catalog::classify(name).expect("an update file name");
        listed.push(
            json!({ "filename": name, "path": path.display().to_string(), "size": data.len(),
            "sha256": sha256(data), "component": c.component, "type": c.file_type,
            "architecture": c.architecture.unwrap_or("x86_64") }),
        );
        paths.push(path);
    }
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/provisioning/updates",
            ADMIN,
            Some(json!({ "version": VERSION, "channels": ["stable"], "files": listed })),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    (v["uuid"].as_str().unwrap().to_owned(), paths)
}

fn update_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "IncusOS_202612010000.efi.gz",
            (0..70_000u32).map(|i| (i % 253) as u8).collect(),
        ),
        (
            "IncusOS_202612010000.usr-x86-64.raw.gz",
            (0..150_000u32).map(|i| (i % 241) as u8).collect(),
        ),
        ("incus.raw.gz", b"the incus application".to_vec()),
    ]
}

/// The provider settings a deployment's seed gives a server: the API's address, trusting exactly its certificate.
fn manager(api: &Api) -> Manager {
    Manager {
        server_url: api.base.clone(),
        server_token: "0".repeat(64),
        server_certificate: api.certificate_pem.clone(),
    }
}

/// A simulated server whose installed OS runs from a seed naming the API as its provider (as a deployment's
/// would), registered in the catalog with its client certificate.
async fn registered_server(api: &Api) -> SimHandle {
    let sim =
        Sim::start(SimConfig::new(1, PersonalityChoice::Single(Personality::Generic)).with_time_scale(0.001))
            .await
            .expect("simulator");
    // Incus trusts racklift's client certificate through the seed's preseed (the server does not register here).
    let identity = api.store.client_identity().await.expect("racklift's identity");
    let preseed = json!({"certificates": [
        {"name": "racklift", "type": "client", "certificate": identity.certificate_pem}
    ]});
    let config = SeedConfig {
        incus_preseed: preseed.as_object().cloned(),
        ..SeedConfig::default()
    };
    let seed = SeedFiles::for_deployment(&config, &manager(api), "stable")
        .archive()
        .expect("a seed archive");
    sim.boot_installed(0, &seed.bytes).expect("the seed parses");
    let sha256 = wait_for("the installed OS to run", Duration::from_secs(30), || async {
        (sim.truth(0)["phase"]["phase"] == "os_running")
            .then(|| sim.client_certificate_sha256(0))
            .flatten()
    })
    .await;
    api.store
        .create_server(&NewServer {
            name: "node1".into(),
            ..NewServer::default()
        })
        .await
        .expect("server");
    api.store
        .set_client_certificate("node1", Some(&sha256))
        .await
        .expect("its certificate");
    sim
}

/// A client of the servers' Incus APIs presenting racklift's client identity (mutual TLS).
async fn incus_client(api: &Api) -> reqwest::Client {
    let identity = api.store.client_identity().await.expect("racklift's identity");
    let pem = format!("{}{}", identity.key_pem, identity.certificate_pem);
    reqwest::Client::builder()
        .identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"))
        .tls_danger_accept_invalid_certs(true)
        .build()
        .expect("client")
}

fn incus_url(sim: &SimHandle) -> String {
    sim.incus_url(0).expect("Incus runs")
}

async fn os_update_state(api: &Api, sim: &SimHandle) -> Value {
    let http = incus_client(api).await;
    let r = http
        .get(format!("{}/os/1.0/system/update", incus_url(sim)))
        .send()
        .await
        .unwrap();
    r.json::<Value>().await.unwrap()["metadata"]["state"].clone()
}

async fn check(api: &Api, sim: &SimHandle) -> u16 {
    incus_client(api)
        .await
        .post(format!("{}/os/1.0/system/update/:check", incus_url(sim)))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_registered_server_fetches_verifies_and_stages_a_published_update() {
    let api = Api::start_tls().await;
    let (uuid, _) = publish(&api, &update_files()).await;

    // What IncusOS reads, through an API token here.
    let (s, list) = api
        .call(Method::GET, "/1.0/provisioning/updates", VIEWER, None)
        .await;
    assert_eq!(s, 200, "{list}");
    assert_eq!(
        (list["type"].as_str(), list["status_code"].as_u64()),
        (Some("sync"), Some(200))
    );
    assert_eq!(
        list["metadata"],
        json!([format!("/1.0/provisioning/updates/{uuid}")])
    );
    let (_, recursive) = api
        .call(Method::GET, "/1.0/provisioning/updates?recursion=1", VIEWER, None)
        .await;
    assert_eq!(recursive["metadata"][0]["version"], VERSION);
    assert_eq!(recursive["metadata"][0]["channels"], json!(["stable"]));
    // Deeper than Incus defines: refused in the envelope, naming the parameter.
    let (s, deep) = api
        .call(Method::GET, "/1.0/provisioning/updates?recursion=3", VIEWER, None)
        .await;
    assert_eq!(
        (s, &deep["metadata"]["field"]),
        (400, &json!("recursion")),
        "{deep}"
    );
    let (_, files) = api
        .call(
            Method::GET,
            &format!("/1.0/provisioning/updates/{uuid}/files"),
            VIEWER,
            None,
        )
        .await;
    let files = files["metadata"].as_array().expect("files").clone();
    assert_eq!(files.len(), 3);
    let efi = files
        .iter()
        .find(|f| f["type"] == "update-efi")
        .expect("the EFI file");
    assert_eq!(
        (efi["component"].as_str(), efi["architecture"].as_str()),
        (Some("os"), Some("x86_64"))
    );
    assert_eq!(efi["size"], 70_000);
    let app = files
        .iter()
        .find(|f| f["filename"] == "incus.raw.gz")
        .expect("the application");
    assert_eq!(
        (app["component"].as_str(), app["type"].as_str()),
        (Some("incus"), Some("application"))
    );

    // The simulated IncusOS, by its certificate: stages the version after checking every file.
    let sim = registered_server(&api).await;
    assert_eq!(
        check(&api, &sim).await,
        200,
        "{}",
        os_update_state(&api, &sim).await
    );
    let state = os_update_state(&api, &sim).await;
    assert_eq!(state["needs_reboot"], true, "{state}");
    assert_eq!(state["status"], format!("Update {VERSION} staged"), "{state}");
    assert_eq!(sim.truth(0)["os"]["staged_version"], VERSION);
    // The update's `incus` file stages the application too (applied at the reboot or its restart).
    let app: Value = incus_client(&api)
        .await
        .get(format!("{}/os/1.0/applications/incus", incus_url(&sim)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let available = app["metadata"]["state"]["available_versions"].clone();
    assert_eq!(available[1], VERSION, "{app}");
}

#[tokio::test]
async fn a_tampered_file_is_refused_by_the_simulator_and_nothing_is_staged() {
    let api = Api::start_tls().await;
    let (_, paths) = publish(&api, &update_files()).await;
    // Same size, other bytes: only the SHA-256 tells.
    let mut data = std::fs::read(&paths[1]).unwrap();
    data[100] ^= 0xff;
    std::fs::write(&paths[1], &data).unwrap();
    let sim = registered_server(&api).await;
    assert_eq!(check(&api, &sim).await, 500);
    let state = os_update_state(&api, &sim).await;
    assert_eq!(state["needs_reboot"], false, "{state}");
    let status = state["status"].as_str().unwrap_or_default();
    assert!(
        status.contains("refused") && status.contains("usr-x86-64"),
        "{state}"
    );
    assert!(sim.truth(0)["os"]["staged_version"].is_null());
}

#[tokio::test]
async fn callers_without_a_registered_certificate_or_a_token_get_403_in_the_incus_envelope() {
    let api = Api::start_tls().await;
    let (uuid, _) = publish(&api, &update_files()).await;
    let paths = [
        "/1.0/provisioning/updates".to_owned(),
        format!("/1.0/provisioning/updates/{uuid}/files"),
        format!("/1.0/provisioning/updates/{uuid}/files/incus.raw.gz"),
    ];
    // An unregistered certificate: an Incus client certificate the catalog does not know, sent by the
    // simulated IncusOS's own provider client.
    let stranger = ClientIdentity::generate("stranger").unwrap();
    let m = manager(&api);
    let provider = OperationsCenter::from_provider(&Provider {
        name: "operations-center".to_owned(),
        config: [
            ("server_url".to_owned(), m.server_url),
            ("server_token".to_owned(), m.server_token),
            ("server_certificate".to_owned(), m.server_certificate.unwrap()),
        ]
        .into(),
        ..Provider::default()
    })
    .unwrap()
    .unwrap();
    let with_cert = register::client(&provider, &stranger).unwrap();
    for path in &paths {
        for (who, request) in [
            ("nobody", api.req(Method::GET, path, None)),
            ("a garbage token", api.req(Method::GET, path, Some("not-a-token"))),
            (
                "an unknown certificate",
                with_cert.get(format!("{}{path}", api.base)),
            ),
        ] {
            let (s, v) = read(request.send().await.unwrap()).await;
            assert_eq!(s, 403, "{path} as {who}: {v}");
            assert_eq!(
                (v["type"].as_str(), v["error_code"].as_u64()),
                (Some("error"), Some(403)),
                "{v}"
            );
            assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
        }
    }
    // The provider's own parser reports the manager's error.
    let refused = register::get::<Value>(&with_cert, &provider, &paths[0]).await;
    assert!(matches!(refused, Err(RegisterError::Refused(_))), "{refused:?}");
}

#[tokio::test]
async fn update_files_honour_range_and_content_length() {
    let api = Api::start_tls().await;
    let files = update_files();
    let (uuid, _) = publish(&api, &files).await;
    let path = format!("/1.0/provisioning/updates/{uuid}/files/{}", files[0].0);
    let whole = api.req(Method::GET, &path, Some(VIEWER)).send().await.unwrap();
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.content_length(), Some(70_000));
    assert_eq!(whole.bytes().await.unwrap().as_ref(), files[0].1.as_slice());
    let part = api
        .req(Method::GET, &path, Some(VIEWER))
        .header("Range", "bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(
        part.headers()["content-range"].to_str().unwrap(),
        "bytes 1000-1999/70000"
    );
    assert_eq!(part.content_length(), Some(1000));
    assert_eq!(part.bytes().await.unwrap().as_ref(), &files[0].1[1000..2000]);
    let tail = api
        .req(Method::GET, &path, Some(VIEWER))
        .header("Range", "bytes=69990-")
        .send()
        .await
        .unwrap();
    assert_eq!(tail.status(), 206);
    assert_eq!(tail.bytes().await.unwrap().as_ref(), &files[0].1[69_990..]);
    let beyond = api
        .req(Method::GET, &path, Some(VIEWER))
        .header("Range", "bytes=80000-")
        .send()
        .await
        .unwrap();
    assert_eq!(beyond.status(), 416);
    let (s, v) = read(
        api.req(
            Method::GET,
            &format!("/1.0/provisioning/updates/{uuid}/files/nope.gz"),
            Some(VIEWER),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((s, v["type"].as_str()), (404, Some("error")), "{v}");
}

#[tokio::test]
async fn a_bad_file_or_a_sha_mismatch_is_refused_naming_the_field() {
    let api = Api::start().await;
    let data = b"update bytes".to_vec();
    let path = api.dirs.images().join("IncusOS_1.efi.gz");
    std::fs::write(&path, &data).unwrap();
    let file = |sha: &str, at: &str| {
        json!({ "filename": "IncusOS_1.efi.gz", "path": at, "size": data.len(),
        "sha256": sha, "component": "os", "type": "update-efi", "architecture": "x86_64" })
    };
    let good = sha256(&data);
    let outside = std::env::temp_dir().join(format!("racklift-outside-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&outside, &data).unwrap();
    for (files, status, expect_code, expect_field) in [
        (
            json!([file(&"0".repeat(64), &path.display().to_string())]),
            422,
            "sha256_mismatch",
            "files[0].sha256",
        ),
        (
            json!([file(&good, &outside.display().to_string())]),
            422,
            "outside_images_dir",
            "files[0].path",
        ),
        (
            json!([{ "filename": "IncusOS_1.efi.gz", "path": path.display().to_string(), "size": 1, "sha256": good,
            "component": "os", "type": "update-efi", "architecture": "x86_64" }]),
            422,
            "size_mismatch",
            "files[0].size",
        ),
        (
            json!([{ "filename": "IncusOS_1.efi.gz", "path": path.display().to_string(), "size": data.len(),
            "sha256": good, "component": "os", "type": "firmware", "architecture": "x86_64" }]),
            400,
            "invalid_field",
            "files[0].type",
        ),
    ] {
        let (s, v) = api
            .call(
                Method::POST,
                "/1.0/provisioning/updates",
                ADMIN,
                Some(json!({ "version": "1", "channels": ["stable"], "files": files })),
            )
            .await;
        assert_eq!(
            (s, code(&v), field(&v)),
            (status, expect_code, Some(expect_field)),
            "{v}"
        );
    }
    let _ = std::fs::remove_file(outside);
    let (s, _) = api
        .call(Method::POST, "/1.0/provisioning/updates", ADMIN,
            Some(json!({ "version": "1", "channels": ["stable"], "files": [file(&good, &path.display().to_string())] })))
        .await;
    assert_eq!(s, 201);
}

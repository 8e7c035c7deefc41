//! The update catalog end to end: a server deployed through the API, the worker pool and the simulated rack
//! registers over TLS 1.3 with its Incus client certificate and receives racklift's; then, checking for updates
//! exactly as IncusOS does (its provider from the seed on its disk, that same certificate, the API's certificate
//! trusted alone), it lists, fetches and verifies what an admin published and stages it.

use std::time::Duration;

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_tests::rack::Rack;
use serde_json::{Value, json};

const VERSION: &str = "202612020000";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deployed_server_stages_a_published_update_through_its_registered_certificate() {
    let rack = Rack::start(1, PersonalityChoice::Single(Personality::Generic), 0.002).await;
    rack.deploy_all().await;
    let name = rack.sim.name(0).to_owned();
    rack.wait_completed(&name, Duration::from_secs(90)).await;

    // Registration recorded the certificate the server presented and handed it racklift's.
    let presented = rack
        .sim
        .client_certificate_sha256(0)
        .expect("the server's certificate");
    assert_eq!(rack.stored_client_certificate(&name).await, Some(presented));
    let identity = rack.store.client_identity().await.unwrap();
    let truth = rack.sim.truth(0);
    assert_eq!(
        truth["os"]["trusted_certificates"],
        json!([identity.certificate_pem]),
        "{truth}"
    );

    // An admin publishes an update lying in the images directory.
    let dir = rack.images_dir().join(VERSION);
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (file, data) in [
        (format!("x86_64/IncusOS_{VERSION}.efi.gz"), gzip(&[7u8; 40_000])),
        (
            format!("x86_64/IncusOS_{VERSION}.usr-x86-64.0a1b.raw.gz"),
            gzip(&[8u8; 30_000]),
        ),
        (
            format!("x86_64/IncusOS_{VERSION}.usr-x86-64-verity.0a1b.raw.gz"),
            gzip(&[9u8; 3_000]),
        ),
        (
            format!("x86_64/IncusOS_{VERSION}.usr-x86-64-verity-sig.0a1b.raw.gz"),
            gzip(&[10u8; 300]),
        ),
        ("x86_64/incus.raw.gz".to_owned(), gzip(b"the incus application")),
    ] {
        let path = dir.join(&file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &data).unwrap();
        let c = racklift_api::update_catalog::classify(&file).expect("an update file name");
        files.push(
            json!({ "filename": file, "path": path.display().to_string(), "size": data.len(),
            "sha256": racklift_store::sha256_hex(&data), "component": c.component, "type": c.file_type,
            "architecture": c.architecture.unwrap_or("") }),
        );
    }
    let r = rack
        .admin(reqwest::Method::POST, "/1.0/provisioning/updates")
        .json(&json!({ "version": VERSION, "channels": ["stable"], "files": files }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());

    // The installed OS checks, as `POST /os/1.0/system/update/:check` makes it.
    // racklift's client identity, which the server trusts since its registration (mutual TLS).
    let pem = format!("{}{}", identity.key_pem, identity.certificate_pem);
    let http = reqwest::Client::builder()
        .identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"))
        .tls_danger_accept_invalid_certs(true)
        .build()
        .expect("client");
    let incus = rack.sim.incus_url(0).expect("Incus runs");
    let checked = http
        .post(format!("{incus}/os/1.0/system/update/:check"))
        .send()
        .await
        .unwrap();
    let status = checked.status();
    assert!(
        status.is_success(),
        "{status}: {}",
        checked.text().await.unwrap_or_default()
    );
    let update: Value = http
        .get(format!("{incus}/os/1.0/system/update"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let state = &update["metadata"]["state"];
    assert_eq!(state["needs_reboot"], true, "{update}");
    assert_eq!(
        state["status"],
        format!("IncusOS has been updated to version {VERSION}"),
        "{update}"
    );
    rack.stop().await;
}

/// `data` as gzip, as IncusOS's publisher writes every update file and IncusOS gunzips every download.
fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

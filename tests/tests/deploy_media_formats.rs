//! Install media in both formats IncusOS publishes, end to end against the simulated rack: an `.iso` (2048-byte
//! sectors) deployed through a CD slot booted `Cd`, an `.img.gz` registered, decompressed and deployed through a
//! USBStick slot booted `Usb`; and a registered server reinstalled with the same version, which IncusOS accepts
//! only with `force_install` and the first six characters of its machine-id.

use std::time::Duration;

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_tests::rack::Rack;
use reqwest::Method;
use serde_json::{Value, json};

const SCALE: f64 = 0.002;
const LIMIT: Duration = Duration::from_secs(120);

/// Lower-case hex SHA-256 of `bytes`.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_iso_deploys_through_a_cd_slot_and_a_gzip_img_through_a_usb_slot() {
    let rack = Rack::start(2, PersonalityChoice::Single(Personality::Generic), SCALE).await;

    // The demo catalog's image is an .iso: a CD slot, booted Cd.
    assert_eq!(rack.catalog.image.format.as_str(), "cd");
    let iso_server = rack.sim.name(0).to_owned();
    assert_eq!(rack.deploy(&iso_server, json!({})).await.status(), 202);
    let d = rack.wait_completed(&iso_server, LIMIT).await;
    assert_eq!(d.boot_target.as_deref(), Some("Cd"));
    assert_eq!(d.media_slot, Some(json!("system:CD1")));
    assert!(
        d.deployment.plan.image_url.ends_with(".iso"),
        "{}",
        d.deployment.plan.image_url
    );
    assert_eq!(rack.sim.truth(0)["registered"], json!(true));

    // An .img.gz as IncusOS publishes it: registered compressed, decompressed beside itself, served raw.
    let dir = rack.images_dir().join("published");
    let (img, _) =
        racklift_api::demo::generate_image_as(&dir, &racklift_media::layout::DemoImage::img(4 << 20))
            .expect("write the .img");
    let status = std::process::Command::new("gzip")
        .arg("-1")
        .arg(&img)
        .status()
        .expect("gzip");
    assert!(status.success());
    let gz = dir.join("incusos-demo.img.gz");
    let compressed = std::fs::read(&gz).expect("the .img.gz");
    assert!(!img.exists(), "gzip replaced the image with its .gz");
    let r = rack
        .admin(Method::POST, "/1.0/images")
        .json(&json!({
            "type": "img", "architecture": "x86_64", "channel": "stable",
            "path": gz.display().to_string(),
            "size_bytes": compressed.len(), "sha256": sha256_hex(&compressed),
        }))
        .send()
        .await
        .expect("register the image");
    let status = r.status();
    let image: Value = r.json().await.expect("image");
    assert_eq!(status, 201, "{image}");
    assert_eq!(image["format"], "disk", "{image}");
    assert!(
        image["path"].as_str().unwrap().ends_with("incusos-demo.img"),
        "{image}"
    );
    assert_eq!(image["size_bytes"], 4 << 20, "{image}");
    let raw = std::fs::read(&img).expect("the decompressed image beside the .gz");
    assert_eq!(image["sha256"], sha256_hex(&raw), "{image}");

    let img_server = rack.sim.name(1).to_owned();
    assert_eq!(
        rack.deploy(&img_server, json!({ "image_type": "img" }))
            .await
            .status(),
        202
    );
    let d = rack.wait_completed(&img_server, LIMIT).await;
    assert_eq!(d.boot_target.as_deref(), Some("Usb"));
    assert_eq!(d.media_slot, Some(json!("system:USB1")));
    assert!(
        d.deployment.plan.image_url.ends_with(".img"),
        "{}",
        d.deployment.plan.image_url
    );
    let truth = rack.sim.truth(1);
    assert_eq!(truth["registered"], json!(true), "{truth}");
    rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_registered_server_is_reinstalled_with_the_same_version_only_with_its_confirmation() {
    let rack = Rack::start(1, PersonalityChoice::Single(Personality::Generic), SCALE).await;
    let name = rack.sim.name(0).to_owned();
    assert_eq!(rack.deploy(&name, json!({})).await.status(), 202);
    rack.wait_completed(&name, LIMIT).await;
    let first = rack.sim.truth(0);
    let machine_id = first["os"]["machine_id"]
        .as_str()
        .expect("a machine-id")
        .to_owned();
    assert_eq!(machine_id.len(), 32, "{first}");
    // What IncusOS sends at registration as `machine_id`.
    sqlx::query(
        "UPDATE servers SET registration = coalesce(registration, '{}'::jsonb) || jsonb_build_object('machine_id', $2::text) \
         WHERE name = $1",
    )
    .bind(&name)
    .bind(&machine_id)
    .execute(&rack.db.pool)
    .await
    .expect("record the machine-id");

    // A registered server is not wiped by a request that does not say so.
    let r = rack.deploy(&name, json!({})).await;
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.expect("error body");
    assert_eq!(body["error"]["code"], "server_registered", "{body}");
    assert_eq!(body["error"]["field"], "force_install", "{body}");

    // With force_install the seed confirms the machine: IncusOS wipes the same version, reboots and installs.
    assert_eq!(
        rack.deploy(&name, json!({ "force_install": true }))
            .await
            .status(),
        202
    );
    let d = rack.wait_completed(&name, LIMIT).await;
    assert!(d.deployment.plan.reinstall);
    let truth = rack.sim.truth(0);
    let seed = &truth["install_seed"];
    assert_eq!(seed["force_install"], json!(true), "{truth}");
    assert_eq!(
        seed["force_install_confirmation"],
        json!(machine_id[..6]),
        "{truth}"
    );
    assert_eq!(truth["registered"], json!(true), "{truth}");
    // A fresh installation: its own machine-id, and the installer ran for the wipe and for the install.
    assert_ne!(truth["os"]["machine_id"], json!(machine_id), "{truth}");
    assert!(
        truth["counters"]["installer_runs"].as_u64() >= Some(3),
        "first install, wipe, install: {truth}"
    );
    rack.stop().await;
}

//! Rolling updates of a 5-member cluster end to end: an update published in racklift's catalog, staged by each
//! member's IncusOS from it, and every member rebooted onto it one at a time; an update restricted to the OS or to
//! an application stages only what it covers.

use std::time::Duration;

use racklift_tests::cluster::{CLUSTER, ClusterRack, assert_rolled_once_each, op_status};
use serde_json::{Value, json};

const MEMBERS: usize = 5;
const RUN_LIMIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_update_stages_the_published_version_and_reboots_every_member_onto_it() {
    const VERSION: &str = "209901010000";
    let c = ClusterRack::start(MEMBERS).await;
    // Nothing is published yet: an update restricted to the OS has nothing to do and is refused at launch.
    let (status, refused) = c.action("update", json!({"os_only": true})).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "nothing_to_update", "{refused}");
    // An application installed nowhere is refused, naming it.
    let (status, refused) = c
        .action("update", json!({"applications": ["migration-manager"]}))
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "application_not_installed", "{refused}");
    assert_eq!(refused["error"]["field"], "applications", "{refused}");

    publish(&c, VERSION).await;
    let (status, started) = c
        .post(&format!("/1.0/provisioning/clusters/{CLUSTER}:update"), json!({}))
        .await;
    assert_eq!(status, 202, "{started}");
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");
    assert_rolled_once_each(&c, &[]);
    for i in 0..MEMBERS {
        let truth = c.rack.sim.truth(i);
        assert_eq!(truth["os"]["running_version"], VERSION, "{}: {truth}", c.names[i]);
        assert_eq!(
            truth["os"]["staged_version"],
            Value::Null,
            "{}: {truth}",
            c.names[i]
        );
    }
    // Up to date now: the same restricted update has nothing left to do.
    let (status, refused) = c.action("update", json!({"os_only": true})).await;
    assert_eq!(status, 422, "{refused}");
    c.rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restricted_updates_stage_only_what_they_cover_and_reboot_every_member_once_each() {
    const VERSION: &str = "209901010000";
    let c = ClusterRack::start(MEMBERS).await;
    let os_before: Vec<Value> = (0..MEMBERS)
        .map(|i| c.rack.sim.truth(i)["os"]["running_version"].clone())
        .collect();
    let incus_version = |i: usize| {
        let truth = c.rack.sim.truth(i);
        truth["os"]["applications"]
            .as_array()
            .and_then(|apps| apps.iter().find(|a| a["name"] == "incus"))
            .map(|a| a["version"].clone())
            .unwrap_or_else(|| panic!("{}: no incus application: {truth}", c.names[i]))
    };
    let incus_before: Vec<Value> = (0..MEMBERS).map(incus_version).collect();
    publish(&c, VERSION).await;

    // The OS alone: the catalog offers the members its image only, so the application stays where it was.
    let (status, started) = c.action("update", json!({"os_only": true})).await;
    assert_eq!(status, 202, "{started}");
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");
    assert_rolled_once_each(&c, &[]);
    for (i, incus) in incus_before.iter().enumerate() {
        let truth = c.rack.sim.truth(i);
        assert_eq!(truth["os"]["running_version"], VERSION, "{}: {truth}", c.names[i]);
        assert_eq!(&incus_version(i), incus, "{}: {truth}", c.names[i]);
    }
    assert_ne!(os_before[0], VERSION);

    // Then the application alone: it runs the new version, and the OS is not staged again.
    c.rack.sim.reset_cluster_audit(CLUSTER);
    let (status, started) = c.action("update", json!({"applications": ["incus"]})).await;
    assert_eq!(status, 202, "{started}");
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(op_status(&view), "completed", "{view:#}");
    assert_rolled_once_each(&c, &[]);
    for i in 0..MEMBERS {
        let truth = c.rack.sim.truth(i);
        assert_eq!(
            truth["os"]["staged_version"],
            Value::Null,
            "{}: {truth}",
            c.names[i]
        );
        assert_eq!(incus_version(i), VERSION, "{}: {truth}", c.names[i]);
    }
    // Both are current now: either restriction has nothing left to do.
    for body in [json!({"applications": ["incus"]}), json!({"os_only": true})] {
        let (status, refused) = c.action("update", body).await;
        assert_eq!(status, 422, "{refused}");
        assert_eq!(refused["error"]["code"], "nothing_to_update", "{refused}");
    }
    c.rack.stop().await;
}

/// Publishes an OS update (and the incus application) from files inside the API's images directory.
async fn publish(c: &ClusterRack, version: &str) {
    let dir = c.rack.images_dir().join(version);
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (file, data) in [
        (format!("x86_64/IncusOS_{version}.efi.gz"), gzip(&[7u8; 40_000])),
        (
            format!("x86_64/IncusOS_{version}.usr-x86-64.0a1b.raw.gz"),
            gzip(&[8u8; 30_000]),
        ),
        (
            format!("x86_64/IncusOS_{version}.usr-x86-64-verity.0a1b.raw.gz"),
            gzip(&[9u8; 3_000]),
        ),
        (
            format!("x86_64/IncusOS_{version}.usr-x86-64-verity-sig.0a1b.raw.gz"),
            gzip(&[10u8; 300]),
        ),
        ("x86_64/incus.raw.gz".to_owned(), gzip(b"the incus application")),
    ] {
        let path = dir.join(&file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &data).unwrap();
        let class = racklift_api::update_catalog::classify(&file).expect("an update file name");
        files.push(json!({ "filename": file, "path": path.display().to_string(), "size": data.len(),
            "sha256": racklift_store::sha256_hex(&data), "component": class.component, "type": class.file_type,
            "architecture": class.architecture.unwrap_or("") }));
    }
    let (status, body) = c
        .post(
            "/1.0/provisioning/updates",
            json!({ "version": version, "channels": ["stable"], "files": files }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

/// `data` as gzip, as IncusOS's publisher writes every update file and IncusOS gunzips every download.
fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

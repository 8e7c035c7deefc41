//! The update catalog end to end: an admin publishes files lying in the images directory; a registered server's
//! simulated IncusOS, presenting its own client certificate over TLS 1.3 and trusting exactly the API's
//! certificate, lists, fetches, verifies and gunzips them, and stages the version; a tampered file is refused; a client
//! with no certificate at all (a fresh IncusOS before Incus exists) reads the whole catalog as IncusOS parses it;
//! downloads honour Range; a publish IncusOS could not use is refused, and so is a deployment whose channel
//! offers no Incus for its architecture.

mod common;

use std::time::Duration;

use common::{ADMIN, Api, VIEWER, code, field, gzip, read, wait_for};
use racklift_bmc_sim::register::{self, ClientIdentity, OperationsCenter, RegisterError};
use racklift_bmc_sim::seed::Provider;
use racklift_bmc_sim::{Personality, PersonalityChoice, Sim, SimConfig, SimHandle};
use racklift_media::SeedFiles;
use racklift_media::seed::{Manager, SeedConfig};
use racklift_store::NewServer;
use reqwest::Method;
use serde_json::{Value, json};

const VERSION: &str = "202612010000";
/// The version a simulated server installs as.
const RUNNING: &str = "202611010000";

fn sha256(data: &[u8]) -> String {
    racklift_store::sha256_hex(data)
}

/// Writes the update's files into the images directory and publishes them; returns the update's uuid and the
/// files' paths.
async fn publish(api: &Api, files: &[(&str, Vec<u8>)]) -> (String, Vec<std::path::PathBuf>) {
    publish_as(api, VERSION, &["stable"], files).await
}

/// The body of a publish of `files` written under the images directory's `version/` (each file's architecture,
/// component and type from its name, as `racklift update publish` finds them), and their paths.
fn publish_body(
    api: &Api,
    version: &str,
    channels: &[&str],
    files: &[(&str, Vec<u8>)],
) -> (Value, Vec<std::path::PathBuf>) {
    let dir = api.dirs.images().join(version);
    let mut paths = Vec::new();
    let mut listed = Vec::new();
    for (name, data) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, data).unwrap();
        let c = racklift_api::update_catalog::classify(name).expect("an update file name");
        listed.push(
            json!({ "filename": name, "path": path.display().to_string(), "size": data.len(),
            "sha256": sha256(data), "component": c.component, "type": c.file_type,
            "architecture": c.architecture.unwrap_or("") }),
        );
        paths.push(path);
    }
    (
        json!({ "version": version, "channels": channels, "files": listed }),
        paths,
    )
}

async fn publish_as(
    api: &Api,
    version: &str,
    channels: &[&str],
    files: &[(&str, Vec<u8>)],
) -> (String, Vec<std::path::PathBuf>) {
    let (body, paths) = publish_body(api, version, channels, files);
    let (s, v) = api
        .call(Method::POST, "/1.0/provisioning/updates", ADMIN, Some(body))
        .await;
    assert_eq!(s, 201, "{v}");
    (v["uuid"].as_str().unwrap().to_owned(), paths)
}

/// A whole x86_64 update as IncusOS's publisher lays one out: the four OS update files and the Incus application,
/// each in the architecture's directory, each gzip.
fn update_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "x86_64/IncusOS_202612010000.efi.gz",
            gzip(&(0..70_000u32).map(|i| (i % 253) as u8).collect::<Vec<_>>()),
        ),
        (
            "x86_64/IncusOS_202612010000.usr-x86-64.d7a3a4b2.raw.gz",
            gzip(&(0..150_000u32).map(|i| (i % 241) as u8).collect::<Vec<_>>()),
        ),
        (
            "x86_64/IncusOS_202612010000.usr-x86-64-verity.d7a3a4b2.raw.gz",
            gzip(&[3u8; 4_000]),
        ),
        (
            "x86_64/IncusOS_202612010000.usr-x86-64-verity-sig.d7a3a4b2.raw.gz",
            gzip(&[5u8; 700]),
        ),
        ("x86_64/incus.raw.gz", gzip(b"the incus application")),
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
    // The server is installed from its release, whose update holds Incus at the running version; the newer update
    // is published once it runs (published before, its start-up check would have rebooted it into it already).
    common::publish_incus(&api, RUNNING, "stable").await;
    let sim = registered_server(&api).await;
    let (uuid, _) = publish(&api, &update_files()).await;

    // What IncusOS reads (an API token changes nothing: the catalog is public).
    let (s, list) = api
        .call(Method::GET, "/1.0/provisioning/updates", VIEWER, None)
        .await;
    assert_eq!(s, 200, "{list}");
    assert_eq!(
        (list["type"].as_str(), list["status_code"].as_u64()),
        (Some("sync"), Some(200))
    );
    assert_eq!(
        list["metadata"][0],
        json!(format!("/1.0/provisioning/updates/{uuid}"))
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
    assert_eq!(files.len(), 5);
    let efi = files
        .iter()
        .find(|f| f["type"] == "update-efi")
        .expect("the EFI file");
    assert_eq!(
        (efi["component"].as_str(), efi["architecture"].as_str()),
        (Some("os"), Some("x86_64"))
    );
    assert_eq!(efi["size"], update_files()[0].1.len());
    let app = files
        .iter()
        .find(|f| f["filename"] == "x86_64/incus.raw.gz")
        .expect("the application");
    assert_eq!(
        (app["component"].as_str(), app["type"].as_str()),
        (Some("incus"), Some("application"))
    );

    // The simulated IncusOS, by its certificate: stages the version after checking and gunzipping every file.
    assert_eq!(
        check(&api, &sim).await,
        200,
        "{}",
        os_update_state(&api, &sim).await
    );
    let state = os_update_state(&api, &sim).await;
    assert_eq!(state["needs_reboot"], true, "{state}");
    assert_eq!(
        state["status"],
        format!("IncusOS has been updated to version {VERSION}"),
        "{state}"
    );
    assert_eq!(sim.truth(0)["os"]["staged_version"], VERSION);
    // The update's `incus` file updates the application at once, as IncusOS reloads it.
    let app: Value = incus_client(&api)
        .await
        .get(format!("{}/os/1.0/applications/incus", incus_url(&sim)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(app["metadata"]["state"]["version"], VERSION, "{app}");
}

/// racklift hashes a file changed since it was published before serving it, so the tampered file never reaches
/// the server; the server's check fails naming it, and nothing is staged.
#[tokio::test]
async fn a_tampered_file_is_refused_and_nothing_is_staged() {
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
        status.contains("HTTP 503") && status.contains("usr-x86-64."),
        "{state}"
    );
    assert!(sim.truth(0)["os"]["staged_version"].is_null());
}

/// What IncusOS decodes a listed update into (`operationsCenterUpdate` in its `operations-center` provider,
/// `provider_operations_center.go`): Go's `encoding/json` ignores every other key.
#[derive(Debug, serde::Deserialize)]
struct OperationsCenterUpdate {
    channels: Vec<String>,
    uuid: String,
    version: String,
}

/// What IncusOS decodes a listed file into (`operationsCenterUpdateFile`).
#[derive(Debug, serde::Deserialize)]
struct OperationsCenterUpdateFile {
    filename: String,
    size: i64,
    component: String,
    #[serde(rename = "type")]
    file_type: String,
    architecture: String,
    sha256: String,
}

/// IncusOS's `apiRequest` check: whatever the HTTP status, the body must be a `sync` envelope with
/// `status_code` 200; then `metadata` is decoded.
fn incusos_metadata<T: serde::de::DeserializeOwned>(body: &Value) -> T {
    assert_eq!(
        (body["type"].as_str(), body["status_code"].as_u64()),
        (Some("sync"), Some(200)),
        "IncusOS would report a bad response: {body}"
    );
    serde_json::from_value(body["metadata"].clone()).expect("metadata as IncusOS decodes it")
}

/// A client as IncusOS's provider is on its first start-up: TLS 1.3, the API's certificate trusted (the seed's
/// `server_certificate`), and no client certificate, since no Incus exists yet.
fn first_boot_client(api: &Api) -> reqwest::Client {
    let pem = api.certificate_pem.as_deref().expect("the API serves TLS");
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap())
        .min_tls_version(reqwest::tls::Version::TLS_1_3)
        .build()
        .unwrap()
}

async fn get_json(http: &reqwest::Client, url: String) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn a_fresh_incusos_without_a_certificate_reads_the_catalog_newest_first_and_fetches_its_architecture() {
    let api = Api::start_tls().await;
    let efi = |v: &str| (format!("x86_64/IncusOS_{v}.efi.gz"), gzip(&[1u8; 900]));
    // Published out of order, on two channels, for two architectures.
    let aarch64_incus = gzip(b"incus for aarch64");
    let x86_incus = gzip(b"incus for x86_64");
    let full = |v: &str| -> Vec<(String, Vec<u8>)> {
        vec![
            efi(v),
            (
                format!("x86_64/IncusOS_{v}.usr-x86-64.aa.raw.gz"),
                gzip(&[2u8; 900]),
            ),
            (
                format!("x86_64/IncusOS_{v}.usr-x86-64-verity.aa.raw.gz"),
                gzip(&[3u8; 90]),
            ),
            (
                format!("x86_64/IncusOS_{v}.usr-x86-64-verity-sig.aa.raw.gz"),
                gzip(&[4u8; 9]),
            ),
            ("x86_64/incus.raw.gz".to_owned(), x86_incus.clone()),
            ("aarch64/incus.raw.gz".to_owned(), aarch64_incus.clone()),
            ("x86_64/changelog-stable.yaml.gz".to_owned(), gzip(&[6u8; 30])),
        ]
    };
    for (version, channels) in [
        ("202612010000", vec!["stable"]),
        ("202611150000", vec!["stable"]),
        ("202612020000", vec!["testing"]),
    ] {
        let files = full(version);
        let refs: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
        publish_as(&api, version, &channels, &refs).await;
    }

    let http = first_boot_client(&api);
    let body = get_json(
        &http,
        format!("{}/1.0/provisioning/updates?recursion=1", api.base),
    )
    .await;
    let updates: Vec<OperationsCenterUpdate> = incusos_metadata(&body);
    // Highest version first, as Operations Center sorts them, whatever the order of publication.
    let versions: Vec<&str> = updates.iter().map(|u| u.version.as_str()).collect();
    assert_eq!(versions, ["202612020000", "202612010000", "202611150000"]);
    // IncusOS on `stable` takes the first update listed in its channel.
    let offered = updates
        .iter()
        .find(|u| u.channels.iter().any(|c| c == "stable"))
        .expect("an update on stable");
    assert_eq!(offered.version, "202612010000");
    let one = get_json(
        &http,
        format!("{}/1.0/provisioning/updates/{}", api.base, offered.uuid),
    )
    .await;
    let one: OperationsCenterUpdate = incusos_metadata(&one);
    assert_eq!(
        (one.version.as_str(), one.channels.as_slice()),
        ("202612010000", &["stable".to_owned()][..])
    );

    let body = get_json(
        &http,
        format!("{}/1.0/provisioning/updates/{}/files", api.base, offered.uuid),
    )
    .await;
    // Every key IncusOS reads, and no other, on each file.
    for file in body["metadata"].as_array().expect("files") {
        let mut keys: Vec<&str> = file.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["architecture", "component", "filename", "sha256", "size", "type"],
            "{file}"
        );
    }
    let files: Vec<OperationsCenterUpdateFile> = incusos_metadata(&body);
    assert_eq!(files.len(), 7, "{body}");
    // An x86_64 IncusOS keeps the files for any architecture and its own.
    let kept: Vec<&OperationsCenterUpdateFile> = files
        .iter()
        .filter(|f| f.architecture.is_empty() || f.architecture == "x86_64")
        .collect();
    assert_eq!(kept.len(), 6);
    let mut os_types: Vec<&str> = kept
        .iter()
        .filter(|f| f.component == "os" && f.file_type.starts_with("update-"))
        .map(|f| f.file_type.as_str())
        .collect();
    os_types.sort_unstable();
    assert_eq!(
        os_types,
        [
            "update-efi",
            "update-usr",
            "update-usr-verity",
            "update-usr-verity-signature"
        ]
    );
    let incus = kept
        .iter()
        .find(|f| f.file_type == "application" && f.filename.rsplit('/').next() == Some("incus.raw.gz"))
        .expect("the Incus application for x86_64");
    assert_eq!(
        (incus.filename.as_str(), incus.component.as_str()),
        ("x86_64/incus.raw.gz", "incus")
    );
    // The file URL is the raw filename appended, its `/` unescaped; what comes back is the gzip file whose
    // SHA-256 (lower-case hex, over the compressed bytes) the listing gave, with HTTP 200.
    for f in &kept {
        let url = format!(
            "{}/1.0/provisioning/updates/{}/files/{}",
            api.base, offered.uuid, f.filename
        );
        let r = http.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}");
        let bytes = r.bytes().await.unwrap();
        assert_eq!(
            (bytes.len() as i64, sha256(&bytes)),
            (f.size, f.sha256.clone()),
            "{url}"
        );
    }
    let r = http
        .get(format!(
            "{}/1.0/provisioning/updates/{}/files/x86_64/incus.raw.gz",
            api.base, offered.uuid
        ))
        .send()
        .await
        .unwrap();
    let bytes = r.bytes().await.unwrap();
    assert_eq!(bytes[..2], [0x1f, 0x8b], "gzip");
    assert_eq!(bytes.as_ref(), x86_incus.as_slice());
    // A name that is not one of the update's is not found, in the envelope.
    for name in [
        "incus.raw.gz",
        "x86_64//incus.raw.gz",
        "x86_64",
        "aarch64/incus.raw.gz/x",
    ] {
        let (s, v) = read(
            http.get(format!(
                "{}/1.0/provisioning/updates/{}/files/{name}",
                api.base, offered.uuid
            ))
            .send()
            .await
            .unwrap(),
        )
        .await;
        assert_eq!((s, v["type"].as_str()), (404, Some("error")), "{name}: {v}");
    }
    // The provider's own parser reads the same answers.
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
    // An Incus certificate no server registered with is no different from none.
    let stranger = ClientIdentity::generate("stranger").unwrap();
    let with_cert = register::client(&provider, &stranger).unwrap();
    let listed: Result<Vec<Value>, RegisterError> =
        register::get(&with_cert, &provider, "/1.0/provisioning/updates?recursion=1").await;
    assert_eq!(listed.expect("listed").len(), 3);
}

#[tokio::test]
async fn a_publish_incusos_could_not_use_is_refused_naming_the_files() {
    let api = Api::start().await;
    let os = |arch: &str, marker: &str| -> Vec<(String, Vec<u8>)> {
        vec![
            (format!("{arch}/IncusOS_1.efi.gz"), gzip(&[1u8; 10])),
            (
                format!("{arch}/IncusOS_1.usr-{marker}.a.raw.gz"),
                gzip(&[2u8; 10]),
            ),
            (
                format!("{arch}/IncusOS_1.usr-{marker}-verity.a.raw.gz"),
                gzip(&[3u8; 10]),
            ),
            (
                format!("{arch}/IncusOS_1.usr-{marker}-verity-sig.a.raw.gz"),
                gzip(&[4u8; 10]),
            ),
        ]
    };
    let incus = |arch: &str| (format!("{arch}/incus.raw.gz"), gzip(&[5u8; 10]));
    let without = |files: Vec<(String, Vec<u8>)>, gone: &str| -> Vec<(String, Vec<u8>)> {
        files.into_iter().filter(|(n, _)| !n.contains(gone)).collect()
    };
    let x86 = [os("x86_64", "x86-64"), vec![incus("x86_64")]].concat();
    for (what, files, expect_code, word) in [
        (
            "no verity signature",
            without(x86.clone(), "verity-sig"),
            "incomplete_os_update",
            "update-usr-verity-signature",
        ),
        (
            "an EFI file alone",
            vec![os("x86_64", "x86-64")[0].clone(), incus("x86_64")],
            "incomplete_os_update",
            "update-usr",
        ),
        (
            "no Incus at all",
            os("x86_64", "x86-64"),
            "missing_incus",
            "x86_64",
        ),
        (
            "aarch64 listed without its Incus",
            [x86.clone(), os("aarch64", "arm64")].concat(),
            "missing_incus",
            "aarch64",
        ),
    ] {
        let refs: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
        let (body, _) = publish_body(&api, "1", &["stable"], &refs);
        let (s, v) = api
            .call(Method::POST, "/1.0/provisioning/updates", ADMIN, Some(body))
            .await;
        assert_eq!(
            (s, code(&v), field(&v)),
            (422, expect_code, Some("files")),
            "{what}: {v}"
        );
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(word), "{what}: {v}");
    }
    // Nothing of the refused ones was recorded; the whole update is.
    let (_, list) = api
        .call(Method::GET, "/1.0/provisioning/updates", VIEWER, None)
        .await;
    assert_eq!(list["metadata"], json!([]));
    let both = [x86, os("aarch64", "arm64"), vec![incus("aarch64")]].concat();
    let refs: Vec<(&str, Vec<u8>)> = both.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
    publish_as(&api, "1", &["stable"], &refs).await;
}

#[tokio::test]
async fn update_files_honour_range_and_content_length() {
    let api = Api::start_tls().await;
    let files = update_files();
    let (uuid, _) = publish(&api, &files).await;
    let path = format!("/1.0/provisioning/updates/{uuid}/files/{}", files[0].0);
    // No token: the catalog is served to anyone.
    let whole = api.req(Method::GET, &path, None).send().await.unwrap();
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.content_length(), Some(files[0].1.len() as u64));
    assert_eq!(whole.bytes().await.unwrap().as_ref(), files[0].1.as_slice());
    let part = api
        .req(Method::GET, &path, None)
        .header("Range", "bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(
        part.headers()["content-range"].to_str().unwrap(),
        format!("bytes 1000-1999/{}", files[0].1.len())
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

/// The SHA-256 the catalog lists is the one of the bytes served: a file rewritten in place at the same size is
/// refused (naming the file, not its path) until it holds its published bytes again. A file published without a
/// `sha256` is listed with the one racklift computed.
#[tokio::test]
async fn a_file_rewritten_in_place_is_not_served_with_its_old_digest() {
    let api = Api::start_tls().await;
    let files = update_files();
    let (mut body, paths) = publish_body(&api, VERSION, &["stable"], &files);
    body["files"][0].as_object_mut().unwrap().remove("sha256");
    let (s, v) = api
        .call(Method::POST, "/1.0/provisioning/updates", ADMIN, Some(body))
        .await;
    assert_eq!(s, 201, "{v}");
    let uuid = v["uuid"].as_str().unwrap().to_owned();
    let listing = get_json(
        &first_boot_client(&api),
        format!("{}/1.0/provisioning/updates/{uuid}/files", api.base),
    )
    .await;
    let listed: Vec<OperationsCenterUpdateFile> = incusos_metadata(&listing);
    let first = listed.iter().find(|f| f.filename == files[0].0).expect("listed");
    assert_eq!(
        first.sha256,
        sha256(&files[0].1),
        "racklift's own digest is listed"
    );

    let url = format!("/1.0/provisioning/updates/{uuid}/files/{}", files[0].0);
    let download = || async { api.req(Method::GET, &url, None).send().await.unwrap() };
    assert_eq!(
        download().await.bytes().await.unwrap().as_ref(),
        files[0].1.as_slice()
    );
    let mut changed = files[0].1.clone();
    changed[100] ^= 0xff;
    common::rewrite_in_place(&paths[0], &changed);
    let (s, v) = read(download().await).await;
    assert_eq!((s, v["type"].as_str()), (503, Some("error")), "{v}");
    let text = v.to_string();
    assert!(text.contains(files[0].0), "named by its catalog name: {text}");
    for dir in [api.dirs.images(), api.dirs.base.clone()] {
        assert!(!text.contains(&dir.display().to_string()), "a host path: {text}");
    }

    common::rewrite_in_place(&paths[0], &files[0].1);
    let served = download().await;
    assert_eq!(served.status(), 200);
    assert_eq!(sha256(&served.bytes().await.unwrap()), first.sha256);
}

#[tokio::test]
async fn a_bad_file_or_a_sha_mismatch_is_refused_naming_the_field() {
    let api = Api::start().await;
    let data = gzip(b"update bytes");
    let path = api.dirs.images().join("incus.raw.gz");
    std::fs::write(&path, &data).unwrap();
    let file = |sha: &str, at: &str| {
        json!({ "filename": "x86_64/incus.raw.gz", "path": at, "size": data.len(),
        "sha256": sha, "component": "incus", "type": "application", "architecture": "x86_64" })
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
            json!([{ "filename": "x86_64/incus.raw.gz", "path": path.display().to_string(), "size": 1, "sha256": good,
            "component": "incus", "type": "application", "architecture": "x86_64" }]),
            422,
            "size_mismatch",
            "files[0].size",
        ),
        (
            json!([{ "filename": "x86_64/incus.raw.gz", "path": path.display().to_string(), "size": data.len(),
            "sha256": good, "component": "incus", "type": "firmware", "architecture": "x86_64" }]),
            400,
            "invalid_field",
            "files[0].type",
        ),
        (
            json!([{ "filename": "x86_64/../incus.raw.gz", "path": path.display().to_string(), "size": data.len(),
            "sha256": good, "component": "incus", "type": "application", "architecture": "x86_64" }]),
            400,
            "invalid_field",
            "files[0].filename",
        ),
        (
            json!([{ "filename": "/incus.raw.gz", "path": path.display().to_string(), "size": data.len(),
            "sha256": good, "component": "incus", "type": "application", "architecture": "x86_64" }]),
            400,
            "invalid_field",
            "files[0].filename",
        ),
        (
            json!([{ "filename": "x86_64/incus.raw.gz", "path": path.display().to_string(), "size": data.len(),
            "sha256": good, "component": "nginx", "type": "application", "architecture": "x86_64" }]),
            400,
            "invalid_field",
            "files[0].component",
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

#[tokio::test]
async fn a_deployment_whose_channel_offers_no_incus_for_its_architecture_is_refused() {
    let api = Api::start().await;
    let sim =
        Sim::start(SimConfig::new(1, PersonalityChoice::Single(Personality::Generic)).with_time_scale(0.001))
            .await
            .expect("simulator");
    // An x86_64 image on `stable`, whose first update (202611010000) holds x86_64/incus.raw.gz.
    let (token, image_path) = common::catalog(&api, &sim, 4096).await;
    common::set_public_address(&api).await;
    let size = std::fs::metadata(&image_path).unwrap().len();
    for (arch, channel) in [("aarch64", "stable"), ("x86_64", "edge")] {
        let image = json!({ "type": "iso", "architecture": arch, "channel": channel, "path": image_path,
            "size_bytes": size });
        let (s, v) = api.call(Method::POST, "/1.0/images", ADMIN, Some(image)).await;
        assert_eq!(s, 201, "{v}");
    }
    let deploy = |architecture: &str, channel: &str| {
        let body = json!({ "token": token, "seed": "web", "force": true, "architecture": architecture,
            "channel": channel });
        api.req(
            Method::POST,
            "/1.0/provisioning/servers/node1:deploy",
            Some(common::OPERATOR),
        )
        .json(&body)
    };
    let refused = |why: &'static str, expect_in_message: &'static str| {
        move |(s, v): (u16, Value)| {
            assert_eq!(
                (s, code(&v), field(&v)),
                (422, "no_incus_update", Some("channel")),
                "{why}: {v}"
            );
            let message = v["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(expect_in_message), "{why}: {v}");
        }
    };
    refused("nothing on the channel", "\"edge\"")(read(deploy("x86_64", "edge").send().await.unwrap()).await);
    refused("no aarch64 Incus", "202611010000")(
        read(deploy("aarch64", "stable").send().await.unwrap()).await,
    );

    // A newer update on `stable` without x86_64's Incus: IncusOS takes it, not the older one that has it.
    let aarch64_only = [("aarch64/incus.raw.gz", gzip(b"incus"))];
    publish_as(&api, "202612010000", &["stable"], &aarch64_only).await;
    refused("the first update lacks x86_64", "202612010000")(
        read(deploy("x86_64", "stable").send().await.unwrap()).await,
    );
    // One holding both: deployed.
    let both = [
        ("x86_64/incus.raw.gz", gzip(b"incus")),
        ("aarch64/incus.raw.gz", gzip(b"incus")),
    ];
    publish_as(&api, "202612020000", &["stable"], &both).await;
    let (s, v) = read(deploy("x86_64", "stable").send().await.unwrap()).await;
    assert_eq!(s, 202, "{v}");
}

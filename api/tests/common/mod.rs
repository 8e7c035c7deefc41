//! A served API on a fresh database, with one API token per role, confined to its own secrets and images
//! directories.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use racklift_api::{ApiConfig, AppState};
use racklift_bmc_access::AccessPolicy;
use racklift_bmc_access::secrets::DEFAULT_ENV_PREFIX;
use racklift_bmc_sim::SimHandle;
use racklift_queue::{Queue, QueueConfig};
use racklift_store::{Role, Store};
use racklift_testdb::TestDb;
use reqwest::{Method, RequestBuilder, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub const ADMIN: &str = "admin-secret";
pub const OPERATOR: &str = "operator-secret";
pub const VIEWER: &str = "viewer-secret";

/// A test's own secrets and images directories under the system's temporary directory, removed when dropped.
pub struct Dirs {
    pub base: PathBuf,
}

impl Dirs {
    pub fn new() -> Dirs {
        let base = std::env::temp_dir().join(format!("racklift-api-test-{}", uuid::Uuid::new_v4().simple()));
        let dirs = Dirs { base };
        std::fs::create_dir_all(dirs.secrets()).expect("create the secrets directory");
        std::fs::create_dir_all(dirs.images()).expect("create the images directory");
        dirs
    }

    pub fn secrets(&self) -> PathBuf {
        self.base.join("secrets")
    }

    pub fn images(&self) -> PathBuf {
        self.base.join("images")
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

pub struct Api {
    pub base: String,
    /// The plain-HTTP media listener (`[api] media_listen`), served beside the API.
    pub media_base: String,
    pub http: reqwest::Client,
    pub store: Store,
    pub shutdown: CancellationToken,
    pub task: Option<tokio::task::JoinHandle<()>>,
    pub db: TestDb,
    pub dirs: Dirs,
    /// The API's certificate (PEM) when it serves TLS ([`Api::start_tls`]).
    pub certificate_pem: Option<String>,
}

impl Api {
    pub async fn start() -> Api {
        Api::start_with(|_| {}).await
    }

    /// As [`Api::start`], served over TLS with a fresh self-signed certificate (for `localhost` and 127.0.0.1),
    /// which `http` trusts.
    pub async fn start_tls() -> Api {
        let server =
            racklift_listener::tls::self_signed(&["localhost".to_owned(), "127.0.0.1".to_owned()], "api")
                .expect("a certificate");
        let config =
            racklift_listener::tls::server_config(&server.certificate_pem, &server.key_pem).expect("TLS");
        let pem = server.certificate_pem.clone();
        let mut api = Api::start_with(|c| {
            c.transport = racklift_listener::Transport::Tls(config);
            c.server_certificate_pem = racklift_listener::tls::self_signed_leaf(&pem);
        })
        .await;
        api.http = reqwest::Client::builder()
            .add_root_certificate(
                reqwest::Certificate::from_pem(server.certificate_pem.as_bytes()).expect("PEM"),
            )
            .build()
            .expect("client");
        api.certificate_pem = Some(server.certificate_pem);
        api
    }

    /// As [`Api::start`], with `tune` applied to the configuration, which already names this test's directories.
    /// Plain HTTP unless `tune` chooses TLS.
    pub async fn start_with(tune: impl FnOnce(&mut ApiConfig)) -> Api {
        let dirs = Dirs::new();
        let mut config = ApiConfig {
            bmc_read_timeout: Duration::from_secs(10),
            bmc_access: AccessPolicy::load(None, &dirs.secrets(), DEFAULT_ENV_PREFIX)
                .expect("the test's access policy"),
            images_dir: dirs.images(),
            ..ApiConfig::default()
        };
        tune(&mut config);
        let db = TestDb::new().await;
        let store = Store::new(db.pool.clone());
        let queue = Queue::new(db.pool.clone(), QueueConfig::default());
        for (name, secret, role) in [
            ("admin", ADMIN, Role::Admin),
            ("operator", OPERATOR, Role::Operator),
            ("viewer", VIEWER, Role::Viewer),
        ] {
            store.put_api_token(name, secret, role).await.expect("api token");
        }
        let state = AppState::new(store.clone(), queue, config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!(
            "{}://{}",
            state.config.transport.scheme(),
            listener.local_addr().expect("addr")
        );
        let media = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let media_base = format!("http://{}", media.local_addr().expect("addr"));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                racklift_api::serve_all(listener, Some(media), state, shutdown)
                    .await
                    .expect("serve");
            }
        });
        Api {
            base,
            media_base,
            http: reqwest::Client::new(),
            store,
            shutdown,
            task: Some(task),
            db,
            dirs,
            certificate_pem: None,
        }
    }

    /// Writes `password` to a new file of this test's secrets directory and returns its `file:` reference
    /// (tests cannot set environment variables safely).
    pub fn password_file(&self, password: &str) -> String {
        let name = format!("bmc-{}", uuid::Uuid::new_v4().simple());
        std::fs::write(self.dirs.secrets().join(&name), password).expect("write the password file");
        format!("file:{name}")
    }

    /// Writes a new image of `len` bytes (at least 2 MiB) laid out like an IncusOS install image (a GPT whose
    /// partition 2 takes the seed), `byte(i)` at every offset outside the partition table and partition 2, and
    /// returns its path.
    pub fn seedable_image(&self, len: usize) -> PathBuf {
        let path = self
            .dirs
            .images()
            .join(format!("image-{}.img", uuid::Uuid::new_v4().simple()));
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("create the image file");
        let mut at = 0usize;
        let spec = racklift_media::layout::DemoImage::img(len.max(IMAGE_MIN) as u64);
        racklift_media::layout::write_demo_image(&mut file, &spec, |block| {
            for b in block.iter_mut() {
                *b = byte(at);
                at += 1;
            }
        })
        .expect("write the image file");
        path
    }

    /// The bytes the media server should answer for the deployment with media secret `secret`: its image file
    /// with the seed archive laid over partition 2.
    pub async fn composed_media(&self, secret: &str) -> Vec<u8> {
        let target = self
            .store
            .media_target(secret)
            .await
            .expect("media target")
            .expect("a deployment");
        let overlay = racklift_media::Overlay {
            offset: target.seed_offset.expect("seed offset") as u64,
            bytes: target.seed_archive.expect("seed archive").into(),
        };
        let file = std::fs::File::open(&target.path).expect("the image file");
        let mut out = Vec::new();
        racklift_media::write_composed(file, &overlay, &mut out).expect("compose");
        out
    }

    /// Writes `data` to a new image file of this test's images directory and returns its path.
    pub fn image_file(&self, data: &[u8]) -> PathBuf {
        let path = self
            .dirs
            .images()
            .join(format!("image-{}.img", uuid::Uuid::new_v4().simple()));
        std::fs::write(&path, data).expect("write the image file");
        path
    }

    pub fn req(&self, method: Method, path: &str, secret: Option<&str>) -> RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match secret {
            Some(s) => r.bearer_auth(s),
            None => r,
        }
    }

    pub async fn call(&self, method: Method, path: &str, secret: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self.req(method, path, Some(secret));
        if let Some(b) = body {
            r = r.json(&b);
        }
        read(r.send().await.expect("request")).await
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            t.await.expect("server task");
        }
    }
}

pub async fn read(resp: Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let v = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(json!({ "raw": text }))
    };
    (status, v)
}

/// The error code of an error body.
pub fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<none>")
}

pub fn field(v: &Value) -> Option<&str> {
    v["error"]["field"].as_str()
}

/// Polls `check` until it yields a value or the deadline passes.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A catalog that passes every check; returns (token, image path).
pub async fn catalog(api: &Api, sim: &SimHandle, image_len: usize) -> (String, String) {
    let (user, pass) = sim.credentials();
    let server = json!({ "name": "node1", "bmc_address": sim.bmc_url(0), "bmc_username": user,
                         "bmc_password_ref": api.password_file(pass), "vendor_hint": "generic",
                         "allow_plain_http": true });
    let (s, v) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(server)).await;
    assert_eq!(s, 201, "{v}");
    deploy_catalog(api, image_len).await
}

/// The least an image with a seed partition takes (`seedable_image`).
pub const IMAGE_MIN: usize = 2 << 20;

/// The byte `seedable_image` writes at offset `i` outside the partition table and the seed partition.
pub fn byte(i: usize) -> u8 {
    (i % 251) as u8
}

/// Everything a deploy request needs but the server: a token with public seeds (`web`, `private`,
/// `noreboot`), an image of `image_len` bytes (at least [`IMAGE_MIN`]) and a BIOS profile; returns (token,
/// image path).
pub async fn deploy_catalog(api: &Api, image_len: usize) -> (String, String) {
    let expires = (chrono::Utc::now() + chrono::TimeDelta::days(2)).to_rfc3339();
    let (_, t) = api
        .call(
            Method::POST,
            "/1.0/tokens",
            ADMIN,
            Some(json!({ "uses_remaining": 5, "expires_at": expires })),
        )
        .await;
    let token = t["token"].as_str().unwrap().to_owned();
    let seeds = format!("/1.0/tokens/{token}/seeds");
    for (name, public, force_reboot) in [
        ("web", true, true),
        ("private", false, true),
        ("noreboot", true, false),
    ] {
        let seed =
            json!({ "name": name, "public": public, "install_config": { "force_reboot": force_reboot } });
        let (s, _) = api.call(Method::POST, &seeds, ADMIN, Some(seed)).await;
        assert_eq!(s, 201);
    }
    let path = std::fs::canonicalize(api.seedable_image(image_len)).expect("the image path");
    let size = std::fs::metadata(&path).expect("the image").len();
    let image = json!({ "type": "iso", "architecture": "x86_64", "channel": "stable",
                        "path": path.display().to_string(), "size_bytes": size });
    let (s, v) = api.call(Method::POST, "/1.0/images", ADMIN, Some(image)).await;
    assert_eq!(s, 201, "{v}");
    publish_incus(api, "202611010000", "stable").await;
    let profile = json!({ "name": "generic", "match_rules": { "vendor": "generic" }, "priority": 1,
                          "attributes": { "BootMode": "Uefi", "Cores": 4 }, "secure_boot": { "db": ["aa"] } });
    let (s, _) = api
        .call(Method::POST, "/1.0/bios-profiles", ADMIN, Some(profile))
        .await;
    assert_eq!(s, 200);
    (token, path.display().to_string())
}

/// `data` as gzip, as IncusOS's publisher writes every update file and IncusOS gunzips every download. Stored
/// (level 0), so a file keeps about the size of its data: the Range tests read parts of it.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
    encoder.write_all(data).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

/// Publishes `version` on `channel` holding only `x86_64/incus.raw.gz` (a small gzip file in the images
/// directory): what the deploy pre-flight asks of the channel a server is installed from.
pub async fn publish_incus(api: &Api, version: &str, channel: &str) {
    let data = gzip(format!("incus {version}").as_bytes());
    let path = api.dirs.images().join(version).join("x86_64/incus.raw.gz");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &data).unwrap();
    let file = json!({ "filename": "x86_64/incus.raw.gz", "path": path.display().to_string(), "size": data.len(),
        "sha256": racklift_store::sha256_hex(&data), "component": "incus", "type": "application",
        "architecture": "x86_64" });
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/provisioning/updates",
            ADMIN,
            Some(json!({ "version": version, "channels": [channel], "files": [file] })),
        )
        .await;
    assert_eq!(s, 201, "{v}");
}

pub async fn set_public_address(api: &Api) {
    let (s, _) = api
        .call(
            Method::PUT,
            "/1.0/settings/public-address",
            ADMIN,
            Some(json!({ "address": api.base })),
        )
        .await;
    assert_eq!(s, 200);
}

/// Rewrites `path` in place (same inode, same size) with `bytes`, until its change time has moved: what tells
/// racklift the file changed, whatever the clock's granularity.
pub fn rewrite_in_place(path: &std::path::Path, bytes: &[u8]) {
    use std::os::unix::fs::MetadataExt;
    let ctime = |m: &std::fs::Metadata| (m.ctime(), m.ctime_nsec());
    let before = std::fs::metadata(path).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        std::io::Write::write_all(&mut file, bytes).unwrap();
        drop(file);
        let after = std::fs::metadata(path).unwrap();
        assert_eq!(
            (after.ino(), after.len()),
            (before.ino(), before.len()),
            "rewritten in place"
        );
        if ctime(&after) != ctime(&before) || std::time::Instant::now() > deadline {
            break;
        }
    }
}

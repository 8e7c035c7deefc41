//! Helpers: a plain reqwest Redfish client, a Range-capable media server for the images of `seeded` and
//! bounded polling.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use racklift_bmc_sim::{PersonalityChoice, Sim, SimConfig, SimHandle};
use serde_json::{Value, json};

/// Time scale used by the tests: a 25-minute install takes 1.5 s.
pub const SCALE: f64 = 0.001;

pub async fn start(servers: usize, personality: &str) -> SimHandle {
    start_with_tls(servers, personality, false).await
}

/// As [`start`], serving HTTPS when `tls` (so the Incus API's `connection_url` is `https://`).
pub async fn start_with_tls(servers: usize, personality: &str, tls: bool) -> SimHandle {
    let choice: PersonalityChoice = personality.parse().expect("personality");
    let mut config = SimConfig::new(servers, choice)
        .with_time_scale(SCALE)
        .with_tls(tls);
    // POST stages of 60 ms: the reboot after stage 1 leaves a test ~400 ms to eject.
    config.timings.post_stage = Duration::from_secs(60);
    Sim::start(config).await.expect("sim starts")
}

/// A Redfish client with the sim's credentials.
pub struct Client {
    pub http: reqwest::Client,
    user: String,
    pass: String,
    /// Host part (`http://127.0.0.1:PORT`) for resolving `@odata.id` links.
    pub host: String,
}

impl Client {
    pub fn new(sim: &SimHandle) -> Client {
        let (user, pass) = sim.credentials();
        Client {
            http: reqwest::Client::builder()
                .tls_danger_accept_invalid_certs(true)
                .build()
                .expect("client"),
            user: user.to_owned(),
            pass: pass.to_owned(),
            host: sim.base_url().to_owned(),
        }
    }

    /// The same client logging in as another account.
    pub fn as_user(&self, user: &str, pass: &str) -> Client {
        Client {
            http: self.http.clone(),
            user: user.to_owned(),
            pass: pass.to_owned(),
            host: self.host.clone(),
        }
    }

    /// Absolute URL for a link or path that starts with `/`.
    pub fn url(&self, link: &str) -> String {
        if link.starts_with("http") {
            link.to_owned()
        } else {
            format!("{}{link}", self.host)
        }
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        link: &str,
        body: Option<Value>,
        fence: Option<u64>,
    ) -> (StatusCode, HeaderMap, Value) {
        let mut req = self
            .http
            .request(method, self.url(link))
            .basic_auth(&self.user, Some(&self.pass));
        if let Some(b) = body {
            req = req.json(&b);
        }
        if let Some(f) = fence {
            req = req.header("X-Racklift-Fence", f.to_string());
        }
        let resp = req.send().await.expect("request");
        let status = StatusCode::from_u16(resp.status().as_u16()).expect("status");
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.expect("body");
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        (status, headers, value)
    }

    /// A request with one extra header (`If-Match`, `If-None-Match`); the status and headers.
    pub async fn send_with(
        &self,
        method: reqwest::Method,
        link: &str,
        header: (&str, &str),
        body: Option<Value>,
    ) -> (StatusCode, HeaderMap) {
        let mut req = self
            .http
            .request(method, self.url(link))
            .basic_auth(&self.user, Some(&self.pass))
            .header(header.0, header.1);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = StatusCode::from_u16(resp.status().as_u16()).expect("status");
        (status, resp.headers().clone())
    }

    /// PATCH with `If-Match: tag`; the status.
    pub async fn http_with_if_match(&self, link: &str, tag: &str, body: Value) -> StatusCode {
        self.send_with(reqwest::Method::PATCH, link, ("If-Match", tag), Some(body))
            .await
            .0
    }

    pub async fn get(&self, link: &str) -> Value {
        let (status, _, body) = self.send(reqwest::Method::GET, link, None, None).await;
        assert_eq!(status, StatusCode::OK, "GET {link}: {body}");
        body
    }

    pub async fn post(&self, link: &str, body: Value) -> (StatusCode, HeaderMap, Value) {
        self.send(reqwest::Method::POST, link, Some(body), None).await
    }

    pub async fn patch(&self, link: &str, body: Value) -> (StatusCode, HeaderMap, Value) {
        self.send(reqwest::Method::PATCH, link, Some(body), None).await
    }

    /// The first System of BMC `base` (discovered by links).
    pub async fn system(&self, base: &str) -> Value {
        let root = self.get(&format!("{base}/redfish/v1")).await;
        let systems = self
            .get(root["Systems"]["@odata.id"].as_str().expect("Systems link"))
            .await;
        self.get(systems["Members"][0]["@odata.id"].as_str().expect("member"))
            .await
    }

    pub async fn reset(&self, system: &Value, kind: &str) -> StatusCode {
        let target = system["Actions"]["#ComputerSystem.Reset"]["target"]
            .as_str()
            .expect("reset target");
        self.post(target, json!({"ResetType": kind})).await.0
    }
}

/// Poll `check` every 10 ms until it returns `Some`, for at most `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Served ranges `(start, end inclusive)`.
pub type Reads = Arc<Mutex<Vec<(u64, u64)>>>;

/// An HTTP server with one image at `/image.iso` honouring `Range: bytes=a-b`.
pub struct MediaServer {
    pub base: String,
    pub reads: Reads,
    pub size: u64,
}

impl MediaServer {
    pub fn url(&self) -> String {
        format!("{}/image.iso", self.base)
    }

    /// The same bytes named as a disk image (`.img`).
    pub fn img_url(&self) -> String {
        format!("{}/image.img", self.base)
    }

    pub fn bytes_served(&self) -> u64 {
        self.reads.lock().unwrap().iter().map(|(a, b)| b - a + 1).sum()
    }
}

fn parse_range(headers: &HeaderMap, size: u64) -> Option<(u64, u64)> {
    let v = headers.get(header::RANGE)?.to_str().ok()?;
    let (a, b) = v.strip_prefix("bytes=")?.split_once('-')?;
    let start: u64 = a.parse().ok()?;
    let end: u64 = if b.is_empty() {
        size - 1
    } else {
        b.parse::<u64>().ok()?.min(size - 1)
    };
    (start <= end).then_some((start, end))
}

async fn serve_image(State((image, reads)): State<(Arc<Vec<u8>>, Reads)>, headers: HeaderMap) -> Response {
    let size = image.len() as u64;
    match parse_range(&headers, size) {
        Some((a, b)) => {
            reads.lock().unwrap().push((a, b));
            (
                StatusCode::PARTIAL_CONTENT,
                [
                    (header::CONTENT_RANGE, format!("bytes {a}-{b}/{size}")),
                    (header::ACCEPT_RANGES, "bytes".to_owned()),
                ],
                image[a as usize..=b as usize].to_vec(),
            )
                .into_response()
        }
        None => {
            reads.lock().unwrap().push((0, size - 1));
            (StatusCode::OK, image.to_vec()).into_response()
        }
    }
}

/// Serve `image` (see `seeded` for images with a seed).
pub async fn media_server(image: Vec<u8>) -> MediaServer {
    let reads: Reads = Arc::default();
    let size = image.len() as u64;
    let app = axum::Router::new()
        .route("/image.iso", get(serve_image))
        .route("/image.img", get(serve_image))
        .with_state((Arc::new(image), reads.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    MediaServer { base, reads, size }
}

/// GET a control endpoint.
pub async fn control_get(sim: &SimHandle, path: &str) -> Value {
    let http = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .build()
        .expect("client");
    let resp = http
        .get(format!("{}{path}", sim.control_url()))
        .send()
        .await
        .expect("control");
    assert!(resp.status().is_success(), "control {path}: {}", resp.status());
    resp.json().await.expect("json")
}

/// Index of the slot link whose MediaTypes contain CD, searching System then Manager.
pub async fn cd_slot(c: &Client, base: &str) -> Value {
    let root = c.get(&format!("{base}/redfish/v1")).await;
    let mut collections = Vec::new();
    let sys = c.system(base).await;
    if let Some(l) = sys["VirtualMedia"]["@odata.id"].as_str() {
        collections.push(l.to_owned());
    }
    let managers = c.get(root["Managers"]["@odata.id"].as_str().unwrap()).await;
    let mgr = c.get(managers["Members"][0]["@odata.id"].as_str().unwrap()).await;
    if let Some(l) = mgr["VirtualMedia"]["@odata.id"].as_str() {
        collections.push(l.to_owned());
    }
    for coll in collections {
        let coll = c.get(&coll).await;
        for m in coll["Members"].as_array().unwrap() {
            let slot = c.get(m["@odata.id"].as_str().unwrap()).await;
            if slot["MediaTypes"].as_array().unwrap().iter().any(|t| t == "CD") {
                return slot;
            }
        }
    }
    panic!("no CD slot on {base}");
}

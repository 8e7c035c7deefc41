//! The Incus side of installed servers: each server's own TLS listener, its certificate, and who it trusts. Also
//! the helpers the cluster tests share: an operator identity trusted through the Incus preseed, servers booted with
//! IncusOS installed, and a client pinned to a server's own certificate.

use std::time::Duration;

use racklift_bmc_sim::SimHandle;
use racklift_bmc_sim::register::{self, ClientIdentity, OperationsCenter};
use reqwest::StatusCode;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};

use crate::common::{self, control_get, wait_for};
use crate::seeded::seed_archive;

pub const LONG: Duration = Duration::from_secs(30);

/// `incus.json` whose preseed trusts `cert_pem` (Incus `InitPreseed.certificates`).
pub fn trusting(cert_pem: &str) -> (&'static str, String) {
    let body = json!({
        "version": "1",
        "apply_defaults": true,
        "preseed": {"certificates": [{"name": "operator", "type": "client", "certificate": cert_pem}]},
    });
    ("incus.json", body.to_string())
}

/// An Incus client identity (the operator's, or a stranger's).
pub struct TestClient {
    pub identity: ClientIdentity,
}

impl TestClient {
    pub fn new(name: &str) -> TestClient {
        TestClient {
            identity: ClientIdentity::generate(name).expect("certificate"),
        }
    }

    /// A client presenting this identity to server `i`, trusting exactly the certificate the server's Incus made:
    /// a request that gets through proves the server served its own certificate.
    pub fn client(&self, sim: &SimHandle, i: usize) -> reqwest::Client {
        let pem = sim.incus_certificate_pem(i).expect("Incus has a certificate");
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).expect("PEM");
        let oc = OperationsCenter {
            server_url: reqwest::Url::parse(&sim.incus_url(i).expect("Incus URL")).unwrap(),
            server_token: String::new(),
            server_certificate: Some(der.to_vec()),
        };
        register::client(&oc, &self.identity).expect("client")
    }
}

/// The seed of an installed server named `hostname`, trusting `operator`, with `extra` files.
pub fn installed_seed(hostname: &str, operator: &TestClient, extra: &[(&'static str, String)]) -> Vec<u8> {
    let mut files = vec![
        trusting(&operator.identity.cert_pem),
        (
            "network.yaml",
            format!("version: \"1\"\ndns:\n  hostname: {hostname}\n"),
        ),
    ];
    files.extend(extra.iter().cloned());
    seed_archive(&files)
}

/// Wait until server `i`'s Incus answers connections; its base URL.
pub async fn wait_for_incus(sim: &SimHandle, i: usize) -> String {
    wait_for("Incus running", LONG, || async {
        (sim.truth(i)["phase"]["phase"] == "os_running")
            .then(|| sim.incus_url(i))
            .flatten()
    })
    .await
}

/// A simulator with `n` servers booted with IncusOS installed, named `node-<i>`, trusting `operator`.
pub async fn installed_fleet(n: usize, operator: &TestClient) -> SimHandle {
    let sim = common::start(n, "generic").await;
    for i in 0..n {
        let seed = installed_seed(&format!("node-{i}"), operator, &[]);
        sim.boot_installed(i, &seed).expect("seed");
    }
    for i in 0..n {
        wait_for_incus(&sim, i).await;
    }
    sim
}

/// GET `path` on server `i` with `http`: status and body.
pub async fn get(http: &reqwest::Client, sim: &SimHandle, i: usize, path: &str) -> (StatusCode, Value) {
    let resp = http
        .get(format!("{}{path}", sim.incus_url(i).unwrap()))
        .send()
        .await
        .expect("request");
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// POST `body` to `path` on server `i` with the fence `fence`: status and body.
pub async fn post(
    http: &reqwest::Client,
    sim: &SimHandle,
    i: usize,
    path: &str,
    body: Value,
    fence: Option<u64>,
) -> (StatusCode, Value) {
    let mut req = http
        .post(format!("{}{path}", sim.incus_url(i).unwrap()))
        .json(&body);
    if let Some(f) = fence {
        req = req.header(racklift_bmc_sim::FENCE_HEADER, f.to_string());
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_listener_serves_the_servers_own_certificate_and_trusts_only_its_trusted_certificates() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(1, &operator).await;
    let url = sim.incus_url(0).unwrap();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    assert_ne!(url, sim.base_url(), "a listener of its own");

    // The pinned client only connects if the served certificate is the server's own Incus certificate.
    let (status, body) = get(&operator.client(&sim, 0), &sim, 0, "/1.0").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["environment"]["server_name"], "node-0");
    assert_eq!(
        sim.incus_certificate_pem(0).unwrap(),
        sim.truth(0)["os"]["client_certificate"].as_str().unwrap(),
        "one certificate as server and client certificate"
    );

    let anonymous = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let (status, body) = get(&anonymous, &sim, 0, "/os/1.0").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body,
        json!({"type": "error", "error": "not authorized", "error_code": 403})
    );
    let stranger = TestClient::new("stranger");
    let (status, body) = get(&stranger.client(&sim, 0), &sim, 0, "/os/1.0").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["error"], "not authorized");

    let servers = control_get(&sim, "/servers").await;
    assert_eq!(servers[0]["incus_url"], json!(url));
}

#[tokio::test]
async fn the_port_stays_across_a_reboot_and_closes_connections_while_the_os_is_down() {
    let operator = TestClient::new("operator");
    let sim = installed_fleet(1, &operator).await;
    let url = sim.incus_url(0).unwrap();
    let http = operator.client(&sim, 0);
    let (status, _) = post(&http, &sim, 0, "/os/1.0/system/:reboot", json!({}), Some(1)).await;
    assert_eq!(status, StatusCode::OK);
    // While it reboots the port takes the connection and closes it: no TLS, no answer.
    let fresh = operator.client(&sim, 0);
    assert!(fresh.get(format!("{url}/1.0")).send().await.is_err());
    wait_for("back up", LONG, || async {
        let r = operator.client(&sim, 0).get(format!("{url}/1.0")).send().await;
        r.ok().filter(|r| r.status() == StatusCode::OK).map(|_| ())
    })
    .await;
    assert_eq!(sim.incus_url(0).unwrap(), url, "the same port");
}

#[tokio::test]
async fn applications_are_those_of_the_seed_at_the_os_version() {
    let operator = TestClient::new("operator");
    let sim = common::start(1, "generic").await;
    let apps = (
        "applications.yaml",
        "version: \"1\"\napplications:\n  - name: incus\n  - name: gpu-support\n".to_owned(),
    );
    sim.boot_installed(0, &installed_seed("node-0", &operator, &[apps]))
        .unwrap();
    wait_for_incus(&sim, 0).await;
    let http = operator.client(&sim, 0);
    let (_, list) = get(&http, &sim, 0, "/os/1.0/applications").await;
    assert_eq!(
        list["metadata"],
        json!(["/os/1.0/applications/gpu-support", "/os/1.0/applications/incus"])
    );
    let (_, os) = get(&http, &sim, 0, "/os/1.0").await;
    let (status, app) = get(&http, &sim, 0, "/os/1.0/applications/incus").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        app["metadata"]["state"]["version"],
        os["metadata"]["environment"]["os_version"]
    );
    assert_eq!(app["metadata"]["state"]["is_primary"], true);
    let (status, _) = get(&http, &sim, 0, "/os/1.0/applications/missing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

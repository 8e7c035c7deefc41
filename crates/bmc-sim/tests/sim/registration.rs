//! A stand-in for Operations Center's provider endpoints over TLS, written after its handlers
//! (`internal/api/api_provisioning_server.go`, `api_provisioning_update.go`, `internal/api/daemon.go`):
//!
//! - `POST /1.0/provisioning/servers?token=`: the body is read whatever its `Content-Type`; without a client
//!   certificate the answer is OC's 400 "No client certificate provided" (`api_provisioning_server.go:326-329`);
//!   otherwise the script, then HTTP 201 with the `sync` envelope and a certificate (`SyncResponseLocation`).
//! - `PUT /1.0/provisioning/servers/:self`: 403 without a client certificate (`api_provisioning_server.go:
//!   597-600`), else a `sync` envelope.
//! - `GET /1.0/provisioning/updates?recursion=1`, `.../{uuid}/files`, `.../{uuid}/files/{filename...}`:
//!   unauthenticated (`daemon.go:994-1020`), the listing newest first (`api_provisioning_update.go:161-167`), the
//!   file name routed with its slashes.
//!
//! Every request is logged with the TLS version and the client certificate presented.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, ProtocolVersion, ServerConfig, SignatureScheme};
use serde_json::{Value, json};
use sha2::Digest;
use tokio_rustls::TlsAcceptor;

/// The certificate the endpoint hands out for the manager to call the server's Incus API with.
pub const MANAGER_CERT: &str = "-----BEGIN CERTIFICATE-----\nMANAGER\n-----END CERTIFICATE-----\n";

/// The OS version a simulated machine runs before any update.
pub const RUNNING_VERSION: &str = "202611010000";

/// One registration received.
#[derive(Clone, Debug)]
pub struct Received {
    pub token: Option<String>,
    pub body: Value,
    /// The body's `Content-Type` header, if any.
    pub content_type: Option<String>,
    pub tls_version: Option<ProtocolVersion>,
    /// DER of the client certificate presented, if any.
    pub client_cert: Option<Vec<u8>>,
}

/// One request of any kind, in arrival order.
#[derive(Clone, Debug)]
pub struct Logged {
    pub method: Method,
    /// Path and query.
    pub target: String,
    pub body: Value,
    pub user_agent: Option<String>,
    pub client_cert: Option<Vec<u8>>,
}

/// One file of a published update.
#[derive(Clone, Debug)]
pub struct PublishedFile {
    pub filename: String,
    pub component: String,
    pub kind: String,
    pub architecture: String,
    /// What is served (gzip-compressed, as every upstream file is).
    pub bytes: Vec<u8>,
}

/// One published update.
#[derive(Clone, Debug)]
pub struct PublishedUpdate {
    pub uuid: String,
    pub version: String,
    pub channels: Vec<String>,
    pub files: Vec<PublishedFile>,
}

/// gzip of `data`.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn file(filename: &str, component: &str, kind: &str, architecture: &str) -> PublishedFile {
    PublishedFile {
        filename: filename.to_owned(),
        component: component.to_owned(),
        kind: kind.to_owned(),
        architecture: architecture.to_owned(),
        bytes: gzip(format!("the contents of {filename}").as_bytes()),
    }
}

/// An update of `version` on `stable`: `x86_64/incus.raw.gz` when `incus`, the four OS files when `os`, as
/// upstream publishes them (`image-publisher/main_sync.go`).
pub fn update(version: &str, incus: bool, os: bool) -> PublishedUpdate {
    let mut files = Vec::new();
    if incus {
        files.push(file("x86_64/incus.raw.gz", "incus", "application", "x86_64"));
        files.push(file("aarch64/incus.raw.gz", "incus", "application", "aarch64"));
    }
    if os {
        files.push(file(
            &format!("x86_64/IncusOS_{version}.efi.gz"),
            "os",
            "update-efi",
            "x86_64",
        ));
        for (suffix, kind) in [
            ("usr-x86-64.raw.gz", "update-usr"),
            ("usr-x86-64-verity.raw.gz", "update-usr-verity"),
            ("usr-x86-64-verity-sig.raw.gz", "update-usr-verity-signature"),
        ] {
            files.push(file(
                &format!("x86_64/IncusOS_{version}.{suffix}"),
                "os",
                kind,
                "x86_64",
            ));
        }
    }
    PublishedUpdate {
        uuid: format!("00000000-0000-4000-8000-{version}"),
        version: version.to_owned(),
        channels: vec!["stable".to_owned()],
        files,
    }
}

#[derive(Clone, Default)]
struct Shared {
    received: Arc<Mutex<Vec<Received>>>,
    log: Arc<Mutex<Vec<Logged>>>,
    script: Arc<Mutex<VecDeque<(StatusCode, Value)>>>,
    catalog: Arc<Mutex<Vec<PublishedUpdate>>>,
}

/// What the handshake told about one connection.
#[derive(Clone)]
struct Conn {
    tls_version: Option<ProtocolVersion>,
    client_cert: Option<Vec<u8>>,
}

pub struct RegistrationServer {
    /// `https://127.0.0.1:PORT`: the provider seed's `server_url`.
    pub url: String,
    /// The endpoint's self-signed certificate: the provider seed's `server_certificate`.
    pub cert_pem: String,
    shared: Shared,
}

impl RegistrationServer {
    /// The registrations received.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Every request received, in order.
    pub fn log(&self) -> Vec<Logged> {
        self.shared.log.lock().unwrap().clone()
    }

    /// The `PUT :self` received: `(cause, connection_url, client certificate)`.
    pub fn self_updates(&self) -> Vec<(String, String, Option<Vec<u8>>)> {
        self.log()
            .into_iter()
            .filter(|l| l.method == Method::PUT && l.target == "/1.0/provisioning/servers/:self")
            .map(|l| {
                (
                    l.body["cause"].as_str().unwrap_or_default().to_owned(),
                    l.body["connection_url"].as_str().unwrap_or_default().to_owned(),
                    l.client_cert,
                )
            })
            .collect()
    }

    /// Replace the published updates (listed newest first, as OC sorts them).
    pub fn publish(&self, updates: Vec<PublishedUpdate>) {
        *self.shared.catalog.lock().unwrap() = updates;
    }
}

/// The Incus `sync` envelope a registration succeeds with.
pub fn sync_answer() -> (StatusCode, Value) {
    (
        StatusCode::CREATED,
        json!({"type": "sync", "status": "Success", "status_code": 200, "operation": "", "error_code": 0,
               "error": "", "metadata": {"certificate": MANAGER_CERT}}),
    )
}

fn envelope(metadata: Value) -> Response {
    Json(
        json!({"type": "sync", "status": "Success", "status_code": 200, "operation": "", "error_code": 0,
                "error": "", "metadata": metadata}),
    )
    .into_response()
}

fn oc_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({"type": "error", "error": message, "error_code": status.as_u16(), "metadata": null})),
    )
        .into_response()
}

fn sha256_hex(data: &[u8]) -> String {
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn handle(
    State(shared): State<Shared>,
    Extension(conn): Extension<Conn>,
    Query(q): Query<HashMap<String, String>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    shared.log.lock().unwrap().push(Logged {
        method: method.clone(),
        target: uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default(),
        body: parsed.clone(),
        user_agent: header("user-agent"),
        client_cert: conn.client_cert.clone(),
    });
    let path = uri.path();
    match (&method, path) {
        (&Method::POST, "/1.0/provisioning/servers") => {
            shared.received.lock().unwrap().push(Received {
                token: q.get("token").cloned(),
                body: parsed,
                content_type: header("content-type"),
                tls_version: conn.tls_version,
                client_cert: conn.client_cert.clone(),
            });
            if conn.client_cert.is_none() {
                return oc_error(StatusCode::BAD_REQUEST, "No client certificate provided");
            }
            let (status, answer) = shared
                .script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(sync_answer);
            (status, Json(answer)).into_response()
        }
        (&Method::PUT, "/1.0/provisioning/servers/:self") => {
            if conn.client_cert.is_none() {
                return oc_error(StatusCode::FORBIDDEN, "Forbidden");
            }
            envelope(json!({}))
        }
        (&Method::GET, _) => updates(&shared, path),
        _ => oc_error(StatusCode::NOT_FOUND, "not found"),
    }
}

/// The update routes, unauthenticated.
fn updates(shared: &Shared, path: &str) -> Response {
    let catalog = shared.catalog.lock().unwrap().clone();
    let Some(rest) = path.strip_prefix("/1.0/provisioning/updates") else {
        return oc_error(StatusCode::NOT_FOUND, "not found");
    };
    let files_json = |u: &PublishedUpdate| -> Vec<Value> {
        u.files
            .iter()
            .map(|f| {
                json!({"filename": f.filename, "size": f.bytes.len(), "sha256": sha256_hex(&f.bytes),
                       "component": f.component, "type": f.kind, "architecture": f.architecture})
            })
            .collect()
    };
    if rest.is_empty() {
        let list: Vec<Value> = catalog
            .iter()
            .map(|u| {
                json!({"uuid": u.uuid, "version": u.version, "channels": u.channels, "origin": "stand-in",
                       "severity": "none", "changelog": "", "url": "", "update_status": "ready",
                       "published_at": "2026-12-01T00:00:00Z", "files": files_json(u)})
            })
            .collect();
        return envelope(json!(list));
    }
    let parts: Vec<&str> = rest.trim_start_matches('/').splitn(3, '/').collect();
    let Some(u) = catalog.iter().find(|u| u.uuid == parts[0]) else {
        return oc_error(StatusCode::NOT_FOUND, "Update not found");
    };
    match parts.as_slice() {
        [_, "files"] => envelope(json!(files_json(u))),
        [_, "files", filename] => match u.files.iter().find(|f| f.filename == *filename) {
            Some(f) => (StatusCode::OK, f.bytes.clone()).into_response(),
            None => oc_error(StatusCode::NOT_FOUND, "File not found"),
        },
        _ => oc_error(StatusCode::NOT_FOUND, "not found"),
    }
}

/// Start the endpoint: TLS 1.3 and 1.2 offered (`tls12_only` offers 1.2 alone), a client certificate asked for
/// but not required, `script` answered first to registrations, the running release with Incus published.
pub async fn start(tls12_only: bool, script: Vec<(StatusCode, Value)>) -> RegistrationServer {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let cert_pem = certified.cert.pem();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if tls12_only {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let config = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .unwrap()
        .with_client_cert_verifier(Arc::new(AnyClientCert(
            provider.signature_verification_algorithms,
        )))
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let shared = Shared {
        script: Arc::new(Mutex::new(script.into())),
        // A provider whose channel offers the running release with Incus, as every working one does.
        catalog: Arc::new(Mutex::new(vec![update(RUNNING_VERSION, true, false)])),
        ..Shared::default()
    };
    let router = Router::new().fallback(handle).with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let router = router.clone();
            tokio::spawn(async move {
                // A client that refuses the handshake (a TLS version below its minimum) just fails here.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let (_, session) = tls.get_ref();
                let conn = Conn {
                    tls_version: session.protocol_version(),
                    client_cert: session
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(|c| c.to_vec()),
                };
                let service = TowerToHyperService::new(router.layer(Extension(conn)));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    RegistrationServer {
        url,
        cert_pem,
        shared,
    }
}

/// Asks for a client certificate and accepts any, so the test can look at what was presented.
#[derive(Debug)]
struct AnyClientCert(WebPkiSupportedAlgorithms);

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

//! A stand-in for Operations Center's registration endpoint over TLS: it records every request with the TLS
//! version negotiated and the client certificate presented, and answers from a script (then the Incus `sync`
//! envelope with a certificate once the script is spent).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, ProtocolVersion, ServerConfig, SignatureScheme};
use serde_json::{Value, json};
use tokio_rustls::TlsAcceptor;

/// The certificate the endpoint hands out for the manager to call the server's Incus API with.
pub const MANAGER_CERT: &str = "-----BEGIN CERTIFICATE-----\nMANAGER\n-----END CERTIFICATE-----\n";

/// One request received.
#[derive(Clone, Debug)]
pub struct Received {
    pub token: Option<String>,
    pub body: Value,
    pub tls_version: Option<ProtocolVersion>,
    /// DER of the client certificate presented, if any.
    pub client_cert: Option<Vec<u8>>,
}

#[derive(Clone, Default)]
struct Shared {
    received: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<VecDeque<(StatusCode, Value)>>>,
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
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }
}

/// The Incus `sync` envelope a registration succeeds with.
pub fn sync_answer() -> (StatusCode, Value) {
    (
        StatusCode::OK,
        json!({"type": "sync", "status": "Success", "status_code": 200, "metadata": {"certificate": MANAGER_CERT}}),
    )
}

async fn register(
    State(shared): State<Shared>,
    Extension(conn): Extension<Conn>,
    Query(q): Query<HashMap<String, String>>,
    Json(body): Json<Value>,
) -> Response {
    shared.received.lock().unwrap().push(Received {
        token: q.get("token").cloned(),
        body,
        tls_version: conn.tls_version,
        client_cert: conn.client_cert,
    });
    let (status, answer) = shared
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or_else(sync_answer);
    (status, Json(answer)).into_response()
}

/// Start the endpoint: TLS 1.3 and 1.2 offered (`tls12_only` offers 1.2 alone), a client certificate asked for
/// but not required, `script` answered first.
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
        ..Shared::default()
    };
    let router = Router::new()
        .route("/1.0/provisioning/servers", post(register))
        .with_state(shared.clone());
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

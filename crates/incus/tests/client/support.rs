//! A small Incus-like HTTPS server for the client's tests: a self-signed certificate that can be rotated,
//! client certificates requested and recorded, every request logged, and answers chosen per request by the
//! test (an envelope, a hang, a reset, or an answer held until the test opens a gate).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use racklift_incus::{CertPin, ClientIdentity, IncusConfig, RetryPolicy, ServerLimiter, ServerTrust};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio_rustls::TlsAcceptor;

/// How long any condition may take before a test fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    /// Path and query, as sent.
    pub path: String,
    pub fence: Option<String>,
    pub body: String,
    /// The SHA-256 of the client certificate of the connection (`None` over plain HTTP).
    pub client_pin: Option<CertPin>,
    /// Open connections when this request arrived, itself included.
    pub open_connections: usize,
}

/// What the server does with a request.
pub enum Reply {
    Json(u16, Value),
    Text(u16, &'static str),
    /// Never answers; the request ends when the client goes away.
    Hang,
    /// Resets the TCP connection without answering.
    Reset,
    /// Answers once the gate is open.
    Held(watch::Receiver<bool>, Box<Reply>),
}

/// A sync envelope around `metadata`.
pub fn sync(metadata: Value) -> Reply {
    Reply::Json(
        200,
        json!({"type": "sync", "status": "Success", "status_code": 200, "metadata": metadata}),
    )
}

/// An async envelope for operation `id`.
pub fn operation_created(id: &str) -> Reply {
    Reply::Json(
        202,
        json!({"type": "async", "status": "Operation created", "status_code": 100,
               "operation": format!("/1.0/operations/{id}"),
               "metadata": {"id": id, "class": "task", "status": "Running", "status_code": 103}}),
    )
}

/// An error envelope.
pub fn error(code: u16, message: &str) -> Reply {
    Reply::Json(
        code,
        json!({"type": "error", "error": message, "error_code": code}),
    )
}

/// Chooses the reply to a request; `hits` counts the requests to the same path so far, this one included.
pub type Handler = Arc<dyn Fn(&Seen, usize) -> Reply + Send + Sync>;

/// A self-signed certificate and its key.
pub struct Certified {
    pub cert_pem: String,
    pub key_pem: String,
    pub key_der: Vec<u8>,
    pub der: Vec<u8>,
}

pub fn certified(name: &str) -> Certified {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
        .expect("params")
        .self_signed(&key)
        .expect("certificate");
    Certified {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        key_der: key.serialize_der(),
        der: cert.der().to_vec(),
    }
}

/// A fresh client identity and its pin.
pub fn identity() -> (ClientIdentity, CertPin) {
    let c = certified("racklift");
    (
        ClientIdentity::from_pem(c.cert_pem, c.key_pem),
        CertPin::of_der(&c.der),
    )
}

#[derive(Default)]
struct State {
    seen: Mutex<Vec<Seen>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    open: AtomicUsize,
    max_open: AtomicUsize,
    changed: Notify,
}

impl State {
    fn enter(self: &Arc<Self>, count: fn(&State) -> (&AtomicUsize, &AtomicUsize)) -> Gauge {
        let (now, max) = count(self);
        let value = now.fetch_add(1, Ordering::SeqCst) + 1;
        max.fetch_max(value, Ordering::SeqCst);
        self.changed.notify_waiters();
        Gauge {
            state: self.clone(),
            count,
        }
    }
}

/// Decrements a counter when dropped (a request or a connection ending, however it ends).
struct Gauge {
    state: Arc<State>,
    count: fn(&State) -> (&AtomicUsize, &AtomicUsize),
}

impl Drop for Gauge {
    fn drop(&mut self) {
        (self.count)(&self.state).0.fetch_sub(1, Ordering::SeqCst);
        self.state.changed.notify_waiters();
    }
}

/// The server's certificate, swappable while it runs.
#[derive(Debug)]
struct Rotating(Mutex<Arc<CertifiedKey>>);

impl ResolvesServerCert for Rotating {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.lock().expect("cert").clone())
    }
}

fn certified_key(c: &Certified) -> Arc<CertifiedKey> {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.key_der.clone()));
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).expect("signer");
    Arc::new(CertifiedKey::new(
        vec![CertificateDer::from(c.der.clone())],
        signer,
    ))
}

/// Requests a client certificate and accepts any (Incus checks it against its trust store; the tests only
/// record it), verifying the handshake signature.
#[derive(Debug)]
struct AnyClientCert(WebPkiSupportedAlgorithms);

impl ClientCertVerifier for AnyClientCert {
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

/// A running test server.
pub struct TestServer {
    pub url: String,
    state: Arc<State>,
    cert: Option<Arc<Rotating>>,
    pin: Mutex<Option<CertPin>>,
}

impl TestServer {
    /// An HTTPS server requesting client certificates.
    pub async fn start(handler: Handler) -> Self {
        Self::start_with(handler, true).await
    }

    /// A plain HTTP server.
    pub async fn start_plain(handler: Handler) -> Self {
        Self::start_with(handler, false).await
    }

    async fn start_with(handler: Handler, tls: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(State::default());
        let (acceptor, cert, pin) = if tls {
            let first = certified("127.0.0.1");
            let rotating = Arc::new(Rotating(Mutex::new(certified_key(&first))));
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let algs = provider.signature_verification_algorithms;
            let config = ServerConfig::builder_with_provider(provider)
                .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
                .expect("versions")
                .with_client_cert_verifier(Arc::new(AnyClientCert(algs)))
                .with_cert_resolver(rotating.clone());
            let acceptor = TlsAcceptor::from(Arc::new(config));
            (Some(acceptor), Some(rotating), Some(CertPin::of_der(&first.der)))
        } else {
            (None, None, None)
        };
        let accept_state = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                // A dropped connection resets rather than closes, which is what `Reply::Reset` needs.
                let _ = tcp.set_zero_linger();
                let (state, handler, acceptor) = (accept_state.clone(), handler.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let open = state.enter(|s| (&s.open, &s.max_open));
                    match acceptor {
                        None => serve(tcp, None, state, handler).await,
                        Some(acceptor) => {
                            let Ok(tls) = acceptor.accept(tcp).await else {
                                return;
                            };
                            let client_pin = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .map(|der| CertPin::of_der(der));
                            serve(tls, client_pin, state, handler).await;
                        }
                    }
                    drop(open);
                });
            }
        });
        let scheme = if tls { "https" } else { "http" };
        Self {
            url: format!("{scheme}://127.0.0.1:{port}"),
            state,
            cert,
            pin: Mutex::new(pin),
        }
    }

    /// The SHA-256 of the certificate the server presents now.
    pub fn pin(&self) -> CertPin {
        self.pin.lock().expect("pin").expect("an HTTPS server")
    }

    /// Presents a new certificate from now on; returns its pin.
    pub fn rotate(&self) -> CertPin {
        let next = certified("127.0.0.1");
        let pin = CertPin::of_der(&next.der);
        *self
            .cert
            .as_ref()
            .expect("an HTTPS server")
            .0
            .lock()
            .expect("cert") = certified_key(&next);
        *self.pin.lock().expect("pin") = Some(pin);
        pin
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().expect("seen").clone()
    }

    pub fn in_flight(&self) -> usize {
        self.state.in_flight.load(Ordering::SeqCst)
    }

    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn open_connections(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }

    pub fn max_open_connections(&self) -> usize {
        self.state.max_open.load(Ordering::SeqCst)
    }

    /// Waits until `cond` holds, re-checking whenever the server's state changes.
    pub async fn wait_for(&self, what: &str, cond: impl Fn(&Self) -> bool) {
        let wait = async {
            loop {
                let changed = self.state.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if cond(self) {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(PATIENCE, wait)
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }

    /// A client configuration for this server with its own limiter, a 5 s deadline and quick retries.
    pub fn config(&self, server: &str, identity: ClientIdentity, trust: ServerTrust) -> IncusConfig {
        let mut config = IncusConfig::new(server, &self.url, identity, trust);
        config.limiter = ServerLimiter::new();
        config.call_deadline = Duration::from_secs(5);
        config.retry = RetryPolicy {
            max_retries: 2,
            min_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
        };
        config
    }
}

/// Waits until a condition outside the server holds (the client's limiter queue), checking every millisecond.
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let wait = async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

async fn serve<IO>(io: IO, client_pin: Option<CertPin>, state: Arc<State>, handler: Handler)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let reset = Arc::new(Notify::new());
    let service = {
        let reset = reset.clone();
        service_fn(move |req| handle(req, client_pin, state.clone(), handler.clone(), reset.clone()))
    };
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), service);
    tokio::select! {
        _ = conn => {}
        // Dropping the connection with a zero linger sends a TCP reset.
        _ = reset.notified() => {}
    }
}

async fn handle(
    req: Request<Incoming>,
    client_pin: Option<CertPin>,
    state: Arc<State>,
    handler: Handler,
    reset: Arc<Notify>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let fence = req
        .headers()
        .get("x-racklift-fence")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let seen = Seen {
        method,
        path: path.clone(),
        fence,
        body: String::from_utf8_lossy(&body).into_owned(),
        client_pin,
        open_connections: state.open.load(Ordering::SeqCst),
    };
    let _in_flight = state.enter(|s| (&s.in_flight, &s.max_in_flight));
    let hits = {
        let mut log = state.seen.lock().expect("seen");
        log.push(seen.clone());
        log.iter().filter(|s| s.path == path).count()
    };
    state.changed.notify_waiters();
    let reply = handler(&seen, hits);
    Ok(respond(reply, reset).await)
}

fn respond(reply: Reply, reset: Arc<Notify>) -> Pin<Box<dyn Future<Output = Response<Full<Bytes>>> + Send>> {
    Box::pin(async move {
        let (status, body) = match reply {
            Reply::Json(status, value) => (status, value.to_string()),
            Reply::Text(status, text) => (status, text.to_owned()),
            Reply::Hang => std::future::pending().await,
            Reply::Reset => {
                reset.notify_one();
                std::future::pending().await
            }
            Reply::Held(mut gate, then) => {
                let _ = gate.wait_for(|open| *open).await;
                return respond(*then, reset).await;
            }
        };
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("response")
    })
}

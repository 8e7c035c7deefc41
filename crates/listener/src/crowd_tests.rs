//! One client crowding a listener cannot lock out another (`admission`), on each kind of listener: plain HTTP and
//! TLS through hyper, and the media listener's own loop. The server runs on a runtime of its own thread, as it
//! would in its own process, while the attacker's sockets churn on the test's runtime.
//!
//! The attacker connects from 127.0.0.1, the second client from 127.0.0.2 (Linux routes all of 127.0.0.0/8 to
//! the loopback interface), so the per-peer share is what keeps the second client's way open.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use super::*;

/// What the second client is allowed, from connecting to the end of its answer.
const ANSWERED_WITHIN: Duration = Duration::from_secs(1);
/// Generous against a loaded machine: what is checked is that the server closes, not how fast.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);
/// The attack of the finding: this many silent sockets from one address.
const ATTACK_SOCKETS: usize = 2000;
/// Rounds of the second client's request, each after the attacker reopened as many sockets as it holds.
const ROUNDS: usize = 4;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Plain,
    Tls,
    Media,
}

/// A listener served on a runtime of its own thread; stopped and joined on drop.
struct Server {
    addr: SocketAddr,
    kind: Kind,
    certificate: tls::CertifiedKeyPem,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn app() -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/second", get(|| async { "second" }))
}

fn start(kind: Kind, limits: Limits) -> Server {
    let certificate = tls::self_signed(&["localhost".to_owned(), "127.0.0.1".to_owned()], "test").unwrap();
    let config = tls::server_config(&certificate.certificate_pem, &certificate.key_pem).unwrap();
    let (bound, addr) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
            bound.send(listener.local_addr().unwrap()).unwrap();
            let stopped = async move {
                let _ = stopped.await;
            };
            match kind {
                Kind::Plain => serve(listener, app(), limits, stopped).await,
                Kind::Tls => serve_with(listener, app(), limits, Transport::Tls(config), stopped).await,
                Kind::Media => files::serve_files(listener, app(), limits, stopped).await,
            }
            .unwrap();
        });
    });
    Server {
        addr: addr.recv().unwrap(),
        kind,
        certificate,
        stop: Some(stop),
        thread: Some(thread),
    }
}

/// Raises the soft open-file limit to the hard one; the soft limit then in force.
fn raise_open_files() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// A socket connected to `addr` from `source`.
async fn connect_from(source: [u8; 4], addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((source, 0))).unwrap();
    socket.connect(addr).await.unwrap()
}

/// `GET path` on `stream` with `Connection: close`: everything the server sends until it closes.
async fn exchange(mut stream: impl AsyncRead + AsyncWrite + Unpin, request: &[u8]) -> String {
    stream.write_all(request).await.unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// The second client's request from 127.0.0.2 (over TLS when the server speaks it): the answer.
async fn second_client(server: &Server) -> String {
    let request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let tcp = connect_from([127, 0, 0, 2], server.addr).await;
    match server.kind {
        Kind::Plain | Kind::Media => exchange(tcp, request).await,
        Kind::Tls => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(server.certificate.certificate_pem.as_bytes()).unwrap())
                .unwrap();
            let config = rustls::ClientConfig::builder_with_provider(tls::provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(ServerName::try_from("localhost").unwrap(), tcp)
                .await
                .expect("handshake");
            exchange(tls, request).await
        }
    }
}

/// `sockets` silent connections from 127.0.0.1, each reopened as soon as the server closes it.
struct Attack {
    stop: CancellationToken,
    opened: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Attack {
    fn start(addr: SocketAddr, sockets: usize) -> Attack {
        let stop = CancellationToken::new();
        let opened = Arc::new(AtomicU64::new(0));
        let tasks = (0..sockets)
            .map(|_| {
                let (stop, opened) = (stop.clone(), opened.clone());
                tokio::spawn(async move {
                    while !stop.is_cancelled() {
                        let connected = tokio::select! {
                            () = stop.cancelled() => return,
                            connected = TcpStream::connect(addr) => connected,
                        };
                        let Ok(mut stream) = connected else {
                            // Out of ports or refused for a moment: try again.
                            tokio::task::yield_now().await;
                            continue;
                        };
                        opened.fetch_add(1, Ordering::Relaxed);
                        let mut byte = [0u8; 1];
                        tokio::select! {
                            () = stop.cancelled() => return,
                            _ = stream.read(&mut byte) => {}
                        }
                    }
                })
            })
            .collect();
        Attack { stop, opened, tasks }
    }

    fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Waits until the attacker has opened `count` sockets in all.
    async fn until_opened(&self, count: u64) {
        tokio::time::timeout(CLOSE_WITHIN, async {
            while self.opened() < count {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the attacker opened {} of {count} sockets", self.opened()));
    }

    async fn stop(self) {
        self.stop.cancel();
        for task in self.tasks {
            task.await.unwrap();
        }
    }
}

/// 2,000 silent sockets from one address, reopened as fast as the server closes them, while a second client
/// from another address is answered within [`ANSWERED_WITHIN`] round after round.
async fn one_client_cannot_lock_out_another(kind: Kind) {
    let limit = raise_open_files();
    // The defaults, as the API runs: a silent socket is held for the whole 10 s header timeout, so only the
    // per-peer share keeps slots free for others.
    let limits = Limits::default();
    // The attacker's sockets, the server's side of its share and some room, all in this process.
    let room = limits.max_connections_per_peer as u64 + 256;
    let sockets = ATTACK_SOCKETS.min(usize::try_from(limit.saturating_sub(room)).unwrap_or(ATTACK_SOCKETS));
    if sockets < ATTACK_SOCKETS {
        println!(
            "open-file limit {limit} (could not be raised): {sockets} attacking sockets instead of {ATTACK_SOCKETS}"
        );
    }
    assert!(
        sockets > limits.max_connections_per_peer,
        "the open-file limit ({limit}) leaves too few sockets to crowd the listener"
    );
    let server = start(kind, limits);
    let attack = Attack::start(server.addr, sockets);
    attack.until_opened(sockets as u64).await;
    for round in 0..ROUNDS {
        let started = Instant::now();
        let answer = tokio::time::timeout(ANSWERED_WITHIN, second_client(&server))
            .await
            .unwrap_or_else(|_| panic!("{kind:?} round {round}: no answer within {ANSWERED_WITHIN:?}"));
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"),
            "{kind:?} round {round}: {answer}"
        );
        println!(
            "{kind:?} round {round}: answered in {:?} with {} attacking sockets opened so far",
            started.elapsed(),
            attack.opened()
        );
        // The attacker reopens as many sockets as it holds before the next round.
        attack.until_opened(attack.opened() + sockets as u64).await;
    }
    attack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_address_leaves_the_plain_listener_to_others() {
    one_client_cannot_lock_out_another(Kind::Plain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_address_leaves_the_tls_listener_to_others() {
    one_client_cannot_lock_out_another(Kind::Tls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_address_leaves_the_media_listener_to_others() {
    one_client_cannot_lock_out_another(Kind::Media).await;
}

/// Whether the server has closed `stream`: its end read, or a reset.
async fn closed(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(CLOSE_WITHIN, stream.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Whether `stream` is still open, without waiting: nothing to read and no end.
fn still_open(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Silent connections from many addresses fill the listener to its cap; a new client is answered at once, the
/// oldest silent connection having been closed to make room long before its header timeout, and the newest
/// left open.
async fn at_the_cap_the_oldest_silent_connection_makes_room(kind: Kind) {
    let limits = Limits {
        // Longer than the test: only the early close can end a silent connection here.
        header_read_timeout: Duration::from_secs(60),
        max_connections: 16,
        max_connections_per_peer: 4,
    };
    let server = start(kind, limits);
    let mut silent = Vec::new();
    for i in 0..limits.max_connections {
        let source = [127, 0, 1, (i / limits.max_connections_per_peer) as u8 + 1];
        silent.push(connect_from(source, server.addr).await);
    }
    let started = Instant::now();
    let answer = tokio::time::timeout(CLOSE_WITHIN, second_client(&server))
        .await
        .unwrap_or_else(|_| panic!("{kind:?}: the new client waits"));
    assert!(answer.starts_with("HTTP/1.1 200"), "{kind:?}: {answer}");
    assert!(
        closed(&mut silent[0]).await,
        "{kind:?}: the oldest silent connection was closed"
    );
    assert!(
        started.elapsed() < limits.header_read_timeout,
        "{kind:?}: closed early"
    );
    assert!(
        still_open(silent.last().unwrap()),
        "{kind:?}: the newest silent connection stays"
    );
}

#[tokio::test]
async fn at_the_cap_the_plain_listener_closes_the_oldest_silent_connection() {
    at_the_cap_the_oldest_silent_connection_makes_room(Kind::Plain).await;
}

#[tokio::test]
async fn at_the_cap_the_tls_listener_closes_the_oldest_silent_connection() {
    at_the_cap_the_oldest_silent_connection_makes_room(Kind::Tls).await;
}

#[tokio::test]
async fn at_the_cap_the_media_listener_closes_the_oldest_silent_connection() {
    at_the_cap_the_oldest_silent_connection_makes_room(Kind::Media).await;
}

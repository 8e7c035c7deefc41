//! Each installed server's own Incus listener, as a real IncusOS server serves `https://<address>:8443`.
//!
//! - The port is bound (`127.0.0.1:0`) when the server's Incus first starts and kept for the machine's life, across
//!   reboots and reinstalls, as a real server keeps its address.
//! - TLS with the server's own Incus certificate (`incus_tls`), or its cluster's certificate once it is a cluster
//!   member (`Fleet::served_identity`); a client certificate is requested, optional at the handshake. A request
//!   is authorized only when the client's certificate (DER) is among the server's `trusted_certificates` (the
//!   registration answer's, the Incus preseed's); otherwise 403 with Incus's error envelope, `not authorized`.
//! - While the installed OS is not running (rebooting, powered off, in firmware), or its network is gone (the
//!   `member_offline` fault), the port accepts a TCP connection and closes it at once, without TLS: the nearest to
//!   "connection refused" that keeping the port allows. A connection made before the OS went down is closed at its
//!   next request, without an answer, as the reboot would have cut it.
//! - Request faults (`incus_hang`, `incus_status`, `incus_reset`) hit after the handshake; every request counts in the
//!   server's Incus audit (highest in flight), every POST/PUT/PATCH/DELETE records its fence header there.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::audit::FENCE_HEADER;
use crate::bmc::Bmc;
use crate::cluster::reachable;
use crate::faults::IncusFault;
use crate::incus::{self, IncusRequest, error};
use crate::incus_tls;
use crate::server::Fleet;

/// Largest request body accepted.
const BODY_LIMIT: usize = 1 << 20;

/// Bind server `bmc`'s Incus port if it has none yet, and serve it. Returns the port, or `None` when the simulator
/// is shutting down or the bind failed.
pub fn ensure(bmc: &Bmc) -> Option<u16> {
    let mut port = bmc.incus_port();
    if let Some(p) = *port {
        return Some(p);
    }
    let fleet = bmc.shared.fleet()?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(|l| TcpListener::from_std(l));
    let listener = match listener {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(server = %bmc.name, error = %e, "binding the Incus listener failed");
            return None;
        }
    };
    let bound = listener.local_addr().ok()?.port();
    *port = Some(bound);
    tokio::spawn(serve(fleet, bmc.index, listener, bmc.shared.cancel.clone()));
    Some(bound)
}

/// Accept until the simulator stops; a connection while the OS is down is closed at once.
async fn serve(fleet: Arc<Fleet>, index: usize, listener: TcpListener, cancel: CancellationToken) {
    let mut conns = JoinSet::new();
    // The acceptor for the certificate last served (a reinstall makes a new one).
    let mut cached: Option<(Vec<u8>, TlsAcceptor)> = None;
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "Incus listener accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = cancel.cancelled() => break,
        };
        while conns.try_join_next().is_some() {}
        let bmc = fleet.bmcs[index].clone();
        let generation = {
            let m = bmc.machine();
            if !reachable(&bmc, &m) {
                continue;
            }
            m.boot_gen
        };
        // Its own `server.crt`, or the cluster certificate once it is a member.
        let Some(identity) = fleet.served_identity(index) else {
            continue;
        };
        let acceptor = match &cached {
            Some((der, acceptor)) if der.as_slice() == identity.cert_der() => acceptor.clone(),
            _ => match incus_tls::server_config(&identity) {
                Ok(config) => {
                    let acceptor = TlsAcceptor::from(config);
                    cached = Some((identity.cert_der().to_vec(), acceptor.clone()));
                    acceptor
                }
                Err(e) => {
                    tracing::warn!(server = %bmc.name, error = %e, "Incus TLS configuration failed");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let fleet = fleet.clone();
        let cancel = cancel.clone();
        conns.spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let peer = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .map(|c| c.to_vec());
            let peer = Arc::new(peer);
            let kill = Arc::new(Notify::new());
            let svc = {
                let kill = kill.clone();
                hyper::service::service_fn(move |req| {
                    let fleet = fleet.clone();
                    let bmc = bmc.clone();
                    let kill = kill.clone();
                    let peer = peer.clone();
                    async move {
                        let ctx = Conn {
                            fleet: &fleet,
                            bmc: &bmc,
                            peer: peer.as_ref().as_deref(),
                            generation,
                            kill: &kill,
                        };
                        Ok::<_, Infallible>(handle(ctx, req).await)
                    }
                })
            };
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(tls), svc);
            tokio::select! {
                _ = conn => {}
                () = kill.notified() => {}
                () = cancel.cancelled() => {}
            }
        });
    }
}

/// What a request knows of its connection.
struct Conn<'a> {
    fleet: &'a Arc<Fleet>,
    bmc: &'a Arc<Bmc>,
    /// The client certificate of the handshake (DER).
    peer: Option<&'a [u8]>,
    /// The boot the connection was made in.
    generation: u64,
    kill: &'a Notify,
}

impl Conn<'_> {
    /// Drop the connection without an answer.
    async fn cut(&self) -> Response {
        self.kill.notify_one();
        std::future::pending().await
    }
}

async fn handle(conn: Conn<'_>, req: Request<Incoming>) -> Response {
    let bmc = conn.bmc;
    let (alive, trusted) = {
        let m = bmc.machine();
        let alive = m.boot_gen == conn.generation && reachable(bmc, &m);
        (alive, incus_tls::trusted_ders(&m.os.trusted_certificates))
    };
    if !alive {
        return conn.cut().await;
    }
    let _in_flight = bmc.incus_audit.enter();
    let fault = bmc.faults().take_incus_fault();
    match fault {
        Some(IncusFault::Hang) => return std::future::pending().await,
        Some(IncusFault::Reset) => return conn.cut().await,
        Some(IncusFault::Status(code)) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error(status, "Injected failure");
        }
        None => {}
    }
    if !conn
        .peer
        .is_some_and(|peer| trusted.iter().any(|t| t.as_slice() == peer))
    {
        return error(StatusCode::FORBIDDEN, "not authorized");
    }
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let fence = req
        .headers()
        .get(FENCE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if matches!(
        method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        bmc.incus_audit.mutation(method.as_str(), &path, fence.as_deref());
    }
    let Ok(body) = axum::body::to_bytes(Body::new(req.into_body()), BODY_LIMIT).await else {
        return error(StatusCode::BAD_REQUEST, "request body too large");
    };
    let request = IncusRequest {
        method: &method,
        path: &path,
        query: query.as_deref(),
        fence: fence.as_deref(),
        body: &body,
    };
    incus::handle(conn.fleet, bmc, request).await
}

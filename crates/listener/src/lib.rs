//! Every racklift listener (the API with its media server, the workers' `/metrics`) is served through [`serve`],
//! which holds what `axum::serve` leaves open to a slow or hostile client:
//!
//! - **a header read timeout**: a connection that does not deliver a whole request head within
//!   [`Limits::header_read_timeout`] (idle keep-alive connections included) is closed;
//! - **a cap on open connections** ([`Limits::max_connections`]) **that no one client can exhaust** (see
//!   [`admission`]): a share per source address ([`Limits::max_connections_per_peer`]), connections past it closed
//!   at once; above three quarters of the cap, connections that have not completed a request (or a TLS handshake)
//!   are closed oldest first; at the cap, new connections wait in the kernel's accept queue until one closes, so
//!   thousands of idle sockets cannot exhaust the process's file descriptors;
//! - **graceful shutdown**: on `shutdown` no new connection is accepted and the open ones finish their requests;
//! - **TLS** when asked ([`Transport::Tls`], see [`tls`]): the handshake and the first request's head share the
//!   header read timeout, so a client that stalls mid-handshake is closed like one that stalls mid-head, and a
//!   client certificate reaches handlers as the [`PeerCertificate`] extension.
//!
//! Request and body deadlines depend on the route (an installation image streams for many minutes), so they are
//! layers of the router itself (see `racklift_api::router`).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::extract::Request;
use hyper::server::conn::http1::Builder;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::admission::Admission;

pub mod admission;
pub mod files;
pub mod tls;

pub use tls::PeerCertificate;

/// What a listener speaks on its connections.
#[derive(Clone, Debug)]
pub enum Transport {
    /// Plain HTTP/1.1.
    Plain,
    /// HTTP/1.1 over TLS with this configuration (see [`tls::server_config`]).
    Tls(Arc<rustls::ServerConfig>),
}

impl Transport {
    /// `https` or `http`, for the URLs a caller prints.
    pub fn scheme(&self) -> &'static str {
        match self {
            Transport::Plain => "http",
            Transport::Tls(_) => "https",
        }
    }
}

/// What a listener allows a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest wait for a request's head (request line and headers), also between requests of a keep-alive
    /// connection.
    pub header_read_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one source address (IPv4 or IPv6 address, whatever the port); past it a new
    /// connection from that address is closed as soon as it is accepted.
    pub max_connections_per_peer: usize,
}

impl Default for Limits {
    /// 10 s for a head (a BMC or a browser sends one in milliseconds), 1,024 connections (a rack's BMCs reading
    /// media, the dashboard, the CLI and Prometheus, with room to spare) and 256 from one address (a quarter of the
    /// cap, far more than a BMC, a browser or the CLI opens, while below the three quarters where the listener
    /// starts closing silent connections).
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_connections_per_peer: 256,
        }
    }
}

/// Connections a listener bound by [`bind`] lets wait for `accept` (the kernel caps it at `net.core.somaxconn`): a
/// flood from one address that the listener closes as fast as it accepts must not fill the queue, or other
/// clients' connection attempts are dropped and retried a second later.
pub const ACCEPT_QUEUE: u32 = 4096;

/// A TCP listener on `addr` (address reuse on, as `TcpListener::bind`) with an accept queue of [`ACCEPT_QUEUE`].
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_QUEUE)
}

/// Serves `app` over plain HTTP on `listener` within `limits` until `shutdown` completes, then lets open
/// connections finish. Handlers see the peer as `ConnectInfo<SocketAddr>`, as with axum's own
/// `into_make_service_with_connect_info`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_with(listener, app, limits, Transport::Plain, shutdown).await
}

/// As [`serve`], speaking `transport`.
pub async fn serve_with(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    transport: Transport,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let acceptor = match transport {
        Transport::Plain => None,
        Transport::Tls(config) => Some(TlsAcceptor::from(config)),
    };
    let admission = Admission::new(limits);
    let graceful = GracefulShutdown::new();
    // HTTP/1.1 only: BMCs, browsers, the CLI and Prometheus all speak it, and without TLS HTTP/2 would need
    // prior knowledge no client of these listeners has.
    let mut builder = Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // EMFILE and the like: back off rather than spin; the listener itself is still good.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let admitted = tokio::select! {
            admitted = admission.admit(peer.ip().to_canonical()) => admitted,
            () = &mut shutdown => break,
        };
        // Past the peer's share: closed at once (dropped), so it never waits in front of other clients.
        let Some(admitted) = admitted else { continue };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let head_timeout = limits.header_read_timeout;
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let proof = admitted.clone();
            let service = move |certificate: Option<PeerCertificate>| {
                let proof = proof.clone();
                let service = app.map_request(move |mut request: Request<_>| {
                    // A whole request head: the connection is no longer closed early under pressure.
                    proof.prove();
                    request.extensions_mut().insert(ConnectInfo(peer));
                    if let Some(certificate) = &certificate {
                        request.extensions_mut().insert(certificate.clone());
                    }
                    request
                });
                TowerToHyperService::new(service.map_err(|never: Infallible| match never {}))
            };
            // Until its first request head, a connection is closed early when chosen to make room (`admission`):
            // `biased`, so once chosen it is never polled again, and no request is dispatched after the choice.
            let evicted = admitted.evicted();
            tokio::pin!(evicted);
            match acceptor {
                None => {
                    // hyper times a request head from its first byte: a connection that never sends one is timed
                    // here.
                    let readable = tokio::select! {
                        biased;
                        () = &mut evicted => false,
                        readable = tokio::time::timeout(head_timeout, stream.readable()) => readable.is_ok(),
                    };
                    if !readable {
                        return;
                    }
                    let connection = builder.serve_connection(TokioIo::new(stream), service(None));
                    // A client that hangs up or times out is no error of the server's.
                    tokio::select! {
                        biased;
                        () = &mut evicted => {}
                        _ = watcher.watch(connection) => {}
                    }
                }
                Some(acceptor) => {
                    // The handshake and the first byte of the first request head within one header timeout.
                    let opened = tokio::time::timeout(head_timeout, async {
                        let tls = acceptor.accept(stream).await.ok()?;
                        let certificate = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|chain| chain.first())
                            .map(|leaf| PeerCertificate::from_der(leaf.to_vec()));
                        // Buffered so the first byte can be awaited without being consumed.
                        let mut buffered = BufReader::new(tls);
                        let first = buffered.fill_buf().await.ok()?;
                        (!first.is_empty()).then_some((buffered, certificate))
                    });
                    let opened = tokio::select! {
                        biased;
                        () = &mut evicted => return,
                        opened = opened => opened,
                    };
                    if let Ok(Some((stream, certificate))) = opened {
                        let connection = builder.serve_connection(TokioIo::new(stream), service(certificate));
                        tokio::select! {
                            biased;
                            () = &mut evicted => {}
                            _ = watcher.watch(connection) => {}
                        }
                    }
                }
            }
            // Dropping `admitted` (here and with the service) gives the slot and the peer's share back.
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tls_tests;

#[cfg(test)]
mod crowd_tests;

#[cfg(test)]
mod framing_tests;

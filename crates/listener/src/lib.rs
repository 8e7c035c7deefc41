//! Every racklift listener (the API with its media server, the workers' `/metrics`) is served through [`serve`],
//! which holds what `axum::serve` leaves open to a slow or hostile client:
//!
//! - **a header read timeout**: a connection that does not deliver a whole request head within
//!   [`Limits::header_read_timeout`] (idle keep-alive connections included) is closed;
//! - **a cap on open connections** ([`Limits::max_connections`]): past it, new connections wait in the kernel's
//!   accept queue until one closes, so thousands of idle sockets cannot exhaust the process's file descriptors,
//!   and the header timeout frees their slots;
//! - **graceful shutdown**: on `shutdown` no new connection is accepted and the open ones finish their requests.
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
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// What a listener allows a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest wait for a request's head (request line and headers), also between requests of a keep-alive
    /// connection.
    pub header_read_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

impl Default for Limits {
    /// 10 s for a head (a BMC or a browser sends one in milliseconds) and 1,024 connections (a rack's BMCs
    /// reading media, the dashboard, the CLI and Prometheus, with room to spare).
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes, then lets open connections finish.
/// Handlers see the peer as `ConnectInfo<SocketAddr>`, as with axum's own `into_make_service_with_connect_info`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
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
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
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
        let _ = stream.set_nodelay(true);
        let service = app.clone().map_request(move |mut request: Request<_>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        });
        let service = TowerToHyperService::new(service.map_err(|never: Infallible| match never {}));
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let head_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            // hyper times a request head from its first byte: a connection that never sends one is timed here.
            if tokio::time::timeout(head_timeout, stream.readable())
                .await
                .is_err()
            {
                drop(slot);
                return;
            }
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            // A client that hangs up or times out is no error of the server's.
            let _ = watcher.watch(connection).await;
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests;

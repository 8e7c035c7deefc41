//! One HTTP/1.1 exchange on a connection of its own, under the BMC's slot, and the rule that the slot is free
//! only once that connection is gone.
//!
//! BMCs count connections, not just requests, and have very few of them (an iDRAC or an iLO serves a handful).
//! When a call hits its deadline the BMC accepted the request and has not answered; dropping the call's future
//! must not let the next request reach the BMC while that connection is still open, or the BMC serves two
//! requests at once. reqwest cannot give that guarantee: its pool drives every connection in a spawned task,
//! which closes a cancelled one some time after the caller has moved on, and its `connector_layer` must return
//! reqwest's own sealed `Conn`, so no layer can tie a permit to the life of a stream. So a call here owns its
//! connection: it connects, sends one request, reads the whole answer and closes, and the connection is driven
//! inside the call's future, not by a spawned task.
//!
//! The slot ([`Line`] holds it with the connection) is released
//! - after the connection is closed, when the answer was read or the connection failed: the BMC has finished
//!   with the request (it answered, or the socket is dead);
//! - when the call is dropped (its deadline) or fails with the connection still up, only after the BMC has
//!   closed its side too, or after [`LINGER`]: the client closes its write side and reads until the BMC closes.
//!   Closing the socket alone is not enough: the BMC still holds the request until it has read the close, and
//!   a request sent right after our `close()` can reach it first (the simulator's audit saw exactly that).
//!
//! Why this cannot deadlock: each call takes exactly one permit of one semaphore, before its connection
//! exists, and nothing but that call's own connection gives it back, after at most the connect timeout, the
//! call's deadline and [`LINGER`]. There is no pool, so no idle connection holds a slot a new connection waits
//! for, and there is no second permit, so no order of acquisition to get wrong. A connection per call also
//! removes the pool's stale keep-alive race (a mutation written on a connection the BMC closed a moment
//! before). It costs a TCP (and TLS) handshake per call, which is small next to the seconds between the calls
//! a deployment makes to one BMC.

use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper::{HeaderMap, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio_rustls::TlsConnector;
use tracing::Instrument;
use url::{Host, Url};

use crate::error::{Error, Result};

/// The error of an exchange that got no complete answer.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Answers larger than this are refused: Redfish resources are kilobytes, a BIOS attribute dump a few MiB.
const MAX_BODY_BYTES: usize = 32 << 20;

/// How long an abandoned connection keeps its slot waiting for the BMC to close it. A BMC that has not seen
/// the close by then is not going to; the socket is then dropped (the kernel resets it) and the slot freed.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// A byte stream to the BMC: plain TCP or TLS over it.
trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

type Io = Box<dyn Stream>;
type Connection = http1::Connection<TokioIo<Io>, Full<Bytes>>;

/// Where and how to connect to one BMC.
pub(crate) struct Endpoint {
    /// `host:port` to connect to (brackets around IPv6).
    address: String,
    /// The `Host` header: as the base URL spells it, port only when not the scheme's default.
    host_header: String,
    /// `None` for `http://`.
    tls: Option<(TlsConnector, ServerName<'static>)>,
    connect_timeout: Duration,
}

impl Endpoint {
    /// The endpoint of a base URL; `tls` is used when the scheme is `https`. The server name is the URL's
    /// host (a DNS name, or an IP address and no SNI), as reqwest derived it, so verification and pinning
    /// behave as they did.
    pub fn new(base: &Url, tls: ClientConfig, connect_timeout: Duration) -> Result<Self> {
        let bad = |reason: &str| Error::Config {
            reason: format!("base URL {:?}: {reason}", base.as_str()),
        };
        let host = base.host().ok_or_else(|| bad("no host"))?;
        let port = base.port_or_known_default().ok_or_else(|| bad("no port"))?;
        let tls = match base.scheme() {
            "https" => {
                let name = match &host {
                    Host::Domain(d) => {
                        ServerName::try_from(d.to_string()).map_err(|_| bad("invalid host name"))?
                    }
                    Host::Ipv4(ip) => ServerName::IpAddress(std::net::IpAddr::V4(*ip).into()),
                    Host::Ipv6(ip) => ServerName::IpAddress(std::net::IpAddr::V6(*ip).into()),
                };
                Some((TlsConnector::from(Arc::new(tls)), name))
            }
            _ => None,
        };
        let host_header = match base.port() {
            Some(explicit) => format!("{host}:{explicit}"),
            None => host.to_string(),
        };
        Ok(Self {
            address: format!("{host}:{port}"),
            host_header,
            tls,
            connect_timeout,
        })
    }

    /// The value of the `Host` header for requests to this endpoint.
    pub fn host_header(&self) -> &str {
        &self.host_header
    }

    /// TCP connect and, for `https`, the TLS handshake, within the connect timeout.
    async fn connect(&self) -> Result<Io, BoxError> {
        let connect = async {
            let tcp = TcpStream::connect(&self.address).await?;
            // Requests are small and answered at once; Nagle would only add latency (reqwest disabled it too).
            let _ = tcp.set_nodelay(true);
            match &self.tls {
                None => Ok::<Io, BoxError>(Box::new(tcp)),
                Some((connector, name)) => {
                    let tls = connector.connect(name.clone(), tcp).await?;
                    Ok(Box::new(tls) as Io)
                }
            }
        };
        match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(stream) => stream,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out").into()),
        }
    }
}

/// A complete answer, with any status.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Connects, sends `request` and reads the whole answer, holding `slot` until the connection is gone (see the
/// module documentation for when that is).
pub(crate) async fn exchange(
    endpoint: &Endpoint,
    request: hyper::Request<Full<Bytes>>,
    slot: OwnedSemaphorePermit,
) -> Result<Answer, BoxError> {
    let mut line = Line {
        conn: None,
        slot: Some(slot),
    };
    let io = endpoint.connect().await?;
    let (mut sender, conn) = http1::handshake(TokioIo::new(io)).await?;
    line.conn = Some(conn);
    let call = async move {
        let response = sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_BODY_BYTES).collect().await?.to_bytes();
        Ok::<_, BoxError>(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    };
    tokio::pin!(call);
    let outcome = tokio::select! {
        biased;
        answer = &mut call => answer,
        closed = std::future::poll_fn(|cx| line.drive(cx)) => match closed {
            // The connection ended first (the BMC closed after answering): the answer is complete or the
            // request failed, and `call` says which.
            Ok(()) => call.await,
            Err(e) => Err(e.into()),
        },
    };
    if outcome.is_ok() {
        line.close();
    }
    // Otherwise `line` drops here with the connection still up (or already gone) and lingers as needed.
    outcome
}

/// A call's connection and its BMC slot. The slot is given back only after the connection is gone: at once
/// when the exchange completed or the connection ended by itself, else after [`linger`].
struct Line {
    conn: Option<Connection>,
    slot: Option<OwnedSemaphorePermit>,
}

impl Line {
    /// Drives the connection; when it ends (by itself: closed by the BMC or failed) it is dropped.
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<hyper::Result<()>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Pending;
        };
        // Without shutdown: either way the connection is dropped next, and a failed one cannot shut down.
        let ended = std::task::ready!(conn.poll_without_shutdown(cx));
        self.conn = None;
        Poll::Ready(ended)
    }

    /// The exchange is complete: close the socket, then free the slot. The BMC has already produced the whole
    /// answer, so it no longer holds the request.
    fn close(&mut self) {
        drop(self.conn.take());
        drop(self.slot.take());
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            // No connection (never made, or already ended): the slot goes with `self`.
            return;
        };
        let io = conn.into_parts().io.into_inner();
        let slot = self.slot.take();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(linger(io, slot).instrument(tracing::Span::current()));
            }
            // Outside a runtime nothing can wait for the BMC: close, then free the slot.
            Err(_) => {
                drop(io);
                drop(slot);
            }
        }
    }
}

/// Closes the write side of an abandoned connection and reads (discarding a late answer) until the BMC closes
/// its side, within [`LINGER`], then drops the socket and only then the slot.
async fn linger(mut io: Io, slot: Option<OwnedSemaphorePermit>) {
    let closed = async {
        // For TLS this sends close_notify first. An error means the connection is dead already.
        if io.shutdown().await.is_err() {
            return;
        }
        let mut scrap = [0u8; 4096];
        // EOF, or an error (a reset, TLS ended without close_notify): the BMC has closed.
        while let Ok(n) = io.read(&mut scrap).await
            && n > 0
        {}
    };
    if tokio::time::timeout(LINGER, closed).await.is_err() {
        tracing::debug!(
            linger_ms = LINGER.as_millis() as u64,
            "BMC kept an abandoned connection open; dropping it"
        );
    }
    drop(io);
    drop(slot);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(url: &str) -> Endpoint {
        let tls = crate::tls::client_config(&crate::tls::TlsMode::WebPkiRoots, "s").expect("tls");
        Endpoint::new(&Url::parse(url).expect("url"), tls, Duration::from_secs(1)).expect("endpoint")
    }

    #[test]
    fn addresses_and_host_headers() {
        let e = endpoint("https://10.0.0.1/");
        assert_eq!(
            (e.address.as_str(), e.host_header()),
            ("10.0.0.1:443", "10.0.0.1")
        );
        assert!(e.tls.is_some());
        let e = endpoint("http://[::1]:8000/bmc/7/");
        assert_eq!(
            (e.address.as_str(), e.host_header()),
            ("[::1]:8000", "[::1]:8000")
        );
        assert!(e.tls.is_none());
        let e = endpoint("https://bmc.example:8443");
        assert!(matches!(&e.tls, Some((_, ServerName::DnsName(n))) if n.as_ref() == "bmc.example"));
    }
}

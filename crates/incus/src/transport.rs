//! One HTTP/1.1 exchange on its own connection.
//!
//! Each attempt connects, handshakes, sends one request, reads the whole answer and closes. The connection is
//! driven inside the attempt's future, not by a spawned task, so dropping the future (a deadline) closes the
//! socket at once: the server's one slot is never released while a dropped call's connection is still open. A
//! fresh TLS 1.3 handshake per call costs a few milliseconds on a management network, which is nothing next to
//! an evacuation or a reboot.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use url::{Host, Url};

use crate::error::{BoxError, Error, Result};
use crate::tls::{CertPin, PinState, TlsFailure, tls_failure};

/// Answers larger than this are refused: a member list of a large cluster is tens of kilobytes.
const MAX_BODY_BYTES: usize = 8 << 20;

/// Where and how to connect.
pub(crate) struct Endpoint {
    /// `host:port` (brackets around IPv6), for connecting and for the `Host` header.
    pub authority: String,
    /// `None` for plain HTTP (an explicit opt-in).
    pub tls: Option<TlsEndpoint>,
    pub connect_timeout: Duration,
}

pub(crate) struct TlsEndpoint {
    pub connector: TlsConnector,
    pub name: ServerName<'static>,
    pub pins: Arc<PinState>,
}

impl Endpoint {
    /// The authority and TLS server name of a base URL.
    pub fn parse(base: &Url) -> Result<(String, ServerName<'static>)> {
        let bad = |reason: &str| Error::Config {
            reason: format!("base URL {:?}: {reason}", base.as_str()),
        };
        let host = base.host().ok_or_else(|| bad("no host"))?;
        let port = base.port_or_known_default().ok_or_else(|| bad("no port"))?;
        let name = match &host {
            Host::Domain(d) => ServerName::try_from(d.to_string()).map_err(|_| bad("invalid host name"))?,
            Host::Ipv4(ip) => ServerName::IpAddress(std::net::IpAddr::V4(*ip).into()),
            Host::Ipv6(ip) => ServerName::IpAddress(std::net::IpAddr::V6(*ip).into()),
        };
        Ok((format!("{host}:{port}"), name))
    }
}

/// An answer with any status.
pub(crate) struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// Why an exchange got no answer.
pub(crate) enum Failure {
    Transport(BoxError),
    Tls(BoxError),
    Pin { expected: CertPin, presented: CertPin },
}

impl Failure {
    fn classify(err: BoxError) -> Self {
        match tls_failure(err.as_ref()) {
            Some(TlsFailure::Pin(expected, presented)) => Self::Pin { expected, presented },
            Some(TlsFailure::Other) => Self::Tls(err),
            None => Self::Transport(err),
        }
    }
}

/// Connects, sends `request`, and reads the whole answer.
pub(crate) async fn exchange(
    endpoint: &Endpoint,
    request: hyper::Request<Full<Bytes>>,
) -> Result<Answer, Failure> {
    let connect = async {
        let tcp = TcpStream::connect(&endpoint.authority)
            .await
            .map_err(|e| Failure::Transport(e.into()))?;
        // Requests are small and answered at once; Nagle would only add latency.
        let _ = tcp.set_nodelay(true);
        Ok::<_, Failure>(tcp)
    };
    let connect_timeout = || {
        Failure::Transport(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connect timed out",
        )))
    };
    match &endpoint.tls {
        None => {
            let tcp = tokio::time::timeout(endpoint.connect_timeout, connect)
                .await
                .map_err(|_| connect_timeout())??;
            send(tcp, request).await
        }
        Some(tls) => {
            let handshake = async {
                let tcp = connect.await?;
                let stream = tls
                    .connector
                    .connect(tls.name.clone(), tcp)
                    .await
                    .map_err(|e| Failure::classify(e.into()))?;
                let presented = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|certs| certs.first())
                    .map(|der| CertPin::of_der(der))
                    .ok_or_else(|| Failure::Tls("server presented no certificate".into()))?;
                match tls.pins.settle(presented) {
                    Ok(()) => Ok(stream),
                    Err(Error::PinMismatch { expected, presented }) => {
                        Err(Failure::Pin { expected, presented })
                    }
                    Err(other) => Err(Failure::Tls(other.into())),
                }
            };
            let stream = tokio::time::timeout(endpoint.connect_timeout, handshake)
                .await
                .map_err(|_| connect_timeout())??;
            send(stream, request).await
        }
    }
}

/// Drives the connection and the request together in this future: when the answer is read (or this future is
/// dropped) the connection goes with it.
async fn send<IO>(io: IO, request: hyper::Request<Full<Bytes>>) -> Result<Answer, Failure>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| Failure::classify(e.into()))?;
    let call = async move {
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await?
            .to_bytes();
        Ok::<_, BoxError>(Answer { status, body })
    };
    tokio::pin!(call, conn);
    let outcome = tokio::select! {
        biased;
        answer = &mut call => answer,
        closed = &mut conn => match closed {
            // The connection finished first (the server closed after answering): the answer is complete or the
            // request has failed, and `call` says which.
            Ok(()) => call.await,
            Err(e) => Err(e.into()),
        },
    };
    outcome.map_err(Failure::classify)
}

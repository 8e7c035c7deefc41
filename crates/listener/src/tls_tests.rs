//! The TLS listener against real sockets: the handshake, the client certificate a handler sees, and a client
//! that stalls in the handshake.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::*;

const HEAD_TIMEOUT: Duration = Duration::from_millis(300);
const CLOSE_WITHIN: Duration = Duration::from_secs(10);

struct Served {
    addr: SocketAddr,
    server: tls::CertifiedKeyPem,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start() -> Served {
    let server = tls::self_signed(&["localhost".to_owned(), "127.0.0.1".to_owned()], "test").unwrap();
    let config = tls::server_config(&server.certificate_pem, &server.key_pem).unwrap();
    let app = Router::new().route(
        "/cert",
        get(
            |certificate: Option<axum::Extension<PeerCertificate>>| async move {
                certificate.map_or_else(|| "none".to_owned(), |c| c.0.sha256)
            },
        ),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let limits = Limits {
        header_read_timeout: HEAD_TIMEOUT,
        max_connections: 16,
        ..Limits::default()
    };
    tokio::spawn(serve_with(
        listener,
        app,
        limits,
        Transport::Tls(config),
        async move {
            let _ = stopped.await;
        },
    ));
    Served {
        addr,
        server,
        _stop: stop,
    }
}

/// A TLS 1.3-only client trusting exactly the server's certificate, presenting `identity` when given.
fn connector(server: &tls::CertifiedKeyPem, identity: Option<&tls::CertifiedKeyPem>) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(server.certificate_pem.as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        Some(id) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(id.certificate_pem.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    TlsConnector::from(Arc::new(config))
}

/// `GET /cert` over a fresh TLS connection: the negotiated version and the answer's body.
async fn get_cert(
    served: &Served,
    identity: Option<&tls::CertifiedKeyPem>,
) -> (rustls::ProtocolVersion, String) {
    let tcp = TcpStream::connect(served.addr).await.unwrap();
    let mut tls = connector(&served.server, identity)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("handshake");
    let version = tls.get_ref().1.protocol_version().expect("negotiated");
    tls.write_all(b"GET /cert HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    tls.read_to_end(&mut got).await.ok();
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (version, body)
}

#[tokio::test]
async fn a_tls13_client_is_answered_and_sees_no_certificate_of_its_own() {
    let served = start().await;
    let (version, body) = get_cert(&served, None).await;
    assert_eq!(version, rustls::ProtocolVersion::TLSv1_3);
    assert_eq!(body, "none", "no client certificate, no extension");
}

#[tokio::test]
async fn a_self_signed_client_certificate_reaches_the_handler_with_its_fingerprint() {
    let served = start().await;
    let client = tls::self_signed(&["client".to_owned()], "client").unwrap();
    let der = CertificateDer::from_pem_slice(client.certificate_pem.as_bytes()).unwrap();
    let expected = PeerCertificate::from_der(der.to_vec());
    assert_eq!(expected.sha256.len(), 64);
    assert!(
        expected
            .sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    let (_, body) = get_cert(&served, Some(&client)).await;
    assert_eq!(body, expected.sha256);
}

#[tokio::test]
async fn a_stalled_handshake_is_closed_within_the_header_timeout() {
    let served = start().await;
    // Half a ClientHello record header: the handshake can never complete.
    let mut stalled = TcpStream::connect(served.addr).await.unwrap();
    stalled.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    let silent = TcpStream::connect(served.addr).await.unwrap();
    let started = Instant::now();
    for mut stream in [stalled, silent] {
        let mut got = Vec::new();
        tokio::time::timeout(CLOSE_WITHIN, stream.read_to_end(&mut got))
            .await
            .expect("the server closes the connection")
            .ok();
    }
    assert!(started.elapsed() >= HEAD_TIMEOUT / 2, "closed before its timeout");
    // The listener still serves others.
    assert_eq!(get_cert(&served, None).await.1, "none");
}

#[tokio::test]
async fn a_handshake_then_silence_is_closed_within_the_header_timeout() {
    let served = start().await;
    let tcp = TcpStream::connect(served.addr).await.unwrap();
    let started = Instant::now();
    let mut tls = connector(&served.server, None)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("handshake");
    let mut got = Vec::new();
    tokio::time::timeout(CLOSE_WITHIN, tls.read_to_end(&mut got))
        .await
        .expect("the server closes the connection")
        .ok();
    assert!(started.elapsed() >= HEAD_TIMEOUT / 2, "closed before its timeout");
    assert!(got.is_empty(), "nothing answered to no request");
}

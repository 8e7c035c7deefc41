//! Request smuggling: heads whose framing RFC 9112 refuses, each followed on the same connection by a second
//! request, against the media listener (`files`) and the hyper listener. Each is answered once, 400 (hyper frames
//! `Content-Length` with `Transfer-Encoding` by the chunked coding, as RFC 9112 section 6.1 allows, and closes),
//! then the connection is closed; the second request is never answered.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

const CLOSE_WITHIN: Duration = Duration::from_secs(10);

/// What follows every refused head: a request whose answer must never come.
const SMUGGLED: &str = "GET /second HTTP/1.1\r\nHost: x\r\n\r\n";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Hyper,
    Media,
}

async fn start(kind: Kind) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let app = Router::new()
        .route("/", get(|| async { "first" }))
        .route("/second", get(|| async { "second" }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = async move {
        let _ = stopped.await;
    };
    let limits = Limits {
        header_read_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    match kind {
        Kind::Hyper => tokio::spawn(serve(listener, app, limits, stopped)),
        Kind::Media => tokio::spawn(files::serve_files(listener, app, limits, stopped)),
    };
    (addr, stop)
}

/// Sends `head` and [`SMUGGLED`] in one write: all the server sends until it closes the connection.
async fn smuggle(addr: SocketAddr, head: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("{head}{SMUGGLED}").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(CLOSE_WITHIN, stream.read_to_end(&mut got))
        .await
        .expect("the server closes the connection")
        .ok();
    String::from_utf8_lossy(&got).into_owned()
}

/// The heads refused, by name; each announces a body the smuggled request would be taken from.
fn heads() -> [(&'static str, String); 7] {
    let get = "GET / HTTP/1.1\r\nHost: x\r\n";
    [
        (
            "CL.CL",
            format!("{get}Content-Length: 0\r\nContent-Length: 34\r\n\r\n"),
        ),
        ("CL list", format!("{get}Content-Length: 0, 34\r\n\r\n")),
        (
            "CL.TE",
            format!("{get}Content-Length: 34\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ),
        (
            "TE.CL",
            format!("{get}Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n"),
        ),
        ("TE gzip", format!("{get}Transfer-Encoding: gzip\r\n\r\n")),
        ("CL sign", format!("{get}Content-Length: +0\r\n\r\n")),
        ("obs-fold", format!("{get}X-A: 1\r\n Content-Length: 34\r\n\r\n")),
    ]
}

async fn refused_with_one_answer_and_closed(kind: Kind) {
    let (addr, _stop) = start(kind).await;
    for (name, head) in heads() {
        let got = smuggle(addr, &head).await;
        assert_eq!(
            got.matches("HTTP/1.1 ").count(),
            1,
            "{kind:?} {name}: one answer only: {got}"
        );
        assert!(
            !got.contains("second"),
            "{kind:?} {name}: the smuggled request was answered: {got}"
        );
        // hyper takes CL.TE and TE.CL by the chunked coding, answers and closes; everything else is a 400.
        let chunked = kind == Kind::Hyper && (name == "CL.TE" || name == "TE.CL");
        if chunked {
            assert!(got.starts_with("HTTP/1.1 200"), "{kind:?} {name}: {got}");
        } else {
            assert!(got.starts_with("HTTP/1.1 400"), "{kind:?} {name}: {got}");
        }
    }
}

#[tokio::test]
async fn the_media_listener_refuses_smuggling_heads_and_closes() {
    refused_with_one_answer_and_closed(Kind::Media).await;
}

#[tokio::test]
async fn the_hyper_listener_refuses_smuggling_heads_or_frames_them_by_chunked_and_closes() {
    refused_with_one_answer_and_closed(Kind::Hyper).await;
}

#[tokio::test]
async fn the_media_listeners_refusal_names_the_header_in_the_api_error_shape() {
    let (addr, _stop) = start(Kind::Media).await;
    let got = smuggle(addr, &heads()[0].1).await;
    let body = got.split("\r\n\r\n").nth(1).unwrap_or_default();
    assert!(got.contains("content-type: application/json"), "{got}");
    assert!(got.contains("connection: close"), "{got}");
    assert!(
        body.contains(r#""code":"bad_framing""#) && body.contains(r#""field":"Content-Length""#),
        "{body}"
    );
}

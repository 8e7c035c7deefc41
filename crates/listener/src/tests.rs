//! The limits against real sockets: clients that stall, idle or crowd the listener, beside a normal request.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::*;

const HEAD_TIMEOUT: Duration = Duration::from_millis(300);
/// Generous against a loaded machine: what is checked is that the server closes, not how fast.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);

struct Served {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Notified when `/slow` has started handling a request.
    slow_started: Arc<tokio::sync::Notify>,
}

async fn start(limits: Limits) -> Served {
    let slow_started = Arc::new(tokio::sync::Notify::new());
    let notify = slow_started.clone();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
        )
        .route(
            "/slow",
            get(move || async move {
                notify.notify_one();
                tokio::time::sleep(Duration::from_millis(500)).await;
                "slow"
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, app, limits, async move {
        let _ = stopped.await;
    }));
    Served {
        addr,
        stop: Some(stop),
        task,
        slow_started,
    }
}

fn limits() -> Limits {
    Limits {
        header_read_timeout: HEAD_TIMEOUT,
        max_connections: 64,
        ..Limits::default()
    }
}

/// Reads until the server closes the connection; fails the test if it stays open past [`CLOSE_WITHIN`].
async fn closed_by_server(mut stream: TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(CLOSE_WITHIN, stream.read_to_end(&mut got))
        .await
        .expect("the server closes the connection")
        .ok();
    got
}

async fn get_ok(addr: SocketAddr, path: &str) -> String {
    reqwest::get(format!("http://{addr}{path}"))
        .await
        .expect("answered")
        .text()
        .await
        .expect("body")
}

#[tokio::test]
async fn a_stalled_request_head_is_closed_while_others_are_answered() {
    let served = start(limits()).await;
    let mut stalled = TcpStream::connect(served.addr).await.unwrap();
    stalled.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let idle = TcpStream::connect(served.addr).await.unwrap();
    assert_eq!(get_ok(served.addr, "/").await, "ok");
    let started = Instant::now();
    let (stalled, idle) = tokio::join!(closed_by_server(stalled), closed_by_server(idle));
    assert!(started.elapsed() >= HEAD_TIMEOUT / 2, "closed before its timeout");
    // Either nothing or a 408: never an answer to the incomplete request.
    for got in [stalled, idle] {
        let text = String::from_utf8_lossy(&got);
        assert!(got.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    }
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let served = start(limits()).await;
    let mut stream = TcpStream::connect(served.addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let got = closed_by_server(stream).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200") && text.ends_with("ok"), "{text}");
}

#[tokio::test]
async fn past_the_cap_new_connections_wait_for_a_free_slot() {
    let served = start(Limits {
        header_read_timeout: HEAD_TIMEOUT,
        max_connections: 2,
        ..Limits::default()
    })
    .await;
    let crowd = [
        TcpStream::connect(served.addr).await.unwrap(),
        TcpStream::connect(served.addr).await.unwrap(),
    ];
    // Both slots are taken by clients that send nothing; the request is served once the header timeout frees one.
    assert_eq!(get_ok(served.addr, "/").await, "ok");
    for stream in crowd {
        closed_by_server(stream).await;
    }
}

#[tokio::test]
async fn handlers_see_the_peer_address() {
    let served = start(limits()).await;
    let peer = get_ok(served.addr, "/peer").await;
    assert!(peer.starts_with("127.0.0.1:"), "{peer}");
}

#[tokio::test]
async fn shutdown_lets_a_request_in_flight_finish_and_refuses_new_connections() {
    let mut served = start(limits()).await;
    let addr = served.addr;
    let slow = tokio::spawn(async move { get_ok(addr, "/slow").await });
    served.slow_started.notified().await;
    served.stop.take().unwrap().send(()).unwrap();
    assert_eq!(slow.await.unwrap(), "slow");
    served.task.await.unwrap().unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "the listener is closed");
}

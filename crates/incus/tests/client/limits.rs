//! Deadlines, transport failures, retries of GETs only, and one call in flight per server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use racklift_incus::{ErrorClass, IncusClient, RetryPolicy, ServerLimiter, ServerTrust};
use serde_json::json;
use tokio::sync::watch;

use crate::support::{Reply, TestServer, error, eventually, identity, sync};

fn cluster() -> Reply {
    sync(json!({"server_name": "node-1", "enabled": true}))
}

#[tokio::test]
async fn a_hanging_server_hits_the_deadline_and_loses_the_connection() {
    let server = TestServer::start(Arc::new(|_, _| Reply::Hang)).await;
    let (identity, _) = identity();
    let mut config = server.config("hang", identity, ServerTrust::FirstUse);
    config.call_deadline = Duration::from_millis(300);
    let client = IncusClient::new(config).expect("client");
    let started = Instant::now();
    let err = client.cluster().await.expect_err("deadline");
    let elapsed = started.elapsed();
    assert_eq!(
        (err.class(), err.as_str()),
        (ErrorClass::Deadline, "deadline"),
        "{err}"
    );
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    assert_eq!(err.to_string(), "cluster: call deadline of 300 ms exceeded");
    server
        .wait_for("the timed-out call's connection to close", |s| {
            s.open_connections() == 0 && s.in_flight() == 0
        })
        .await;
}

#[tokio::test]
async fn a_reset_connection_is_a_transport_error() {
    let server = TestServer::start(Arc::new(|_, _| Reply::Reset)).await;
    let (identity, _) = identity();
    let mut config = server.config("reset", identity, ServerTrust::FirstUse);
    config.retry = RetryPolicy::NONE;
    let client = IncusClient::new(config).expect("client");
    let err = client.os().await.expect_err("reset");
    assert_eq!(
        (err.class(), err.as_str()),
        (ErrorClass::Transport, "transport"),
        "{err:?}"
    );
    assert!(err.is_retryable());
    let err = client.reboot().await.expect_err("reset");
    assert_eq!(err.class(), ErrorClass::Transport, "{err:?}");
    assert_eq!(server.seen().len(), 2, "one request each, no retries");
}

#[tokio::test]
async fn nothing_listening_is_a_transport_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let (identity, _) = identity();
    let mut config = racklift_incus::IncusConfig::new(
        "gone",
        format!("https://127.0.0.1:{port}"),
        identity,
        ServerTrust::FirstUse,
    );
    config.retry = RetryPolicy::NONE;
    config.limiter = ServerLimiter::new();
    let err = IncusClient::new(config)
        .expect("client")
        .cluster()
        .await
        .expect_err("refused");
    assert_eq!(err.class(), ErrorClass::Transport, "{err:?}");
}

#[tokio::test]
async fn gets_are_retried_after_a_503_and_posts_are_not() {
    // The first request to each path is refused with a 503, later ones succeed.
    let server = TestServer::start(Arc::new(|_, hits| {
        if hits == 1 {
            error(503, "Daemon is starting")
        } else {
            sync(json!({"server_name": "node-1"}))
        }
    }))
    .await;
    let (identity, _) = identity();
    let client = IncusClient::new(server.config("retry", identity, ServerTrust::FirstUse)).expect("client");
    client.cluster().await.expect("the retry succeeds");
    let err = client.check_update().await.expect_err("a POST is sent once");
    assert_eq!((err.status(), err.class()), (Some(503), ErrorClass::Busy));
    let seen: Vec<(String, String)> = server.seen().into_iter().map(|s| (s.method, s.path)).collect();
    assert_eq!(
        seen,
        [
            ("GET".into(), "/1.0/cluster".into()),
            ("GET".into(), "/1.0/cluster".into()),
            ("POST".into(), "/os/1.0/system/update/:check".into()),
        ]
    );
}

#[tokio::test]
async fn one_call_in_flight_per_server() {
    let (open, gate) = watch::channel(false);
    let server = TestServer::start(Arc::new(move |_, _| {
        Reply::Held(gate.clone(), Box::new(cluster()))
    }))
    .await;
    let (identity, _) = identity();
    let config = server.config("node-1", identity, ServerTrust::FirstUse);
    // Two clients built separately for the same server share its slot through the limiter.
    let a = IncusClient::new(config.clone()).expect("client a");
    let b = IncusClient::new(config.clone()).expect("client b");
    let first = tokio::spawn(async move { a.cluster().await });
    server
        .wait_for("the first call to arrive", |s| s.in_flight() == 1)
        .await;
    let second = tokio::spawn(async move { b.members().await.map(drop) });
    eventually("the second call to queue", || {
        config.limiter.waiting("node-1") == 1
    })
    .await;
    assert_eq!(
        server.seen().len(),
        1,
        "the second call waits for the server's slot"
    );
    open.send_replace(true);
    first.await.expect("join").expect("first call");
    let err = second
        .await
        .expect("join")
        .expect_err("a cluster is not a member list");
    assert_eq!(err.class(), ErrorClass::Protocol);
    assert_eq!(server.seen().len(), 2);
    assert_eq!((server.max_in_flight(), server.max_open_connections()), (1, 1));
}

#[tokio::test]
async fn different_servers_are_not_serialized() {
    let (open, gate) = watch::channel(false);
    let server = TestServer::start(Arc::new(move |_, _| {
        Reply::Held(gate.clone(), Box::new(cluster()))
    }))
    .await;
    let limiter = ServerLimiter::new();
    let mut calls = Vec::new();
    for name in ["node-1", "node-2"] {
        let (identity, _) = identity();
        let mut config = server.config(name, identity, ServerTrust::FirstUse);
        config.limiter = limiter.clone();
        let client = IncusClient::new(config).expect("client");
        calls.push(tokio::spawn(async move { client.cluster().await }));
    }
    server
        .wait_for("both calls to arrive at once", |s| s.in_flight() == 2)
        .await;
    open.send_replace(true);
    for call in calls {
        call.await.expect("join").expect("call");
    }
}

#[tokio::test]
async fn a_timed_out_call_keeps_the_slot_until_its_connection_is_gone() {
    // The first request hangs; the second is answered.
    let server = TestServer::start(Arc::new(
        |_, hits| if hits == 1 { Reply::Hang } else { cluster() },
    ))
    .await;
    let (identity, _) = identity();
    let mut config = server.config("node-1", identity, ServerTrust::FirstUse);
    let patient = IncusClient::new(config.clone()).expect("patient client");
    config.call_deadline = Duration::from_millis(300);
    let hasty = IncusClient::new(config.clone()).expect("hasty client");
    let first = tokio::spawn(async move { hasty.cluster().await });
    server
        .wait_for("the hanging call to arrive", |s| s.in_flight() == 1)
        .await;
    let second = tokio::spawn(async move { patient.cluster().await });
    eventually("the second call to queue", || {
        config.limiter.waiting("node-1") == 1
    })
    .await;
    let err = first.await.expect("join").expect_err("deadline");
    assert_eq!(err.class(), ErrorClass::Deadline);
    second.await.expect("join").expect("the queued call goes through");
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].open_connections, 1,
        "the timed-out call's connection was closed before the next call connected"
    );
    assert_eq!(server.max_open_connections(), 1);
}

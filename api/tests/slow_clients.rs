//! Clients that stall or crowd the API's listener (the limits of `racklift_listener` and the router's request and
//! body deadlines): each is cut off within its timeout, loses nothing and stores nothing, while a normal request
//! is still answered.

mod common;

use std::time::Duration;

use common::{ADMIN, Api};
use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TIMEOUT: Duration = Duration::from_millis(500);
/// Generous against a loaded machine: what is checked is that the server ends the exchange, not how fast.
const ENDED_WITHIN: Duration = Duration::from_secs(15);

async fn api() -> Api {
    let mut api = Api::start_with(|c| {
        c.listener = racklift_listener::Limits {
            header_read_timeout: TIMEOUT,
            max_connections: 32,
            ..racklift_listener::Limits::default()
        };
        c.body_timeout = TIMEOUT;
    })
    .await;
    // The server closes a keep-alive connection idle past `TIMEOUT`, the very wait these tests make: a pooled
    // connection would race that close. Each normal request here opens its own.
    api.http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    api
}

fn addr(api: &Api) -> String {
    api.base.trim_start_matches("http://").to_owned()
}

/// What the server sends before it closes the connection (or nothing).
async fn until_closed(mut stream: TcpStream) -> String {
    let mut got = Vec::new();
    tokio::time::timeout(ENDED_WITHIN, stream.read_to_end(&mut got))
        .await
        .expect("the server ends the exchange")
        .ok();
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_comes_is_cut_off_and_stores_nothing() {
    let api = api().await;
    let mut stream = TcpStream::connect(addr(&api)).await.unwrap();
    let head = format!(
        "POST /1.0/servers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\n\
         Content-Length: 1000000\r\n\r\n{{\"name\": \"stalled\""
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Meanwhile the API answers others.
    let (s, _) = api.call(Method::GET, "/1.0/servers", ADMIN, None).await;
    assert_eq!(s, 200);
    let answer = until_closed(stream).await;
    let status: Option<u16> = answer.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    assert!(
        answer.is_empty() || status.is_some_and(|s| (400..500).contains(&s)),
        "a stalled body gets a 4xx or a closed connection: {answer}"
    );
    let (s, _) = api.call(Method::GET, "/1.0/servers/stalled", ADMIN, None).await;
    assert_eq!(s, 404, "nothing was stored");
}

/// A body that pauses mid-way is answered `408` in the error shape once the pause passes the body timeout: not cut
/// off silently, and not at the header timeout, shorter here. The connection is closed after the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_pauses_is_answered_408_at_the_body_timeout() {
    let body_timeout = TIMEOUT * 3;
    let api = Api::start_with(|c| {
        c.listener = racklift_listener::Limits {
            header_read_timeout: TIMEOUT,
            max_connections: 32,
            ..racklift_listener::Limits::default()
        };
        c.body_timeout = body_timeout;
    })
    .await;
    let mut stream = TcpStream::connect(addr(&api)).await.unwrap();
    let head = format!(
        "POST /1.0/servers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"name\": \"paused\""
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    let answer = until_closed(stream).await;
    let waited = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        waited >= body_timeout - TIMEOUT / 5,
        "answered after {waited:?}, before the body timeout"
    );
    let body: serde_json::Value =
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or_default()).expect("a JSON error");
    assert_eq!(body["error"]["code"], "request_timeout", "{body}");
    assert_eq!(body["error"]["field"], "body", "{body}");
    let (s, _) = api.call(Method::GET, "/1.0/servers/paused", ADMIN, None).await;
    assert_eq!(s, 404, "nothing was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_heads_and_a_crowd_of_idle_connections_are_closed_while_a_request_is_answered() {
    let api = api().await;
    let mut crowd = Vec::new();
    for i in 0..64 {
        let mut stream = TcpStream::connect(addr(&api)).await.unwrap();
        if i % 2 == 0 {
            stream
                .write_all(b"GET /1.0/servers HTTP/1.1\r\nHost: x\r\n")
                .await
                .unwrap();
        }
        crowd.push(stream);
    }
    // Twice the connection cap is open and silent; a normal request is answered once their timeout frees a slot.
    let (s, _) = tokio::time::timeout(ENDED_WITHIN, api.call(Method::GET, "/1.0/servers", ADMIN, None))
        .await
        .expect("a normal request is answered");
    assert_eq!(s, 200);
    for stream in crowd {
        let answer = until_closed(stream).await;
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "{answer}"
        );
    }
}

/// A request whose handler waits on a BMC that never answers is answered 408 at the request deadline, and the API
/// keeps answering meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_deadline_is_answered_408() {
    use racklift_bmc_sim::{Faults, Personality, PersonalityChoice, Sim, SimConfig};
    let api = Api::start_with(|c| {
        c.request_timeout = TIMEOUT;
        // Longer than the request deadline, so the deadline is what ends the request.
        c.bmc_read_timeout = Duration::from_secs(60);
    })
    .await;
    let sim =
        Sim::start(SimConfig::new(1, PersonalityChoice::Single(Personality::Generic)).with_time_scale(0.001))
            .await
            .expect("simulator");
    let (token, _) = common::catalog(&api, &sim, 4096).await;
    common::set_public_address(&api).await;
    sim.set_faults(
        0,
        Faults {
            hang: true,
            ..Faults::default()
        },
    );
    let deploy = api.call(
        Method::POST,
        "/1.0/provisioning/servers/node1:deploy",
        ADMIN,
        Some(serde_json::json!({ "token": token, "seed": "web" })),
    );
    let (s, v) = tokio::time::timeout(ENDED_WITHIN, deploy)
        .await
        .expect("answered");
    assert_eq!(s, 408, "{v}");
    let (s, _) = api.call(Method::GET, "/1.0/servers/node1", ADMIN, None).await;
    assert_eq!(s, 200);
}

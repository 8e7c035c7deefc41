//! Mutual TLS: the client certificate is presented, and the server's certificate is accepted by pin, on first
//! use, or (opted in) not checked.

use std::sync::Arc;

use racklift_incus::{CertPin, Error, ErrorClass, IncusClient, ServerTrust};
use serde_json::json;

use crate::support::{Handler, TestServer, identity, sync};

fn cluster_handler() -> Handler {
    Arc::new(|_, _| sync(json!({"server_name": "node-1", "enabled": true})))
}

#[tokio::test]
async fn server_trust_modes() {
    let server = TestServer::start(cluster_handler()).await;
    let wrong = CertPin::from_bytes([0x5a; 32]);
    // (mode, trust, whether the call succeeds, the pin the client records)
    let cases = [
        (
            "right pin",
            ServerTrust::Pinned(server.pin()),
            true,
            Some(server.pin()),
        ),
        ("first use", ServerTrust::FirstUse, true, Some(server.pin())),
        ("insecure", ServerTrust::InsecureAcceptAny, true, None),
        ("wrong pin", ServerTrust::Pinned(wrong), false, None),
    ];
    for (mode, trust, succeeds, recorded) in cases {
        let (identity, client_pin) = identity();
        let client = IncusClient::new(server.config(mode, identity, trust)).expect("client");
        let before = server.seen().len();
        let result = client.cluster().await;
        assert_eq!(client.observed_pin(), recorded, "{mode}");
        if succeeds {
            assert_eq!(result.expect(mode).server_name, "node-1", "{mode}");
            let seen = server.seen();
            assert_eq!(seen.len(), before + 1, "{mode}");
            assert_eq!(
                seen[before].client_pin,
                Some(client_pin),
                "{mode}: client certificate presented"
            );
            continue;
        }
        let err = result.expect_err(mode);
        assert_eq!(
            (err.class(), err.as_str()),
            (ErrorClass::Tls, "pin_mismatch"),
            "{mode}: {err}"
        );
        assert!(
            matches!(err, Error::PinMismatch { expected, presented } if expected == wrong && presented == server.pin()),
            "{mode}: {err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&wrong.to_string()) && text.contains(&server.pin().to_string()),
            "{text}"
        );
        assert_eq!(
            server.seen().len(),
            before,
            "{mode}: no request reaches a mismatched server"
        );
    }
}

#[tokio::test]
async fn first_use_refuses_a_later_certificate() {
    let server = TestServer::start(cluster_handler()).await;
    let (identity, _) = identity();
    let client = IncusClient::new(server.config("tofu", identity, ServerTrust::FirstUse)).expect("client");
    assert_eq!(client.observed_pin(), None, "nothing seen before the first call");
    client.cluster().await.expect("first contact");
    let first = server.pin();
    assert_eq!(client.observed_pin(), Some(first));
    let rotated = server.rotate();
    let clone = client.with_fence(racklift_incus::Fence(3));
    let err = clone.cluster().await.expect_err("a different certificate");
    assert!(
        matches!(err, Error::PinMismatch { expected, presented } if expected == first && presented == rotated),
        "{err:?}"
    );
    assert_eq!(client.observed_pin(), Some(first), "the first pin stays");
}

#[tokio::test]
async fn plain_http_is_refused_unless_allowed() {
    let server = TestServer::start_plain(cluster_handler()).await;
    let (identity, _) = identity();
    let mut config = server.config("plain", identity, ServerTrust::FirstUse);
    let err = IncusClient::new(config.clone()).expect_err("http refused");
    assert!(matches!(err, Error::PlainHttp { .. }), "{err:?}");
    assert_eq!(err.class(), ErrorClass::Client);
    config.allow_plain_http = true;
    let client = IncusClient::new(config).expect("opted in");
    assert_eq!(client.cluster().await.expect("plain").server_name, "node-1");
    assert_eq!(client.observed_pin(), None);
    assert_eq!(server.seen()[0].client_pin, None);
    let (other, _) = crate::support::identity();
    let ftp = racklift_incus::IncusConfig::new("x", "ftp://127.0.0.1:1", other, ServerTrust::FirstUse);
    assert!(matches!(IncusClient::new(ftp), Err(Error::Config { .. })));
}

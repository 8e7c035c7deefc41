//! Envelopes decoded into typed views and typed errors; operations created, read and waited on; the fence on
//! mutations.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use racklift_incus::{
    ErrorClass, Fence, IncusClient, MemberStatus, OperationStatus, RetryPolicy, ServerTrust,
};
use serde_json::{Value, json};

use crate::support::{Handler, Reply, TestServer, error, identity, operation_created, sync};

fn incus_like() -> Handler {
    Arc::new(|seen, _| {
        let member = |name: &str, status: &str| {
            json!({"server_name": name, "url": format!("https://{name}:8443"), "roles": ["database"],
                   "status": status, "message": "Fully operational"})
        };
        match (seen.method.as_str(), seen.path.as_str()) {
            ("GET", "/1.0/cluster") => sync(json!({"server_name": "node-1", "enabled": true})),
            ("GET", "/1.0/cluster/members?recursion=1") => sync(json!([
                member("node-1", "Online"),
                member("node-2", "Evacuated"),
                member("node-3", "Blocked"),
            ])),
            ("GET", "/1.0/cluster/members/node%202") => sync(member("node 2", "Evacuating")),
            ("POST", "/1.0/cluster/members/node-2/state") => operation_created("op-1"),
            ("GET", "/1.0/operations/op-1") => {
                sync(json!({"id": "op-1", "class": "task", "status": "Running", "status_code": 103}))
            }
            ("GET", "/1.0/operations/op-1/wait?timeout=3") => sync(
                json!({"id": "op-1", "class": "task", "status": "Failure", "status_code": 400, "err": "instance busy"}),
            ),
            ("GET", "/os/1.0") => sync(json!({"environment":
                {"os_name": "IncusOS", "os_version": "202501010000", "os_version_next": "202502010000"}})),
            ("GET", "/os/1.0/system/update") => {
                sync(json!({"config": {"auto_reboot": false, "channel": "stable"},
                "state": {"last_check": "2025-02-01T10:00:00Z", "status": "Update staged", "needs_reboot": true}}))
            }
            ("POST", "/os/1.0/system/update/:check" | "/os/1.0/system/:reboot") => sync(Value::Null),
            ("GET", "/os/1.0/applications") => sync(json!([
                "/os/1.0/applications/incus",
                "/os/1.0/applications/migration-manager"
            ])),
            ("GET", "/os/1.0/applications/incus") => {
                sync(json!({"state": {"version": "6.12"}, "config": {}}))
            }
            ("GET", "/os/1.0/applications/migration-manager") => sync(json!({"state": {}})),
            _ => error(404, "not found"),
        }
    })
}

#[tokio::test]
async fn typed_reads_decode_sync_envelopes() {
    let server = TestServer::start(incus_like()).await;
    let (identity, _) = identity();
    let client = IncusClient::new(server.config("reads", identity, ServerTrust::FirstUse)).expect("client");

    let cluster = client.cluster().await.expect("cluster");
    assert_eq!((cluster.server_name.as_str(), cluster.enabled), ("node-1", true));

    let statuses: Vec<(String, MemberStatus)> = client
        .members()
        .await
        .expect("members")
        .into_iter()
        .map(|m| (m.server_name, m.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("node-1".into(), MemberStatus::Online),
            ("node-2".into(), MemberStatus::Evacuated),
            ("node-3".into(), MemberStatus::Other("Blocked".into())),
        ]
    );
    let member = client
        .member("node 2")
        .await
        .expect("member name is percent-encoded");
    assert_eq!(
        (member.status, member.roles),
        (MemberStatus::Evacuating, vec!["database".to_owned()])
    );

    let os = client.os().await.expect("os");
    assert_eq!(os.environment.os_version, "202501010000");
    assert_eq!(os.staged_version(), Some("202502010000"));
    let update = client.update_state().await.expect("update");
    assert!(update.state.needs_reboot);
    assert_eq!(update.state.last_check.as_deref(), Some("2025-02-01T10:00:00Z"));
    assert_eq!(update.config["channel"], "stable");

    let apps: BTreeMap<String, Option<String>> = client
        .applications()
        .await
        .expect("applications")
        .into_iter()
        .map(|(name, state)| (name, state.version))
        .collect();
    let want = BTreeMap::from([
        ("incus".to_owned(), Some("6.12".to_owned())),
        ("migration-manager".to_owned(), None),
    ]);
    assert_eq!(apps, want);
    assert!(
        server.seen().iter().all(|s| s.fence.is_none()),
        "no fence on a handle without one"
    );
}

#[tokio::test]
async fn operations_are_created_read_and_waited_on_with_the_fence() {
    let server = TestServer::start(incus_like()).await;
    let (identity, _) = identity();
    let client = IncusClient::new(server.config("ops", identity, ServerTrust::FirstUse))
        .expect("client")
        .with_fence(Fence(42));
    for action in ["evacuate", "restore"] {
        let before = server.seen().len();
        let op = match action {
            "evacuate" => client.evacuate("node-2").await,
            _ => client.restore("node-2", "").await,
        }
        .expect(action);
        assert_eq!(
            (op.id.as_str(), op.url.as_str()),
            ("op-1", "/1.0/operations/op-1"),
            "{action}"
        );
        let seen = &server.seen()[before];
        assert_eq!(seen.method, "POST");
        assert_eq!(seen.fence.as_deref(), Some("42"), "{action}");
        let body: Value = serde_json::from_str(&seen.body).expect("json body");
        assert_eq!(body, json!({"action": action, "mode": ""}), "{action}");
    }
    let running = client.operation("op-1").await.expect("operation");
    assert!(!running.is_final());
    assert_eq!(
        (running.status, running.status_code),
        (OperationStatus::Running, 103)
    );
    let done = client
        .wait_operation("op-1", Duration::from_secs(3))
        .await
        .expect("wait");
    assert!(done.is_final());
    assert_eq!(
        (done.status, done.err.as_str()),
        (OperationStatus::Failure, "instance busy")
    );

    client.check_update().await.expect("check");
    client.reboot().await.expect("reboot");
    let posts: Vec<(String, Option<String>)> = server
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .map(|s| (s.path, s.fence))
        .collect();
    assert_eq!(posts.len(), 4);
    assert!(
        posts.iter().all(|(_, fence)| fence.as_deref() == Some("42")),
        "{posts:?}"
    );
    assert_eq!(posts[2].0, "/os/1.0/system/update/:check");
    assert_eq!(posts[3].0, "/os/1.0/system/:reboot");
    let gets = server.seen().into_iter().filter(|s| s.method == "GET");
    assert!(
        gets.into_iter().all(|s| s.fence.is_none()),
        "the fence marks mutations only"
    );
}

#[tokio::test]
async fn error_answers_become_typed_errors() {
    /// A reply, and the error's HTTP status, class and message.
    type Case = (fn() -> Reply, Option<u16>, ErrorClass, Option<&'static str>);
    let cases: Vec<Case> = vec![
        (
            || error(403, "not authorized"),
            Some(403),
            ErrorClass::NotAuthorized,
            Some("not authorized"),
        ),
        (
            || error(404, "Cluster member not found"),
            Some(404),
            ErrorClass::NotFound,
            Some("Cluster member not found"),
        ),
        (
            || error(400, "Member is already evacuated"),
            Some(400),
            ErrorClass::Rejected,
            Some("Member is already evacuated"),
        ),
        (
            || error(503, "Daemon is starting"),
            Some(503),
            ErrorClass::Busy,
            Some("Daemon is starting"),
        ),
        (
            || error(500, "database is locked"),
            Some(500),
            ErrorClass::Server,
            Some("database is locked"),
        ),
        (
            || Reply::Text(502, "<html>bad gateway</html>"),
            Some(502),
            ErrorClass::Server,
            Some("<html>bad gateway</html>"),
        ),
        (
            || Reply::Text(200, "<html>login</html>"),
            None,
            ErrorClass::Protocol,
            None,
        ),
        (
            || sync(json!({"server_name": 7})),
            None,
            ErrorClass::Protocol,
            None,
        ),
    ];
    for (i, (reply, status, class, message)) in cases.into_iter().enumerate() {
        let server = TestServer::start(Arc::new(move |_, _| reply())).await;
        let (identity, _) = identity();
        let mut config = server.config("errors", identity, ServerTrust::FirstUse);
        config.retry = RetryPolicy::NONE;
        let client = IncusClient::new(config).expect("client");
        let err = client.member("node-1").await.expect_err("an error");
        assert_eq!(
            (err.status(), err.class(), err.message()),
            (status, class, message),
            "case {i}: {err}"
        );
    }
    // An operation call answered synchronously has no operation to wait on.
    let server = TestServer::start(Arc::new(|_, _| sync(json!({})))).await;
    let (identity, _) = identity();
    let client = IncusClient::new(server.config("sync-op", identity, ServerTrust::FirstUse)).expect("client");
    let err = client.evacuate("node-1").await.expect_err("no operation");
    assert_eq!(err.class(), ErrorClass::Protocol, "{err}");
}

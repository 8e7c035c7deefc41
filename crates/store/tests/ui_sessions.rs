//! The dashboard's sessions in the store: one opens only from a live token, is found by its id and nothing else,
//! ends once on logout, refreshes `last_seen` at most once a minute, and expired rows are cleared at the next
//! login.

use std::time::Duration;

use racklift_store::{Role, Store};
use racklift_testdb::TestDb;

const TTL: Duration = Duration::from_secs(12 * 3600);

async fn count(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM ui_sessions")
        .fetch_one(&db.pool)
        .await
        .expect("count")
}

#[tokio::test]
async fn open_look_up_refresh_and_end() {
    let db = TestDb::new().await;
    let store = Store::new(db.pool.clone());
    store
        .put_api_token("ops", "ops-secret", Role::Operator)
        .await
        .expect("token");

    assert!(
        store
            .create_ui_session("wrong", TTL)
            .await
            .expect("login")
            .is_none()
    );
    let session = store
        .create_ui_session("ops-secret", TTL)
        .await
        .expect("login")
        .expect("a session");
    assert_eq!(
        (session.token.name.as_str(), session.token.role),
        ("ops", Role::Operator)
    );
    assert_eq!(session.id.len(), 64);
    let found = store
        .ui_session(&session.id)
        .await
        .expect("lookup")
        .expect("live");
    assert_eq!(found.name, "ops");
    // The token's secret is not a session id, and neither is a session id's digest.
    assert!(store.ui_session("ops-secret").await.expect("lookup").is_none());
    let digest = racklift_store::sha256_hex(session.id.as_bytes());
    assert!(store.ui_session(&digest).await.expect("lookup").is_none());

    // A lookup within a minute of the last one writes nothing; an older last_seen is moved to now.
    let seen = || async {
        sqlx::query_scalar::<_, bool>("SELECT last_seen > now() - interval '5 seconds' FROM ui_sessions")
            .fetch_one(&db.pool)
            .await
            .expect("last_seen")
    };
    sqlx::query("UPDATE ui_sessions SET last_seen = now() - interval '30 seconds'")
        .execute(&db.pool)
        .await
        .expect("age");
    store.ui_session(&session.id).await.expect("lookup");
    assert!(!seen().await, "refreshed within the minute");
    sqlx::query("UPDATE ui_sessions SET last_seen = now() - interval '2 minutes'")
        .execute(&db.pool)
        .await
        .expect("age");
    store.ui_session(&session.id).await.expect("lookup");
    assert!(seen().await, "not refreshed after the minute");

    assert!(store.end_ui_session(&session.id).await.expect("logout"));
    assert!(!store.end_ui_session(&session.id).await.expect("logout twice"));
    assert!(store.ui_session(&session.id).await.expect("lookup").is_none());

    // Expired sessions are removed by the next login, live ones are kept.
    let old = store
        .create_ui_session("ops-secret", TTL)
        .await
        .expect("login")
        .expect("session");
    sqlx::query("UPDATE ui_sessions SET expires_at = now() - interval '1 second'")
        .execute(&db.pool)
        .await
        .expect("expire");
    assert!(store.ui_session(&old.id).await.expect("lookup").is_none());
    store
        .create_ui_session("ops-secret", TTL)
        .await
        .expect("login")
        .expect("session");
    assert_eq!(count(&db).await, 1);
}

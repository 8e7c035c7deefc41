//! API tokens in the store: a created token authenticates with its role, a name is never silently replaced, the
//! listing carries no secret, revoking and expiring take effect on the next lookup, and `put_api_token` still
//! replaces for `racklift up`.

use chrono::{Duration, Utc};
use racklift_store::{Role, Store, StoreError};
use racklift_testdb::TestDb;

#[tokio::test]
async fn create_list_revoke_and_expire() {
    let db = TestDb::new().await;
    let store = Store::new(db.pool.clone());

    let later = Utc::now() + Duration::days(30);
    let admin = store
        .create_api_token("ops-admin", Role::Admin, None)
        .await
        .expect("create admin");
    let viewer = store
        .create_api_token("dash", Role::Viewer, Some(later))
        .await
        .expect("create viewer");
    assert_ne!(admin, viewer, "every token gets its own secret");
    assert_eq!(admin.len(), 64, "{admin}");

    let found = store
        .api_token(&admin)
        .await
        .expect("lookup")
        .expect("admin token");
    assert_eq!((found.name.as_str(), found.role), ("ops-admin", Role::Admin));
    let found = store
        .api_token(&viewer)
        .await
        .expect("lookup")
        .expect("viewer token");
    assert_eq!((found.name.as_str(), found.role), ("dash", Role::Viewer));

    // An existing name is refused and the first token keeps working.
    match store.create_api_token("ops-admin", Role::Viewer, None).await {
        Err(StoreError::Conflict { what, name }) => {
            assert_eq!((what, name.as_str()), ("api token", "ops-admin"))
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        store.api_token(&admin).await.expect("lookup").map(|t| t.role),
        Some(Role::Admin)
    );

    let listed = store.list_api_tokens().await.expect("list");
    let names: Vec<(&str, Role)> = listed.iter().map(|t| (t.name.as_str(), t.role)).collect();
    assert_eq!(names, vec![("ops-admin", Role::Admin), ("dash", Role::Viewer)]);
    assert_eq!(listed[0].expires_at, None);
    let stored = listed[1].expires_at.expect("the viewer's expiry");
    assert!(
        (stored - later).num_milliseconds().abs() < 1,
        "{stored} != {later}"
    );
    let shown = format!("{listed:?}");
    assert!(!shown.contains(&admin) && !shown.contains(&viewer), "{shown}");

    assert!(store.revoke_api_token("dash").await.expect("revoke"));
    assert!(store.api_token(&viewer).await.expect("lookup").is_none());
    assert!(!store.revoke_api_token("dash").await.expect("revoke again"));
    assert!(
        !store
            .revoke_api_token("no-such-token")
            .await
            .expect("revoke unknown")
    );

    // A token whose expiry has passed no longer authenticates but is still listed, so it can be seen and revoked.
    let expired = store
        .create_api_token("old", Role::Operator, Some(Utc::now() - Duration::seconds(1)))
        .await
        .expect("create expired");
    assert!(store.api_token(&expired).await.expect("lookup").is_none());
    assert!(
        store
            .list_api_tokens()
            .await
            .expect("list")
            .iter()
            .any(|t| t.name == "old")
    );
}

#[tokio::test]
async fn put_api_token_replaces_and_clears_the_expiry() {
    let db = TestDb::new().await;
    let store = Store::new(db.pool.clone());

    let old = store
        .create_api_token("admin", Role::Viewer, Some(Utc::now() - Duration::seconds(1)))
        .await
        .expect("create");
    store
        .put_api_token("admin", "fresh-secret", Role::Admin)
        .await
        .expect("put");
    assert!(store.api_token(&old).await.expect("lookup").is_none());
    let found = store
        .api_token("fresh-secret")
        .await
        .expect("lookup")
        .expect("replaced token");
    assert_eq!(found.role, Role::Admin);
    let listed = store.list_api_tokens().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].expires_at, None);
}

//! racklift's client identity: generated once, the same for every instance, even when several ask at once.

use racklift_store::Store;
use racklift_testdb::TestDb;

#[tokio::test]
async fn instances_asking_at_once_all_get_the_one_stored_identity() {
    let db = TestDb::new().await;
    // Separate stores stand for separate API and worker instances sharing the database.
    let stores: Vec<Store> = (0..8).map(|_| Store::new(db.pool.clone())).collect();
    let identities = futures::future::join_all(stores.iter().map(Store::client_identity)).await;
    let first = identities[0].as_ref().expect("an identity").clone();
    for identity in &identities {
        assert_eq!(identity.as_ref().expect("an identity"), &first);
    }
    assert!(first.certificate_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(first.key_pem.contains("PRIVATE KEY"));
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM client_identity")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 1);
    // Asked again later: the same, not a new one.
    assert_eq!(stores[3].client_identity().await.unwrap(), first);
    let shown = format!("{first:?}");
    assert!(
        !shown.contains("PRIVATE KEY") && shown.contains("<redacted>"),
        "{shown}"
    );
}

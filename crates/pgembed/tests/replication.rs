//! A primary and its synchronous standby against the machine's real PostgreSQL binaries: a commit the primary
//! acknowledged is on the standby, the standby refuses writes until promoted, and after the primary is killed
//! and the standby promoted, the committed rows are there and new writes are accepted.

use racklift_pgembed::{Node, ReplicatedPostgres};
use sqlx::{Connection, PgConnection};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_synchronous_standby_has_every_acknowledged_commit() {
    let mut pair = tokio::task::block_in_place(ReplicatedPostgres::start).unwrap();
    let seen = pair
        .query(Node::Primary, &["SELECT sync_state FROM pg_stat_replication"])
        .unwrap();
    assert_eq!(seen, "sync");

    let mut primary = PgConnection::connect(&pair.primary().admin_url()).await.unwrap();
    sqlx::query("CREATE TABLE kept (v int)")
        .execute(&mut primary)
        .await
        .unwrap();
    for v in 0..100 {
        sqlx::query("INSERT INTO kept VALUES ($1)")
            .bind(v)
            .execute(&mut primary)
            .await
            .unwrap();
    }

    let mut standby = PgConnection::connect(&pair.standby().admin_url()).await.unwrap();
    let refused = sqlx::query("INSERT INTO kept VALUES (-1)")
        .execute(&mut standby)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("read-only"), "{refused}");
    assert!(pair.in_recovery(Node::Standby).unwrap());

    tokio::task::block_in_place(|| pair.kill_primary()).unwrap();
    assert!(
        sqlx::query("SELECT 1").execute(&mut primary).await.is_err(),
        "the primary's connections died with it"
    );
    tokio::task::block_in_place(|| pair.promote()).unwrap();
    assert!(!pair.in_recovery(Node::Standby).unwrap());

    // The connection opened while it was a standby writes now.
    sqlx::query("INSERT INTO kept VALUES (100)")
        .execute(&mut standby)
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM kept")
        .fetch_one(&mut standby)
        .await
        .unwrap();
    assert_eq!(n, 101);
    standby.close().await.unwrap();

    let base = pair.standby().root().parent().unwrap().to_owned();
    drop(pair);
    assert!(!base.exists(), "{} removed", base.display());
}

//! The embedded server against the machine's real PostgreSQL binaries: data survives a restart, the server
//! listens on loopback with a password, and a second start on the same directory reuses it.

use std::path::PathBuf;

use racklift_pgembed::EmbeddedPostgres;
use sqlx::{Connection, PgConnection};

fn scratch_dir() -> PathBuf {
    // Under the system temp dir, which the unprivileged server user can reach wherever the checkout lives.
    let dir = std::env::temp_dir().join(format!("racklift-pgembed-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn data_is_kept_across_a_restart_and_a_password_is_required() {
    let dir = scratch_dir();
    let pg = EmbeddedPostgres::start(&dir).unwrap();
    let mut conn = PgConnection::connect(&pg.admin_url()).await.unwrap();
    sqlx::query("CREATE TABLE kept (v text)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO kept VALUES ('still here')")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let wrong = pg.admin_url().replace("racklift:", "racklift:wrong");
    assert!(
        PgConnection::connect(&wrong).await.is_err(),
        "scram-sha-256, not trust"
    );
    pg.stop().unwrap();

    let pg = EmbeddedPostgres::start(&dir).unwrap();
    let mut conn = PgConnection::connect(&pg.admin_url()).await.unwrap();
    let v: String = sqlx::query_scalar("SELECT v FROM kept")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(v, "still here");
    let listen: String = sqlx::query_scalar("SHOW listen_addresses")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(listen, "127.0.0.1");
    conn.close().await.unwrap();
    pg.stop().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

//! A fresh database per test, on the real PostgreSQL named by `DATABASE_URL`.
//!
//! Nothing in racklift mocks the database: each test gets its own database, migrated with the shipped migrations,
//! and dropped when the test ends. `ops/test` starts a throwaway server when `DATABASE_URL` is not set.

use std::future::Future;
use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

/// A migrated database that is dropped (with its connections) when this value is dropped.
pub struct TestDb {
    pub pool: PgPool,
    pub url: String,
    name: String,
    admin: PgConnectOptions,
}

/// Reads `DATABASE_URL`, failing with a sentence that says how to get one.
pub fn admin_url() -> String {
    std::env::var("DATABASE_URL").expect(
        "DATABASE_URL is not set: run the tests through ops/test, which starts a throwaway PostgreSQL, \
         or point DATABASE_URL at a server where this user may CREATE DATABASE",
    )
}

impl TestDb {
    /// Creates and migrates a database with a unique name.
    pub async fn new() -> TestDb {
        TestDb::new_on(&admin_url()).await
    }

    /// As [`TestDb::new`], on the server `admin_url` names instead of `DATABASE_URL`'s (one a test restarts).
    pub async fn new_on(admin_url: &str) -> TestDb {
        let db = TestDb::empty_on(admin_url).await;
        racklift_schema::migrate(&db.pool)
            .await
            .expect("migrations apply to a fresh database");
        db
    }

    /// Creates a database with a unique name and no tables (for migration tests).
    pub async fn empty() -> TestDb {
        TestDb::empty_on(&admin_url()).await
    }

    async fn empty_on(admin_url: &str) -> TestDb {
        let admin = PgConnectOptions::from_str(admin_url).expect("the admin URL parses");
        let name = format!("racklift_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect_with(&admin)
            .await
            .expect("connect to DATABASE_URL");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("CREATE DATABASE");
        conn.close().await.ok();
        let opts = admin.clone().database(&name);
        let url = opts.to_url_lossy().to_string();
        // Not racklift's bounded pool (`racklift_queue::session`): tests line writers up behind locks on a loaded
        // machine, and the queue's tests build bounded pools of their own where the bounds are what they check.
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .connect_with(opts)
            .await
            .expect("connect to the test database");
        TestDb {
            pool,
            url,
            name,
            admin,
        }
    }
}

/// Writes to one table held back by a lock of a connection of its own, until [`WriteGate::open`]. Writers queue
/// behind it and are then let go together: a race a test means to provoke happens, instead of depending on how
/// fast the pool hands out connections.
pub struct WriteGate {
    conn: PgConnection,
    table: String,
}

impl TestDb {
    /// Holds every write to `table` (reads still pass) until the gate is opened.
    pub async fn hold_writes(&self, table: &str) -> WriteGate {
        let mut conn = PgConnection::connect_with(&self.admin.clone().database(&self.name))
            .await
            .expect("connect the gate");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "BEGIN; LOCK TABLE {table} IN SHARE MODE"
        )))
        .execute(&mut conn)
        .await
        .expect("lock the table");
        WriteGate {
            conn,
            table: table.to_owned(),
        }
    }
}

impl WriteGate {
    /// Waits until at least `writers` connections are queued behind the gate.
    pub async fn wait_for_writers(&mut self, writers: i64, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks
                 WHERE NOT granted AND relation = $1::regclass
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .bind(&self.table)
            .fetch_one(&mut self.conn)
            .await
            .expect("count the waiting writers");
            if waiting >= writers {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {writers} writers to {} (saw {waiting})",
                self.table
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Lets the held writers go, all at once.
    pub async fn open(mut self) {
        sqlx::raw_sql("COMMIT")
            .execute(&mut self.conn)
            .await
            .expect("open the gate");
        self.conn.close().await.ok();
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // Drop runs inside the test's runtime, which cannot be awaited here: a thread with its own runtime
        // removes the database (FORCE ends the pool's sessions server-side), and the test waits for it.
        let dropper = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async move {
                let mut conn = PgConnection::connect_with(&admin).await.ok()?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await
                .ok()
            })
        });
        let _ = dropper.join();
    }
}

/// Polls `check` until it holds, failing the test after `limit`: tests wait on conditions, never fixed sleeps.
pub async fn wait_for<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

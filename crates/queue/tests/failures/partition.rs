//! A holder cut off from PostgreSQL: the session bounds end its transaction, and a connection dropped inside
//! `begin()` comes back to the pool without one.

use std::str::FromStr;
use std::time::{Duration, Instant};

use racklift_queue::session::{SessionBounds, pool_options};
use racklift_queue::{Queue, QueueConfig};
use racklift_testdb::{TestDb, wait_for};
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;

use crate::common::*;
use racklift_netfault::FreezableProxy;

/// A proxy in front of the server `db` is on.
async fn proxy_for(db: &TestDb) -> FreezableProxy {
    let target = PgConnectOptions::from_str(&db.url).expect("the test URL parses");
    let upstream = tokio::net::lookup_host((target.get_host(), target.get_port()))
        .await
        .expect("resolve the database's host")
        .next()
        .expect("an address");
    FreezableProxy::start(upstream).await.expect("start the proxy")
}

/// A pool of one connection to `db` through `proxy`, its sessions bounded by `bounds`.
async fn through(
    proxy: &FreezableProxy,
    db: &TestDb,
    bounds: &SessionBounds,
    test_before_acquire: bool,
) -> PgPool {
    let options = PgConnectOptions::from_str(&db.url)
        .expect("the test URL parses")
        .host(&proxy.addr().ip().to_string())
        .port(proxy.addr().port());
    pool_options()
        .max_connections(1)
        .test_before_acquire(test_before_acquire)
        .connect_with(bounds.apply(options))
        .await
        .expect("connect through the proxy")
}

#[tokio::test]
async fn a_holder_frozen_inside_a_transaction_lets_go_of_its_row_within_the_idle_bound() {
    let db = TestDb::new().await;
    let proxy = proxy_for(&db).await;
    let bounds = SessionBounds {
        idle_in_transaction: Duration::from_millis(500),
        ..SessionBounds::for_lease(Duration::from_secs(30))
    };
    let holder = Queue::new(through(&proxy, &db, &bounds, true).await, QueueConfig::default());
    let id = enqueue(&holder, &job("k")).await.id();
    let leased = holder.lease(&["k"], 1, "frozen").await.unwrap().remove(0);

    // The holder writes its outcome fenced, in its own transaction, and is cut off before it commits.
    let mut tx = holder.pool().begin().await.unwrap();
    holder.complete(&mut tx, leased.job_ref()).await.unwrap();
    proxy.freeze();

    // Another session writes the same row, directly: it waits for the lock only until the server has ended
    // the frozen session.
    let started = Instant::now();
    let margin = Duration::from_secs(5);
    tokio::time::timeout(bounds.idle_in_transaction + margin, expire_lease(&db.pool, id))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the write still waited for the frozen holder's lock after {:?}",
                started.elapsed()
            )
        });
    // The holder's completion went with its session; the rescuer takes the job over.
    assert_eq!(state_of(&db.pool, id).await.as_deref(), Some("running"));
    let rescued = queue(&db.pool).rescue(10).await.unwrap();
    assert_eq!(rescued.retried, 1, "the expired lease is rescued");
    drop(tx);
}

#[tokio::test]
async fn a_transaction_dropped_inside_begin_leaves_no_transaction_on_the_pooled_connection() {
    let db = TestDb::new().await;
    let proxy = proxy_for(&db).await;
    // No test on acquire: the acquire must not touch the wire, so the drop lands inside `begin()` itself.
    let pool = through(
        &proxy,
        &db,
        &SessionBounds::for_lease(Duration::from_secs(30)),
        false,
    )
    .await;
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&pool)
        .await
        .unwrap();

    // Idle in the pool before the freeze: the release of the connection just used is itself a round trip.
    wait_for(
        Duration::from_secs(10),
        "the connection to be idle in the pool",
        || async { pool.num_idle() == 1 },
    )
    .await;

    // A handler's transaction dropped where it waits (its lease lost, a timeout): BEGIN is sent but its answer
    // is held back, so the future is dropped before `begin()` returns.
    proxy.freeze();
    let dropped = tokio::time::timeout(Duration::from_millis(300), async {
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT 1").execute(&mut *tx).await?;
        tx.commit().await
    })
    .await;
    assert!(
        dropped.is_err(),
        "the transaction was dropped mid-way: {dropped:?}"
    );
    proxy.thaw();

    // The one connection, back in the pool and held: the server sees it idle, not idle in a transaction.
    let mut conn = pool
        .acquire()
        .await
        .expect("the connection comes back to the pool");
    let state: String = sqlx::query_scalar("SELECT state FROM pg_stat_activity WHERE pid = $1")
        .bind(pid)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        state, "idle",
        "the pooled connection came back inside a transaction"
    );
    let mut tx = sqlx::Connection::begin(&mut *conn)
        .await
        .expect("the next begin works");
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
}

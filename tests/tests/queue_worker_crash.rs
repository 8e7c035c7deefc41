//! A worker process killed with SIGKILL mid-job loses nothing: another worker runs each job exactly once more.

use std::time::Duration;

use racklift_queue::{NewJob, Queue, QueueConfig};
use racklift_testdb::TestDb;
use racklift_tests::{Racklift, wait_for};

const WORKER: &[&str] = &[
    "worker",
    "--concurrency",
    "8",
    "--lease-ttl-ms",
    "1500",
    "--rescue-interval-ms",
    "300",
    "--poll-interval-ms",
    "100",
];

async fn count(pool: &sqlx::PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_job_loses_no_job_and_each_runs_exactly_once_more() {
    let db = TestDb::new().await;
    let queue = Queue::new(db.pool.clone(), QueueConfig::default());
    let jobs: Vec<NewJob> = (0..5)
        .map(|_| NewJob::new("sleep", &serde_json::json!({ "ms": 2500 })).unwrap())
        .collect();
    let mut tx = db.pool.begin().await.unwrap();
    assert_eq!(
        queue.enqueue_batch(&mut tx, &jobs).await.unwrap().created.len(),
        5
    );
    tx.commit().await.unwrap();

    let doomed = Racklift::spawn(WORKER, &db.url);
    wait_for(
        Duration::from_secs(30),
        "the first worker to lease all five jobs",
        || async { count(&db.pool, "SELECT count(*) FROM jobs WHERE state = 'running'").await == 5 },
    )
    .await;
    let holder: String = sqlx::query_scalar("SELECT DISTINCT leased_by FROM jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    doomed.signal("KILL");

    let survivor = Racklift::spawn(WORKER, &db.url);
    wait_for(
        Duration::from_secs(60),
        "every job to complete on the second worker",
        || async { count(&db.pool, "SELECT count(*) FROM jobs_completed").await == 5 },
    )
    .await;
    // Leased exactly twice each: once by the killed worker, once more by the survivor. Nothing dead, nothing lost.
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM jobs_completed WHERE attempts = 2").await,
        5
    );
    assert_eq!(count(&db.pool, "SELECT count(*) FROM dead_letters").await, 0);
    let leftover_holders: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs_completed WHERE leased_by = $1")
            .bind(&holder)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        leftover_holders, 0,
        "the killed worker's leases were all taken over"
    );
    let errors: String = sqlx::query_scalar("SELECT errors::text FROM jobs_completed LIMIT 1")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        errors.contains("lease expired"),
        "the rescue is in the job's history: {errors}"
    );
    drop(survivor);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_jobs_before_exiting() {
    let db = TestDb::new().await;
    let queue = Queue::new(db.pool.clone(), QueueConfig::default());
    let mut tx = db.pool.begin().await.unwrap();
    queue
        .enqueue(
            &mut tx,
            &NewJob::new("sleep", &serde_json::json!({ "ms": 1500 })).unwrap(),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut worker = Racklift::spawn(WORKER, &db.url);
    wait_for(Duration::from_secs(30), "the job to run", || async {
        count(&db.pool, "SELECT count(*) FROM jobs WHERE state = 'running'").await == 1
    })
    .await;
    worker.signal("TERM");
    let status = tokio::time::timeout(Duration::from_secs(30), worker.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "graceful exit: {status:?}");
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM jobs_completed WHERE attempts = 1").await,
        1
    );
}

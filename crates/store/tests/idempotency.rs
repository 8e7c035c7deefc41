//! Idempotency keys of the store's requests: an ad-hoc BMC action's key is held per server against a fingerprint
//! of the action and its parameters; racing deploy requests with one key get the one deployment.

use std::time::Duration;

use chrono::Utc;
use racklift_deploy::{Deployment, Plan};
use racklift_queue::{Queue, QueueConfig};
use racklift_store::{
    BMC_ACTION_KIND, BmcAction, BmcActionPayload, NewDeployment, STEP_KIND, Store, StoreError,
    bmc_action_request_key,
};
use racklift_testdb::TestDb;

async fn seed(db: &TestDb) -> (Store, Queue) {
    sqlx::raw_sql(
        "INSERT INTO servers (name) VALUES ('node1'), ('node2');
         INSERT INTO images (type, architecture, channel, path, size_bytes, sha256)
           VALUES ('iso', 'x86_64', 'stable', '/nonexistent', 1, repeat('0', 64));",
    )
    .execute(&db.pool)
    .await
    .expect("seed");
    (
        Store::new(db.pool.clone()),
        Queue::new(db.pool.clone(), QueueConfig::default()),
    )
}

fn payload(server: &str, action: BmcAction, by: &str) -> BmcActionPayload {
    BmcActionPayload {
        server: server.to_owned(),
        action,
        requested_by: by.to_owned(),
    }
}

fn insert(url: &str) -> BmcAction {
    BmcAction::InsertMedia {
        image_url: url.to_owned(),
    }
}

async fn count(db: &TestDb, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&db.pool).await.unwrap()
}

#[derive(Debug)]
enum Expect {
    SameJob,
    Refused,
    NewJob,
}

#[tokio::test]
async fn a_bmc_action_key_is_held_per_server_against_the_action_and_its_parameters() {
    let db = TestDb::new().await;
    let (store, queue) = seed(&db).await;
    let first = payload("node1", insert("https://a/x.iso"), "alice");
    let (job, created) = store.enqueue_bmc_action(&queue, &first, Some("k")).await.unwrap();
    assert!(created);
    // Finished: only the key remembers the request now.
    let held = queue.lease(&[BMC_ACTION_KIND], 1, "w").await.unwrap().remove(0);
    let mut conn = db.pool.acquire().await.unwrap();
    queue.complete(&mut conn, held.job_ref()).await.unwrap();

    let cases = [
        // Whoever retries, the same request is the same job.
        (
            payload("node1", insert("https://a/x.iso"), "bob"),
            "k",
            Expect::SameJob,
        ),
        (
            payload("node1", insert("https://a/y.iso"), "alice"),
            "k",
            Expect::Refused,
        ),
        (
            payload("node1", BmcAction::EjectMedia, "alice"),
            "k",
            Expect::Refused,
        ),
        (
            payload("node1", BmcAction::PowerOn, "alice"),
            "k",
            Expect::Refused,
        ),
        (
            payload("node2", insert("https://a/x.iso"), "alice"),
            "k",
            Expect::NewJob,
        ),
        (
            payload("node1", BmcAction::PowerOn, "alice"),
            "k2",
            Expect::NewJob,
        ),
    ];
    for (request, key, expect) in cases {
        let got = store.enqueue_bmc_action(&queue, &request, Some(key)).await;
        let what = format!("{request:?} {key}: {got:?}");
        match expect {
            Expect::SameJob => assert!(matches!(got, Ok((id, false)) if id == job), "{what}"),
            Expect::Refused => assert!(
                matches!(&got, Err(StoreError::IdempotencyKeyReused { existing_job, key: k })
                    if *existing_job == job && k == key),
                "{what}"
            ),
            Expect::NewJob => assert!(matches!(got, Ok((id, true)) if id != job), "{what}"),
        }
    }
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM server_events WHERE kind = 'bmc_action_requested'"
        )
        .await,
        3,
        "one event per job made, none for a retry"
    );
}

#[test]
fn the_fingerprint_names_the_request_not_the_caller() {
    let key = |server, action, by| bmc_action_request_key(&payload(server, action, by), "k");
    let base = key("node1", BmcAction::PowerCycle, "alice");
    assert_eq!(base.scope, "bmc-action/node1");
    assert_eq!(base.key, "k");
    assert_eq!(base, key("node1", BmcAction::PowerCycle, "bob"));
    for other in [
        key("node1", BmcAction::PowerOn, "alice"),
        key("node2", BmcAction::PowerCycle, "alice"),
    ] {
        assert_ne!(base.fingerprint, other.fingerprint, "{other:?}");
    }
}

fn deployment(server: &str, key: Option<&str>) -> NewDeployment {
    NewDeployment {
        server: server.to_owned(),
        media_secret: racklift_store::new_secret(),
        image_id: 1,
        token: uuid::Uuid::new_v4(),
        seed: "web".into(),
        deployment: Deployment::new(Plan::default(), Utc::now()),
        media_slot: None,
        boot_target: None,
        idempotency_key: key.map(str::to_owned),
        requested_by: "operator".into(),
        seed_archive: Vec::new(),
        registration_token: racklift_store::new_secret(),
        expected_hostname: None,
        bmc_system_uuid: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_deploy_requests_with_one_key_get_the_one_deployment() {
    let db = TestDb::new().await;
    let (store, queue) = seed(&db).await;
    // Every request has looked for its key and found none before any of them may insert.
    let mut gate = db.hold_writes("deployments").await;
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let (store, queue) = (store.clone(), queue.clone());
            tokio::spawn(async move {
                let (record, created) = store
                    .create_deployment(&queue, &deployment("node1", Some("k")))
                    .await
                    .unwrap();
                (record.id, created)
            })
        })
        .collect();
    gate.wait_for_writers(12, Duration::from_secs(10)).await;
    gate.open().await;
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    let id = outcomes[0].0;
    assert!(outcomes.iter().all(|(d, _)| *d == id), "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|(_, c)| *c).count(), 1, "{outcomes:?}");
    assert_eq!(count(&db, "SELECT count(*) FROM deployments").await, 1);
    let steps: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE kind = $1")
        .bind(STEP_KIND)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(steps, 1);

    // Another key while it runs is still a conflict, not that deployment.
    let other = store
        .create_deployment(&queue, &deployment("node1", Some("k2")))
        .await;
    assert!(matches!(other, Err(StoreError::Conflict { .. })), "{other:?}");
}

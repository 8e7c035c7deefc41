//! `Idempotency-Key` on `:power` and `:media`: remembered for the retention window after the job finished, one job
//! for a crowd of racing copies of one request, refused for another request, free again once expired.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{ADMIN, Api, OPERATOR, code, field};
use racklift_queue::{Queue, QueueConfig};
use racklift_store::BMC_ACTION_KIND;
use reqwest::Method;
use serde_json::{Value, json};

/// A server with a BMC configured; nothing here contacts it (actions are only enqueued).
async fn server(api: &Api, name: &str) {
    let body = json!({ "name": name, "bmc_address": "https://127.0.0.1:9", "bmc_username": "root",
                       "bmc_password_ref": "env:RACKLIFT_SECRET_TEST_UNUSED" });
    let (s, v) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(body)).await;
    assert_eq!(s, 201, "{v}");
}

async fn action(api: &Api, server: &str, endpoint: &str, body: Value, key: Option<&str>) -> (u16, Value) {
    let mut r = api
        .req(
            Method::POST,
            &format!("/1.0/provisioning/servers/{server}:{endpoint}"),
            Some(OPERATOR),
        )
        .json(&body);
    if let Some(k) = key {
        r = r.header("Idempotency-Key", k);
    }
    common::read(r.send().await.expect("request")).await
}

async fn power_on(api: &Api, key: &str) -> (u16, Value) {
    action(api, "node1", "power", json!({ "action": "on" }), Some(key)).await
}

fn job_id(v: &Value) -> i64 {
    v["job_id"].as_i64().unwrap_or_else(|| panic!("a job id in {v}"))
}

/// Runs the BMC action job to completion the way a worker would end it, without a BMC.
async fn complete_the_job(api: &Api, id: i64) {
    let queue = Queue::new(api.db.pool.clone(), QueueConfig::default());
    let held = queue
        .lease(&[BMC_ACTION_KIND], 1, "test-worker")
        .await
        .expect("lease")
        .pop()
        .expect("the job is queued");
    assert_eq!(held.id, id);
    let mut conn = api.db.pool.acquire().await.unwrap();
    queue.complete(&mut conn, held.job_ref()).await.expect("complete");
}

/// Every BMC action job there is or was: live, completed or dead-lettered.
async fn jobs_made(api: &Api) -> i64 {
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM jobs WHERE kind = $1) + (SELECT count(*) FROM jobs_completed WHERE kind = $1)
                + (SELECT count(*) FROM dead_letters WHERE kind = $1)",
    )
    .bind(BMC_ACTION_KIND)
    .fetch_one(&api.db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_same_key_after_the_job_completed_answers_with_that_job() {
    let api = Api::start().await;
    server(&api, "node1").await;
    let (s, first) = power_on(&api, "retry-1").await;
    assert_eq!(s, 202, "{first}");
    complete_the_job(&api, job_id(&first)).await;

    let (s, again) = power_on(&api, "retry-1").await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(job_id(&again), job_id(&first));
    assert_eq!(again["action"], first["action"]);
    assert_eq!(jobs_made(&api).await, 1);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_racing_requests_with_one_key_make_one_job() {
    let api = Api::start().await;
    server(&api, "node1").await;
    // Claims wait behind the gate until many requests are at the same point, then race.
    let mut gate = api.db.hold_writes("idempotency_keys").await;
    let requests: Vec<_> = (0..100)
        .map(|_| {
            let r = api
                .req(
                    Method::POST,
                    "/1.0/provisioning/servers/node1:power",
                    Some(OPERATOR),
                )
                .header("Idempotency-Key", "crowd")
                .json(&json!({ "action": "cycle" }));
            tokio::spawn(async move { common::read(r.send().await.expect("request")).await })
        })
        .collect();
    // The API's pool has 16 connections: most of them are queued claims by now.
    gate.wait_for_writers(10, Duration::from_secs(30)).await;
    gate.open().await;
    // The job finishes while later copies are still arriving: a key remembered only while its job lives would
    // let one of them make a second job.
    let queue = Queue::new(api.db.pool.clone(), QueueConfig::default());
    let held = common::wait_for("the job to be made", Duration::from_secs(30), || async {
        queue
            .lease(&[BMC_ACTION_KIND], 1, "test-worker")
            .await
            .unwrap()
            .pop()
    })
    .await;
    let mut conn = api.db.pool.acquire().await.unwrap();
    queue.complete(&mut conn, held.job_ref()).await.unwrap();
    drop(conn);
    let mut answers = Vec::new();
    for r in requests {
        answers.push(r.await.expect("request task"));
    }
    let ids: BTreeSet<i64> = answers.iter().map(|(_, v)| job_id(v)).collect();
    assert_eq!(
        ids,
        BTreeSet::from([held.id]),
        "one job id in every answer: {answers:?}"
    );
    let accepted = answers.iter().filter(|(s, _)| *s == 202).count();
    let repeated = answers.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!((accepted, repeated), (1, 99), "{answers:?}");
    assert_eq!(jobs_made(&api).await, 1);
    api.stop().await;
}

#[tokio::test]
async fn a_key_reused_for_another_request_is_refused_naming_the_header() {
    let api = Api::start().await;
    server(&api, "node1").await;
    server(&api, "node2").await;
    let (s, first) = power_on(&api, "k").await;
    assert_eq!(s, 202, "{first}");
    complete_the_job(&api, job_id(&first)).await;
    let image = json!({ "action": "insert", "image_url": "https://images.example/x.iso" });
    let unreadable = "x".repeat(256);
    // (server, endpoint, body, key, status, code)
    let cases = [
        (
            "node1",
            "power",
            json!({ "action": "off" }),
            "k",
            422,
            Some("idempotency_key_reused"),
        ),
        (
            "node1",
            "media",
            image.clone(),
            "k",
            422,
            Some("idempotency_key_reused"),
        ),
        (
            "node1",
            "media",
            json!({ "action": "eject" }),
            "k",
            422,
            Some("idempotency_key_reused"),
        ),
        // Keys are per server: another one may use the same key.
        ("node2", "power", json!({ "action": "off" }), "k", 202, None),
        ("node1", "media", image, "k2", 202, None),
        (
            "node1",
            "power",
            json!({ "action": "on" }),
            unreadable.as_str(),
            400,
            Some("invalid_field"),
        ),
    ];
    for (server, endpoint, body, key, status, error) in cases {
        let (s, v) = action(&api, server, endpoint, body.clone(), Some(key)).await;
        assert_eq!(s, status, "{server}:{endpoint} {body} {key}: {v}");
        if let Some(error) = error {
            assert_eq!((code(&v), field(&v)), (error, Some("Idempotency-Key")), "{v}");
        }
    }
    // The refusals made nothing, and the key still answers to its own request.
    assert_eq!(jobs_made(&api).await, 3);
    let (s, again) = power_on(&api, "k").await;
    assert_eq!((s, job_id(&again)), (200, job_id(&first)), "{again}");
    api.stop().await;
}

#[tokio::test]
async fn an_expired_key_makes_a_new_job() {
    let api = Api::start().await;
    server(&api, "node1").await;
    let (s, first) = power_on(&api, "old").await;
    assert_eq!(s, 202, "{first}");
    complete_the_job(&api, job_id(&first)).await;
    // As if the request was made 25 hours ago, past the default 24 h retention.
    let n = sqlx::query(
        "UPDATE idempotency_keys SET created_at = now() - interval '25 hours',
                                     expires_at = now() - interval '1 hour'
         WHERE key = 'old'",
    )
    .execute(&api.db.pool)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(n, 1);

    let (s, second) = power_on(&api, "old").await;
    assert_eq!(s, 202, "{second}");
    assert_ne!(job_id(&second), job_id(&first));
    assert_eq!(jobs_made(&api).await, 2);
    api.stop().await;
}

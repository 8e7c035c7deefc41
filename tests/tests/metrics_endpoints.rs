//! `/metrics` as Prometheus and the kubelet's probes reach it: `racklift worker --metrics-listen ADDR` and
//! `racklift api --listen ADDR`, each the built binary as a child process against a fresh database.

use std::time::{Duration, Instant};

use racklift_queue::{NewJob, Queue, QueueConfig};
use racklift_testdb::TestDb;
use racklift_tests::{Racklift, wait_for};

/// A port nobody listens on right now, for a child process to bind.
fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a probe port");
    probe.local_addr().expect("probe address").port()
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("HTTP client")
}

/// `GET url`'s body once it answers 200 (the child may still be starting).
async fn get_when_up(url: &str) -> String {
    let http = http();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = http.get(url).send().await
            && r.status().is_success()
        {
            return r.text().await.expect("body");
        }
        assert!(Instant::now() < deadline, "{url} did not answer within 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of one sample line (`name{labels}`) in the text format.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn exits_cleanly_on_sigterm(mut child: Racklift) {
    child.signal("TERM");
    let status = tokio::time::timeout(Duration::from_secs(30), child.child.wait())
        .await
        .expect("exit within 30 s")
        .expect("wait");
    assert!(status.success(), "graceful exit: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_serves_its_counters_and_the_database_gauges() {
    let db = TestDb::new().await;
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let worker = Racklift::spawn(
        &["worker", "--metrics-listen", &listen, "--poll-interval-ms", "100"],
        &db.url,
    );
    let url = format!("http://{listen}/metrics");
    let text = get_when_up(&url).await;
    // The pool's kinds report zeros before any job exists.
    assert_eq!(
        sample(
            &text,
            "racklift_queue_jobs{kind=\"deployment.step\",state=\"queued\"}"
        ),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "racklift_queue_leases_total{kind=\"sleep\"}"),
        Some(0.0),
        "{text}"
    );

    let queue = Queue::new(db.pool.clone(), QueueConfig::default());
    let mut tx = db.pool.begin().await.unwrap();
    queue
        .enqueue(
            &mut tx,
            &NewJob::new("sleep", &serde_json::json!({ "ms": 10 })).unwrap(),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let http = http();
    wait_for(
        Duration::from_secs(30),
        "the worker to count a completed sleep job",
        || async {
            let Ok(r) = http.get(&url).send().await else {
                return false;
            };
            let text = r.text().await.unwrap_or_default();
            sample(&text, "racklift_queue_leases_total{kind=\"sleep\"}") == Some(1.0)
                && sample(
                    &text,
                    "racklift_job_duration_seconds_count{kind=\"sleep\",outcome=\"complete\"}",
                ) == Some(1.0)
        },
    )
    .await;
    exits_cleanly_on_sigterm(worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_metrics_port_is_taken_fails_at_once() {
    let db = TestDb::new().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let mut worker = Racklift::spawn(&["worker", "--metrics-listen", &listen], &db.url);
    let status = tokio::time::timeout(Duration::from_secs(30), worker.child.wait())
        .await
        .expect("exit within 30 s")
        .expect("wait");
    assert!(!status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_command_serves_metrics_without_auth_and_stops_on_sigterm() {
    let db = TestDb::new().await;
    let listen = format!("127.0.0.1:{}", free_port());
    // Plain HTTP by explicit opt-in: the metrics, not TLS, are what this test is about.
    let api = Racklift::spawn_with(
        &["api", "--listen", &listen],
        &db.url,
        &[("RACKLIFT_API__PLAIN_HTTP", std::ffi::OsStr::new("true"))],
    );
    let text = get_when_up(&format!("http://{listen}/metrics")).await;
    assert!(
        text.contains("# TYPE racklift_media_bytes_served_total counter"),
        "{text}"
    );
    assert_eq!(
        sample(&text, "racklift_dead_letters_open{kind=\"bmc.action\"}"),
        Some(0.0),
        "{text}"
    );
    // The rest of the API is there too (the OpenAPI document is public).
    let r = http()
        .get(format!("http://{listen}/1.0/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    exits_cleanly_on_sigterm(api).await;
}

//! The metric names are a contract with ops/prometheus/alerts.yml and ops/grafana/racklift.json: each must render
//! under its fixed name, with the labels the rules aggregate by.

use std::time::Duration;

use racklift_metrics::{CONTENT_TYPE, NAMES, global, render};

/// Gives every labelled collector one series, as a running process would.
fn touch_every_metric() {
    let m = global();
    m.queue_jobs.with_label_values(&["t.kind", "queued"]).set(1.0);
    m.queue_oldest_due.with_label_values(&["t.kind"]).set(2.0);
    m.dead_letters_open.with_label_values(&["t.kind"]).set(0.0);
    m.deployments.with_label_values(&["Completed"]).set(3.0);
    m.cluster_operations
        .with_label_values(&["rolling_reboot", "running"])
        .set(1.0);
    m.cluster_servers_done
        .with_label_values(&["c1", "rolling_reboot"])
        .set(2.0);
    m.cluster_step_duration
        .with_label_values(&["evacuate"])
        .observe(0.4);
    m.queue_leases.with_label_values(&["t.kind"]).inc();
    m.queue_lease_lost.with_label_values(&["t.kind"]).inc();
    m.queue_fence_rejections.with_label_values(&["t.kind"]).inc();
    m.queue_retries.with_label_values(&["t.kind"]).inc();
    m.dead_letters_opened
        .with_label_values(&["t.kind", "bmc_timeout"])
        .inc();
    m.job_duration
        .with_label_values(&["t.kind", "complete"])
        .observe(0.2);
    m.deploy_step_duration
        .with_label_values(&["PowerOff"])
        .observe(1.5);
    m.bmc_call_duration
        .with_label_values(&["dell", "read_system"])
        .observe(0.3);
    m.bmc_call_errors.with_label_values(&["dell", "timeout"]).inc();
    m.media_bytes_served.inc_by(4096);
}

#[test]
fn every_fixed_name_renders_with_its_labels() {
    touch_every_metric();
    let text = render(&global().registry);
    for name in NAMES {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} missing from:\n{text}"
        );
    }
    // Gauges are set, so their values are exact; counters and histograms are shared by the tests of this binary.
    for series in [
        "racklift_queue_jobs{kind=\"t.kind\",state=\"queued\"} 1\n",
        "racklift_queue_oldest_due_seconds{kind=\"t.kind\"} 2\n",
        "racklift_deployments{state=\"Completed\"} 3\n",
        "racklift_cluster_operations{operation=\"rolling_reboot\",status=\"running\"} 1\n",
        "racklift_cluster_servers_done{cluster=\"c1\",operation=\"rolling_reboot\"} 2\n",
        "racklift_cluster_step_duration_seconds_count{step=\"evacuate\"} ",
        "racklift_dead_letters_opened_total{error_class=\"bmc_timeout\",kind=\"t.kind\"} ",
        "racklift_job_duration_seconds_bucket{kind=\"t.kind\",outcome=\"complete\",le=\"0.25\"} ",
        "racklift_deploy_step_duration_seconds_count{state=\"PowerOff\"} ",
        "racklift_bmc_call_duration_seconds_count{operation=\"read_system\",vendor=\"dell\"} ",
        "racklift_bmc_call_errors_total{class=\"timeout\",vendor=\"dell\"} ",
        "racklift_media_bytes_served_total ",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
}

/// ops/check-configs lists the metrics the ops files may use, with their types; each must be defined here.
#[test]
fn the_ops_metric_table_matches_the_definitions() {
    touch_every_metric();
    let text = render(&global().registry);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../ops/check-configs");
    let script = std::fs::read_to_string(path).expect("ops/check-configs");
    let table: Vec<(&str, &str)> = script
        .lines()
        .filter_map(|line| {
            let (name, kind) = line.trim().strip_prefix("\"racklift_")?.split_once("\": \"")?;
            Some((name, kind.strip_suffix("\",")?))
        })
        .collect();
    assert_eq!(table.len(), NAMES.len(), "{table:?}");
    for (name, kind) in table {
        assert!(
            text.contains(&format!("# TYPE racklift_{name} {kind}\n")),
            "racklift_{name} is not a {kind}"
        );
    }
}

#[tokio::test]
async fn the_router_serves_the_text_format_and_samples_first() {
    touch_every_metric();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(racklift_metrics::serve(
        listener,
        || async {
            global().deployments.with_label_values(&["Sampled"]).set(42.0);
        },
        async {
            stopped.await.ok();
        },
    ));
    let response = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], CONTENT_TYPE);
    let text = response.text().await.unwrap();
    assert!(
        text.contains("racklift_deployments{state=\"Sampled\"} 42"),
        "{text}"
    );
    assert!(text.contains("racklift_queue_leases_total"), "{text}");
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

//! `racklift bench queue` at toy size, so the benchmark and both peers keep working between the runs that measure:
//! every row it promises is printed, with a figure. The figures themselves are measured by `ops/bench-queue`, not
//! asserted here.

use std::path::PathBuf;

use racklift_testdb::admin_url;
use racklift_tests::cli::{describe, racklift};

/// A printed table row: a positive jobs/s figure first, then what it is.
fn row<'a>(stdout: &'a str, what: &str) -> Option<&'a str> {
    stdout.lines().find(|line| {
        line.contains(what)
            && line
                .split_whitespace()
                .next()
                .and_then(|rate| rate.parse::<f64>().ok())
                .is_some_and(|rate| rate > 0.0)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_of_the_queue_benchmark_is_printed() {
    let driver =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/bench/peers/graphile-worker/bench.mjs");
    let graphile_installed = driver
        .with_file_name("node_modules/graphile-worker/package.json")
        .exists();
    let admin = admin_url();
    let args = [
        "bench",
        "queue",
        "--jobs",
        "2000",
        "--reps",
        "1",
        "--batch",
        "100",
        "--concurrency",
        "100",
        "--latency-samples",
        "5",
        "--rss-in-flight",
        "20",
        "--apalis-grid",
        "2x100",
        "--graphile-grid",
        "1x10",
        "--graphile-driver",
        driver.to_str().expect("UTF-8 path"),
    ];
    let output = racklift(&args, &[("DATABASE_URL", &admin)]).await;
    let text = describe(&output);
    assert!(output.status.success(), "{text}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    for what in [
        "raw-SQL bound, 4 clients, complete=DELETE",
        "racklift end to end, 2 pools x 100 in flight, complete=DELETE",
        "raw-SQL bound, 4 clients, complete=move to jobs_completed",
        "racklift end to end, 2 pools x 100 in flight, complete=move to jobs_completed",
        "apalis-postgres 1.0 at its best: 2 workers x batch 100",
    ] {
        assert!(row(&stdout, what).is_some(), "no row {what:?}\n{text}");
    }
    if graphile_installed {
        assert!(
            row(&stdout, "graphile-worker 0.18 at its best: 1 processes x 10").is_some(),
            "no graphile-worker row although it is installed\n{text}"
        );
    } else {
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("graphile-worker peer skipped"),
            "{text}"
        );
    }
    assert!(
        stdout.contains("idle pickup latency (enqueue commit -> handler start, 5 samples): p50"),
        "{text}"
    );
    assert!(
        stdout.contains("worker peak RSS with 20 jobs in flight:"),
        "{text}"
    );
}

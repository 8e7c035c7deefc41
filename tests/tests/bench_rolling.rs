//! `racklift bench rolling` at toy size, so the benchmark keeps working between the runs that measure: every
//! cluster completes, the simulator's audit is clean, and every line it promises is printed with a figure. The
//! wall time against the ideal is measured by the full-size run (BENCHMARKS.md), not asserted here.

use racklift_testdb::admin_url;
use racklift_tests::cli::{describe, racklift};

/// The first number on the printed line that starts with `what` (after its label).
fn figure(stdout: &str, what: &str) -> Option<f64> {
    let line = stdout.lines().find(|l| l.trim_start().starts_with(what))?;
    line[line.find(what)? + what.len()..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find(|t| !t.is_empty())
        .and_then(|t| t.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_small_clusters_reboot_at_once_with_a_clean_audit() {
    let admin = admin_url();
    let args = [
        "bench",
        "rolling",
        "--clusters",
        "2",
        "--members",
        "3",
        "--time-scale",
        "0.02",
        "--workers",
        "2",
    ];
    let output = racklift(&args, &[("DATABASE_URL", &admin)]).await;
    let text = describe(&output);
    assert!(output.status.success(), "{text}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("racklift bench rolling: 2 clusters x 3 members rebooting at once"),
        "{text}"
    );
    for what in [
        "ideal (members in sequence):",
        "one cluster alone:",
        "all clusters, wall time:",
        "per cluster p50 / p90 / max:",
        "run saves (cluster_operations):",
        "write transactions:",
        "worker CPU:",
        "PostgreSQL CPU:",
    ] {
        assert!(
            figure(&stdout, what).is_some_and(|f| f >= 0.0),
            "no figure for {what:?}\n{text}"
        );
    }
    assert!(
        figure(&stdout, "ideal (members in sequence):").is_some_and(|f| f > 0.0),
        "{text}"
    );
    assert!(
        stdout.contains("completed / not completed:       2 / 0"),
        "{text}"
    );
    assert!(stdout.contains("dead letters:                    0"), "{text}");
    assert!(stdout.contains("Incus steps:                     18 "), "{text}");
    assert!(
        stdout.contains(
            "audit: max out at once 1 per cluster, 18 mutations, 0 unfenced, 0 stale, 6 / 6 members \
             evacuated, rebooted and restored once"
        ),
        "{text}"
    );
}

//! `racklift bench chaos` at toy size, so the benchmark keeps working between the runs that measure
//! (BENCHMARKS.md): first the standalone simulator, API and worker processes deploying a small rack with no fault
//! at all, then a small rack under worker kills, stops and a partition from PostgreSQL, BMC and Incus faults and a
//! late eject, which must hold: the command exits 0 and its JSON tally shows no stale, unfenced or concurrent
//! mutation and no job lost.

use std::process::Output;
use std::time::Duration;

use racklift_testdb::admin_url;
use racklift_tests::cli::{command, describe, empty_home};
use serde_json::Value;

/// Runs `racklift ARGS` to completion within `limit`, with `env`. Past the limit it is interrupted (SIGTERM) and
/// waited for, so it stops the processes and the PostgreSQL it started before the test fails with the end of what
/// it logged.
async fn bench(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    use tokio::io::AsyncReadExt;
    let home = empty_home();
    let mut cmd = command(args, env, &home);
    // Its progress on stderr, so a failing run shows what it was doing.
    cmd.env("RUST_LOG", "info,sqlx=warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("run racklift");
    let pid = child.id().expect("a running racklift");
    let read_all = |pipe: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>| {
        tokio::spawn(async move {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes).await;
            }
            bytes
        })
    };
    let stdout = read_all(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read_all(child.stderr.take().map(|p| Box::new(p) as _));
    let finished = tokio::time::timeout(limit, child.wait()).await;
    let _ = std::fs::remove_dir_all(&home);
    let status = match finished {
        Ok(status) => status.expect("racklift's exit status"),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            // Its drop of the run (processes killed, PostgreSQL stopped) is waited for, not guessed at.
            let stopped = tokio::time::timeout(Duration::from_secs(90), child.wait()).await;
            let log = stderr.await.unwrap_or_default();
            let log = String::from_utf8_lossy(&log);
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "racklift {args:?} did not finish within {limit:?} (after SIGTERM: {stopped:?}); its last lines:\n{}",
                tail.join("\n")
            )
        }
    };
    Output {
        status,
        stdout: stdout.await.unwrap_or_default(),
        stderr: stderr.await.unwrap_or_default(),
    }
}

/// The JSON tally a `--json` run printed.
fn tally(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}\n{}", describe(output)))
}

/// How many of `kind` the tally says were injected.
fn injected(tally: &Value, kind: &str) -> u64 {
    tally["faults"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["kind"] == kind))
        .and_then(|f| f["injected"].as_u64())
        .unwrap_or(0)
}

/// Checks what a run that held must show: every deployment completed, nothing stale, unfenced, concurrent or lost.
fn assert_held(t: &Value, servers: u64, text: &str) {
    assert_eq!(t["problems"], serde_json::json!([]), "{text}");
    assert_eq!(t["deployments"]["completed"], servers, "{text}");
    let m = &t["mutations"];
    for field in [
        "bmc_stale",
        "bmc_unfenced",
        "incus_stale",
        "incus_unfenced",
        "cluster_stale",
        "cluster_unfenced",
    ] {
        assert_eq!(m[field], 0, "{field}\n{text}");
    }
    assert!(m["bmc_max_concurrent"].as_u64() <= Some(1), "{text}");
    assert!(m["max_evacuated_at_once"].as_u64() <= Some(1), "{text}");
    assert_eq!(t["jobs"]["lost"], serde_json::json!([]), "{text}");
    assert_eq!(t["jobs"]["live"], 0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standalone_simulator_deploys_a_small_rack_without_faults() {
    let admin = admin_url();
    let args = [
        "bench",
        "chaos",
        "--servers",
        "3",
        "--workers",
        "1",
        "--time-scale",
        "0.01",
        "--kills",
        "0",
        "--stops",
        "0",
        "--partitions",
        "0",
        "--pg-restarts",
        "0",
        "--promotions",
        "0",
        "--api-restarts",
        "0",
        "--bmc-faults",
        "0",
        "--late-ejects",
        "0",
        "--clusters",
        "0",
        "--json",
    ];
    let output = bench(&args, &[("DATABASE_URL", &admin)], Duration::from_secs(180)).await;
    let text = describe(&output);
    assert!(output.status.success(), "{text}");
    let t = tally(&output);
    assert_held(&t, 3, &text);
    assert_eq!(t["fault_log"], serde_json::json!([]), "{text}");
    assert_eq!(t["clusters"]["clusters"], 0, "{text}");
    // Every id the job sequence drew is a job that completed.
    assert_eq!(t["jobs"]["ids_drawn"], t["jobs"]["completed"], "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_rack_under_every_kind_of_fault_holds() {
    // One of each process fault: a worker killed, a worker stopped past its lease, a worker cut off from
    // PostgreSQL right after it sent a member a reboot call, PostgreSQL restarted, its standby promoted (the run's
    // own primary and standby behind HAProxy, whatever DATABASE_URL says), the API restarted; BMC and Incus faults
    // and a late eject.
    let args = [
        "bench",
        "chaos",
        "--servers",
        "6",
        "--workers",
        "2",
        "--time-scale",
        "0.01",
        "--kills",
        "1",
        "--stops",
        "1",
        "--partitions",
        "1",
        "--pg-restarts",
        "1",
        "--promotions",
        "1",
        "--api-restarts",
        "1",
        "--bmc-faults",
        "10",
        "--late-ejects",
        "1",
        "--members",
        "3",
        "--json",
    ];
    let output = bench(&args, &[], Duration::from_secs(240)).await;
    let text = describe(&output);
    assert!(output.status.success(), "{text}");
    let t = tally(&output);
    assert_held(&t, 6, &text);
    for kind in [
        "worker_kill",
        "worker_stop",
        "worker_partition",
        "pg_restart",
        "promotion",
        "api_restart",
        "late_eject",
    ] {
        assert_eq!(injected(&t, kind), 1, "{kind}\n{text}");
    }
    let transient: u64 = [
        "bmc_hang",
        "bmc_status",
        "bmc_busy",
        "bmc_reset",
        "incus_status",
        "incus_reset",
    ]
    .iter()
    .map(|k| injected(&t, k))
    .sum();
    assert!(transient >= 5, "{text}");
    assert_eq!(t["clusters"]["clusters"], 2, "{text}");
    assert_eq!(t["clusters"]["completed"], 2, "{text}");
    let late = &t["late_ejects"][0];
    assert_eq!(late["state"], "Completed", "{text}");
    // After every restart racklift answered, wrote and leased again.
    for r in t["recoveries"].as_array().expect("recoveries") {
        match r["kind"].as_str() {
            Some("pg_restart" | "promotion") => {
                assert!(r["write_secs"].is_number(), "{r}\n{text}");
                assert!(r["api_secs"].is_number(), "{r}\n{text}");
            }
            Some("api_restart") => assert!(r["api_secs"].is_number(), "{r}\n{text}"),
            _ => {}
        }
    }
    // The partition came while the clusters rebooted, right after a member received a reboot call from the worker
    // cut off, and that worker's jobs went to the others.
    let partitions: Vec<&Value> = t["recoveries"]
        .as_array()
        .expect("recoveries")
        .iter()
        .filter(|r| r["kind"] == "worker_partition")
        .collect();
    assert_eq!(partitions.len(), 1, "{text}");
    let p = partitions[0];
    assert_eq!(p["phase"], "rolling", "{p}\n{text}");
    assert!(p["after_reboot_call_secs"].is_number(), "{p}\n{text}");
    assert!(p["takeover_secs"].is_number(), "{p}\n{text}");
}

//! graphile-worker (Node.js) as a second peer: the best of the queues measured on this project's machines, run
//! side by side with racklift instead of quoted from another day. The driver is `peers/graphile-worker/bench.mjs`;
//! `ops/bench-queue` installs its one npm dependency. This side starts it, reads PostgreSQL's CPU around its timed
//! part and turns its result line into a [`Throughput`].

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::BenchError;
use crate::proc_stats::{CpuMeter, CpuPerJob, Throughput};

/// How long one run (enqueue included) may take before it counts as stalled.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphileRun {
    pub jobs: u64,
    /// Worker processes (graphile-worker's unit of scale-out, like a `racklift worker`).
    pub processes: usize,
    /// graphile-worker `concurrency` per process.
    pub concurrency: usize,
    /// graphile-worker `localQueue.size`: jobs a process claims per fetch.
    pub local_queue: usize,
}

/// Where the peer lives and whether it can run here.
#[derive(Debug, Clone)]
pub struct GraphilePeer {
    script: PathBuf,
}

impl GraphilePeer {
    /// The peer whose driver script is `script`, if its dependency is installed and `node` runs; otherwise the
    /// sentence to print instead of its figures.
    pub fn find(script: &Path) -> Result<GraphilePeer, String> {
        let installed = script
            .parent()
            .map(|dir| dir.join("node_modules/graphile-worker/package.json"))
            .is_some_and(|p| p.exists());
        if !installed {
            return Err(format!(
                "graphile-worker is not installed next to {} (ops/bench-queue installs it with npm)",
                script.display()
            ));
        }
        let node = std::process::Command::new("node")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !node.is_ok_and(|s| s.success()) {
            return Err("Node.js (`node`) is not on the PATH; install Node.js 20 or later".into());
        }
        Ok(GraphilePeer {
            script: script.to_path_buf(),
        })
    }

    /// One burn-down of `run.jobs` no-op jobs on the empty database at `url`.
    pub async fn run(&self, url: &str, run: GraphileRun) -> Result<Throughput, BenchError> {
        tokio::time::timeout(RUN_TIMEOUT, self.run_inner(url, run))
            .await
            .map_err(|_| {
                BenchError::Stalled(format!(
                    "graphile-worker run did not finish in {} s",
                    RUN_TIMEOUT.as_secs()
                ))
            })?
    }

    async fn run_inner(&self, url: &str, run: GraphileRun) -> Result<Throughput, BenchError> {
        let mut child = tokio::process::Command::new("node")
            .arg(&self.script)
            .args([
                "--jobs",
                &run.jobs.to_string(),
                "--processes",
                &run.processes.to_string(),
                "--concurrency",
                &run.concurrency.to_string(),
                "--local-queue",
                &run.local_queue.to_string(),
            ])
            .env("DATABASE_URL", url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(BenchError::Process)?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let mut next_line = async || {
            lines
                .next_line()
                .await
                .map_err(BenchError::Process)?
                .ok_or_else(|| BenchError::Stalled("graphile-worker driver ended without a result".into()))
        };

        // The driver enqueues and starts its worker processes, then waits for us to take the CPU reading.
        while next_line().await? != "ready" {}
        let cpu = CpuMeter::start();
        stdin.write_all(b"go\n").await.map_err(BenchError::Process)?;
        drop(stdin);
        let result = loop {
            let line = next_line().await?;
            if line.starts_with('{') {
                break parse_result(&line)?;
            }
        };
        let postgres = cpu.per_job(run.jobs);
        let status = child.wait().await.map_err(BenchError::Process)?;
        if !status.success() {
            return Err(BenchError::Stalled(format!(
                "graphile-worker driver exited with {status}"
            )));
        }
        Ok(result.throughput(postgres.postgres_us))
    }
}

/// The driver's last line.
#[derive(Debug, Deserialize, PartialEq)]
struct DriverResult {
    jobs: u64,
    elapsed_ms: f64,
    /// Its worker processes' user + system CPU over the timed part.
    worker_cpu_us: f64,
}

impl DriverResult {
    fn throughput(&self, postgres_us_per_job: f64) -> Throughput {
        Throughput {
            jobs_per_sec: self.jobs as f64 / (self.elapsed_ms.max(0.001) / 1000.0),
            cpu: CpuPerJob {
                own_us: self.worker_cpu_us / self.jobs.max(1) as f64,
                postgres_us: postgres_us_per_job,
            },
        }
    }
}

fn parse_result(line: &str) -> Result<DriverResult, BenchError> {
    serde_json::from_str(line)
        .map_err(|e| BenchError::Stalled(format!("graphile-worker driver printed {line:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_line_becomes_jobs_per_second_and_worker_cpu_per_job() {
        let r = parse_result(r#"{"jobs":50000,"elapsed_ms":2000.0,"worker_cpu_us":2500000}"#).unwrap();
        let t = r.throughput(40.0);
        assert_eq!(t.jobs_per_sec, 25_000.0);
        assert_eq!(t.cpu.own_us, 50.0);
        assert_eq!(t.cpu.postgres_us, 40.0);
    }

    #[test]
    fn a_garbled_result_line_is_an_error_that_quotes_it() {
        let err = parse_result(r#"{"jobs":"many"}"#).unwrap_err().to_string();
        assert!(err.contains(r#"{\"jobs\":\"many\"}"#), "{err}");
    }

    #[test]
    fn a_missing_install_says_how_to_install() {
        let err = GraphilePeer::find(Path::new("/nonexistent/bench.mjs")).unwrap_err();
        assert!(err.contains("ops/bench-queue"), "{err}");
    }
}

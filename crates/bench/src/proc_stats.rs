//! What the kernel says about processes on this machine: CPU time and peak memory, read from `/proc`. The
//! benchmarks run next to their PostgreSQL, so its processes can be read too; elsewhere the readings are zero.

/// utime + stime (and, with `children`, the reaped children's) of a process, in seconds.
pub(crate) fn cpu_secs(pid: u32, children: bool) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime is field 14 of the whole line.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|f| f.parse().ok())
        .collect();
    let ticks: u64 = if children {
        fields.iter().sum()
    } else {
        fields.iter().take(2).sum()
    };
    ticks as f64 / 100.0
}

/// Every PostgreSQL process's CPU, the postmaster's reaped backends included.
pub(crate) fn postgres_cpu_secs() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres")
        })
        .map(|pid| cpu_secs(pid, true))
        .sum()
}

pub(crate) fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// CPU spent per job by this process and by PostgreSQL over one throughput run. Unlike jobs/s, which moves with
/// whatever else the machine is doing, CPU per job barely moves between runs, so it shows where a change saved
/// work and on which side.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuPerJob {
    pub own_us: f64,
    pub postgres_us: f64,
}

pub(crate) struct CpuMeter {
    own: f64,
    postgres: f64,
}

impl CpuMeter {
    pub(crate) fn start() -> CpuMeter {
        CpuMeter {
            own: cpu_secs(std::process::id(), false),
            postgres: postgres_cpu_secs(),
        }
    }

    pub(crate) fn per_job(&self, jobs: u64) -> CpuPerJob {
        let per_job_us = |secs: f64| secs * 1e6 / jobs.max(1) as f64;
        CpuPerJob {
            own_us: per_job_us(cpu_secs(std::process::id(), false) - self.own),
            postgres_us: per_job_us(postgres_cpu_secs() - self.postgres),
        }
    }
}

/// One throughput run's result.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    pub jobs_per_sec: f64,
    pub cpu: CpuPerJob,
}

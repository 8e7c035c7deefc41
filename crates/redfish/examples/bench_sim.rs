//! Throughput of the simulator and per-call overhead of the client, in one run.
//!
//! ```text
//! cargo run --release -p racklift-redfish --example bench_sim [-- SERVERS TASKS SECONDS]
//! ```
//!
//! Starts the simulator in-process with SERVERS BMCs (default 1,000, mixed personalities),
//! then:
//! 1. overhead: one task alternates a client `read_system` and a raw reqwest GET of the same
//!    System URI (no limiter, no JSON parsing), and reports both medians and their difference;
//! 2. throughput: TASKS concurrent tasks (default 64) drive `read_system` across all BMCs for
//!    SECONDS (default 6), then the same with raw GETs. Requests served are counted by the
//!    simulator's own audit, so they are what it answered, not what the client attempted.
//!
//! The per-BMC limiter serialises calls to one BMC, so concurrency comes from many BMCs:
//! task `k` walks BMCs `k, k + TASKS, …`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use racklift_bmc_sim::{PersonalityChoice, Sim, SimConfig, SimHandle};
use racklift_redfish::{BmcClient, BmcConfig, Credentials, HostLimiter, RetryPolicy, TlsMode};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// CPU time this process has used (user + system), from `/proc/self/stat` in USER_HZ ticks
/// (100 per second on Linux). The machine is shared with other builds, so throughput is also
/// reported per CPU-second, which does not depend on how much of the machine the run got.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split(' ').collect())
        .unwrap_or_default();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

fn served(sim: &SimHandle) -> u64 {
    (0..sim.len()).map(|i| sim.audit(i).requests).sum()
}

struct Phase {
    requests: u64,
    elapsed: Duration,
    cpu: Duration,
    latencies: Vec<Duration>,
    errors: u64,
}

impl Phase {
    fn report(&mut self, name: &str) {
        self.latencies.sort();
        println!(
            "{name:<8} served {:>7} requests in {:.2} s = {:>8.0} req/s ({:.2} CPU-s used: {:>6.0} req per CPU-s) | p50 {:.3} ms p99 {:.3} ms | errors {}",
            self.requests,
            self.elapsed.as_secs_f64(),
            self.requests as f64 / self.elapsed.as_secs_f64(),
            self.cpu.as_secs_f64(),
            self.requests as f64 / self.cpu.as_secs_f64().max(0.01),
            ms(percentile(&self.latencies, 0.5)),
            ms(percentile(&self.latencies, 0.99)),
            self.errors,
        );
    }
}

/// Runs `tasks` workers for `seconds`; worker `k` calls `call(i)` for BMCs `k, k+tasks, …`.
async fn drive<F, Fut>(sim: &SimHandle, tasks: usize, seconds: u64, call: F) -> Phase
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let call = Arc::new(call);
    let stop = Arc::new(AtomicBool::new(false));
    let n = sim.len();
    let before = served(sim);
    let cpu_before = cpu_time();
    let started = Instant::now();
    let mut handles = Vec::new();
    for k in 0..tasks {
        let (call, stop) = (call.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            let (mut lat, mut errors, mut i) = (Vec::new(), 0u64, k % n);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                if call(i).await {
                    lat.push(t.elapsed());
                } else {
                    errors += 1;
                }
                i = (i + tasks) % n;
            }
            (lat, errors)
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut phase = Phase {
        requests: 0,
        elapsed: Duration::ZERO,
        cpu: Duration::ZERO,
        latencies: Vec::new(),
        errors: 0,
    };
    for h in handles {
        let (lat, errors) = h.await.expect("worker");
        phase.latencies.extend(lat);
        phase.errors += errors;
    }
    phase.elapsed = started.elapsed();
    phase.cpu = cpu_time().saturating_sub(cpu_before);
    phase.requests = served(sim) - before;
    phase
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("numeric argument"));
    let servers = args.next().unwrap_or(1000) as usize;
    let tasks = args.next().unwrap_or(64) as usize;
    let seconds = args.next().unwrap_or(6);

    let sim = Sim::start(SimConfig::new(servers, PersonalityChoice::Mix).with_time_scale(0.01))
        .await
        .expect("simulator");
    let sim = Arc::new(sim);
    let (user, pass) = sim.credentials();
    let (user, pass) = (user.to_owned(), pass.to_owned());
    let limiter = HostLimiter::new(1);
    let clients: Arc<Vec<BmcClient>> = Arc::new(
        (0..servers)
            .map(|i| {
                let mut c = BmcConfig::new(
                    sim.name(i),
                    sim.bmc_url(i),
                    Credentials::new(user.clone(), pass.clone()),
                    TlsMode::WebPkiRoots,
                );
                c.limiter = limiter.clone();
                c.retry = RetryPolicy::NONE;
                c.call_deadline = Duration::from_secs(10);
                BmcClient::new(c).expect("client")
            })
            .collect(),
    );
    // Warm up: discover every System URI (cached per client) and open connections.
    let mut urls = Vec::with_capacity(servers);
    for c in clients.iter() {
        let system = c.read_system().await.expect("warm-up read");
        urls.push(system.odata_id);
    }
    let urls: Arc<Vec<String>> = Arc::new(
        urls.iter()
            .enumerate()
            .map(|(i, path)| format!("{}{}", sim.base_url(), path_under(&sim.bmc_url(i), path)))
            .collect(),
    );
    let raw = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .expect("raw client");
    println!("bench_sim: {servers} BMCs (mixed personalities), {tasks} tasks, {seconds} s per phase");

    // 1. Per-call overhead, sequential and alternating so both see the same conditions.
    let (mut client_lat, mut raw_lat) = (Vec::new(), Vec::new());
    let overhead_until = Instant::now() + Duration::from_secs(3);
    let mut i = 0;
    while Instant::now() < overhead_until {
        let t = Instant::now();
        clients[i].read_system().await.expect("client read");
        client_lat.push(t.elapsed());
        let t = Instant::now();
        let body = raw
            .get(&urls[i])
            .basic_auth(&user, Some(&pass))
            .send()
            .await
            .expect("raw")
            .bytes()
            .await
            .expect("body");
        raw_lat.push(t.elapsed());
        assert!(!body.is_empty());
        i = (i + 1) % servers;
    }
    client_lat.sort();
    raw_lat.sort();
    let (c50, r50) = (percentile(&client_lat, 0.5), percentile(&raw_lat, 0.5));
    println!(
        "overhead {} pairs: client read_system p50 {:.3} ms, raw GET p50 {:.3} ms => client overhead {:.3} ms ({:.0} µs) per call",
        client_lat.len(),
        ms(c50),
        ms(r50),
        ms(c50.saturating_sub(r50)),
        c50.saturating_sub(r50).as_secs_f64() * 1e6,
    );

    // 2. Throughput through the client, then raw.
    let cs = clients.clone();
    let mut client_phase = drive(&sim, tasks, seconds, move |i| {
        let c = cs[i].clone();
        async move { c.read_system().await.is_ok() }
    })
    .await;
    client_phase.report("client");
    let (raw2, urls2, u, p) = (raw.clone(), urls.clone(), user.clone(), pass.clone());
    let mut raw_phase = drive(&sim, tasks, seconds, move |i| {
        let req = raw2.get(&urls2[i]).basic_auth(&u, Some(&p));
        async move {
            match req.send().await {
                Ok(r) => r.bytes().await.is_ok(),
                Err(_) => false,
            }
        }
    })
    .await;
    raw_phase.report("raw");
    let max_concurrent = (0..sim.len())
        .map(|i| sim.audit(i).max_concurrent)
        .max()
        .unwrap_or(0);
    println!(
        "highest concurrency the simulator saw on one BMC over the whole run: {max_concurrent} (the raw phase has no limiter)"
    );
}

/// The System URI as an absolute path under the simulator (links already carry the BMC prefix).
fn path_under(bmc_url: &str, path: &str) -> String {
    let prefix = bmc_url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("");
    if path.starts_with(prefix) {
        path.to_owned()
    } else {
        format!("{prefix}{path}")
    }
}

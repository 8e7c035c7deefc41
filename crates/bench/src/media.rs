//! The media server against nginx, side by side in one run: `racklift api` (a child process, so its CPU is its
//! own) serving a deployment's composed image (the seed laid over partition 2, reads recorded) on its plain media
//! listener (`sendfile`) and on the API's own listener (hyper, plain HTTP here so that only the body's path
//! differs), and nginx (Debian's package, a child too, `sendfile` on) serving the same file from the same disk
//! with Range. The same readers hit the three in turn on loopback: `readers` at once, each either fetching random
//! `range_bytes` ranges or streaming the file from the start, for `duration` per run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::StreamExt;
use racklift_api::demo::{self, RackServer};
use racklift_queue::{Queue, QueueConfig};
use racklift_store::Store;

use crate::proc_stats::cpu_secs;
use crate::{BenchDb, BenchError};

/// How the readers read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Random ranges of `range_bytes`, one request each.
    RandomRanges,
    /// The whole file from the start, one request, restarted at the end.
    Sequential,
}

impl ReadMode {
    pub fn name(self) -> &'static str {
        match self {
            ReadMode::RandomRanges => "random ranges",
            ReadMode::Sequential => "sequential streams",
        }
    }
}

/// One benchmark run's settings.
#[derive(Debug, Clone, Copy)]
pub struct MediaRun {
    pub readers: usize,
    pub image_bytes: u64,
    pub range_bytes: u64,
    pub duration: Duration,
    pub reps: usize,
}

/// One measurement: bytes served per second and the server's CPU per GiB served.
#[derive(Debug, Clone, Copy, Default)]
pub struct Served {
    pub bytes_per_sec: f64,
    pub cpu_secs_per_gib: f64,
}

/// The medians of one read mode, per server.
#[derive(Debug, Clone, Copy)]
pub struct MediaRow {
    pub mode: ReadMode,
    /// racklift's media listener (`[api] media_listen`): what BMCs read.
    pub media_listener: Served,
    /// The same media through the API's own listener.
    pub api_listener: Served,
    pub nginx: Served,
}

/// The medians per mode.
#[derive(Debug, Clone)]
pub struct MediaReport {
    pub rows: Vec<MediaRow>,
    pub nginx_version: String,
}

/// A server under test: where it serves the file, and the processes whose CPU is its cost.
struct Target {
    url: String,
    pids: Vec<u32>,
}

impl Target {
    fn cpu(&self) -> f64 {
        self.pids.iter().map(|p| cpu_secs(*p, false)).sum()
    }
}

pub async fn run(racklift: &Path, admin_url: &str, run: MediaRun) -> Result<MediaReport, BenchError> {
    let dbs = BenchDb::new(admin_url);
    let (url, pool) = dbs.fresh("racklift_bench_media", 8).await?;
    let dir = std::env::temp_dir().join(format!("racklift-bench-media-{}", std::process::id()));
    let images = dir.join("images");
    let (image, sha) = demo::generate_image(&images, run.image_bytes).map_err(BenchError::Process)?;
    let store = Store::new(pool.clone());
    let api_port = free_port()?;
    let api_base = format!("http://127.0.0.1:{api_port}");
    let media_port = free_port()?;
    let media_base = format!("http://127.0.0.1:{media_port}");
    let server = RackServer {
        name: "bench-1".to_owned(),
        bmc_url: "https://bmc.invalid".to_owned(),
        vendor: "generic".to_owned(),
        bmc_cert_pin: None,
    };
    let catalog = demo::seed_catalog(
        &store,
        std::slice::from_ref(&server),
        "root",
        "file:bmc-password",
        &api_base,
        (&image, run.image_bytes, &sha),
    )
    .await
    .map_err(|e| BenchError::Stalled(format!("catalog: {e}")))?;
    let queue = Queue::new(pool.clone(), QueueConfig::default());
    let media_path =
        demo::media_only_deployment(&store, &queue, &catalog, &server.name, &api_base, "incusos.img")
            .await
            .map_err(|e| BenchError::Stalled(format!("deployment: {e}")))?;

    let mut api = tokio::process::Command::new(racklift)
        .arg("api")
        .env("DATABASE_URL", &url)
        .env("RACKLIFT_API_LISTEN", format!("127.0.0.1:{api_port}"))
        .env("RACKLIFT_API__PLAIN_HTTP", "true")
        .env("RACKLIFT_API__MEDIA_LISTEN", format!("127.0.0.1:{media_port}"))
        .env("RACKLIFT_API__MEDIA_PUBLIC_ADDRESS", &media_base)
        .env("RACKLIFT_PATHS__IMAGES_DIR", &images)
        // Every reader comes from this host's own address: one peer for the listener.
        .env(
            "RACKLIFT_API__MAX_CONNECTIONS_PER_PEER",
            (run.readers + 16).to_string(),
        )
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(BenchError::Process)?;
    let nginx_port = free_port()?;
    let nginx = Nginx::start(&dir, &images, nginx_port)?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(run.readers)
        .build()
        .map_err(|e| BenchError::Stalled(format!("HTTP client: {e}")))?;
    let file = image.file_name().and_then(|f| f.to_str()).unwrap_or_default();
    let pids: Vec<u32> = api.id().into_iter().collect();
    let targets = [
        Target {
            url: format!("{media_base}{media_path}"),
            pids: pids.clone(),
        },
        Target {
            url: format!("{api_base}{media_path}"),
            pids,
        },
        Target {
            url: format!("http://127.0.0.1:{nginx_port}/{file}"),
            pids: nginx.pids(),
        },
    ];
    for target in &targets {
        wait_serving(&http, &target.url).await?;
    }
    // All serve the same size; only racklift's bytes carry the seed.
    let mut rows = Vec::new();
    for mode in [ReadMode::RandomRanges, ReadMode::Sequential] {
        let mut runs: [Vec<Served>; 3] = Default::default();
        for _ in 0..run.reps.max(1) {
            for (target, runs) in targets.iter().zip(runs.iter_mut()) {
                runs.push(measure(&http, target, mode, run).await?);
            }
        }
        let [media, api, nginx] = runs;
        rows.push(MediaRow {
            mode,
            media_listener: median_served(&mut { media }),
            api_listener: median_served(&mut { api }),
            nginx: median_served(&mut { nginx }),
        });
    }
    let nginx_version = nginx.version();
    let _ = api.start_kill();
    let _ = api.wait().await;
    nginx.stop().await;
    pool.close().await;
    dbs.drop_db("racklift_bench_media").await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(MediaReport { rows, nginx_version })
}

fn median_served(runs: &mut [Served]) -> Served {
    let mut rate: Vec<f64> = runs.iter().map(|s| s.bytes_per_sec).collect();
    let mut cpu: Vec<f64> = runs.iter().map(|s| s.cpu_secs_per_gib).collect();
    Served {
        bytes_per_sec: crate::median(&mut rate),
        cpu_secs_per_gib: crate::median(&mut cpu),
    }
}

fn free_port() -> Result<u16, BenchError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(BenchError::Process)?;
    Ok(l.local_addr().map_err(BenchError::Process)?.port())
}

async fn wait_serving(http: &reqwest::Client, url: &str) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(r) = http.head(url).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(BenchError::Stalled(format!("{url} did not answer within 30 s")))
}

/// `run.readers` readers against `target` for `run.duration`.
async fn measure(
    http: &reqwest::Client,
    target: &Target,
    mode: ReadMode,
    run: MediaRun,
) -> Result<Served, BenchError> {
    let cpu_before = target.cpu();
    let started = Instant::now();
    let until = started + run.duration;
    let readers = (0..run.readers).map(|i| read_until(http, &target.url, mode, run, until, i as u64));
    let totals: Vec<Result<u64, BenchError>> = futures::future::join_all(readers).await;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = target.cpu() - cpu_before;
    let mut bytes = 0u64;
    for t in totals {
        bytes += t?;
    }
    let gib = bytes as f64 / f64::from(1u32 << 30);
    Ok(Served {
        bytes_per_sec: bytes as f64 / elapsed,
        cpu_secs_per_gib: if gib > 0.0 { cpu / gib } else { 0.0 },
    })
}

/// One reader: requests until `until`, returning the body bytes it received.
async fn read_until(
    http: &reqwest::Client,
    url: &str,
    mode: ReadMode,
    run: MediaRun,
    until: Instant,
    seed: u64,
) -> Result<u64, BenchError> {
    let failed = |e: reqwest::Error| BenchError::Stalled(format!("{url}: {e}"));
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut total = 0u64;
    while Instant::now() < until {
        let request = match mode {
            ReadMode::RandomRanges => {
                // xorshift: the same offsets for both servers, no dependency for a random number.
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let start = rng % (run.image_bytes - run.range_bytes);
                http.get(url)
                    .header("Range", format!("bytes={start}-{}", start + run.range_bytes - 1))
            }
            ReadMode::Sequential => http.get(url),
        };
        let response = request.send().await.map_err(failed)?;
        if !response.status().is_success() {
            return Err(BenchError::Stalled(format!("{url}: HTTP {}", response.status())));
        }
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            total += chunk.map_err(failed)?.len() as u64;
            if Instant::now() >= until {
                return Ok(total);
            }
        }
    }
    Ok(total)
}

/// nginx serving `root` on loopback, as a media server would be set up: sendfile, no access log.
struct Nginx {
    child: tokio::process::Child,
    binary: PathBuf,
    prefix: PathBuf,
    conf: PathBuf,
}

impl Nginx {
    fn start(dir: &Path, root: &Path, port: u16) -> Result<Nginx, BenchError> {
        let binary = ["/usr/sbin/nginx", "/usr/local/sbin/nginx"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("nginx"));
        let prefix = dir.join("nginx");
        std::fs::create_dir_all(prefix.join("logs")).map_err(BenchError::Process)?;
        let conf = prefix.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "daemon off;\nmaster_process on;\nworker_processes auto;\npid {pid};\nerror_log {log} warn;\n\
                 events {{ worker_connections 4096; }}\n\
                 http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 100000;\n\
                   client_body_temp_path {tmp};\n  proxy_temp_path {tmp};\n  fastcgi_temp_path {tmp};\n\
                   uwsgi_temp_path {tmp};\n  scgi_temp_path {tmp};\n\
                   server {{ listen 127.0.0.1:{port}; root {root}; location / {{ }} }}\n}}\n",
                pid = prefix.join("nginx.pid").display(),
                log = prefix.join("logs/error.log").display(),
                tmp = prefix.join("tmp").display(),
                root = root.display(),
            ),
        )
        .map_err(BenchError::Process)?;
        let child = tokio::process::Command::new(&binary)
            .arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                BenchError::Stalled(format!(
                    "starting {} (Debian's nginx package; ops/bench-media installs it): {e}",
                    binary.display()
                ))
            })?;
        Ok(Nginx {
            child,
            binary,
            prefix,
            conf,
        })
    }

    /// The master and its workers (read after they started: `wait_serving` has seen an answer).
    fn pids(&self) -> Vec<u32> {
        let Some(master) = self.child.id() else {
            return Vec::new();
        };
        let mut pids = vec![master];
        // The workers may not have forked yet: wait for them briefly.
        for _ in 0..50 {
            let children =
                std::fs::read_to_string(format!("/proc/{master}/task/{master}/children")).unwrap_or_default();
            let workers: Vec<u32> = children
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if !workers.is_empty() {
                pids.extend(workers);
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        pids
    }

    fn version(&self) -> String {
        std::process::Command::new(&self.binary)
            .arg("-v")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
            .unwrap_or_default()
    }

    /// `nginx -s stop`: the master stops its workers (killing the master alone would leave them running).
    async fn stop(mut self) {
        let stopped = tokio::process::Command::new(&self.binary)
            .arg("-p")
            .arg(&self.prefix)
            .arg("-c")
            .arg(&self.conf)
            .args(["-s", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .is_ok_and(|s| s.success());
        if !stopped {
            let _ = self.child.start_kill();
        }
        let _ = self.child.wait().await;
    }
}

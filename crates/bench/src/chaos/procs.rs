//! The run's child processes, each the `racklift` binary as an operator would start it: the simulator
//! (`racklift bmc-sim`), the API (`racklift api`) and the workers (`racklift worker`). Each writes its log to a file
//! of its own, so a fault's effects can be looked up afterwards per process; each is killed when dropped. Every
//! worker reaches PostgreSQL through a [`FreezableProxy`] of its own, so one worker can be cut off from the
//! database while everything else keeps it.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use racklift_netfault::FreezableProxy;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::ChaosError;

/// The log filter of the children: `RACKLIFT_BENCH_WORKER_LOG` to look into a run (as `bench fleet`); by default
/// warnings only, without the every-use warning about the simulated rack's plain http:// BMCs.
fn log_filter() -> String {
    std::env::var("RACKLIFT_BENCH_WORKER_LOG").unwrap_or_else(|_| "warn,racklift_bmc_access=error".into())
}

fn log_file(path: &Path) -> Result<File, ChaosError> {
    File::create(path).map_err(|source| ChaosError::Process {
        what: format!("creating the log {}", path.display()),
        source,
    })
}

/// A `racklift` command with a clean configuration: no racklift.toml of the person running the benchmark.
fn racklift(bin: &Path, log: &Path) -> Result<Command, ChaosError> {
    let mut command = Command::new(bin);
    command
        .env_remove("RACKLIFT_CONFIG")
        .env("RUST_LOG", log_filter())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file(log)?)
        .kill_on_drop(true);
    Ok(command)
}

fn spawn(mut command: Command, what: &str) -> Result<(Child, u32), ChaosError> {
    let child = command.spawn().map_err(|source| ChaosError::Process {
        what: format!("starting {what}"),
        source,
    })?;
    let pid = child.id().ok_or_else(|| ChaosError::Exited {
        what: what.to_owned(),
        status: "at once".into(),
    })?;
    Ok((child, pid))
}

/// Sends `signal` (`STOP`, `CONT`) to `pid`.
pub fn signal(pid: u32, signal: &str) -> Result<(), ChaosError> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .map_err(|source| ChaosError::Process {
            what: format!("kill -{signal} {pid}"),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(ChaosError::Exited {
            what: format!("kill -{signal} {pid}"),
            status: status.to_string(),
        })
    }
}

/// `racklift bmc-sim`: the rack, serving until it is killed.
pub struct SimProcess {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// `http://127.0.0.1:PORT/control`.
    pub control_url: String,
}

impl SimProcess {
    /// Starts the simulator and reads the URLs it prints. Its POST-stage floor stays on (the default of the
    /// command): the reboot ending install stage 1 must leave a deployment the time to eject the media.
    pub async fn start(
        bin: &Path,
        servers: usize,
        time_scale: f64,
        password: &str,
        log: &Path,
    ) -> Result<SimProcess, ChaosError> {
        let mut command = racklift(bin, log)?;
        command
            .args(["bmc-sim", "--personality", "mix", "--listen", "127.0.0.1:0"])
            .arg("--servers")
            .arg(servers.to_string())
            .arg("--time-scale")
            .arg(time_scale.to_string())
            .arg("--password")
            .arg(password)
            .stdout(Stdio::piped());
        let (mut child, _) = spawn(command, "racklift bmc-sim")?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| ChaosError::Simulator("no stdout".into()))?;
        let mut lines = BufReader::new(stdout).lines();
        let (mut base_url, mut control_url) = (None, None);
        let read = async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.strip_prefix("bmc-sim listening on ") {
                    base_url = Some(url.trim().to_owned());
                }
                if let Some(url) = line.strip_prefix("control: ") {
                    control_url = Some(url.trim().trim_end_matches("/servers").to_owned());
                }
                if base_url.is_some() && control_url.is_some() {
                    break;
                }
            }
            Ok::<(), std::io::Error>(())
        };
        match tokio::time::timeout(Duration::from_secs(60), read).await {
            Ok(Ok(())) => {}
            Ok(Err(source)) => {
                return Err(ChaosError::Process {
                    what: "reading the simulator's output".into(),
                    source,
                });
            }
            Err(_) => return Err(ChaosError::Simulator("printed no URLs within 60 s".into())),
        }
        let (Some(base_url), Some(control_url)) = (base_url, control_url) else {
            return Err(ChaosError::Simulator(format!(
                "exited before printing its URLs (see {})",
                log.display()
            )));
        };
        // The rest of its output is read and dropped: a closed pipe would end it at its next line.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(SimProcess {
            child,
            base_url,
            control_url,
        })
    }

    /// Its exit status, if it ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// How `racklift api` is started, each time the same way.
#[derive(Clone)]
pub struct ApiSpec {
    pub bin: PathBuf,
    pub listen: SocketAddr,
    pub database_url: String,
    pub secrets: PathBuf,
    pub images: PathBuf,
    pub time_scale: f64,
    pub logs: PathBuf,
    /// The API's self-signed certificate and key (PEM files): IncusOS registers over TLS only, presenting Incus's
    /// certificate, which a plain listener could never see.
    pub tls: (PathBuf, PathBuf),
    /// The plain media listener (many BMCs cannot fetch virtual media over HTTPS from a self-signed certificate).
    pub media_listen: std::net::SocketAddr,
}

/// `racklift api` on a fixed address (the media URLs and the registration address in every seed name it), over
/// TLS with its own self-signed certificate, which every seed hands to IncusOS; the media on a plain listener.
pub struct ApiProcess {
    spec: ApiSpec,
    child: Child,
    starts: usize,
}

impl ApiProcess {
    pub fn start(spec: ApiSpec) -> Result<ApiProcess, ChaosError> {
        let child = ApiProcess::spawn(&spec, 1)?;
        Ok(ApiProcess {
            spec,
            child,
            starts: 1,
        })
    }

    fn spawn(spec: &ApiSpec, n: usize) -> Result<Child, ChaosError> {
        let mut command = racklift(&spec.bin, &spec.logs.join(format!("api-{n}.log")))?;
        command
            .arg("api")
            .arg("--listen")
            .arg(spec.listen.to_string())
            .arg("--sim-time-scale")
            .arg(spec.time_scale.to_string())
            .env("DATABASE_URL", &spec.database_url)
            .env("RACKLIFT_API__TLS_CERTIFICATE", &spec.tls.0)
            .env("RACKLIFT_API__TLS_KEY", &spec.tls.1)
            .env("RACKLIFT_API__MEDIA_LISTEN", spec.media_listen.to_string())
            .env(
                "RACKLIFT_API__MEDIA_PUBLIC_ADDRESS",
                format!("http://{}", spec.media_listen),
            )
            // Every simulated server reaches the API from this host's own address: one peer for the listener.
            .env("RACKLIFT_API__MAX_CONNECTIONS_PER_PEER", "1024")
            .env("RACKLIFT_PATHS__SECRETS_DIR", &spec.secrets)
            .env("RACKLIFT_PATHS__IMAGES_DIR", &spec.images);
        Ok(spawn(command, "racklift api")?.0)
    }

    /// `kill -9`, waiting until it is gone.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// A new process in place of the killed (or exited) one.
    pub fn respawn(&mut self) -> Result<(), ChaosError> {
        self.starts += 1;
        self.child = ApiProcess::spawn(&self.spec, self.starts)?;
        Ok(())
    }

    /// Its exit status, if it ended on its own.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// How `racklift worker` is started.
#[derive(Clone)]
pub struct WorkerSpec {
    pub bin: PathBuf,
    /// The database as the worker would reach it without a proxy (through HAProxy in a replicated run).
    pub database_url: String,
    pub secrets: PathBuf,
    pub time_scale: f64,
    pub concurrency: usize,
    pub lease_ttl_ms: u64,
    pub logs: PathBuf,
}

/// One `racklift worker`.
pub struct WorkerProc {
    child: Child,
    pub pid: u32,
    /// 1 for the first started, counting replacements.
    pub number: usize,
    /// Its only way to PostgreSQL. Dropped after the child (field order), so a killed worker's connections
    /// close with the proxy rather than stay frozen.
    proxy: FreezableProxy,
}

/// The running workers: the K of the run, with replacements for those killed.
pub struct Workers {
    spec: WorkerSpec,
    /// Where `spec.database_url` points: every worker's proxy forwards there.
    upstream: SocketAddr,
    procs: Vec<WorkerProc>,
    started: usize,
}

impl Workers {
    pub async fn start(spec: WorkerSpec, count: usize) -> Result<Workers, ChaosError> {
        let (upstream, database_url) = upstream_of(&spec.database_url).await?;
        let mut workers = Workers {
            spec: WorkerSpec { database_url, ..spec },
            upstream,
            procs: Vec::new(),
            started: 0,
        };
        for _ in 0..count.max(1) {
            workers.spawn_one().await?;
        }
        Ok(workers)
    }

    /// Starts one more worker, behind a proxy of its own; its pid.
    pub async fn spawn_one(&mut self) -> Result<u32, ChaosError> {
        self.started += 1;
        let proxy = FreezableProxy::start(self.upstream)
            .await
            .map_err(|source| ChaosError::Process {
                what: "starting a worker's proxy to PostgreSQL".into(),
                source,
            })?;
        let database_url = proxy
            .url_for(&self.spec.database_url, self.upstream)
            .ok_or_else(|| {
                ChaosError::Settings("the database URL does not name its server's address".into())
            })?;
        let spec = &self.spec;
        let mut command = racklift(&spec.bin, &spec.logs.join(format!("worker-{}.log", self.started)))?;
        // Expired leases are looked for five times per TTL, so a dead worker's jobs move on soon after it.
        let rescue_ms = (spec.lease_ttl_ms / 5).max(200);
        command
            .args(["worker", "--batch", "20", "--poll-interval-ms", "500"])
            .arg("--sim-time-scale")
            .arg(spec.time_scale.to_string())
            .arg("--concurrency")
            .arg(spec.concurrency.to_string())
            .arg("--lease-ttl-ms")
            .arg(spec.lease_ttl_ms.to_string())
            .arg("--rescue-interval-ms")
            .arg(rescue_ms.to_string())
            .env("DATABASE_URL", &database_url)
            .env("RACKLIFT_PATHS__SECRETS_DIR", &spec.secrets)
            // Several workers on one host: each serves its metrics on a free port.
            .env("RACKLIFT_METRICS_LISTEN", "127.0.0.1:0");
        let (child, pid) = spawn(command, "racklift worker")?;
        tracing::info!(pid, number = self.started, proxy = %proxy.addr(), "worker started");
        self.procs.push(WorkerProc {
            child,
            pid,
            number: self.started,
            proxy,
        });
        Ok(pid)
    }

    /// Freezes (`true`) or thaws worker `pid`'s path to PostgreSQL; false when there is no such worker.
    pub fn set_partitioned(&self, pid: u32, partitioned: bool) -> bool {
        let Some(worker) = self.procs.iter().find(|w| w.pid == pid) else {
            return false;
        };
        if partitioned {
            worker.proxy.freeze();
        } else {
            worker.proxy.thaw();
        }
        true
    }

    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(|w| w.pid).collect()
    }

    /// `kill -9` of worker `pid`, waiting until it is gone.
    pub async fn kill(&mut self, pid: u32) {
        if let Some(at) = self.procs.iter().position(|w| w.pid == pid) {
            let mut worker = self.procs.remove(at);
            let _ = worker.child.kill().await;
        }
    }

    /// The workers that ended on their own since the last call, removed from the set: (number, pid, status).
    pub fn exited(&mut self) -> Vec<(usize, u32, ExitStatus)> {
        let mut gone = Vec::new();
        self.procs.retain_mut(|w| match w.child.try_wait() {
            Ok(Some(status)) => {
                gone.push((w.number, w.pid, status));
                false
            }
            _ => true,
        });
        gone
    }

    /// Continues any stopped worker, lets any cut-off one through again, and kills them all.
    pub async fn shutdown(mut self) {
        for mut worker in self.procs.drain(..) {
            let _ = signal(worker.pid, "CONT");
            worker.proxy.thaw();
            let _ = worker.child.kill().await;
        }
    }
}

/// The socket address `url` names (`postgres://user:password@host:port/db`), resolved (IPv4 first), and `url`
/// naming it by that address: a worker's proxy forwards there, and `FreezableProxy::url_for` finds it in the URL by
/// that address.
async fn upstream_of(url: &str) -> Result<(SocketAddr, String), ChaosError> {
    let bad = |why: &str| ChaosError::Settings(format!("the database URL {why}"));
    let mut parsed = reqwest::Url::parse(url).map_err(|_| bad("does not parse"))?;
    let host = parsed.host_str().ok_or_else(|| bad("names no host"))?.to_owned();
    let port = parsed.port().unwrap_or(5432);
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|source| ChaosError::Process {
            what: "resolving the database's host".into(),
            source,
        })?
        .collect();
    let addr = found
        .iter()
        .find(|a| a.is_ipv4())
        .or(found.first())
        .copied()
        .ok_or_else(|| bad("names a host that resolves to no address"))?;
    if host.parse::<std::net::IpAddr>().is_ok() && parsed.port().is_some() {
        return Ok((addr, url.to_owned()));
    }
    parsed
        .set_ip_host(addr.ip())
        .and_then(|()| parsed.set_port(Some(port)))
        .map_err(|()| bad("cannot name its server's address"))?;
    Ok((addr, parsed.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_database_url_is_made_to_name_its_server_by_address() {
        let (addr, url) = upstream_of("postgres://u:p@localhost:6543/db?sslmode=disable")
            .await
            .unwrap();
        assert_eq!(addr.port(), 6543);
        assert!(addr.ip().is_loopback(), "{addr}");
        assert_eq!(
            url,
            format!("postgres://u:p@{}:6543/db?sslmode=disable", addr.ip())
        );
        let direct = "postgres://u:p@127.0.0.1:5432/db";
        assert_eq!(
            upstream_of(direct).await.unwrap(),
            ("127.0.0.1:5432".parse().unwrap(), direct.to_owned())
        );
        assert!(upstream_of("not a url").await.is_err());
    }
}

//! HAProxy as the TCP proxy in front of PostgreSQL that clients reach the database through, so a failover
//! changes the server behind one address instead of the address clients were given.
//!
//! The proxy has the primary as its server and the standby as a `backup`, both with a TCP connect check every
//! 200 ms: traffic goes to the primary while it answers, and to the standby once the primary has failed two
//! checks. That follows the primary only because the old primary stays down after a failover (a crashed host);
//! HAProxy's `pgsql-check` cannot tell a standby from a primary either, so a production setup asks the failover
//! manager instead (Patroni's `GET /primary`, see the runbook). Connections to a server marked down are cut, as a
//! dead host's would be.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A PostgreSQL server behind the proxy.
#[derive(Debug, Clone, Copy)]
pub struct Upstream<'a> {
    /// The server's name in HAProxy's configuration and its stats.
    pub name: &'a str,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Used only while every server that is not a backup is down.
    pub backup: bool,
}

/// Why the proxy could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("preparing the proxy's directory {dir}")]
    Setup {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("running haproxy (on Debian: apt-get install haproxy)")]
    Spawn(#[source] std::io::Error),
    #[error("haproxy exited ({status}): {log}")]
    Exited {
        status: std::process::ExitStatus,
        log: String,
    },
    #[error("haproxy does not listen on {port} after 20 s: {log}")]
    NotListening { port: u16, log: String },
    #[error("{url} is not on port {port}")]
    NotOnPort { url: String, port: u16 },
}

/// A running `haproxy -db` child process, killed (and its directory removed) when dropped.
pub struct HaProxy {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl HaProxy {
    /// Writes the configuration for `upstreams` and starts HAProxy on a free loopback port, returning once it
    /// accepts connections.
    pub fn start(upstreams: &[Upstream<'_>]) -> Result<HaProxy, ProxyError> {
        let dir = std::env::temp_dir().join(format!("racklift-haproxy-{}", crate::generate_password()));
        let setup = |source| ProxyError::Setup {
            dir: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(setup)?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(setup)?
            .port();
        let config = dir.join("haproxy.cfg");
        std::fs::write(&config, config_text(port, &dir.join("admin.sock"), upstreams)).map_err(setup)?;
        let log = std::fs::File::create(dir.join("haproxy.log")).map_err(setup)?;
        let err_log = log.try_clone().map_err(setup)?;
        let child = Command::new(haproxy_bin())
            .arg("-f")
            .arg(&config)
            .arg("-db")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(ProxyError::Spawn)?;
        let mut proxy = HaProxy { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = proxy.child.try_wait() {
                return Err(ProxyError::Exited {
                    status,
                    log: proxy.log(),
                });
            }
            if Instant::now() >= deadline {
                return Err(ProxyError::NotListening {
                    port,
                    log: proxy.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(proxy)
    }

    /// The port the proxy listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `url` (a PostgreSQL URL on 127.0.0.1:`upstream_port`) through the proxy instead.
    pub fn url_for(&self, url: &str, upstream_port: u16) -> Result<String, ProxyError> {
        let direct = format!("@127.0.0.1:{upstream_port}/");
        if !url.contains(&direct) {
            return Err(ProxyError::NotOnPort {
                url: url.to_owned(),
                port: upstream_port,
            });
        }
        Ok(url.replacen(&direct, &format!("@127.0.0.1:{}/", self.port), 1))
    }

    /// Each server's status as the proxy's health checks see it (`UP`, `DOWN`, `UP 1/2` while changing), from
    /// its stats socket.
    pub fn server_status(&self) -> Vec<(String, String)> {
        let Ok(mut socket) = UnixStream::connect(self.dir.join("admin.sock")) else {
            return Vec::new();
        };
        let _ = socket.set_read_timeout(Some(Duration::from_secs(2)));
        if socket.write_all(b"show stat\n").is_err() {
            return Vec::new();
        }
        let mut csv = String::new();
        let _ = socket.read_to_string(&mut csv);
        let mut lines = csv.lines();
        let Some(header) = lines.next() else {
            return Vec::new();
        };
        let columns: Vec<&str> = header.trim_start_matches("# ").split(',').collect();
        let at = |name: &str| columns.iter().position(|c| *c == name);
        let (Some(sv), Some(st)) = (at("svname"), at("status")) else {
            return Vec::new();
        };
        lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| f.len() > sv.max(st) && f[sv] != "FRONTEND" && f[sv] != "BACKEND")
            .map(|f| (f[sv].to_owned(), f[st].to_owned()))
            .collect()
    }

    /// The status of server `name` (see [`HaProxy::server_status`]); empty when the proxy does not answer.
    pub fn status_of(&self, name: &str) -> String {
        self.server_status()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s)
            .unwrap_or_default()
    }

    /// What HAProxy printed (warnings, a configuration error).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("haproxy.log")).unwrap_or_default()
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `haproxy` on PATH, or where Debian puts it (`/usr/sbin`, not on every user's PATH).
fn haproxy_bin() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|dir| dir.join("haproxy"))
        .find(|bin| bin.is_file())
        .unwrap_or_else(|| "haproxy".into())
}

/// `mode tcp` on 127.0.0.1:`port`, in the shape of Patroni's HAProxy template with shorter timings: a dead server
/// is marked down after two failed checks 200 ms apart and its connections are cut; a connection refused by it is
/// retried twice, half a second apart (HAProxy waits `timeout connect`, at most a second, between retries), the
/// last time on another server; client and server timeouts long enough for a pool's idle connections.
fn config_text(port: u16, admin: &Path, upstreams: &[Upstream<'_>]) -> String {
    let mut text = format!(
        "global
    maxconn 1000
    stats socket {admin} mode 600 level admin

defaults
    mode tcp
    timeout connect 500ms
    timeout client 1h
    timeout server 1h
    timeout check 500ms
    retries 2
    option redispatch

listen postgres
    bind 127.0.0.1:{port}
    default-server inter 200ms fall 2 rise 2 on-marked-down shutdown-sessions
",
        admin = admin.display()
    );
    for u in upstreams {
        text.push_str(&format!(
            "    server {} 127.0.0.1:{} check{}\n",
            u.name,
            u.port,
            if u.backup { " backup" } else { "" }
        ));
    }
    text
}

//! A primary with a synchronous streaming standby, and the failover between them.
//!
//! [`ReplicatedPostgres::start`] starts two embedded servers in a temporary directory: a primary configured for
//! physical replication (`wal_level = replica`, WAL senders, a replication role that may connect from
//! 127.0.0.1 only, with a password), and a standby made from it with `pg_basebackup -R` on a port of its own,
//! streaming from a replication slot. The primary then names the standby in `synchronous_standby_names`, so
//! a commit is acknowledged only once the standby has flushed its WAL: promoting the standby after the primary
//! dies loses no transaction a client saw committed. With asynchronous replication (the default when
//! `synchronous_standby_names` is empty) the primary acknowledges a commit before the standby has it, and a
//! failover can lose the last commits before the crash: rows a client was told were written, or a lease and
//! fencing token a worker already acted on, would not exist on the new primary.
//!
//! [`ReplicatedPostgres::kill_primary`] is a host crash (`SIGKILL` of every process of the primary at once) and
//! [`ReplicatedPostgres::promote`] what a failover manager does next. The promoted server runs alone: it has no
//! standby, so it does not wait for one (its configuration came from the base backup, taken before the primary
//! was made synchronous). Both servers are stopped and the directory removed when the value is dropped.

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{
    EmbeddedPostgres, PgEmbedError, SUPERUSER, find_binaries, generate_password, log_tail, mkdir,
    resolve_root, run, unprivileged_user,
};

/// The role the standby streams as: `REPLICATION` and `LOGIN`, nothing else.
pub const REPLICATION_ROLE: &str = "racklift_replication";
/// The standby's `application_name` (its `cluster_name`), as `synchronous_standby_names` names it.
pub const STANDBY_NAME: &str = "racklift_standby";
/// The physical replication slot the standby streams from, so the primary keeps the WAL it has not received.
const SLOT: &str = "racklift_standby";
/// The client programs used beside the server programs; they must be of the server's version.
const CLIENT_PROGRAMS: [&str; 2] = ["pg_basebackup", "psql"];
/// How long starting, streaming, promoting and a killed server's exit may take.
const PATIENCE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicationError {
    #[error(transparent)]
    Server(#[from] PgEmbedError),
    #[error(
        "PostgreSQL's {missing} is not beside its server programs ({dir}) nor on PATH: install the PostgreSQL \
         client programs of the same version (on Debian: apt-get install postgresql)"
    )]
    MissingClientPrograms { missing: String, dir: PathBuf },
    #[error(
        "the standby is not streaming synchronously from the primary after {waited:?} (last seen: {seen})"
    )]
    NotStreaming { waited: Duration, seen: String },
    #[error("the promoted standby is still in recovery after {waited:?}")]
    StillInRecovery { waited: Duration },
    #[error("the primary has no running postmaster to kill ({path}: {reason})")]
    NoPostmaster { path: PathBuf, reason: String },
    #[error("the killed primary still accepts connections on port {port} after {waited:?}")]
    StillRunning { port: u16, waited: Duration },
    #[error("`{command}` failed: {stderr}")]
    Query { command: String, stderr: String },
}

/// Which of the two servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Primary,
    Standby,
}

/// A primary and its synchronous streaming standby, in a temporary directory of their own. Dropping it stops
/// both servers (immediate shutdown) and removes the directory.
#[derive(Debug)]
pub struct ReplicatedPostgres {
    base: PathBuf,
    primary: EmbeddedPostgres,
    standby: EmbeddedPostgres,
    /// Where `pg_basebackup` and `psql` are.
    clients: PathBuf,
    primary_killed: bool,
}

impl ReplicatedPostgres {
    /// Starts the primary, makes the standby from it, starts that and waits until the primary reports it
    /// `streaming` with `sync_state = 'sync'`.
    pub fn start() -> Result<ReplicatedPostgres, ReplicationError> {
        let bin_dir = find_binaries()?;
        let clients = find_client_programs(&bin_dir)?;
        let run_as = unprivileged_user()?;
        let name = format!(
            "racklift-pg-replicated-{}-{}",
            std::process::id(),
            super::generate_password().get(..8).unwrap_or("x")
        );
        let base = resolve_root(&std::env::temp_dir().join(name), run_as)?;
        mkdir(&base, 0o755)?;
        // From here on the directory is removed (and servers stopped) by Drop, whatever fails.
        let primary = EmbeddedPostgres::start_with(
            &base.join("primary"),
            &[
                ("wal_level", "replica".into()),
                ("max_wal_senders", "4".into()),
                ("max_replication_slots", "4".into()),
                // A dead standby connection is noticed within seconds, not the default minute.
                ("wal_sender_timeout", "5s".into()),
            ],
        );
        let primary = match primary {
            Ok(pg) => pg,
            Err(e) => {
                let _ = fs::remove_dir_all(&base);
                return Err(e.into());
            }
        };
        let standby = EmbeddedPostgres {
            root: base.join("standby"),
            port: 0,
            password: primary.password.clone(),
            run_as,
            bin_dir,
            requested: None,
        };
        let mut pair = ReplicatedPostgres {
            base,
            primary,
            standby,
            clients,
            primary_killed: false,
        };
        pair.make_standby()?;
        pair.wait_streaming(PATIENCE)?;
        tracing::info!(
            primary = pair.primary.port,
            standby = pair.standby.port,
            "PostgreSQL primary with a synchronous standby started"
        );
        Ok(pair)
    }

    /// The primary (the server the standby streams from, until it is killed).
    pub fn primary(&self) -> &EmbeddedPostgres {
        &self.primary
    }

    /// The standby (the primary, once promoted).
    pub fn standby(&self) -> &EmbeddedPostgres {
        &self.standby
    }

    fn node(&self, node: Node) -> &EmbeddedPostgres {
        match node {
            Node::Primary => &self.primary,
            Node::Standby => &self.standby,
        }
    }

    /// Creates the replication role, takes the base backup, starts the standby on a free port and makes the
    /// primary wait for it at every commit.
    fn make_standby(&mut self) -> Result<(), ReplicationError> {
        let replication_password = generate_password();
        self.allow_replication_from_loopback()?;
        self.query(
            Node::Primary,
            &[&format!(
                "CREATE ROLE {REPLICATION_ROLE} WITH REPLICATION LOGIN PASSWORD '{replication_password}'"
            )],
        )?;
        let root = self.standby.root.clone();
        mkdir(&root, 0o755)?;
        self.standby.hand_over(&root)?;
        let run_dir = root.join("run");
        mkdir(&run_dir, 0o700)?;
        self.standby.hand_over(&run_dir)?;
        self.standby.port = super::free_port(&root)?;
        // -R writes primary_conninfo (with the application name synchronous_standby_names matches) and
        // standby.signal; -C -S creates the slot it streams from; a fast checkpoint starts the copy at once.
        let conninfo = format!(
            "host=127.0.0.1 port={} user={REPLICATION_ROLE} application_name={STANDBY_NAME}",
            self.primary.port
        );
        let data = root.join("pgdata");
        let mut backup = self.standby.as_server_user(self.clients.join("pg_basebackup"));
        backup
            .arg("-d")
            .arg(&conninfo)
            .arg("-D")
            .arg(&data)
            .args([
                "-R",
                "-X",
                "stream",
                "-C",
                "-S",
                SLOT,
                "--checkpoint=fast",
                "--no-password",
            ])
            .env("PGPASSWORD", &replication_password)
            .env("PGCONNECT_TIMEOUT", "10");
        let out = run(&mut backup, "pg_basebackup")?;
        if !out.status.success() {
            return Err(PgEmbedError::Command {
                command: "pg_basebackup".into(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
            .into());
        }
        self.standby.launch(&[
            ("cluster_name", STANDBY_NAME.into()),
            ("hot_standby", "on".into()),
            // Reconnect quickly to a primary that went away and came back.
            ("wal_retrieve_retry_interval", "500ms".into()),
        ])?;
        // Only now, in the primary's own postgresql.auto.conf (the standby's copy predates it): the promoted
        // standby must not wait for a standby of its own that does not exist.
        self.query(
            Node::Primary,
            &[
                &format!("ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 ({STANDBY_NAME})'"),
                "ALTER SYSTEM SET synchronous_commit = 'on'",
                "SELECT pg_reload_conf()",
            ],
        )?;
        Ok(())
    }

    /// Puts a `host replication` line for the replication role from 127.0.0.1 (password required) first in
    /// the primary's pg_hba.conf and reloads it, whatever initdb's own file allows.
    fn allow_replication_from_loopback(&self) -> Result<(), ReplicationError> {
        let hba = self.primary.root.join("pgdata").join("pg_hba.conf");
        let old = fs::read_to_string(&hba).map_err(|source| PgEmbedError::Io {
            what: "read",
            path: hba.clone(),
            source,
        })?;
        let line = format!("host replication {REPLICATION_ROLE} 127.0.0.1/32 scram-sha-256\n");
        fs::write(&hba, format!("{line}{old}")).map_err(|source| PgEmbedError::Io {
            what: "write",
            path: hba.clone(),
            source,
        })?;
        self.query(Node::Primary, &["SELECT pg_reload_conf()"])?;
        Ok(())
    }

    /// Waits until the primary's `pg_stat_replication` shows the standby `streaming` and `sync`.
    pub fn wait_streaming(&self, limit: Duration) -> Result<(), ReplicationError> {
        let deadline = Instant::now() + limit;
        let sql = format!(
            "SELECT state || ' ' || sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'"
        );
        loop {
            let seen = self.query(Node::Primary, &[&sql])?;
            if seen == "streaming sync" {
                return Ok(());
            }
            if Instant::now() > deadline {
                let seen = if seen.is_empty() {
                    format!(
                        "no standby connected; standby log: {}",
                        log_tail(&self.standby.root.join("run").join("postgres.log"), 5)
                    )
                } else {
                    seen
                };
                return Err(ReplicationError::NotStreaming { waited: limit, seen });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether `node` is in recovery (a standby), asked over its own port.
    pub fn in_recovery(&self, node: Node) -> Result<bool, ReplicationError> {
        Ok(self.query(node, &["SELECT pg_is_in_recovery()"])? == "t")
    }

    /// `kill -9` of the primary's postmaster and every process of it at once (backends, WAL sender, background
    /// processes: each is its own process group, so they are found by their working directory, the data
    /// directory): what a host crash looks like to its clients and to the standby. Returns once none is left
    /// and the port refuses connections.
    pub fn kill_primary(&mut self) -> Result<(), ReplicationError> {
        let data = self.primary.root.join("pgdata");
        let data = fs::canonicalize(&data).unwrap_or(data);
        // The postmaster's System V segment outlives a killed server (a new one would remove it at start, but the
        // directory goes away): its id is on the seventh line of postmaster.pid, read before the kill.
        let shmid = fs::read_to_string(data.join("postmaster.pid"))
            .ok()
            .and_then(|pid| pid.lines().nth(6)?.split_whitespace().nth(1)?.parse::<u64>().ok());
        let first = server_processes(&data);
        if first.is_empty() {
            return Err(ReplicationError::NoPostmaster {
                path: data,
                reason: "no process runs in it".into(),
            });
        }
        self.primary_killed = true;
        let deadline = Instant::now() + PATIENCE;
        let mut left = first.clone();
        while !left.is_empty() {
            let _ = Command::new("kill")
                .arg("-KILL")
                .args(left.iter().map(u32::to_string))
                .status();
            if Instant::now() > deadline {
                return Err(ReplicationError::StillRunning {
                    port: self.primary.port,
                    waited: PATIENCE,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
            left = server_processes(&data);
        }
        while TcpStream::connect_timeout(
            &([127, 0, 0, 1], self.primary.port).into(),
            Duration::from_millis(200),
        )
        .is_ok()
        {
            if Instant::now() > deadline {
                return Err(ReplicationError::StillRunning {
                    port: self.primary.port,
                    waited: PATIENCE,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(shmid) = shmid {
            let _ = Command::new("ipcrm")
                .args(["-m", &shmid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
        tracing::info!(
            processes = first.len(),
            port = self.primary.port,
            "PostgreSQL primary killed"
        );
        Ok(())
    }

    /// Stops the primary cleanly (fast shutdown), for a planned switchover rather than a crash.
    pub fn stop_primary(&mut self) -> Result<(), ReplicationError> {
        self.primary.stop()?;
        self.primary_killed = true;
        Ok(())
    }

    /// Promotes the standby (`pg_ctl promote`, waiting for it) and checks it now accepts writes.
    pub fn promote(&self) -> Result<(), ReplicationError> {
        let data = self.standby.root.join("pgdata");
        let out = self.standby.pg_ctl(&["promote", "-w", "-t", "60", "-D"], &data)?;
        if !out.status.success() {
            return Err(PgEmbedError::Command {
                command: "pg_ctl promote".into(),
                stderr: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stderr),
                    log_tail(&self.standby.root.join("run").join("postgres.log"), 5)
                ),
            }
            .into());
        }
        let deadline = Instant::now() + PATIENCE;
        while self.in_recovery(Node::Standby)? {
            if Instant::now() > deadline {
                return Err(ReplicationError::StillInRecovery { waited: PATIENCE });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::info!(port = self.standby.port, "PostgreSQL standby promoted");
        Ok(())
    }

    /// What `node` has written to its log so far (refused statements are logged with their error).
    pub fn log(&self, node: Node) -> String {
        fs::read_to_string(self.node(node).root.join("run").join("postgres.log")).unwrap_or_default()
    }

    /// Runs `statements` one by one on `node`'s `postgres` database as the superuser; the last one's output,
    /// unaligned and without headers.
    pub fn query(&self, node: Node, statements: &[&str]) -> Result<String, ReplicationError> {
        let pg = self.node(node);
        let mut cmd = Command::new(self.clients.join("psql"));
        cmd.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .arg("-p")
            .arg(pg.port.to_string())
            .args(["-U", SUPERUSER, "-d", "postgres"])
            .env("PGPASSWORD", &pg.password)
            .env("PGCONNECT_TIMEOUT", "5");
        for sql in statements {
            cmd.arg("-c").arg(sql);
        }
        let out = run(&mut cmd, "psql")?;
        if !out.status.success() {
            return Err(ReplicationError::Query {
                command: format!("psql -c {statements:?} on port {}", pg.port),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}

impl Drop for ReplicatedPostgres {
    fn drop(&mut self) {
        for (pg, dead) in [(&self.standby, false), (&self.primary, self.primary_killed)] {
            let data = pg.root.join("pgdata");
            if !dead && data.join("postmaster.pid").exists() {
                let _ = pg.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "30", "-D"], &data);
            }
        }
        let _ = fs::remove_dir_all(&self.base);
    }
}

/// The live processes whose working directory is `data`: a server's postmaster and all its children (a zombie
/// has no working directory and is not counted).
fn server_processes(data: &Path) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == data))
        .collect()
}

/// The directory holding `pg_basebackup` and `psql` of the server's version: beside the `postgres` program
/// (following a link to where the package put it), then on PATH.
fn find_client_programs(bin_dir: &Path) -> Result<PathBuf, ReplicationError> {
    let mut dirs = Vec::new();
    if let Some(real) = fs::canonicalize(bin_dir.join("postgres"))
        .ok()
        .and_then(|p| p.parent().map(Path::to_owned))
    {
        dirs.push(real);
    }
    dirs.push(bin_dir.to_owned());
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter()
        .find(|d| CLIENT_PROGRAMS.iter().all(|t| d.join(t).is_file()))
        .ok_or_else(|| ReplicationError::MissingClientPrograms {
            missing: CLIENT_PROGRAMS.join(", "),
            dir: bin_dir.to_owned(),
        })
}

//! The embedded default database.
//!
//! Without `DATABASE_URL`, `racklift up` runs its own PostgreSQL from the machine's binaries (`initdb`, `pg_ctl`,
//! `postgres` on PATH) in a data directory it keeps across restarts, listening on loopback only, on a free port,
//! with a generated password (never `trust`). PostgreSQL refuses to run as root, so when racklift runs as root
//! the server runs as the unprivileged `postgres` user and the directories it writes are handed to that user. A
//! data directory that user cannot reach (a checkout under `/root`, mode 0700) is moved under
//! [`RELOCATED_BASE`], named after the requested directory so every start from the same place finds the same
//! database.
//!
//! [`ReplicatedPostgres`] runs a primary with a synchronous streaming standby from the same binaries, and fails
//! over between them (the primary killed, the standby promoted): what the failover tests run racklift against.

use std::fs;
use std::io;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod haproxy;
mod replication;

pub use replication::{Node, REPLICATION_ROLE, ReplicatedPostgres, ReplicationError, STANDBY_NAME};

/// The database racklift creates inside the embedded server.
pub const DATABASE: &str = "racklift";
const SUPERUSER: &str = "racklift";
const BINARIES: [&str; 3] = ["initdb", "pg_ctl", "postgres"];
/// Where a data directory closed to the `postgres` user is kept instead: world-traversable on every Linux.
pub const RELOCATED_BASE: &str = "/var/lib/racklift";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgEmbedError {
    #[error(
        "PostgreSQL's server programs ({missing}) are not on PATH: install PostgreSQL 15 or newer \
         (on Debian: apt-get install postgresql) or set DATABASE_URL to an existing server"
    )]
    MissingBinaries { missing: String },
    #[error("running as root, and there is no unprivileged `postgres` user to run the server as")]
    NoUnprivilegedUser,
    #[error(
        "the `postgres` user cannot write to {path} (a parent directory is closed to it): choose a data \
         directory it can reach, e.g. --data-dir /var/tmp/racklift"
    )]
    Unreachable { path: PathBuf },
    #[error("{what} at {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
}

/// A running embedded server. Dropping it does not stop the server; call [`EmbeddedPostgres::stop`].
#[derive(Debug)]
pub struct EmbeddedPostgres {
    root: PathBuf,
    port: u16,
    password: String,
    run_as: Option<(u32, u32)>,
    bin_dir: PathBuf,
    /// The directory asked for, when the server's files live elsewhere because it was closed to the server's
    /// user.
    requested: Option<PathBuf>,
}

impl EmbeddedPostgres {
    /// Starts (initialising on first use) the server whose files live under `root`, or under a relocated
    /// directory when `root` is closed to the server's user (see [`EmbeddedPostgres::relocated_from`]).
    pub fn start(root: &Path) -> Result<EmbeddedPostgres, PgEmbedError> {
        EmbeddedPostgres::start_with(root, &[])
    }

    /// As [`EmbeddedPostgres::start`], with `settings` given to the server on its command line (`-c name=value`)
    /// on top of the listen address, socket directory and connection limit every embedded server has.
    pub(crate) fn start_with(
        root: &Path,
        settings: &[(&str, String)],
    ) -> Result<EmbeddedPostgres, PgEmbedError> {
        let bin_dir = find_binaries()?;
        let run_as = unprivileged_user()?;
        let requested = absolute(root)?;
        let root = resolve_root(&requested, run_as)?;
        let requested = (root != requested).then_some(requested);
        if let Some(from) = &requested {
            tracing::info!(
                requested = %from.display(),
                dir = %root.display(),
                "the postgres user cannot reach the data directory; keeping the embedded PostgreSQL in a directory of its own"
            );
        }
        mkdir(&root, 0o755)?;
        let data = root.join("pgdata");
        let run = root.join("run");
        mkdir(&run, 0o700)?;
        let password = read_or_create_password(&root.join("password"))?;
        let mut pg = EmbeddedPostgres {
            root,
            port: 0,
            password,
            run_as,
            bin_dir,
            requested,
        };
        pg.hand_over(&run)?;
        pg.check_reachable(&run)?;
        if !data.join("PG_VERSION").exists() {
            pg.initdb(&data)?;
        }
        // A server left running by a process that died is stopped first, so it restarts on a port we know.
        if pg
            .pg_ctl(&["status", "-D"], &data)
            .map(|o| o.status.success())
            .unwrap_or(false)
        {
            tracing::info!("stopping an embedded PostgreSQL left running by an earlier process");
            pg.pg_ctl(&["stop", "-m", "fast", "-w", "-D"], &data)?;
        }
        pg.port = free_port(&pg.root)?;
        pg.launch(settings)?;
        tracing::info!(port = pg.port, dir = %pg.root.display(), "embedded PostgreSQL started");
        Ok(pg)
    }

    /// `pg_ctl start` of the data directory under the root, on the server's port, waiting until it accepts
    /// connections; a failure carries the end of the server's log.
    pub(crate) fn launch(&self, settings: &[(&str, String)]) -> Result<(), PgEmbedError> {
        let data = self.root.join("pgdata");
        let run = self.root.join("run");
        let mut options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c max_connections=200",
            self.port,
            run.display()
        );
        for (name, value) in settings {
            options.push_str(&format!(" -c {name}={value}"));
        }
        let log = run.join("postgres.log");
        let out = self.pg_ctl_args(&[
            "start".as_ref(),
            "-w".as_ref(),
            "-t".as_ref(),
            "60".as_ref(),
            "-D".as_ref(),
            data.as_os_str(),
            "-l".as_ref(),
            log.as_os_str(),
            "-o".as_ref(),
            options.as_ref(),
        ])?;
        if !out.status.success() {
            return Err(PgEmbedError::Command {
                command: "pg_ctl start".into(),
                stderr: format!("{}{}", String::from_utf8_lossy(&out.stderr), log_tail(&log, 5)),
            });
        }
        Ok(())
    }

    /// The connection URL of the `racklift` database (created by the caller on the admin URL if missing).
    pub fn url(&self) -> String {
        self.url_for(DATABASE)
    }

    /// The connection URL of the maintenance database, for creating others.
    pub fn admin_url(&self) -> String {
        self.url_for("postgres")
    }

    fn url_for(&self, db: &str) -> String {
        format!(
            "postgres://{SUPERUSER}:{}@127.0.0.1:{}/{db}",
            self.password, self.port
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where the server's files are.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory that was asked for, when the server's files were kept elsewhere because the server's user
    /// cannot reach it.
    pub fn relocated_from(&self) -> Option<&Path> {
        self.requested.as_deref()
    }

    /// Stops the server (fast shutdown: open sessions are ended, committed data is kept).
    pub fn stop(&self) -> Result<(), PgEmbedError> {
        let data = self.root.join("pgdata");
        let out = self.pg_ctl(&["stop", "-m", "fast", "-w", "-D"], &data)?;
        if !out.status.success() {
            return Err(PgEmbedError::Command {
                command: "pg_ctl stop".into(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        tracing::info!(dir = %self.root.display(), "embedded PostgreSQL stopped");
        Ok(())
    }

    /// Starts the server again after [`EmbeddedPostgres::stop`], on the same port: with [`EmbeddedPostgres::restart`]
    /// a client sees a restart, with `stop` then this an outage as long as the caller waits between the two.
    pub fn start_again(&self) -> Result<(), PgEmbedError> {
        self.launch(&[])?;
        tracing::info!(port = self.port, "embedded PostgreSQL started again");
        Ok(())
    }

    /// Restarts the server on the same port (fast shutdown, then start with the options it was started with):
    /// every session is ended, as when a database host restarts under its clients.
    pub fn restart(&self) -> Result<(), PgEmbedError> {
        let data = self.root.join("pgdata");
        let log = self.root.join("run").join("postgres.log");
        let out = self.pg_ctl_args(&[
            "restart".as_ref(),
            "-m".as_ref(),
            "fast".as_ref(),
            "-w".as_ref(),
            "-t".as_ref(),
            "60".as_ref(),
            "-D".as_ref(),
            data.as_os_str(),
            "-l".as_ref(),
            log.as_os_str(),
        ])?;
        if !out.status.success() {
            return Err(PgEmbedError::Command {
                command: "pg_ctl restart".into(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        tracing::info!(port = self.port, "embedded PostgreSQL restarted");
        Ok(())
    }

    /// Stops a server started earlier under `root` by another process, if one is running.
    pub fn stop_dir(root: &Path) -> Result<bool, PgEmbedError> {
        let bin_dir = find_binaries()?;
        let run_as = unprivileged_user()?;
        let pg = EmbeddedPostgres {
            root: resolve_root(&absolute(root)?, run_as)?,
            port: 0,
            password: String::new(),
            run_as,
            bin_dir,
            requested: None,
        };
        let data = pg.root.join("pgdata");
        if !data.join("postmaster.pid").exists() {
            return Ok(false);
        }
        pg.pg_ctl(&["stop", "-m", "fast", "-w", "-D"], &data)?;
        Ok(true)
    }

    fn initdb(&self, data: &Path) -> Result<(), PgEmbedError> {
        self.hand_over(&self.root)?;
        let pwfile = self.root.join("run").join("initdb-password");
        write_private(&pwfile, &self.password)?;
        self.hand_over(&pwfile)?;
        let mut cmd = self.command("initdb");
        cmd.arg("-D")
            .arg(data)
            .args([
                "-U",
                SUPERUSER,
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .arg(format!("--pwfile={}", pwfile.display()));
        let out = run(&mut cmd, "initdb");
        let _ = fs::remove_file(&pwfile);
        let out = out?;
        if !out.status.success() {
            return Err(PgEmbedError::Command {
                command: "initdb".into(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(())
    }

    fn pg_ctl(&self, args: &[&str], data: &Path) -> Result<Output, PgEmbedError> {
        let mut all: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        all.push(data.as_os_str());
        self.pg_ctl_args(&all)
    }

    fn pg_ctl_args(&self, args: &[&std::ffi::OsStr]) -> Result<Output, PgEmbedError> {
        run(self.command("pg_ctl").args(args), "pg_ctl")
    }

    fn command(&self, program: &str) -> Command {
        self.as_server_user(self.bin_dir.join(program))
    }

    fn as_server_user(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.root);
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    /// Fails with a clear sentence when the server's user cannot reach its own directory (a checkout under a
    /// home directory that is closed to other users), instead of letting initdb fail obscurely.
    fn check_reachable(&self, dir: &Path) -> Result<(), PgEmbedError> {
        if self.run_as.is_none() {
            return Ok(());
        }
        let ok = self
            .as_server_user("test")
            .args(["-w".as_ref(), dir.as_os_str()])
            .status()
            .map(|s| s.success());
        match ok {
            Ok(true) => Ok(()),
            _ => Err(PgEmbedError::Unreachable { path: dir.into() }),
        }
    }

    /// Gives a path to the user the server runs as (only when running as root).
    fn hand_over(&self, path: &Path) -> Result<(), PgEmbedError> {
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(|source| PgEmbedError::Io {
                what: "chown",
                path: path.into(),
                source,
            })?;
        }
        Ok(())
    }
}

/// `root` when the server's user can reach it (or no other user is involved), else its relocated directory.
fn resolve_root(root: &Path, run_as: Option<(u32, u32)>) -> Result<PathBuf, PgEmbedError> {
    match run_as {
        Some((uid, gid)) if !reachable(root, uid, gid) => {
            let base = Path::new(RELOCATED_BASE);
            mkdir(base, 0o755)?;
            Ok(relocated(base, root))
        }
        _ => Ok(root.to_owned()),
    }
}

/// The relocated directory for `root`: its last components for a person to recognise, and a digest of the
/// whole path so two checkouts never share a database.
fn relocated(base: &Path, root: &Path) -> PathBuf {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(root.as_os_str().as_encoded_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    let hint: Vec<String> = root
        .components()
        .rev()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => Some(
                n.to_string_lossy()
                    .replace(|c: char| !c.is_ascii_alphanumeric(), ""),
            ),
            _ => None,
        })
        .filter(|n| !n.is_empty())
        .take(2)
        .collect();
    let hint: Vec<&str> = hint.iter().rev().map(String::as_str).collect();
    base.join(format!("{}-{hex}", hint.join("-")))
}

/// Whether a process of `uid`/`gid` can reach `root`: every existing ancestor searchable by it (racklift, as
/// root, creates the rest and hands `root` over). Mode bits only: this decides where to put the files, and
/// the server's own start still reports anything the bits do not show.
fn reachable(root: &Path, uid: u32, gid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    root.ancestors()
        .filter_map(|dir| fs::metadata(dir).ok())
        .all(|meta| {
            let mode = meta.mode();
            let search = if meta.uid() == uid {
                mode & 0o100
            } else if meta.gid() == gid {
                mode & 0o010
            } else {
                mode & 0o001
            };
            meta.is_dir() && search != 0
        })
}

fn run(cmd: &mut Command, name: &str) -> Result<Output, PgEmbedError> {
    cmd.output().map_err(|source| PgEmbedError::Io {
        what: "cannot run",
        path: name.into(),
        source,
    })
}

/// The directory holding all three server programs: PATH first, then Debian's versioned directories.
fn find_binaries() -> Result<PathBuf, PgEmbedError> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Ok(entries) = fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<PathBuf> = entries.flatten().map(|e| e.path().join("bin")).collect();
        versions.sort();
        dirs.extend(versions.into_iter().rev());
    }
    find_binaries_in(&dirs)
}

fn find_binaries_in(dirs: &[PathBuf]) -> Result<PathBuf, PgEmbedError> {
    if let Some(dir) = dirs.iter().find(|d| BINARIES.iter().all(|b| d.join(b).is_file())) {
        return Ok(dir.clone());
    }
    let missing: Vec<&str> = BINARIES
        .iter()
        .copied()
        .filter(|b| !dirs.iter().any(|d| d.join(b).is_file()))
        .collect();
    let missing = if missing.is_empty() {
        BINARIES.to_vec()
    } else {
        missing
    };
    Err(PgEmbedError::MissingBinaries {
        missing: missing.join(", "),
    })
}

/// `Some((uid, gid))` of the `postgres` user when running as root; `None` when already unprivileged.
fn unprivileged_user() -> Result<Option<(u32, u32)>, PgEmbedError> {
    let me = fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(1);
    if me != 0 {
        return Ok(None);
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[0] == "postgres")
        .and_then(|f| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
        .map(Some)
        .ok_or(PgEmbedError::NoUnprivilegedUser)
}

fn absolute(path: &Path) -> Result<PathBuf, PgEmbedError> {
    std::path::absolute(path).map_err(|source| PgEmbedError::Io {
        what: "resolve",
        path: path.into(),
        source,
    })
}

fn mkdir(path: &Path, mode: u32) -> Result<(), PgEmbedError> {
    fs::create_dir_all(path).map_err(|source| PgEmbedError::Io {
        what: "create directory",
        path: path.into(),
        source,
    })?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|source| PgEmbedError::Io {
        what: "chmod",
        path: path.into(),
        source,
    })
}

fn write_private(path: &Path, contents: &str) -> Result<(), PgEmbedError> {
    fs::write(path, contents).map_err(|source| PgEmbedError::Io {
        what: "write",
        path: path.into(),
        source,
    })?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(|source| PgEmbedError::Io {
        what: "chmod",
        path: path.into(),
        source,
    })
}

fn read_or_create_password(path: &Path) -> Result<String, PgEmbedError> {
    if let Ok(existing) = fs::read_to_string(path) {
        return Ok(existing.trim().to_string());
    }
    let password = generate_password();
    write_private(path, &password)?;
    Ok(password)
}

/// 32 random letters and digits (no look-alikes): safe inside a SQL string literal and a connection string.
fn generate_password() -> String {
    (0..32)
        .map(|_| char::from(b"abcdefghijkmnpqrstuvwxyz23456789"[rand::random_range(0..32)]))
        .collect()
}

/// The last `lines` lines of a server log, joined by ` | `, for an error message.
fn log_tail(log: &Path, lines: usize) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let mut tail: Vec<&str> = text.lines().rev().take(lines).collect();
    tail.reverse();
    tail.join(" | ")
}

/// A free loopback port. The port is remembered so a restarted server keeps its URL when it can.
fn free_port(root: &Path) -> Result<u16, PgEmbedError> {
    let remembered = root.join("port");
    if let Some(port) = fs::read_to_string(&remembered)
        .ok()
        .and_then(|p| p.trim().parse::<u16>().ok())
        && TcpListener::bind(("127.0.0.1", port)).is_ok()
    {
        return Ok(port);
    }
    let port = TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| PgEmbedError::Io {
            what: "find a free port",
            path: root.into(),
            source,
        })?;
    fs::write(&remembered, port.to_string()).map_err(|source| PgEmbedError::Io {
        what: "write",
        path: remembered.clone(),
        source,
    })?;
    Ok(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_behind_a_closed_parent_is_unreachable() {
        use std::os::unix::fs::MetadataExt;
        let base = std::env::temp_dir().join(format!("racklift-pgembed-{}", std::process::id()));
        let closed = base.join("home");
        fs::create_dir_all(closed.join("checkout")).unwrap();
        let me = fs::metadata(&base).unwrap();
        // Another user's view: neither the owner nor in the group.
        let (other_uid, other_gid) = (me.uid().wrapping_add(4242), me.gid().wrapping_add(4242));
        fs::set_permissions(&base, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&closed, fs::Permissions::from_mode(0o700)).unwrap();
        let data = closed.join("checkout/.racklift/postgres");
        assert!(!reachable(&data, other_uid, other_gid));
        assert!(reachable(&data, me.uid(), me.gid()), "the owner reaches it");
        fs::set_permissions(&closed, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(
            reachable(&data, other_uid, other_gid),
            "an open parent is reachable"
        );
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_relocated_directory_is_stable_and_distinct_per_path() {
        let base = Path::new(RELOCATED_BASE);
        let a = relocated(base, Path::new("/home/op/racklift/.racklift/postgres"));
        assert_eq!(
            a,
            relocated(base, Path::new("/home/op/racklift/.racklift/postgres"))
        );
        assert_ne!(a, relocated(base, Path::new("/home/op/other/.racklift/postgres")));
        let name = a.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("racklift-postgres-"), "{name}");
        assert_eq!(a.parent(), Some(base));
    }

    #[test]
    fn missing_binaries_are_named_in_one_sentence_saying_what_to_install() {
        let empty = std::env::temp_dir().join("racklift-no-postgres-here");
        let err = find_binaries_in(&[empty]).unwrap_err().to_string();
        assert!(err.contains("initdb, pg_ctl, postgres"), "{err}");
        assert!(err.contains("apt-get install postgresql"), "{err}");
        assert!(err.contains("DATABASE_URL"), "{err}");
        assert_eq!(err.matches(". ").count(), 0, "one sentence: {err}");
    }
}

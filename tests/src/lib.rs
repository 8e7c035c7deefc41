//! Shared helpers for end-to-end tests: the racklift binary as a child process, condition waits, and a whole rack
//! in one process ([`rack::Rack`]).

pub mod browser;
pub mod cli;
pub mod cluster;
pub mod rack;

use std::path::PathBuf;
use std::process::Stdio;

/// The `racklift` binary of this build (`ops/test` builds it before the tests run). `RACKLIFT_BIN` overrides.
pub fn racklift_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("RACKLIFT_BIN") {
        return bin.into();
    }
    // Test binaries live in target/<profile>/deps; the racklift binary one level up.
    let exe = std::env::current_exe().expect("test executable path");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join("racklift");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build -p racklift), as ops/test does",
        bin.display()
    );
    bin
}

/// A `racklift` child process that is killed when dropped.
pub struct Racklift {
    pub child: tokio::process::Child,
}

impl Racklift {
    /// Workers serve metrics on a free port unless `args` name one: tests run several at once, and the default
    /// port would let only the first start.
    pub fn spawn(args: &[&str], database_url: &str) -> Racklift {
        Racklift::spawn_with(args, database_url, &[])
    }

    /// As [`Racklift::spawn`], with `env` set as well (a configuration key's `RACKLIFT_<SECTION>__<KEY>`, say).
    pub fn spawn_with(args: &[&str], database_url: &str, env: &[(&str, &std::ffi::OsStr)]) -> Racklift {
        let child = tokio::process::Command::new(racklift_bin())
            .args(args)
            .envs(env.iter().copied())
            .env("DATABASE_URL", database_url)
            .env("RACKLIFT_METRICS_LISTEN", "127.0.0.1:0")
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn racklift");
        Racklift { child }
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("child is running") as i32
    }

    /// Sends a signal by name (`KILL`, `STOP`, `CONT`, `TERM`).
    pub fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }
}

pub use racklift_testdb::wait_for;

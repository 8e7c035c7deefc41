//! The `racklift` client commands run as an operator runs them: the built binary as a child process, with a
//! clean environment so the developer's own token or API address cannot leak into a test.

use std::process::{Output, Stdio};
use std::time::Duration;

use crate::racklift_bin;

/// A `racklift` command configured like [`racklift`] runs it, for tests that read its output as it streams.
pub fn command(args: &[&str], env: &[(&str, &str)], home: &std::path::Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(racklift_bin());
    command
        .args(args)
        .env_remove("RACKLIFT_TOKEN")
        .env_remove("RACKLIFT_API")
        // Every test rack's API serves the one certificate of this test process.
        .env("RACKLIFT_CA_CERT", crate::rack::api_ca_file())
        .env("HOME", home)
        .env("RUST_LOG", "warn")
        // The messages are checked as a user sees them, without the backtrace a developer may have enabled.
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// An empty directory to serve as HOME, so no `~/.config/racklift/token` is found by accident.
pub fn empty_home() -> std::path::PathBuf {
    let home = std::env::temp_dir().join(format!("racklift-cli-home-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&home).expect("temp HOME");
    home
}

/// Runs `racklift` with `args` and `env` (RACKLIFT_TOKEN and RACKLIFT_API removed unless `env` sets them, HOME
/// an empty directory) to completion.
pub async fn racklift(args: &[&str], env: &[(&str, &str)]) -> Output {
    let home = empty_home();
    let output = tokio::time::timeout(Duration::from_secs(120), command(args, env, &home).output())
        .await
        .unwrap_or_else(|_| panic!("racklift {args:?} did not finish within 120 s"))
        .expect("run racklift");
    let _ = std::fs::remove_dir_all(&home);
    output
}

/// Exit code, stdout and stderr, for assertion messages.
pub fn describe(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The command's standard output, as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The command's standard error, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON a successful `--json` command printed.
pub fn json_out(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", describe(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(out)))
}

/// A run that must fail with a one-line error containing `needle`.
pub fn assert_refused(out: &Output, needle: &str) {
    assert!(!out.status.success(), "{}", describe(out));
    assert!(
        stderr(out).contains(needle),
        "wanted {needle:?}\n{}",
        describe(out)
    );
}

/// Runs `racklift ARGS --api URL` as the rack's admin.
pub async fn as_admin(rack: &crate::rack::Rack, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--api", rack.api_url.as_str()]);
    racklift(&all, &[("RACKLIFT_TOKEN", rack.catalog.admin_token.as_str())]).await
}

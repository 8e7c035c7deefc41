//! `racklift server …` as an operator runs it: the built binary as a child process against a rack whose API runs
//! in this test process. Checks the exit codes and the messages a human would read.

use std::process::{Output, Stdio};
use std::time::Duration;

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_tests::rack::Rack;
use racklift_tests::racklift_bin;

/// Runs `racklift` with `args` and `env`, with RACKLIFT_TOKEN and RACKLIFT_API removed unless `env` sets them
/// and HOME pointing at an empty directory, so the developer's own token file cannot leak into the test.
async fn racklift(args: &[&str], env: &[(&str, &str)]) -> Output {
    let home = std::env::temp_dir().join(format!("racklift-cli-home-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&home).expect("temp HOME");
    let mut command = tokio::process::Command::new(racklift_bin());
    command
        .args(args)
        .env_remove("RACKLIFT_TOKEN")
        .env_remove("RACKLIFT_API")
        .env("HOME", &home)
        .env("RUST_LOG", "warn")
        // The messages are checked as a user sees them, without the backtrace a developer may have enabled.
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .unwrap_or_else(|_| panic!("racklift {args:?} did not finish within 120 s"))
        .expect("run racklift");
    let _ = std::fs::remove_dir_all(&home);
    output
}

fn describe(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_deploy_wait_and_show() {
    let rack = Rack::start(1, PersonalityChoice::Single(Personality::Generic), 0.01).await;
    let name = rack.sim.name(0).to_owned();
    let api = rack.api_url.as_str();
    let env = [("RACKLIFT_TOKEN", rack.catalog.admin_token.as_str())];

    let out = racklift(&["server", "list", "--json", "--api", api], &env).await;
    assert!(out.status.success(), "{}", describe(&out));
    let servers: serde_json::Value = serde_json::from_slice(&out.stdout).expect("list --json prints JSON");
    assert!(
        servers
            .as_array()
            .is_some_and(|a| a.iter().any(|s| s["name"] == name.as_str())),
        "{}",
        describe(&out)
    );

    let out = racklift(&["server", "list", "--api", api], &env).await;
    assert!(out.status.success(), "{}", describe(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.starts_with("NAME") && table.contains(&name),
        "{}",
        describe(&out)
    );

    // The body mirrors racklift_api::demo::deploy_request: the generic personality needs no skip.
    let provisioning_token = rack.catalog.token.to_string();
    let deploy = [
        "server",
        "deploy",
        &name,
        "--token",
        &provisioning_token,
        "--seed",
        &rack.catalog.seed,
        "--wait",
        "--api",
        api,
    ];
    let out = racklift(&deploy, &env).await;
    assert!(
        out.status.success(),
        "{}\nevents:\n{}",
        describe(&out),
        rack.event_log(&name).await
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ended Completed"),
        "{}",
        describe(&out)
    );

    let out = racklift(&["server", "show", &name, "--api", api], &env).await;
    assert!(out.status.success(), "{}", describe(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("deployment state:") && l.ends_with("Completed")),
        "{}",
        describe(&out)
    );

    // An HTTP error shows the API's code.
    let out = racklift(&["server", "show", "no-such-server", "--api", api], &env).await;
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("server_not_found"),
        "{}",
        describe(&out)
    );
    rack.stop().await;
}

#[tokio::test]
async fn missing_token_says_how_to_set_it() {
    let out = racklift(&["server", "list", "--api", "http://127.0.0.1:9"], &[]).await;
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("RACKLIFT_TOKEN"),
        "{}",
        describe(&out)
    );
}

#[tokio::test]
async fn unreachable_api_is_one_clear_line() {
    let out = racklift(
        &["server", "list", "--api", "http://127.0.0.1:9"],
        &[("RACKLIFT_TOKEN", "not-checked")],
    )
    .await;
    assert!(!out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot reach the racklift API at http://127.0.0.1:9"),
        "{}",
        describe(&out)
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{}", describe(&out));
}

//! `racklift server …` as an operator runs it: the built binary as a child process against a rack whose API runs
//! in this test process. Checks the exit codes and the messages a human would read.

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_tests::cli::{describe, racklift};
use racklift_tests::rack::Rack;

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

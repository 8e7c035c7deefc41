//! `racklift deadletter …`, `racklift events --follow` and `racklift server power` as an operator runs them
//! against a rack whose BMC fails every mutation: the failures are listed, grouped and shown; a viewer cannot
//! act; a discard and a retry are recorded; the retried deployment completes; power and media actions run;
//! and the event log follows it all live, each event once.

use std::time::Duration;

use racklift_bmc_sim::{Faults, Personality, PersonalityChoice};
use racklift_deploy::State;
use racklift_store::Role;
use racklift_testdb::wait_for;
use racklift_tests::cli::{command, describe, empty_home, json_out, racklift, stdout};
use racklift_tests::rack::Rack;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const VIEWER: &str = "cli-viewer-secret-0123456789";

async fn open_dead_letters(rack: &Rack, operation: &str) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT id FROM dead_letters WHERE operation = $1 AND triage_status = 'open' ORDER BY id",
    )
    .bind(operation)
    .fetch_all(&rack.db.pool)
    .await
    .expect("dead letters")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_triages_from_the_terminal() {
    let rack = Rack::start(1, PersonalityChoice::Single(Personality::Generic), 0.01).await;
    rack.store
        .put_api_token("cli-viewer", VIEWER, Role::Viewer)
        .await
        .expect("viewer token");
    let name = rack.sim.name(0).to_owned();
    let api = rack.api_url.clone();
    let admin = [
        ("RACKLIFT_TOKEN", rack.catalog.admin_token.as_str()),
        ("RACKLIFT_API", api.as_str()),
    ];
    let viewer = [("RACKLIFT_TOKEN", VIEWER), ("RACKLIFT_API", api.as_str())];

    // Follow the server's events from before anything happens, as JSON lines.
    let home = empty_home();
    let mut follower = command(&["events", &name, "--follow", "--json"], &admin, &home)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn events --follow");
    let mut followed = BufReader::new(follower.stdout.take().expect("piped stdout")).lines();

    rack.deploy_into_failure(0).await;

    // An ad-hoc power action against the same failing BMC dead-letters too, under another operation.
    let out = racklift(&["server", "power", &name, "on"], &admin).await;
    assert!(out.status.success(), "{}", describe(&out));
    assert!(stdout(&out).contains("queued as job"), "{}", describe(&out));
    wait_for(
        Duration::from_secs(120),
        "the power action's dead letter",
        || async { open_dead_letters(&rack, "bmc_action").await.len() == 1 },
    )
    .await;
    let deployment_dl = open_dead_letters(&rack, "deployment").await[0];
    let action_dl = open_dead_letters(&rack, "bmc_action").await[0];

    // Lists: a table by default, JSON with --json, the dashboard's filters, errors naming the field.
    let out = racklift(&["deadletter", "list"], &viewer).await;
    assert!(out.status.success(), "{}", describe(&out));
    let table = stdout(&out);
    assert!(table.starts_with("ID"), "{table}");
    for expected in [
        deployment_dl.to_string(),
        action_dl.to_string(),
        "ApplyBIOS".into(),
    ] {
        assert!(table.contains(&expected), "{expected} missing:\n{table}");
    }
    let page = json_out(
        &racklift(
            &["deadletter", "list", "--json", "--operation", "deployment"],
            &viewer,
        )
        .await,
    );
    let ids: Vec<i64> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![deployment_dl], "{page}");
    let page = json_out(&racklift(&["deadletter", "list", "--json", "--older-than", "1d"], &viewer).await);
    assert_eq!(page["items"], json!([]), "{page}");
    let groups = json_out(&racklift(&["deadletter", "groups", "--json"], &viewer).await);
    assert_eq!(groups["total"], 2, "{groups}");
    let out = racklift(&["deadletter", "groups", "--server", &name], &viewer).await;
    assert!(stdout(&out).contains("total: 2"), "{}", describe(&out));
    let out = racklift(&["deadletter", "list", "--state", "NoSuchState"], &viewer).await;
    assert!(!out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("(field state)") && stderr.contains("HTTP 422"),
        "{}",
        describe(&out)
    );

    // The detail: the failure, the deployment and its timeline.
    let out = racklift(&["deadletter", "show", &deployment_dl.to_string()], &viewer).await;
    assert!(out.status.success(), "{}", describe(&out));
    let shown = stdout(&out);
    for expected in [
        "failed state:",
        "ApplyBIOS",
        "timeline (",
        "transition",
        "may resume at:",
    ] {
        assert!(shown.contains(expected), "{expected} missing:\n{shown}");
    }
    assert!(
        !shown.contains(&rack.catalog.admin_token),
        "a secret was printed:\n{shown}"
    );

    // A viewer reads but cannot act.
    let out = racklift(
        &["deadletter", "discard", &action_dl.to_string(), "--note", "x"],
        &viewer,
    )
    .await;
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("forbidden"),
        "{}",
        describe(&out)
    );

    // An operator discards the power action's failure; a second discard is refused, naming why.
    let note = "powered on by hand at the rack";
    let out = racklift(
        &["deadletter", "discard", &action_dl.to_string(), "--note", note],
        &admin,
    )
    .await;
    assert!(out.status.success(), "{}", describe(&out));
    let out = racklift(
        &["deadletter", "discard", &action_dl.to_string(), "--note", note],
        &admin,
    )
    .await;
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already_triaged"),
        "{}",
        describe(&out)
    );

    // The BMC is fixed; the deployment is retried from its failed state and completes.
    rack.sim.set_faults(0, Faults::default());
    let out = racklift(
        &[
            "deadletter",
            "retry",
            &deployment_dl.to_string(),
            "--reason",
            "BMC firmware updated",
        ],
        &admin,
    )
    .await;
    assert!(out.status.success(), "{}", describe(&out));
    assert!(stdout(&out).contains("retried"), "{}", describe(&out));
    let done = rack.wait_finished(&name, Duration::from_secs(120)).await;
    assert_eq!(
        done.deployment.machine.state,
        State::Completed,
        "{}",
        rack.event_log(&name).await
    );
    let page = json_out(&racklift(&["deadletter", "list", "--json"], &viewer).await);
    assert_eq!(page["items"], json!([]), "nothing is open any more: {page}");
    let page = json_out(&racklift(&["deadletter", "list", "--json", "--status", "retried"], &viewer).await);
    assert_eq!(page["items"][0]["id"], deployment_dl, "{page}");
    assert_eq!(page["items"][0]["triaged_by"], "admin", "{page}");

    // Power and media actions on the healthy BMC, seen by the follower. An insert without an image is refused
    // before anything is sent.
    let out = racklift(&["server", "power", &name, "off"], &admin).await;
    assert!(out.status.success(), "{}", describe(&out));
    let out = racklift(&["server", "media", &name, "insert"], &admin).await;
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--image-url"),
        "{}",
        describe(&out)
    );
    wait_for(Duration::from_secs(60), "the power action to finish", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs WHERE resource_key = 'server/' || $1 AND state IN ('queued', 'running')")
            .bind(&name)
            .fetch_one(&rack.db.pool)
            .await
            .expect("live jobs")
            == 0
    })
    .await;
    let out = racklift(&["server", "media", &name, "eject"], &admin).await;
    assert!(out.status.success(), "{}", describe(&out));

    // The follower printed every event once, in order: the failure, the triage, the registration that ended
    // the retried deployment, and the BMC actions.
    let mut kinds = Vec::new();
    let mut last_id = 0;
    let reading = async {
        while let Some(line) = followed.next_line().await.expect("read events") {
            let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let id = event["id"].as_i64().expect("event id");
            assert!(
                id > last_id,
                "event {id} after {last_id}: printed twice or out of order"
            );
            last_id = id;
            let kind = event["kind"].as_str().unwrap_or_default().to_owned();
            let ejected = kind == "bmc_action" && event["detail"]["action"].as_str() == Some("eject_media");
            kinds.push(kind);
            if ejected {
                return;
            }
        }
        panic!("events --follow ended early");
    };
    if tokio::time::timeout(Duration::from_secs(60), reading)
        .await
        .is_err()
    {
        panic!("the follower did not print the eject within 60 s; it printed {kinds:?}");
    }
    for expected in ["transition", "triage_retry", "registered", "bmc_action"] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "{expected} not followed: {kinds:?}"
        );
    }
    assert_eq!(
        kinds.len() as i64,
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM server_events WHERE server = $1 AND id <= $2")
            .bind(&name)
            .bind(last_id)
            .fetch_one(&rack.db.pool)
            .await
            .expect("event count"),
        "the follower skipped events: {kinds:?}"
    );
    follower.kill().await.expect("stop the follower");
    let _ = std::fs::remove_dir_all(&home);
    rack.stop().await;
}

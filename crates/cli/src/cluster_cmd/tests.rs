use super::follow::verdict;
use super::*;
use clap::Parser;
use serde_json::json;

/// An operation as the API answers it, with `fields` laid over a running one.
fn op(fields: Value) -> ClusterOperationView {
    let mut doc = json!({
        "id": 7, "operation": "rolling_reboot", "status": "running", "phase": "restart",
        "progress": "[2/5]", "done": 2, "total": 5,
        "status_description": "[3/5] Evacuating server s3",
        "current_server": "s3", "current_step": "evacuate", "pending_reboot": ["s3", "s4", "s5"],
        "status_reason": null, "failed_server": null, "failed_step": null,
        "first_error": null, "last_error": null, "os_only": false, "applications": [],
        "cancel_requested": false, "pause_requested": false,
        "schedule": { "not_before": null, "window": null }, "next_start": null,
        "servers": [{ "name": "s1", "step": null, "step_triggered_at": null, "attempts": 0,
                      "reboot_pending": false, "kept_evacuated": false, "done": true,
                      "first_error": null, "last_error": null }],
        "requested_by": "ops", "created_at": "2025-01-02T03:04:05Z",
        "updated_at": "2025-01-02T03:05:05Z", "finished_at": null,
    });
    for (k, v) in fields.as_object().unwrap() {
        doc[k] = v.clone();
    }
    decode(&doc).unwrap()
}

#[test]
fn progress_lines_show_the_description_and_what_is_pending() {
    for (fields, line) in [
        (json!({}), "[3/5] Evacuating server s3"),
        (
            json!({ "pause_requested": true }),
            "[3/5] Evacuating server s3 (pause requested)",
        ),
        (
            json!({ "cancel_requested": true, "pause_requested": true }),
            "[3/5] Evacuating server s3 (cancel requested)",
        ),
        (
            json!({ "status": "paused", "pause_requested": true,
                    "status_description": "[2/5] paused: by ops" }),
            "[2/5] paused: by ops",
        ),
        (json!({ "status_description": "Waiting" }), "[2/5] Waiting"),
    ] {
        assert_eq!(progress_line(&op(fields.clone())), line, "{fields}");
    }
}

#[test]
fn the_exit_follows_the_status() {
    for (fields, outcome) in [
        (json!({}), None),
        (json!({ "status": "completed" }), Some(Ok(()))),
        (
            json!({ "status": "canceled", "status_reason": "by ops" }),
            Some(Ok(())),
        ),
        (
            json!({ "status": "failed", "status_reason": "reboot timed out",
                    "failed_server": "s3", "failed_step": "reboot" }),
            Some(Err(
                "rack1: operation 7 failed at [2/5]: reboot timed out (server s3, step reboot)".to_owned(),
            )),
        ),
        (
            json!({ "status": "failed", "last_error": "connection refused", "failed_server": "s3" }),
            Some(Err(
                "rack1: operation 7 failed at [2/5]: connection refused (server s3)".to_owned(),
            )),
        ),
        (
            json!({ "status": "failed" }),
            Some(Err(
                "rack1: operation 7 failed at [2/5]: no reason recorded".to_owned()
            )),
        ),
        (
            json!({ "status": "paused", "status_reason": "health gate: s2 offline" }),
            Some(Err(
                "rack1: operation 7 paused at [2/5]: health gate: s2 offline; resume it with: \
                      racklift cluster resume rack1"
                    .to_owned(),
            )),
        ),
    ] {
        assert_eq!(verdict("rack1", &op(fields.clone())), outcome, "{fields}");
    }
}

#[test]
fn accepted_actions_name_the_operation() {
    for (action, line) in [
        (
            Action::Reboot,
            "rack1: started rolling_reboot 7: [3/5] Evacuating server s3",
        ),
        (
            Action::Cancel,
            "rack1: cancel requested for rolling_reboot 7: [3/5] Evacuating server s3",
        ),
        (
            Action::Pause,
            "rack1: pause requested for rolling_reboot 7: [3/5] Evacuating server s3",
        ),
        (
            Action::Resume,
            "rack1: resumed rolling_reboot 7: [3/5] Evacuating server s3",
        ),
    ] {
        assert_eq!(accepted_line("rack1", action, &op(json!({}))), line, "{action:?}");
    }
}

#[test]
fn durations_are_checked_before_they_are_sent() {
    for (text, secs) in [
        ("30s", Some(30)),
        ("5m", Some(300)),
        ("0s", Some(0)),
        ("1500ms", None),
        ("soon", None),
    ] {
        assert_eq!(whole_seconds(text).ok(), secs, "{text}");
    }
    for (text, interval) in [
        ("2s", Some(Duration::from_secs(2))),
        ("500ms", Some(Duration::from_millis(500))),
        ("0s", None),
        ("often", None),
    ] {
        assert_eq!(poll_interval(text).ok(), interval, "{text}");
    }
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

#[test]
fn flags_combine_as_the_api_allows() {
    for (argv, accepted) in [
        (&["create", "rack1", "--server", "s1", "--server", "s2"][..], true),
        (
            &["create", "rack1", "--server", "s1", "--post-restore-delay", "30s"],
            true,
        ),
        (&["create", "rack1"], false),
        (
            &[
                "create",
                "rack1",
                "--server",
                "s1",
                "--post-restore-delay",
                "1.5s",
            ],
            false,
        ),
        (&["update", "rack1", "--os-only"], true),
        (
            &[
                "update",
                "rack1",
                "--application",
                "incus",
                "--application",
                "ceph",
            ],
            true,
        ),
        (&["update", "rack1", "--os-only", "--application", "incus"], false),
        (
            &[
                "update",
                "rack1",
                "--wait",
                "--poll",
                "500ms",
                "--idempotency-key",
                "k1",
            ],
            true,
        ),
        (&["update", "rack1", "--wait", "--json"], false),
        (&["update", "rack1", "--poll", "5s"], false),
        (&["reboot", "rack1", "--wait"], true),
        (&["cancel", "rack1", "--reason", "wrong window", "--wait"], true),
        (&["pause", "rack1", "--reason", "change freeze"], true),
        (&["pause", "rack1", "--wait"], false),
        (&["resume", "rack1"], true),
        (&["show", "rack1", "--json"], true),
        (&["list"], true),
        (&["delete", "rack1"], true),
    ] {
        let parsed = Cli::try_parse_from(std::iter::once("cluster").chain(argv.iter().copied()));
        assert_eq!(parsed.is_ok(), accepted, "{argv:?}");
    }
}

#[test]
fn the_poll_interval_defaults_to_two_seconds() {
    let cli = Cli::try_parse_from(["cluster", "reboot", "rack1", "--wait"]).unwrap();
    let ClusterCommand::Reboot { wait, .. } = cli.args.command else {
        panic!("not a reboot");
    };
    assert!(wait.wait);
    assert_eq!(wait.poll, Duration::from_secs(2));
}

#[test]
fn bodies_are_what_the_api_takes() {
    let create = ClusterCreate {
        name: "rack1".into(),
        servers: vec!["s1".into(), "s2".into()],
        post_restore_delay_secs: None,
        restore_mode: racklift_store::RestoreMode::Default,
    };
    assert_eq!(
        serde_json::to_value(&create).unwrap(),
        json!({ "name": "rack1", "servers": ["s1", "s2"], "restore_mode": "default" })
    );
    let update = UpdateRequest {
        os_only: true,
        applications: Vec::new(),
        ..UpdateRequest::default()
    };
    assert_eq!(
        serde_json::to_value(&update).unwrap(),
        json!({ "os_only": true, "applications": [] })
    );
    assert_eq!(Request::control(Action::Cancel, None).unwrap().body, json!({}));
    assert_eq!(
        Request::control(Action::Pause, Some("freeze".into()))
            .unwrap()
            .body,
        json!({ "reason": "freeze" })
    );
    assert!(Request::control(Action::Resume, Some("  ".into())).is_err());
}

#[test]
fn the_server_table_shows_each_record() {
    let shown = server_table(&op(json!({})).servers);
    assert_eq!(
        shown,
        "SERVER  STEP  ATTEMPTS  REBOOT PENDING  KEPT EVACUATED  DONE  LAST ERROR\n\
         s1      -     0         no              no              yes   -\n"
    );
    // A member an operator's retry skipped says so, with the reboot it still owes.
    let skipped = op(
        json!({ "servers": [{ "name": "s2", "step": null, "step_triggered_at": null,
        "attempts": 0, "reboot_pending": true, "kept_evacuated": false, "done": true, "skipped": true,
        "first_error": null, "last_error": null }] }),
    );
    assert_eq!(
        server_table(&skipped.servers),
        "SERVER  STEP  ATTEMPTS  REBOOT PENDING  KEPT EVACUATED  DONE     LAST ERROR\n\
         s2      -     0         yes             no              skipped  -\n"
    );
}

//! Ad-hoc `:media` actions end on what the slot reads back, not on the BMC's answer: an insert the simulated BMC
//! keeps ends succeeded with the slot verified (and the eject after it with the slot verified empty); an insert it
//! answers 204 and drops (`drop_insert`, as an iDRAC does) ends failed, in one attempt, with a dead letter and a
//! `bmc_action_failed` event naming the server, the slot and what the slot read back.

use std::time::Duration;

use racklift_bmc_sim::{Faults, Personality, PersonalityChoice};
use racklift_deploy::Config;
use racklift_testdb::wait_for;
use racklift_tests::rack::Rack;
use serde_json::{Value, json};

const SCALE: f64 = 0.01;

/// How an action's job ended.
#[derive(Debug)]
enum Ended {
    Completed,
    /// The dead letter's `last_error`, `error_class` and `attempts`.
    DeadLettered(String, Option<String>, i32),
}

/// Posts a `:media` request and waits for its job to leave the queue.
async fn media_action(rack: &Rack, name: &str, body: Value) -> Ended {
    let response = rack
        .admin(
            reqwest::Method::POST,
            format!("/1.0/provisioning/servers/{name}:media"),
        )
        .json(&body)
        .send()
        .await
        .expect("media request");
    assert_eq!(response.status(), 202, "{body}");
    let accepted: Value = response.json().await.expect("accepted JSON");
    let job = accepted["job_id"].as_i64().expect("job_id");
    let pool = &rack.db.pool;
    wait_for(
        Duration::from_secs(60),
        "the media action's job to end",
        || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs WHERE id = $1")
                .bind(job)
                .fetch_one(pool)
                .await
                .expect("live job")
                == 0
        },
    )
    .await;
    let dead: Option<(String, Option<String>, i32)> =
        sqlx::query_as("SELECT last_error, error_class, attempts FROM dead_letters WHERE job_id = $1")
            .bind(job)
            .fetch_optional(pool)
            .await
            .expect("dead letter");
    match dead {
        Some((error, class, attempts)) => Ended::DeadLettered(error, class, attempts),
        None => Ended::Completed,
    }
}

/// The detail of the server's newest event of `kind`.
async fn last_event(rack: &Rack, name: &str, kind: &str) -> Value {
    let events = rack.store.events(name, 0, 1000).await.expect("events");
    events
        .into_iter()
        .rev()
        .find(|e| e.kind == kind)
        .map(|e| e.detail)
        .unwrap_or_else(|| panic!("no {kind} event"))
}

fn holds(truth: &Value, image: &str) -> bool {
    truth["media"].as_array().is_some_and(|m| {
        m.iter()
            .any(|s| s["inserted"] == json!(true) && s["image"] == json!(image))
    })
}

fn empty(truth: &Value) -> bool {
    truth["media"]
        .as_array()
        .is_some_and(|m| m.iter().all(|s| s["inserted"] != json!(true)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn media_actions_end_on_what_the_slot_reads_back() {
    // A 3 s call deadline, so a slot that never shows the insert is given up on after 3 s, not the real 30 s.
    let config = Config {
        step_call_timeout_secs: 3,
        ..Config::for_simulation(SCALE)
    };
    let rack =
        Rack::start_with_config(1, PersonalityChoice::Single(Personality::Generic), SCALE, config).await;
    let name = rack.sim.name(0).to_owned();
    let image = format!("{}/media/none/x.img", rack.api_url);
    let insert = json!({ "action": "insert", "image_url": image });

    // A BMC that keeps the insert: succeeded, the slot verified.
    let ended = media_action(&rack, &name, insert.clone()).await;
    assert!(
        matches!(ended, Ended::Completed),
        "{ended:?}\n{}",
        rack.event_log(&name).await
    );
    assert!(holds(&rack.sim.truth(0), &image), "{}", rack.sim.truth(0));
    let done = last_event(&rack, &name, "bmc_action").await;
    assert_eq!(done["action"], json!("insert_media"), "{done}");
    let result = done["result"].as_str().expect("result");
    for expected in [
        format!("holding {image}"),
        "verified slot system:".into(),
        "Inserted: true".into(),
    ] {
        assert!(result.contains(&expected), "{expected:?} missing: {result}");
    }

    let ended = media_action(&rack, &name, json!({ "action": "eject" })).await;
    assert!(
        matches!(ended, Ended::Completed),
        "{ended:?}\n{}",
        rack.event_log(&name).await
    );
    assert!(empty(&rack.sim.truth(0)), "{}", rack.sim.truth(0));
    let done = last_event(&rack, &name, "bmc_action").await;
    assert_eq!(done["action"], json!("eject_media"), "{done}");
    let result = done["result"].as_str().expect("result");
    assert!(
        result.contains("verified slot") && result.contains(" empty"),
        "{result}"
    );

    // A BMC that answers 204 and drops the insert: failed at once, the reason naming what the slot read back.
    rack.sim.set_faults(
        0,
        Faults {
            drop_insert: true,
            ..Faults::default()
        },
    );
    let inserts_before = rack.sim.truth(0)["counters"]["media_inserts"]
        .as_u64()
        .unwrap_or(0);
    let ended = media_action(&rack, &name, insert).await;
    let Ended::DeadLettered(error, class, attempts) = ended else {
        panic!(
            "a dropped insert must fail: {ended:?}\n{}",
            rack.event_log(&name).await
        );
    };
    for expected in [
        format!("server {name}: insert_media:"),
        "slot system:".into(),
        format!("did not read back holding {image}"),
        "Inserted: false, Image: none".into(),
    ] {
        assert!(error.contains(&expected), "{expected:?} missing: {error}");
    }
    assert_eq!(class.as_deref(), Some("media_unconfirmed"), "{error}");
    assert_eq!(attempts, 1, "a dropped insert is not retried: {error}");
    let failed = last_event(&rack, &name, "bmc_action_failed").await;
    assert_eq!(failed["action"], json!("insert_media"), "{failed}");
    assert_eq!(failed["error"], json!(error), "{failed}");
    assert_eq!(failed["bmc_status"], Value::Null, "{failed}");
    let truth = rack.sim.truth(0);
    assert!(empty(&truth), "the simulator dropped the insert: {truth}");
    assert_eq!(
        truth["counters"]["media_inserts"].as_u64(),
        Some(inserts_before + 1),
        "the insert reached the BMC once: {truth}"
    );

    let audit = rack.sim.audit(0);
    assert!(
        audit.unfenced_mutations == 0 && audit.stale_mutations.is_empty(),
        "{audit:?}"
    );
    rack.stop().await;
}

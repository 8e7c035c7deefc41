//! The dead-letter triage over HTTP: list, filter, group and page; one dead letter with its timeline; retry (from
//! the failed state and from an earlier trigger), discard, cancel and bulk retry, each recorded with who and why;
//! roles, conflicts, validation, and that no secret is ever answered.

mod common;
#[path = "triage/seed.rs"]
mod seed;

use common::{Api, OPERATOR, VIEWER, code, field};
use racklift_deploy::State;
use reqwest::Method;
use seed::{Seed, assert_no_secrets, get, ids, open_ids, post, rack};
use serde_json::{Value, json};

#[tokio::test]
async fn list_filters_groups_and_pages() {
    let api = Api::start().await;
    let (_seed, failed, action) = rack(&api).await;
    let all = open_ids(&api, "").await;
    let expected: Vec<i64> = [action]
        .into_iter()
        .chain(failed.iter().rev().map(|f| f.dead_letter_id))
        .collect();
    assert_eq!(all, expected, "newest first");

    // Pages of two, chained by the cursor, cover the list exactly once.
    let mut seen = Vec::new();
    let mut query = "?limit=2".to_owned();
    loop {
        let v = get(&api, &format!("/1.0/deadletters{query}")).await;
        seen.extend(ids(&v));
        match v["next_cursor"].as_str() {
            Some(c) => query = format!("?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen, all);

    let cases: [(&str, usize); 10] = [
        ("?operation=bmc_action", 1),
        ("?operation=deployment", 4),
        ("?vendor=dell", 3),
        ("?vendor=hpe", 2),
        ("?state=AttachMedia", 3),
        ("?state=AttachMedia&vendor=dell", 2),
        ("?error_class=deadline", 1),
        ("?message_id=Base.1.8.PropertyValueNotInList", 4),
        ("?min_age_secs=3600", 0),
        ("?status=retried", 0),
    ];
    for (query, n) in cases {
        assert_eq!(open_ids(&api, query).await.len(), n, "{query}");
    }
    let item = &get(&api, "/1.0/deadletters?operation=bmc_action").await["items"][0];
    assert_eq!(
        (&item["server"], &item["vendor"], &item["error_class"]),
        (&json!("node4"), &json!("hpe"), &json!("transport"))
    );
    let item = &get(&api, "/1.0/deadletters?error_class=deadline").await["items"][0];
    assert_eq!(item["deployment_id"], json!(failed[1].deployment_id));
    assert_eq!(
        (&item["state"], &item["bmc_status"], &item["cause"]),
        (&json!("WaitInstall"), &json!(400), &json!("RetriesExhausted"))
    );

    let v = get(&api, "/1.0/deadletters/groups").await;
    assert_eq!(v["total"], json!(5));
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 4);
    assert_eq!(
        groups[0],
        json!({ "operation": "deployment", "error_class": "rejected_value",
                "message_id": "Base.1.8.PropertyValueNotInList", "vendor": "dell", "state": "AttachMedia",
                "count": 2, "oldest_dead_at": groups[0]["oldest_dead_at"],
                "newest_dead_at": groups[0]["newest_dead_at"] })
    );
    let v = get(&api, "/1.0/deadletters/groups?vendor=hpe").await;
    assert_eq!(v["total"], json!(2));

    // Malformed (400), and well-formed but naming nothing known (422).
    for (query, status, c, f) in [
        ("?stat=AttachMedia", 400, "invalid_field", "stat"),
        ("?state=Nope", 422, "unknown_state", "state"),
        ("?operation=nope", 400, "invalid_field", "operation"),
        ("?limit=0", 400, "invalid_field", "limit"),
        ("?limit=x", 400, "invalid_field", "limit"),
        ("?cursor=garbage", 422, "unknown_cursor", "cursor"),
        ("?min_age_secs=-1", 400, "invalid_field", "min_age_secs"),
        ("?status=gone", 400, "invalid_field", "status"),
    ] {
        let (s, v) = api
            .call(Method::GET, &format!("/1.0/deadletters{query}"), VIEWER, None)
            .await;
        assert_eq!((s, code(&v), field(&v)), (status, c, Some(f)), "{query}");
    }
    let (s, v) = common::read(
        api.req(Method::GET, "/1.0/deadletters", None)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((s, code(&v)), (401, "unauthenticated"));
    let v = get(&api, "/1.0/deadletters").await;
    for f in &failed {
        assert_no_secrets(&v, &f.media_secret);
    }
    api.stop().await;
}

#[tokio::test]
async fn detail_shows_the_deployment_timeline_and_no_secret() {
    let api = Api::start().await;
    let (_seed, failed, action) = rack(&api).await;
    let f = &failed[0];
    let v = get(&api, &format!("/1.0/deadletters/{}", f.dead_letter_id)).await;
    assert_no_secrets(&v, &f.media_secret);
    let dl = &v["dead_letter"];
    assert_eq!(
        (&dl["id"], &dl["triage_status"]),
        (&json!(f.dead_letter_id), &json!("open"))
    );
    assert_eq!(
        dl["context"]["last_error"]["message_id"],
        "Base.1.8.PropertyValueNotInList"
    );
    assert!(
        dl["context"]["last_facts"]["media"]["image"]
            .as_str()
            .unwrap()
            .contains("/media/REDACTED/")
    );

    let d = &v["deployment"];
    assert_eq!(
        (&d["id"], &d["state"]),
        (&json!(f.deployment_id), &json!("Failed"))
    );
    assert_eq!(d["machine"]["failure"]["state"], "AttachMedia");
    assert_eq!(
        (&d["media_bytes_read"], &d["media_size"]),
        (&json!(seed::IMAGE_SIZE / 4), &json!(seed::IMAGE_SIZE))
    );
    assert_eq!(d["last_error_detail"]["bmc_status"], 400);
    let resume: Vec<&str> = d["resume_states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(resume.first(), Some(&"RefreshBMCData"));
    assert_eq!(resume.last(), Some(&"AttachMedia"));
    assert!(
        !resume.contains(&"WaitMediaCleared"),
        "waits before the failure are no re-entry points"
    );

    let timeline = v["timeline"].as_array().unwrap();
    let kinds: Vec<&str> = timeline.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["requested", "transition", "bmc_call", "transition"]);
    let call = &timeline[2];
    assert!(call["fence"].as_i64().is_some());
    assert_eq!(
        (&call["detail"]["duration_ms"], &call["detail"]["bmc_status"]),
        (&json!(812), &json!(400))
    );
    assert_eq!(v["live_job"], Value::Null);
    assert_eq!(v["actions"], json!([]));

    let v = get(&api, &format!("/1.0/deadletters/{action}")).await;
    assert_eq!(v["deployment"], Value::Null);
    assert_eq!(v["dead_letter"]["payload"]["action"], "power_on");
    let (s, v) = api
        .call(Method::GET, "/1.0/deadletters/999999", VIEWER, None)
        .await;
    assert_eq!((s, code(&v), field(&v)), (404, "not_found", Some("id")));
    let (s, v) = api.call(Method::GET, "/1.0/deadletters/abc", VIEWER, None).await;
    assert_eq!((s, field(&v)), (400, Some("id")));
    api.stop().await;
}

#[tokio::test]
async fn retry_resumes_the_failed_state_with_a_fresh_budget_once() {
    let api = Api::start().await;
    let (_seed, failed, _) = rack(&api).await;
    let f = &failed[0];
    let path = format!("/1.0/deadletters/{}:retry", f.dead_letter_id);

    let (s, v) = post(&api, &path, VIEWER, json!({ "reason": "x" })).await;
    assert_eq!((s, code(&v)), (403, "forbidden"));
    let (s, v) = post(&api, &path, OPERATOR, json!({})).await;
    assert_eq!((s, code(&v), field(&v)), (400, "invalid_field", Some("reason")));
    let (s, v) = post(&api, &path, OPERATOR, json!({ "reason": "x", "from": "Y" })).await;
    assert_eq!((s, code(&v)), (400, "invalid_body"));

    let (s, v) = post(
        &api,
        &path,
        OPERATOR,
        json!({ "reason": "image URL fixed on the proxy" }),
    )
    .await;
    assert_eq!(s, 202, "{v}");
    assert_eq!((&v["state"], &v["seq"]), (&json!("AttachMedia"), &json!(8)));
    assert!(!open_ids(&api, "").await.contains(&f.dead_letter_id));

    let d = api.store.deployment(f.deployment_id).await.unwrap();
    let m = &d.deployment.machine;
    assert_eq!((m.state, m.retries, m.seq), (State::AttachMedia, 0, 8));
    assert_eq!((d.finished_at, m.failure.clone()), (None, None));
    let server = api.store.server("node1").await.unwrap();
    assert_eq!(server.status.as_str(), "deploying");

    let v = get(&api, &format!("/1.0/deadletters/{}", f.dead_letter_id)).await;
    let job = &v["live_job"];
    assert_eq!(
        (&job["kind"], &job["state"], &job["id"]),
        (
            &json!("deployment.step"),
            &json!("queued"),
            &json!(v["actions"][0]["detail"]["job_id"])
        )
    );
    let key: String = sqlx::query_scalar("SELECT idempotency_key FROM jobs WHERE id = $1")
        .bind(job["id"].as_i64().unwrap())
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(
        key,
        format!("deployment/{}/8", f.deployment_id),
        "a fresh idempotency key"
    );
    let dl = &v["dead_letter"];
    assert_eq!(
        (&dl["triage_status"], &dl["triaged_by"]),
        (&json!("retried"), &json!("operator"))
    );
    let act = &v["actions"][0];
    assert_eq!(
        (&act["action"], &act["actor"], &act["actor_role"], &act["reason"]),
        (
            &json!("retry"),
            &json!("operator"),
            &json!("operator"),
            &json!("image URL fixed on the proxy")
        )
    );
    assert!(
        v["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "triage_retry")
    );

    let (s, v) = post(&api, &path, OPERATOR, json!({ "reason": "again" })).await;
    assert_eq!((s, code(&v)), (409, "already_triaged"));
    api.stop().await;
}

#[tokio::test]
async fn retry_from_an_earlier_trigger_and_its_refusals() {
    let api = Api::start().await;
    let (_seed, failed, action) = rack(&api).await;
    let wait = &failed[1];
    let path = format!("/1.0/deadletters/{}:retry", wait.dead_letter_id);
    for (from, status, c) in [
        ("Nope", 422, "unknown_state"),
        ("WaitMediaAttached", 422, "invalid_resume_state"),
        ("DetachMedia", 422, "invalid_resume_state"),
    ] {
        let (s, v) = post(
            &api,
            &path,
            OPERATOR,
            json!({ "reason": "r", "from_state": from }),
        )
        .await;
        assert_eq!(
            (s, code(&v), field(&v)),
            (status, c, Some("from_state")),
            "{from}: {v}"
        );
    }
    let (s, v) = post(
        &api,
        &path,
        OPERATOR,
        json!({ "reason": "reinstall", "from_state": "PowerOnInstall" }),
    )
    .await;
    assert_eq!((s, &v["state"]), (202, &json!("PowerOnInstall")), "{v}");
    let d = api.store.deployment(wait.deployment_id).await.unwrap();
    assert_eq!(
        (d.deployment.machine.state, d.deployment.machine.retries),
        (State::PowerOnInstall, 0)
    );

    // A BMC action has no states to resume from; plainly retried it is enqueued again.
    let path = format!("/1.0/deadletters/{action}:retry");
    let (s, v) = post(
        &api,
        &path,
        OPERATOR,
        json!({ "reason": "r", "from_state": "AttachMedia" }),
    )
    .await;
    assert_eq!((s, code(&v)), (422, "from_state_not_allowed"));
    let (s, v) = post(&api, &path, OPERATOR, json!({ "reason": "BMC rebooted" })).await;
    assert_eq!(s, 202, "{v}");
    let (kind, key): (String, String) =
        sqlx::query_as("SELECT kind, idempotency_key FROM jobs WHERE id = $1 AND state = 'queued'")
            .bind(v["job_id"].as_i64().unwrap())
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!((kind.as_str(), key), ("bmc.action", format!("triage/{action}")));
    api.stop().await;
}

#[tokio::test]
async fn discard_and_cancel_with_and_without_clean_up() {
    let api = Api::start().await;
    let (_seed, failed, action) = rack(&api).await;
    let path = format!("/1.0/deadletters/{}:discard", failed[0].dead_letter_id);
    let (s, v) = post(&api, &path, OPERATOR, json!({ "note": " " })).await;
    assert_eq!((s, field(&v)), (400, Some("note")));
    let (s, v) = post(
        &api,
        &path,
        OPERATOR,
        json!({ "note": "server is being decommissioned" }),
    )
    .await;
    assert_eq!((s, &v["triage_status"]), (200, &json!("discarded")), "{v}");
    assert_eq!(
        open_ids(&api, "?status=discarded").await,
        [failed[0].dead_letter_id]
    );
    let (s, v) = post(&api, &path, OPERATOR, json!({ "note": "again" })).await;
    assert_eq!((s, code(&v)), (409, "already_triaged"));
    let d = api.store.deployment(failed[0].deployment_id).await.unwrap();
    assert_eq!(
        d.deployment.machine.state,
        State::Failed,
        "discarding leaves the deployment alone"
    );

    let cancel = |f: &seed::Failed| format!("/1.0/deadletters/{}:cancel", f.dead_letter_id);
    let (s, v) = post(
        &api,
        &cancel(&failed[1]),
        OPERATOR,
        json!({ "reason": "leave it", "skip_cleanup": true }),
    )
    .await;
    assert_eq!(
        (s, &v["state"], &v["job_id"]),
        (200, &json!("Canceled"), &Value::Null),
        "{v}"
    );
    let d = api.store.deployment(failed[1].deployment_id).await.unwrap();
    assert_eq!(d.deployment.machine.state, State::Canceled);
    assert!(d.finished_at.is_some());
    assert_eq!(
        api.store.server("node2").await.unwrap().status.as_str(),
        "unregistered"
    );

    let (s, v) = post(
        &api,
        &cancel(&failed[2]),
        OPERATOR,
        json!({ "reason": "wrong rack" }),
    )
    .await;
    assert_eq!((s, &v["state"]), (202, &json!("Cancel")), "{v}");
    let d = api.store.deployment(failed[2].deployment_id).await.unwrap();
    assert_eq!((d.deployment.machine.state, d.finished_at), (State::Cancel, None));
    assert_eq!(d.cancel, Some(json!({ "skip_cleanup": false })));
    let v = get(&api, &format!("/1.0/deadletters/{}", failed[2].dead_letter_id)).await;
    assert_eq!(v["live_job"]["kind"], "deployment.step");
    assert_eq!(v["dead_letter"]["triage_status"], "canceled");

    let (s, v) = post(
        &api,
        &format!("/1.0/deadletters/{action}:cancel"),
        OPERATOR,
        json!({ "reason": "r" }),
    )
    .await;
    assert_eq!((s, code(&v)), (422, "unsupported_operation"));
    let (s, v) = post(&api, &cancel(&failed[3]), VIEWER, json!({ "reason": "r" })).await;
    assert_eq!((s, code(&v)), (403, "forbidden"));
    api.stop().await;
}

#[tokio::test]
async fn bulk_retry_retries_a_group_and_skips_what_it_cannot() {
    let api = Api::start().await;
    let (seed, failed, _) = rack(&api).await;
    let body = |filter: Value| json!({ "reason": "RAC0218 cleared after cooldown", "filter": filter });
    let (s, v) = post(
        &api,
        "/1.0/deadletters:bulk-retry",
        VIEWER,
        body(json!({ "vendor": "dell" })),
    )
    .await;
    assert_eq!((s, code(&v)), (403, "forbidden"));
    let (s, v) = post(
        &api,
        "/1.0/deadletters:bulk-retry",
        OPERATOR,
        json!({ "filter": { "vendor": "dell" } }),
    )
    .await;
    assert_eq!((s, field(&v)), (400, Some("reason")));
    let (s, v) = post(&api, "/1.0/deadletters:bulk-retry", OPERATOR, body(json!({}))).await;
    assert_eq!((s, code(&v), field(&v)), (422, "filter_required", Some("filter")));
    let (s, v) = post(
        &api,
        "/1.0/deadletters:bulk-retry",
        OPERATOR,
        body(json!({ "state": "Nope" })),
    )
    .await;
    assert_eq!((s, field(&v)), (422, Some("filter.state")));

    // node5's BMC is busy with an action: its deployment cannot get a step job now.
    api.store
        .enqueue_bmc_action(
            &seed.queue,
            &racklift_store::BmcActionPayload {
                server: "node5".into(),
                action: racklift_store::BmcAction::PowerOff,
                requested_by: "operator".into(),
            },
            None,
        )
        .await
        .unwrap();
    let group = json!({ "vendor": "dell", "state": "AttachMedia" });
    let (s, v) = post(&api, "/1.0/deadletters:bulk-retry", OPERATOR, body(group.clone())).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (&v["matched"], &v["retried"], &v["skipped"]),
        (&json!(2), &json!(1), &json!(1))
    );
    assert_eq!(v["skipped_items"][0]["id"], json!(failed[3].dead_letter_id));
    assert_eq!(v["skipped_items"][0]["code"], "server_busy");
    let open = open_ids(&api, "").await;
    assert!(!open.contains(&failed[0].dead_letter_id));
    assert!(
        open.contains(&failed[3].dead_letter_id),
        "a skipped item stays open"
    );
    let (by, reason, bulk): (String, String, Option<i64>) =
        sqlx::query_as("SELECT actor, reason, bulk_id FROM triage_actions WHERE dead_letter_id = $1")
            .bind(failed[0].dead_letter_id)
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(
        (by.as_str(), reason.as_str(), bulk),
        (
            "operator",
            "RAC0218 cleared after cooldown",
            v["bulk_id"].as_i64()
        )
    );
    api.stop().await;
}

#[tokio::test]
async fn a_deployment_whose_step_died_is_stuck_until_retried() {
    let api = Api::start().await;
    let seed = Seed::new(&api).await;
    seed.server(&api, "node1", "lenovo").await;
    let (deployment_id, dead) = seed.rescued_step(&api, "node1").await;

    let v = get(&api, "/1.0/stuck").await;
    let item = &v["items"][0];
    assert_eq!(
        (&item["deployment_id"], &item["reasons"]),
        (&json!(deployment_id), &json!(["no_live_job"]))
    );
    assert_eq!(item["progress"]["state"], "RefreshBMCData");
    assert_eq!(item["progress"]["retry_budget"], 3);
    let item = &get(&api, "/1.0/deadletters?operation=deployment").await["items"][0];
    assert_eq!(
        (&item["id"], &item["server"], &item["error_class"]),
        (&json!(dead), &json!("node1"), &json!("lease_expired"))
    );

    let path = format!("/1.0/deadletters/{dead}:retry");
    let (s, v) = post(
        &api,
        &path,
        OPERATOR,
        json!({ "reason": "r", "from_state": "RefreshBMCData" }),
    )
    .await;
    assert_eq!((s, code(&v)), (422, "from_state_not_allowed"));
    let (s, v) = post(&api, &path, OPERATOR, json!({ "reason": "worker OOM fixed" })).await;
    assert_eq!((s, &v["seq"]), (202, &json!(0)), "{v}");
    assert_eq!(get(&api, "/1.0/stuck").await["items"], json!([]));
    let all = get(&api, "/1.0/stuck?all=true").await;
    assert_eq!(all["items"][0]["job"]["state"], "queued");
    let (s, v) = api.call(Method::GET, "/1.0/stuck?all=maybe", VIEWER, None).await;
    assert_eq!((s, field(&v)), (400, Some("all")));
    api.stop().await;
}

#[tokio::test]
async fn cancel_of_a_live_deployment_and_older_dead_letters_of_a_retried_one() {
    let api = Api::start().await;
    let seed = Seed::new(&api).await;
    seed.server(&api, "node1", "dell").await;
    seed.server(&api, "node2", "dell").await;

    // Seeded first: the seeder leases whichever step job is due, and the cancel below enqueues one.
    let f = seed
        .failed_deployment(&api, "node2", State::SecureBoot, "busy", "Base.1.8.ResourceInUse")
        .await;

    // The step of a live deployment died: the cancel goes through the API's cancel path and gets a step to run it.
    let (live, dead) = seed.rescued_step(&api, "node1").await;
    let path = format!("/1.0/deadletters/{dead}:cancel");
    let (s, v) = post(&api, &path, OPERATOR, json!({ "reason": "give up on node1" })).await;
    assert_eq!((s, &v["state"]), (202, &json!("RefreshBMCData")), "{v}");
    let d = api.store.deployment(live).await.unwrap();
    assert_eq!(
        (d.cancel, d.finished_at),
        (Some(json!({ "skip_cleanup": false })), None)
    );
    let v = get(&api, &format!("/1.0/deadletters/{dead}")).await;
    assert_eq!(v["live_job"]["id"], v["actions"][0]["detail"]["job_id"]);
    assert!(
        v["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "cancel_requested")
    );

    // An older copy of a failure that was never triaged is answered by the retry of the newer one.
    let older: i64 = sqlx::query_scalar(
        "INSERT INTO dead_letters (job_id, kind, payload, priority, attempts, max_attempts, reason, error_class, \
         context, job_created_at, dead_at) \
         SELECT job_id, kind, payload, priority, attempts, max_attempts, reason, error_class, context, \
                job_created_at, dead_at - interval '1 hour' FROM dead_letters WHERE id = $1 RETURNING id",
    )
    .bind(f.dead_letter_id)
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(open_ids(&api, "?server=node2").await, [f.dead_letter_id, older]);
    let path = format!("/1.0/deadletters/{}:retry", f.dead_letter_id);
    let (s, v) = post(&api, &path, OPERATOR, json!({ "reason": "BMC session freed" })).await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(open_ids(&api, "?server=node2").await, Vec::<i64>::new());
    let resolved = get(&api, &format!("/1.0/deadletters/{older}")).await;
    assert_eq!(resolved["dead_letter"]["triage_status"], "resolved");
    let (s, v) = post(
        &api,
        &format!("/1.0/deadletters/{older}:retry"),
        OPERATOR,
        json!({ "reason": "r" }),
    )
    .await;
    assert_eq!((s, code(&v)), (409, "already_triaged"));
    api.stop().await;
}

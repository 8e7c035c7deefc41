//! `GET /1.0/stats/state-durations`: time per state and vendor from the transition events, as percentiles over
//! the deployments started in a window, and the window's validation.

mod common;
#[path = "triage/seed.rs"]
#[allow(dead_code)] // Shared with the triage tests; this file uses part of it.
mod seed;

use common::{Api, VIEWER, field};
use reqwest::Method;
use seed::{get, rack};
use serde_json::Value;

#[tokio::test]
async fn state_durations_are_percentiles_per_vendor_over_the_window() {
    let api = Api::start().await;
    let (_seed, failed, _action) = rack(&api).await;
    // node1, node2, node5 are dell, node3 hpe. Their transitions are replaced by ones at known offsets from the
    // deployment's creation: 2 s in PowerOffBIOSDeferred, then k s in WaitPowerOffBIOSDeferred.
    let pool = &api.db.pool;
    sqlx::query("DELETE FROM server_events WHERE kind = 'transition'")
        .execute(pool)
        .await
        .unwrap();
    for (f, waited, days_ago) in failed
        .iter()
        .zip([10, 20, 5, 30])
        .zip([0, 0, 0, 10])
        .map(|((f, w), d)| (f, w, d))
    {
        sqlx::query(
            "UPDATE deployments SET created_at = now() - make_interval(days => $2, hours => 1) WHERE id = $1",
        )
        .bind(f.deployment_id)
        .bind(days_ago)
        .execute(pool)
        .await
        .unwrap();
        for (from, to, at) in [
            ("PowerOffBIOSDeferred", "WaitPowerOffBIOSDeferred", 2),
            ("WaitPowerOffBIOSDeferred", "PowerOnBIOS", 2 + waited),
        ] {
            sqlx::query(
                "INSERT INTO server_events (server, deployment_id, at, kind, detail) \
                 SELECT server, id, created_at + make_interval(secs => $2), 'transition', \
                        jsonb_build_object('from', $3::text, 'to', $4::text, 'cause', 'Met') \
                 FROM deployments WHERE id = $1",
            )
            .bind(f.deployment_id)
            .bind(at as f64)
            .bind(from)
            .bind(to)
            .execute(pool)
            .await
            .unwrap();
        }
    }
    let row = |v: &Value, vendor: &str, state: &str| -> Value {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["vendor"] == vendor && r["state"] == state)
            .cloned()
            .unwrap_or_else(|| panic!("no {vendor} {state} in {v}"))
    };
    let figures = |r: &Value| ["count", "p50_secs", "p95_secs", "max_secs"].map(|k| r[k].as_f64().unwrap());

    // The default window (a week) leaves out node5's deployment, ten days old.
    let week = get(&api, "/1.0/stats/state-durations").await;
    assert_eq!(week["window_hours"], 168);
    assert_eq!(week["items"].as_array().unwrap().len(), 4, "{week}");
    let wait = row(&week, "dell", "WaitPowerOffBIOSDeferred");
    assert_eq!(figures(&wait), [2.0, 15.0, 19.5, 20.0], "{wait}");
    assert!(wait["budget_secs"].as_i64().unwrap() > 0, "{wait}");
    assert_eq!(
        figures(&row(&week, "dell", "PowerOffBIOSDeferred")),
        [2.0, 2.0, 2.0, 2.0]
    );
    assert_eq!(
        figures(&row(&week, "hpe", "WaitPowerOffBIOSDeferred")),
        [1.0, 5.0, 5.0, 5.0]
    );

    let longer = get(&api, "/1.0/stats/state-durations?window_hours=300").await;
    let wait = row(&longer, "dell", "WaitPowerOffBIOSDeferred");
    assert_eq!(figures(&wait), [3.0, 20.0, 29.0, 30.0], "{wait}");

    // Per deployment, the same spans: node5's 30 s wait is the one ten days old.
    let mut spans: Vec<(String, String, f64)> = api
        .store
        .state_spans(300 * 3600)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.state == "WaitPowerOffBIOSDeferred")
        .map(|s| (s.server, s.vendor.unwrap_or_default(), s.secs))
        .collect();
    spans.sort_by(|a, b| a.2.total_cmp(&b.2));
    let waits: Vec<(&str, f64)> = spans.iter().map(|s| (s.1.as_str(), s.2)).collect();
    assert_eq!(
        waits,
        [("hpe", 5.0), ("dell", 10.0), ("dell", 20.0), ("dell", 30.0)]
    );
    let week: Vec<f64> = api
        .store
        .state_spans(168 * 3600)
        .await
        .unwrap()
        .iter()
        .map(|s| s.secs)
        .collect();
    assert!(!week.contains(&30.0), "{week:?}");

    for bad in ["window_hours=0", "window_hours=x", "window_hours=9000", "since=3"] {
        let (s, v) = api
            .call(
                Method::GET,
                &format!("/1.0/stats/state-durations?{bad}"),
                VIEWER,
                None,
            )
            .await;
        assert_eq!(s, 400, "{bad}: {v}");
        assert!(field(&v).is_some(), "{bad}: {v}");
    }
    api.stop().await;
}

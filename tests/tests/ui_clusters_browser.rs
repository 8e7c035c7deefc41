//! The clusters page in a real browser (headless Chromium through chromedriver): a rolling reboot fails on a
//! member whose evacuation keeps failing; the operator finds it on `/ui/clusters` with the failed server and
//! step, follows it to its dead letters, and once the member is healthy retries it from the cluster's page with a
//! reason; the retry completes without rebooting the member the failed run had already restarted. Or, the member
//! still failing, the operator retries skipping it: the others are rebooted and it is left with its reboot owed.
//!
//! Needs the Debian packages `chromium` and `chromium-driver` (CI installs them).

use std::time::Duration;

use fantoccini::Locator;
use racklift_bmc_sim::Faults;
use racklift_store::Role;
use racklift_tests::browser::{WAIT, browser, click_live, count, live_text, login, screenshot, start_driver};
use racklift_tests::cluster::{CLUSTER, ClusterRack, short_budgets};
use racklift_tests::wait_for;
use serde_json::json;

const OPERATOR: &str = "ui-operator-secret";

/// The ends of a run, for a cluster test: ample for a run of three members at the cluster's time scale.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// A cluster of three whose rolling reboot failed on the second member, whose evacuations keep failing, with an
/// operator's token: the rack and the failed operation's id.
async fn failed_on_the_second_member() -> (ClusterRack, i64) {
    let c = ClusterRack::start_with(3, short_budgets()).await;
    let rack = &c.rack;
    rack.store
        .put_api_token("ui-operator", OPERATOR, Role::Operator)
        .await
        .expect("API token");
    // The second member's evacuations fail: the first member is rebooted, then the run ends on the second.
    rack.sim.set_faults(
        1,
        Faults {
            evacuate_fails: true,
            ..Faults::default()
        },
    );
    let (status, started) = c.action("reboot", json!({})).await;
    assert_eq!(status, 202, "{started}");
    let view = c.wait_ended(RUN_LIMIT).await;
    assert_eq!(view["operation"]["status"], "failed", "{view:#}");
    (c, view["operation"]["id"].as_i64().unwrap())
}

/// Opens the clusters page from the navigation and waits for the cluster's row; its selector.
async fn open_clusters_page(b: &fantoccini::Client) -> String {
    b.find(Locator::Css("#nav-clusters"))
        .await
        .expect("the clusters link")
        .click()
        .await
        .expect("open the clusters page");
    let row = format!(r#"tr.cluster[data-name="{CLUSTER}"]"#);
    b.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(&row))
        .await
        .expect("the cluster is listed");
    row
}

/// Opens the cluster's own page from the clusters page.
async fn open_cluster_page(b: &fantoccini::Client) {
    let row = open_clusters_page(b).await;
    click_live(b, &format!("{row} a.detail")).await;
    b.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#servers tr.server"))
        .await
        .expect("the cluster's servers");
}

/// Fills in the reason of `form` and submits it; the flash message it leads to.
async fn submit_with_reason(b: &fantoccini::Client, form: &str, reason: &str) -> String {
    b.find(Locator::Css(&format!("{form} input[name=reason]")))
        .await
        .unwrap()
        .send_keys(reason)
        .await
        .unwrap();
    b.find(Locator::Css(&format!("{form} button")))
        .await
        .unwrap()
        .click()
        .await
        .expect("submit the form");
    b.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#flash"))
        .await
        .expect("a flash message")
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_retries_a_failed_rolling_reboot_from_the_clusters_page() {
    let driver = start_driver().await;
    let (c, failed_id) = failed_on_the_second_member().await;
    let rack = &c.rack;
    let failing = c.names[1].clone();
    let base = rack.api_url.clone();
    let browser = browser(&driver).await;
    let b = &browser;

    // The operator finds the failed run on the clusters page, with the server and the step it failed in.
    login(b, &base, OPERATOR).await;
    let row = open_clusters_page(b).await;
    let text = live_text(b, &row).await.expect("the cluster's row");
    assert!(
        text.contains("rolling_reboot") && text.contains("failed") && text.contains("[1/3]"),
        "{text}"
    );
    let failed_at = live_text(b, &format!("{row} td.failed")).await.unwrap();
    assert_eq!(failed_at, format!("{failing}: evacuate"));
    assert!(text.contains("evacuate failed"), "the first error: {text}");
    // The list refreshes live, like the dead-letter list.
    let updated = || async { live_text(b, "#live .updated").await };
    let first = updated().await.expect("the refresh time");
    wait_for(WAIT, "the clusters list to refresh", || async {
        updated().await.is_some_and(|now| now != first)
    })
    .await;
    screenshot(b, "clusters.png").await;

    // Its dead letters, filtered to the operation and the server.
    click_live(b, &format!("{row} a.dead-letters")).await;
    b.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#deadletters tr.deadletter"))
        .await
        .expect("the failed run's dead letter");
    let dl = live_text(b, "#deadletters tr.deadletter").await.unwrap();
    assert!(dl.contains("rolling_reboot") && dl.contains(&failing), "{dl}");
    let url = b.current_url().await.unwrap();
    assert!(
        url.query().is_some_and(
            |q| q.contains("operation=rolling_reboot") && q.contains(&format!("server={failing}"))
        ),
        "{url}"
    );

    // The cluster's page: each server's record, and the retry form.
    open_cluster_page(b).await;
    assert_eq!(live_text(b, "#op-status").await.as_deref(), Some("failed"));
    let server_row = |i: usize| format!(r#"#servers tr.server[data-name="{}"]"#, c.names[i]);
    assert_eq!(
        live_text(b, &format!("{} td.done", server_row(0)))
            .await
            .as_deref(),
        Some("yes")
    );
    let record = live_text(b, &server_row(1)).await.unwrap();
    assert!(
        record.contains("evacuate") && record.contains("evacuate failed"),
        "{record}"
    );
    assert_eq!(count(b, "form#retry").await, 1, "an operator gets the retry form");
    assert!(
        live_text(b, "#dead-letters").await.is_some(),
        "the link to the dead letters"
    );
    screenshot(b, "cluster.png").await;

    // The member evacuates again: the operator retries with a reason, and the retry completes.
    rack.sim.set_faults(1, Faults::default());
    let said = submit_with_reason(b, "form#retry", "evacuation works again").await;
    assert!(
        said.contains(&format!(
            "operation {failed_id} (rolling_reboot) retried as operation"
        )),
        "{said}"
    );
    wait_for(RUN_LIMIT, "the retried run shown as completed", || async {
        live_text(b, "#op-status").await.as_deref() == Some("completed")
    })
    .await;
    for i in 0..3 {
        assert_eq!(
            live_text(b, &format!("{} td.done", server_row(i)))
                .await
                .as_deref(),
            Some("yes"),
            "{}",
            c.names[i]
        );
    }
    let view = c.show().await;
    assert_ne!(view["operation"]["id"].as_i64(), Some(failed_id), "{view:#}");
    assert_eq!(view["operation"]["requested_by"], "ui-operator", "{view:#}");
    // Every member was rebooted once: the first, done in the failed run, was not rebooted again.
    let audit = rack.sim.cluster_audit(CLUSTER).expect("the cluster's audit");
    assert_eq!(audit.max_evacuated_at_once, 1, "{audit:#?}");
    for i in 0..3 {
        assert_eq!(
            audit.members[&c.hostname(i)].reboots,
            1,
            "{}: {audit:#?}",
            c.names[i]
        );
    }
    browser.close().await.expect("close the browser");
    c.rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_retries_a_failed_rolling_reboot_skipping_the_server_it_failed_on() {
    let driver = start_driver().await;
    let (c, failed_id) = failed_on_the_second_member().await;
    let failing = c.names[1].clone();
    let browser = browser(&driver).await;
    let b = &browser;
    login(b, &c.rack.api_url, OPERATOR).await;
    open_cluster_page(b).await;
    assert_eq!(
        count(b, "form#skip-server").await,
        1,
        "the skip form, for the failed server"
    );
    let offered = live_text(b, "form#skip-server button").await.unwrap();
    assert!(offered.contains(&failing), "{offered}");

    // The member still cannot be evacuated: the operator retries without it.
    let said = submit_with_reason(
        b,
        "form#skip-server",
        "its instances cannot move; fixed by hand later",
    )
    .await;
    assert!(
        said.contains(&format!(
            "operation {failed_id} (rolling_reboot) retried as operation"
        )) && said.contains(&format!("{failing} skipped")),
        "{said}"
    );
    wait_for(RUN_LIMIT, "the retried run shown as completed", || async {
        live_text(b, "#op-status").await.as_deref() == Some("completed")
    })
    .await;
    let done = |i: usize| {
        let cell = format!(r#"#servers tr.server[data-name="{}"] td.done"#, c.names[i]);
        async move { live_text(b, &cell).await }
    };
    assert_eq!(done(0).await.as_deref(), Some("yes"));
    assert_eq!(done(1).await.as_deref(), Some("skipped"));
    assert_eq!(done(2).await.as_deref(), Some("yes"));
    let view = c.show().await;
    assert_eq!(view["operation"]["pending_reboot"], json!([failing]), "{view:#}");
    // The skipped member was neither evacuated again nor rebooted; the others were rebooted once each.
    let audit = c.rack.sim.cluster_audit(CLUSTER).expect("the cluster's audit");
    assert_eq!(audit.max_evacuated_at_once, 1, "{audit:#?}");
    let reboots: Vec<u64> = (0..3).map(|i| audit.members[&c.hostname(i)].reboots).collect();
    assert_eq!(reboots, [1, 0, 1], "{audit:#?}");
    assert_eq!(audit.members[&c.hostname(1)].evacuations, 3, "{audit:#?}");
    browser.close().await.expect("close the browser");
    c.rack.stop().await;
}

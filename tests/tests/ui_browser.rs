//! The operator dashboard in a real browser: headless Chromium driven through chromedriver (WebDriver) against a
//! whole rack whose deployment failed for real (the BMC refuses every write, so the retries run out and the step
//! job is dead-lettered). A viewer sees the dead letter but no action form, and a POST forged from its page is
//! refused; an operator opens the detail, sees the timeline, retries with a reason once the BMC is healthy again,
//! sees the item leave the open list, and the deployment completes.
//!
//! Needs the Debian packages `chromium` and `chromium-driver` (CI installs them); without chromedriver the test
//! fails saying so. With `RACKLIFT_SCREENSHOTS=1` it rewrites the runbook's screenshots in `ops/runbook/`.

use std::time::Duration;

use fantoccini::{Client, Locator};
use racklift_bmc_sim::{Faults, Personality, PersonalityChoice};
use racklift_deploy::State;
use racklift_store::Role;
use racklift_tests::browser::{WAIT, browser, count, live_text, login, logout, screenshot, start_driver};
use racklift_tests::rack::Rack;
use racklift_tests::wait_for;
use serde_json::json;

const OPERATOR: &str = "ui-operator-secret";
const VIEWER: &str = "ui-viewer-secret";

/// What the browser holds and enforces after a login: an opaque session cookie it keeps from scripts and other
/// sites, a policy under which the dashboard cannot be framed, and the pages still styled and live-refreshing
/// with no inline code.
async fn session_is_hardened(c: &Client) {
    let cookie = c
        .get_named_cookie("racklift_session")
        .await
        .expect("the session cookie");
    let id = cookie.value();
    assert!(
        id != OPERATOR && !id.contains(OPERATOR),
        "the cookie holds the token"
    );
    assert!(
        id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    assert_eq!(cookie.secure(), Some(true), "Secure");
    assert_eq!(cookie.http_only(), Some(true), "HttpOnly");
    assert_eq!(
        cookie.same_site().map(|s| s.to_string()).as_deref(),
        Some("Strict")
    );
    assert_eq!(cookie.path(), Some("/ui"));
    let seen = c
        .execute("return document.cookie;", vec![])
        .await
        .expect("read document.cookie");
    assert!(
        !seen.as_str().unwrap_or_default().contains("racklift_session"),
        "{seen}"
    );

    let csp = c
        .execute_async(
            "const done = arguments[arguments.length - 1]; \
             fetch('/ui/login').then(r => done(r.headers.get('content-security-policy')));",
            vec![],
        )
        .await
        .expect("read the policy");
    assert!(
        csp.as_str().is_some_and(|p| p.contains("frame-ancestors 'none'")),
        "{csp}"
    );
    // A frame of a dashboard page stays empty, while the same origin's JSON (no such policy) is framed: the
    // check can tell the two apart, so the refusal is the policy's doing.
    let framed = |src: &'static str| async move {
        c.execute_async(
            "const [src, done] = arguments; const f = document.createElement('iframe'); \
             f.onload = () => { let d = null; try { d = f.contentDocument; } catch (e) {} \
               done(d && d.body ? d.body.innerText.length > 0 : false); }; \
             f.src = src; document.body.appendChild(f);",
            vec![json!(src)],
        )
        .await
        .expect("frame a page")
    };
    assert_eq!(
        framed("/ui/login").await,
        json!(false),
        "the login page was framed"
    );
    assert_eq!(
        framed("/1.0/openapi.json").await,
        json!(true),
        "a same-origin frame failed"
    );

    // The stylesheet applies and the live part refreshes: both came from /ui/assets under the policy.
    let background = c
        .execute(
            "return getComputedStyle(document.querySelector('header')).backgroundColor;",
            vec![],
        )
        .await
        .expect("header style");
    assert_eq!(background, json!("rgb(29, 36, 51)"));
    let updated = || async { live_text(c, "#live .updated").await };
    let first = updated().await.expect("the refresh time");
    wait_for(WAIT, "the live part to refresh", || async {
        updated().await.is_some_and(|now| now != first)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_triages_a_failed_deployment_in_the_browser() {
    let driver = start_driver().await;
    let rack = Rack::start(1, PersonalityChoice::Single(Personality::Generic), 0.01).await;
    for (name, secret, role) in [
        ("ui-operator", OPERATOR, Role::Operator),
        ("ui-viewer", VIEWER, Role::Viewer),
    ] {
        rack.store
            .put_api_token(name, secret, role)
            .await
            .expect("API token");
    }
    let name = rack.sim.name(0).to_owned();
    let failed = rack.deploy_into_failure(0).await;
    let id: i64 =
        sqlx::query_scalar("SELECT id FROM dead_letters WHERE server = $1 AND triage_status = 'open'")
            .bind(&name)
            .fetch_one(&rack.db.pool)
            .await
            .expect("the deployment's dead letter");
    let row = format!(r#"tr.deadletter[data-id="{id}"]"#);
    let base = rack.api_url.clone();
    let c = browser(&driver).await;

    // The operator sees it listed, then its detail with the timeline.
    login(&c, &base, OPERATOR).await;
    session_is_hardened(&c).await;
    let text = live_text(&c, &row).await.expect("the dead letter is listed");
    assert!(text.contains(&name) && text.contains("ApplyBIOS"), "{text}");
    screenshot(&c, "deadletters.png").await;
    // Clicked in the page's own script: the row lives in the refreshing part, so a handle to it
    // taken in one WebDriver call may be stale by the next.
    c.execute(
        "document.querySelector(arguments[0]).click();",
        vec![json!(format!("{row} a.detail"))],
    )
    .await
    .expect("open the detail");
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#timeline tr.event"))
        .await
        .expect("the timeline");
    let timeline = c
        .find(Locator::Css("#timeline"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        timeline.contains("transition") && timeline.contains("bmc_call"),
        "{timeline}"
    );
    assert!(timeline.contains("Failed"), "{timeline}");
    assert_eq!(
        count(&c, "form#retry").await,
        1,
        "an operator gets the retry form"
    );
    screenshot(&c, "detail.png").await;
    logout(&c).await;

    // A viewer sees the same pages without any action form, and a POST forged from its page is refused.
    login(&c, &base, VIEWER).await;
    c.goto(&format!("{base}/ui?server={name}")).await.unwrap();
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(&row))
        .await
        .expect("listed for the viewer");
    assert_eq!(
        count(&c, "form#bulk-retry").await,
        0,
        "no bulk retry for a viewer"
    );
    c.goto(&format!("{base}/ui/deadletters/{id}")).await.unwrap();
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#timeline tr.event"))
        .await
        .expect("the viewer's detail");
    for form in ["form#retry", "form#discard", "form#cancel"] {
        assert_eq!(count(&c, form).await, 0, "{form} shown to a viewer");
    }
    let forged = c
        .execute(
            "const csrf = document.querySelector('input[name=csrf]').value; \
             return fetch(arguments[0], { method: 'POST', credentials: 'same-origin', \
               headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, \
               body: 'reason=forged&csrf=' + csrf }).then(r => r.status);",
            vec![json!(format!("/ui/deadletters/{id}/retry"))],
        )
        .await
        .expect("forge a POST");
    assert_eq!(forged, json!(403), "a viewer's POST is refused");
    logout(&c).await;

    // The BMC is healthy again: the operator retries, and the item leaves the open list.
    rack.sim.set_faults(0, Faults::default());
    login(&c, &base, OPERATOR).await;
    c.goto(&format!("{base}/ui/deadletters/{id}")).await.unwrap();
    let reason = c
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("form#retry input[name=reason]"))
        .await
        .unwrap();
    reason.send_keys("BMC writes work again").await.unwrap();
    c.find(Locator::Css("form#retry button"))
        .await
        .unwrap()
        .click()
        .await
        .expect("submit the retry");
    let flash = c
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#flash"))
        .await
        .expect("a flash message");
    let said = flash.text().await.unwrap();
    assert!(said.contains(&format!("dead letter {id} retried")), "{said}");
    wait_for(WAIT, "the retried dead letter to leave the open list", || async {
        count(&c, &row).await == 0
    })
    .await;
    let resumed = rack
        .store
        .latest_deployment(&name)
        .await
        .unwrap()
        .expect("the deployment");
    assert_eq!(resumed.id, failed.id);
    assert_ne!(
        resumed.deployment.machine.state,
        State::Failed,
        "the deployment resumed"
    );
    let done = rack.wait_finished(&name, Duration::from_secs(120)).await;
    assert_eq!(
        done.deployment.machine.state,
        State::Completed,
        "{:?}",
        done.deployment.machine
    );
    let by: String = sqlx::query_scalar("SELECT actor FROM triage_actions WHERE dead_letter_id = $1")
        .bind(id)
        .fetch_one(&rack.db.pool)
        .await
        .unwrap();
    assert_eq!(by, "ui-operator");

    // Time per state, from the header: the completed deployment's states are measured.
    c.find(Locator::Css("#nav-stats"))
        .await
        .expect("the time-per-state link")
        .click()
        .await
        .expect("open time per state");
    let measured = c
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(
            r#"#durations tr.duration[data-state="WaitInstall"]"#,
        ))
        .await
        .expect("WaitInstall is measured");
    let text = measured.text().await.expect("row text");
    assert!(text.contains("WaitInstall"), "{text}");
    screenshot(&c, "state-durations.png").await;

    c.close().await.expect("close the browser");
    rack.stop().await;
}

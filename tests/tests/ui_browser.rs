//! The operator dashboard in a real browser: headless Chromium driven through chromedriver (WebDriver) against a
//! whole rack whose deployment failed for real (the BMC refuses every write, so the retries run out and the step
//! job is dead-lettered). A viewer sees the dead letter but no action form, and a POST forged from its page is
//! refused; an operator opens the detail, sees the timeline, retries with a reason once the BMC is healthy again,
//! sees the item leave the open list, and the deployment completes.
//!
//! The clusters page: a rolling reboot fails on a member whose evacuation keeps failing; the operator finds it
//! on `/ui/clusters` with the failed server and step, follows it to its dead letters, and once the member is
//! healthy retries it from the cluster's page with a reason; the retry completes without rebooting the member
//! the failed run had already restarted.
//!
//! Needs the Debian packages `chromium` and `chromium-driver` (CI installs them); without chromedriver the test
//! fails saying so. With `RACKLIFT_SCREENSHOTS=1` it rewrites the runbook's screenshots in `ops/runbook/`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use racklift_bmc_sim::{Faults, Personality, PersonalityChoice};
use racklift_deploy::State;
use racklift_store::Role;
use racklift_tests::cluster::{CLUSTER, ClusterRack};
use racklift_tests::rack::Rack;
use racklift_tests::wait_for;
use serde_json::{Value, json};

const OPERATOR: &str = "ui-operator-secret";
const VIEWER: &str = "ui-viewer-secret";
const WAIT: Duration = Duration::from_secs(30);

/// chromedriver from `CHROMEDRIVER` or the PATH; a missing one is a broken test machine, not a pass.
fn chromedriver() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMEDRIVER") {
        return p.into();
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("chromedriver"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "chromedriver is not installed: this test needs the Debian packages `chromium` and \
                 `chromium-driver` (apt-get install -y chromium chromium-driver), or CHROMEDRIVER=<path>"
            )
        })
}

/// A chromedriver child on a free port, killed when dropped.
struct Driver {
    _child: tokio::process::Child,
    url: String,
}

async fn start_driver() -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = tokio::process::Command::new(chromedriver())
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start chromedriver");
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    wait_for(WAIT, "chromedriver to answer /status", || async {
        match http.get(format!("{url}/status")).send().await {
            Ok(r) => r
                .json::<Value>()
                .await
                .is_ok_and(|v| v["value"]["ready"] == json!(true)),
            Err(_) => false,
        }
    })
    .await;
    Driver { _child: child, url }
}

async fn browser(driver: &Driver) -> Client {
    let mut options = json!({ "args": ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                       "--disable-background-networking", "--window-size=1400,1000"] });
    if std::path::Path::new("/usr/bin/chromium").exists() {
        options["binary"] = json!("/usr/bin/chromium");
    }
    // ring and aws-lc-rs are both linked (fantoccini's TLS stack brings the second), so rustls cannot pick a
    // default provider itself; chromedriver is plain HTTP on loopback anyway.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".into(), options);
    // The rack's API serves a self-signed certificate (WebDriver's standard capability for that).
    caps.insert("acceptInsecureCerts".into(), json!(true));
    ClientBuilder::rustls()
        .expect("TLS roots")
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a Chromium session through chromedriver")
}

async fn login(c: &Client, base: &str, secret: &str) {
    c.goto(&format!("{base}/ui")).await.expect("open /ui");
    // No session yet: the dashboard sends the browser to the login form.
    let token = c
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#token"))
        .await
        .expect("the login form");
    token.send_keys(secret).await.expect("type the token");
    c.find(Locator::Css("#login"))
        .await
        .expect("login button")
        .click()
        .await
        .expect("log in");
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#deadletters"))
        .await
        .expect("the dead-letter list after logging in");
}

async fn logout(c: &Client) {
    c.find(Locator::Css("header form button"))
        .await
        .expect("logout button")
        .click()
        .await
        .expect("log out");
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#token"))
        .await
        .expect("back at the login form");
}

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

/// The text of the first element matching `css`, read in one script: the live part replaces its
/// nodes on every refresh, so an element found in one WebDriver call can be gone by the next.
async fn live_text(c: &Client, css: &str) -> Option<String> {
    let text = c
        .execute(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
            vec![json!(css)],
        )
        .await
        .expect("read the page");
    text.as_str().map(str::to_owned)
}

async fn count(c: &Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.map(|v| v.len()).unwrap_or(0)
}

async fn screenshot(c: &Client, name: &str) {
    if std::env::var("RACKLIFT_SCREENSHOTS").as_deref() != Ok("1") {
        return;
    }
    let png = c.screenshot().await.expect("screenshot");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ops/runbook")
        .join(name);
    std::fs::create_dir_all(path.parent().unwrap()).expect("ops/runbook");
    std::fs::write(&path, png).expect("write the screenshot");
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

/// The ends of a run, for a cluster test: ample for a run of three members at the cluster's time scale.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Budgets short enough for a failing evacuation to end a run within a test (as `cluster_rolling.rs` has them).
fn short_budgets() -> racklift_deploy::Config {
    let mut config = racklift_deploy::Config::for_simulation(0.002);
    config.rolling.reboot_timeout_secs = 8;
    config.rolling.evacuate_timeout_secs = 8;
    config.rolling.restore_timeout_secs = 8;
    config.rolling.health_gate_timeout_secs = 4;
    config.rolling.step_retries = 2;
    config
}

/// Clicks the first element matching `css` in the page's own script (it may live in the refreshing part).
async fn click_live(c: &Client, css: &str) {
    let clicked = c
        .execute(
            "const e = document.querySelector(arguments[0]); if (!e) { return false; } e.click(); return true;",
            vec![json!(css)],
        )
        .await
        .expect("click in the page");
    assert_eq!(clicked, json!(true), "nothing to click at {css}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_retries_a_failed_rolling_reboot_from_the_clusters_page() {
    let driver = start_driver().await;
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
    let failed_id = view["operation"]["id"].as_i64().unwrap();
    let failing = c.names[1].clone();
    let base = rack.api_url.clone();
    let browser = browser(&driver).await;
    let b = &browser;

    // The operator finds the failed run on the clusters page, with the server and the step it failed in.
    login(b, &base, OPERATOR).await;
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
    b.find(Locator::Css("#nav-clusters"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(&row))
        .await
        .unwrap();
    click_live(b, &format!("{row} a.detail")).await;
    b.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#servers tr.server"))
        .await
        .expect("the cluster's servers");
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
    b.find(Locator::Css("form#retry input[name=reason]"))
        .await
        .unwrap()
        .send_keys("evacuation works again")
        .await
        .unwrap();
    b.find(Locator::Css("form#retry button"))
        .await
        .unwrap()
        .click()
        .await
        .expect("submit the retry");
    let flash = b
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#flash"))
        .await
        .expect("a flash message");
    let said = flash.text().await.unwrap();
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

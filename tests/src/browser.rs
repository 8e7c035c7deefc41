//! Headless Chromium for the dashboard's browser tests: chromedriver on a free port, a session, logging in and
//! out, and reading or clicking the 5-second-refreshing part of a page in one script (an element found by one
//! WebDriver call can be replaced before the next).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::wait_for;

/// How long a page element is waited for.
pub const WAIT: Duration = Duration::from_secs(30);

/// chromedriver from `CHROMEDRIVER` or the PATH; a missing one is a broken test machine, not a pass.
pub fn chromedriver() -> PathBuf {
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
pub struct Driver {
    _child: tokio::process::Child,
    pub url: String,
}

pub async fn start_driver() -> Driver {
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

pub async fn browser(driver: &Driver) -> Client {
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

pub async fn login(c: &Client, base: &str, secret: &str) {
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

pub async fn logout(c: &Client) {
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

/// The text of the first element matching `css`, read in one script: the live part replaces its
/// nodes on every refresh, so an element found in one WebDriver call can be gone by the next.
pub async fn live_text(c: &Client, css: &str) -> Option<String> {
    let text = c
        .execute(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
            vec![json!(css)],
        )
        .await
        .expect("read the page");
    text.as_str().map(str::to_owned)
}

pub async fn count(c: &Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.map(|v| v.len()).unwrap_or(0)
}

pub async fn screenshot(c: &Client, name: &str) {
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

/// Clicks the first element matching `css` in the page's own script (it may live in the refreshing part).
pub async fn click_live(c: &Client, css: &str) {
    let clicked = c
        .execute(
            "const e = document.querySelector(arguments[0]); if (!e) { return false; } e.click(); return true;",
            vec![json!(css)],
        )
        .await
        .expect("click in the page");
    assert_eq!(clicked, json!(true), "nothing to click at {css}");
}

//! The media server: HTTP Range (single, multipart, unsatisfiable) and the recorded distinct bytes.

mod common;

use std::time::Duration;

use common::{Api, OPERATOR, catalog, set_public_address};
use racklift_bmc_sim::{Personality, PersonalityChoice, Sim, SimConfig};
use reqwest::Method;
use reqwest::header::{ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, RANGE};
use serde_json::json;

/// The image's size: the least a seed partition allows, plus an odd tail.
const LEN: usize = common::IMAGE_MIN + 100_000;

/// Which listener a test reads the media from.
#[derive(Clone, Copy, Debug)]
enum Listener {
    /// The API's own (hyper, the body read into memory).
    Api,
    /// The plain media listener (the body sent from the file).
    Media,
}

#[tokio::test]
async fn ranges_are_served_and_recorded_by_the_api_listener() {
    ranges_are_served_and_recorded(Listener::Api).await;
}

#[tokio::test]
async fn ranges_are_served_and_recorded_by_the_media_listener() {
    ranges_are_served_and_recorded(Listener::Media).await;
}

async fn ranges_are_served_and_recorded(listener: Listener) {
    let api = Api::start().await;
    let sim =
        Sim::start(SimConfig::new(1, PersonalityChoice::Single(Personality::Generic)).with_time_scale(0.001))
            .await
            .unwrap();
    let (token, _) = catalog(&api, &sim, LEN).await;
    set_public_address(&api).await;
    let r = api
        .req(
            Method::POST,
            "/1.0/provisioning/servers/node1:deploy",
            Some(OPERATOR),
        )
        .json(&json!({ "token": token, "seed": "web" }));
    let (s, d) = common::read(r.send().await.unwrap()).await;
    assert_eq!(s, 202, "{d}");
    let id = d["id"].as_i64().unwrap();
    let secret: String = sqlx::query_scalar("SELECT media_secret FROM deployments WHERE id = $1")
        .bind(id)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    let base = match listener {
        Listener::Api => api.base.clone(),
        Listener::Media => api.media_base.clone(),
    };
    let media = |method: Method, path: &str| api.http.request(method, format!("{base}{path}"));
    let url = format!("/media/{secret}/incusos.img");
    // What every answer is checked against: the image with this deployment's seed over partition 2.
    let composed = api.composed_media(&secret).await;
    assert_eq!(composed.len(), LEN);
    let byte = |i: usize| composed[i];

    // Unknown secret.
    let r = media(Method::GET, "/media/nope/incusos.img")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);

    // HEAD: headers only.
    let r = media(Method::HEAD, &url).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()[ACCEPT_RANGES], "bytes");
    assert_eq!(r.headers()[CONTENT_LENGTH], LEN.to_string().as_str());

    // Single range.
    let r = media(Method::GET, &url)
        .header(RANGE, "bytes=10-19")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(r.headers()[CONTENT_RANGE], format!("bytes 10-19/{LEN}"));
    let body = r.bytes().await.unwrap();
    assert_eq!(body.as_ref(), (10..20).map(byte).collect::<Vec<_>>().as_slice());

    // Multiple ranges: multipart/byteranges with one part per range.
    let r = media(Method::GET, &url)
        .header(RANGE, "bytes=0-4, 1000-1009")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 206);
    let ct = r.headers()[CONTENT_TYPE].to_str().unwrap().to_owned();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect("multipart")
        .to_owned();
    let length = r.content_length();
    let body = r.bytes().await.unwrap();
    assert_eq!(length, Some(body.len() as u64));
    let parts: Vec<&[u8]> = split(&body, format!("--{boundary}").as_bytes());
    assert_eq!(parts.len(), 4, "preamble, two parts, closing");
    for (part, (start, end)) in parts[1..3].iter().zip([(0usize, 4usize), (1000, 1009)]) {
        let text = String::from_utf8_lossy(part);
        assert!(
            text.contains(&format!("Content-Range: bytes {start}-{end}/{LEN}")),
            "{text}"
        );
        let data_at = find(part, b"\r\n\r\n").unwrap() + 4;
        let data = &part[data_at..part.len() - 2];
        assert_eq!(data, (start..=end).map(byte).collect::<Vec<_>>().as_slice());
    }
    assert!(parts[3].starts_with(b"--"));

    // A range across the seed's first byte: the image's bytes, then the seed's.
    let seed_at = api
        .store
        .media_target(&secret)
        .await
        .unwrap()
        .unwrap()
        .seed_offset
        .unwrap() as usize;
    let r = media(Method::GET, &url)
        .header(RANGE, format!("bytes={}-{}", seed_at - 5, seed_at + 5))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 206);
    let body = r.bytes().await.unwrap();
    assert_eq!(body.as_ref(), &composed[seed_at - 5..=seed_at + 5]);

    // Unsatisfiable.
    let r = media(Method::GET, &url)
        .header(RANGE, format!("bytes={}-", LEN + 10))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 416);
    assert_eq!(r.headers()[CONTENT_RANGE], format!("bytes */{LEN}"));
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "range_not_satisfiable");

    // Distinct bytes: 10 + 5 + 10 + 11 (ranges do not overlap), flushed within the deadline.
    let pool = api.db.pool.clone();
    let read: i64 = common::wait_for("media reads flushed", Duration::from_secs(10), || {
        let pool = pool.clone();
        async move {
            let n: Option<i64> = sqlx::query_scalar(
                "SELECT sum(bytes_read)::bigint FROM media_reads WHERE deployment_id = $1",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
            n.filter(|n| *n >= 36)
        }
    })
    .await;
    assert_eq!(read, 36);
    let source: String = sqlx::query_scalar("SELECT source FROM media_reads WHERE deployment_id = $1")
        .bind(id)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(source, "127.0.0.1");
    let (_, v) = api
        .call(Method::GET, "/1.0/servers/node1", common::VIEWER, None)
        .await;
    assert_eq!(v["deployment"]["media_bytes_read"], 36);
    assert_eq!(v["deployment"]["media_size"], LEN);

    // A full read counts the whole image once.
    let body = media(Method::GET, &url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body.len(), LEN);
    let pool = api.db.pool.clone();
    common::wait_for("full read flushed", Duration::from_secs(10), || {
        let pool = pool.clone();
        async move {
            let n: Option<i64> = sqlx::query_scalar(
                "SELECT sum(bytes_read)::bigint FROM media_reads WHERE deployment_id = $1",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
            n.filter(|n| *n == LEN as i64)
        }
    })
    .await;

    // A finished deployment's URL stops serving (within the second a resolution is reused).
    sqlx::query("UPDATE deployments SET finished_at = now() WHERE id = $1")
        .bind(id)
        .execute(&api.db.pool)
        .await
        .unwrap();
    common::wait_for(
        "the finished deployment's media to go",
        Duration::from_secs(10),
        || async {
            let r = media(Method::GET, &url).send().await.ok()?;
            (r.status().as_u16() == 404).then_some(())
        },
    )
    .await;
    api.stop().await;
    sim.shutdown().await;
}

/// The value of an unlabelled sample in the text exposition format.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn scrape(api: &Api) -> String {
    // No bearer token: Prometheus and the kubelet's probes scrape without one.
    let r = api.req(Method::GET, "/metrics", None).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(
        r.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    r.text().await.unwrap()
}

#[tokio::test]
async fn metrics_count_media_bytes_and_sample_the_queue() {
    let api = Api::start().await;
    let sim =
        Sim::start(SimConfig::new(1, PersonalityChoice::Single(Personality::Generic)).with_time_scale(0.001))
            .await
            .unwrap();
    let (token, _) = catalog(&api, &sim, LEN).await;
    set_public_address(&api).await;
    let r = api
        .req(
            Method::POST,
            "/1.0/provisioning/servers/node1:deploy",
            Some(OPERATOR),
        )
        .json(&json!({ "token": token, "seed": "web" }));
    let (s, d) = common::read(r.send().await.unwrap()).await;
    assert_eq!(s, 202, "{d}");
    let secret: String = sqlx::query_scalar("SELECT media_secret FROM deployments WHERE id = $1")
        .bind(d["id"].as_i64().unwrap())
        .fetch_one(&api.db.pool)
        .await
        .unwrap();

    let before = sample(&scrape(&api).await, "racklift_media_bytes_served_total").expect("media counter");
    let r = api
        .req(Method::GET, &format!("/media/{secret}/incusos.img"), None)
        .header(RANGE, "bytes=0-999")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(r.bytes().await.unwrap().len(), 1000);

    let text = scrape(&api).await;
    let after = sample(&text, "racklift_media_bytes_served_total").expect("media counter");
    // Other tests in this binary serve media too: at least these 1000 bytes were added.
    assert!(after - before >= 1000.0, "{before} -> {after}");
    // The deployment's first step waits in the queue (no worker runs here), read from the database.
    assert!(
        text.contains("racklift_queue_jobs{kind=\"deployment.step\",state=\"queued\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("racklift_queue_oldest_due_seconds{kind=\"deployment.step\"}"),
        "{text}"
    );
    assert!(
        text.contains("racklift_dead_letters_open{kind=\"bmc.action\"} 0"),
        "{text}"
    );
    assert!(text.contains("racklift_deployments{state="), "{text}");
    api.stop().await;
    sim.shutdown().await;
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn split<'a>(mut hay: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    while let Some(i) = find(hay, sep) {
        out.push(&hay[..i]);
        hay = &hay[i + sep.len()..];
    }
    out.push(hay);
    out
}

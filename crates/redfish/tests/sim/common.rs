//! Shared helpers: starting a fleet, building clients, bounded polling, and a Range-capable
//! image server for the Upload (Dell-like) BMCs, which copy the image at insert.

use std::future::Future;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use racklift_bmc_sim::{PersonalityChoice, Sim, SimConfig, SimHandle};
use racklift_redfish::{BmcClient, BmcConfig, Credentials, Fence, RetryPolicy, TlsMode};

/// Nominal machine timings run 100× faster: power changes in ~30 ms, POST in ~0.3 s.
pub const TIME_SCALE: f64 = 0.01;

/// Starts `n` BMCs with the given personality choice.
pub async fn fleet(n: usize, choice: &str) -> SimHandle {
    let choice: PersonalityChoice = choice.parse().expect("personality");
    Sim::start(SimConfig::new(n, choice).with_time_scale(TIME_SCALE))
        .await
        .expect("sim starts")
}

/// The configuration tests use: short deadline, fast polite retries.
pub fn config(sim: &SimHandle, i: usize) -> BmcConfig {
    let (user, pass) = sim.credentials();
    let mut config = BmcConfig::new(
        sim.name(i),
        sim.bmc_url(i),
        Credentials::new(user, pass),
        TlsMode::WebPkiRoots,
    );
    config.call_deadline = Duration::from_secs(10);
    config.retry = RetryPolicy {
        max_retries: 2,
        min_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    };
    config
}

/// A fenced client for BMC `i`.
pub fn client(sim: &SimHandle, i: usize) -> BmcClient {
    BmcClient::new(config(sim, i))
        .expect("client")
        .with_fence(Fence(1))
}

/// Polls `check` every 10 ms until it holds; fails the test after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Size of the served image.
pub const IMAGE_SIZE: u64 = 2 << 20;

/// Serves `/<anything>.iso` as `IMAGE_SIZE` zero bytes, honouring `Range: bytes=a-b`.
/// Returns the base URL (`http://127.0.0.1:PORT`).
pub async fn image_server() -> String {
    let app = axum::Router::new().fallback(serve_image);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind image server");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn serve_image(headers: HeaderMap) -> Response {
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.split_once('-'))
        .and_then(|(a, b)| {
            let start: u64 = a.parse().ok()?;
            let end: u64 = if b.is_empty() {
                IMAGE_SIZE - 1
            } else {
                b.parse().ok()?
            };
            Some((start, end.min(IMAGE_SIZE - 1)))
        });
    match range {
        Some((start, end)) if start <= end => {
            let len = usize::try_from(end - start + 1).expect("len");
            (
                StatusCode::PARTIAL_CONTENT,
                [
                    (header::CONTENT_RANGE, format!("bytes {start}-{end}/{IMAGE_SIZE}")),
                    (header::ACCEPT_RANGES, "bytes".to_owned()),
                ],
                vec![0u8; len],
            )
                .into_response()
        }
        Some(_) => StatusCode::RANGE_NOT_SATISFIABLE.into_response(),
        None => (
            StatusCode::OK,
            [(header::ACCEPT_RANGES, "bytes")],
            vec![0u8; usize::try_from(IMAGE_SIZE).expect("size")],
        )
            .into_response(),
    }
}

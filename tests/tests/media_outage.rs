//! An install outlives a database outage. A Lenovo-like BMC reads its installation media over the whole install;
//! while it does, the test's PostgreSQL is stopped for longer than a BMC retries a failed read (the simulator's
//! installer gives up about a simulated minute after the first failure, 0.6 s here). The media server keeps
//! serving the deployment it resolved before the outage, so no read fails and none is retried; the media read
//! progress bought meanwhile reaches the database once it is back, and the deployment completes.

use std::time::{Duration, Instant};

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_pgembed::EmbeddedPostgres;
use racklift_tests::rack::Rack;
use serde_json::{Value, json};

const SCALE: f64 = 0.01;
/// Longer than the simulated BMC's whole retry schedule (62 simulated seconds) at [`SCALE`], several times over.
const OUTAGE: Duration = Duration::from_secs(3);

fn counter(truth: &Value, name: &str) -> u64 {
    truth["counters"][name].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_install_reading_its_media_outlives_a_database_outage() {
    // A server of the test's own, so stopping it touches no other test's database.
    let dir = std::env::temp_dir().join(format!("racklift-media-outage-{}", uuid::Uuid::new_v4()));
    let pg = EmbeddedPostgres::start(&dir).expect("start a PostgreSQL of the test's own");
    let db = racklift_testdb::TestDb::new_on(&pg.admin_url()).await;
    let rack = Rack::start_on(db, 1, PersonalityChoice::Single(Personality::Lenovo), SCALE).await;
    let _worker = rack.worker_process(SCALE, &[]);
    let name = rack.sim.name(0).to_owned();
    assert_eq!(rack.deploy(&name, json!({})).await.status(), 202);

    // Installing, with some of the image read and most of it still to come.
    racklift_tests::wait_for(
        Duration::from_secs(60),
        "the installer reading its media",
        || async {
            let t = rack.sim.truth(0);
            t["phase"]["phase"] == "installing" && counter(&t, "media_range_requests") >= 4
        },
    )
    .await;
    let before = rack.sim.truth(0);

    tokio::task::block_in_place(|| pg.stop()).expect("stop PostgreSQL");
    let stopped = Instant::now();
    // The outage lasts OUTAGE, and the installer reads across it.
    racklift_tests::wait_for(OUTAGE * 3, "reads during an outage of OUTAGE", || async {
        stopped.elapsed() >= OUTAGE
            && counter(&rack.sim.truth(0), "media_bytes_read") > counter(&before, "media_bytes_read")
    })
    .await;
    let during = rack.sim.truth(0);
    tokio::task::block_in_place(|| pg.start_again()).expect("start PostgreSQL again");

    assert_eq!(
        during["phase"]["phase"], "installing",
        "the install failed while the database was away: {during:#}"
    );
    assert_eq!(
        counter(&during, "media_read_retries"),
        0,
        "no media read failed while the database was away: {during:#}"
    );
    assert!(
        counter(&during, "media_bytes_read") > counter(&before, "media_bytes_read"),
        "the installer kept reading while the database was away\nbefore: {before:#}\nduring: {during:#}"
    );

    rack.wait_completed(&name, Duration::from_secs(120)).await;
    let after = rack.sim.truth(0);
    assert_eq!(counter(&after, "installer_runs"), 1, "{after:#}");
    assert_eq!(counter(&after, "media_read_retries"), 0, "{after:#}");
    assert_eq!(after["registered"], true, "{after:#}");

    rack.stop().await;
    pg.stop().expect("stop the test's PostgreSQL");
    let _ = std::fs::remove_dir_all(pg.root());
    let _ = std::fs::remove_dir_all(&dir);
}

//! A rolling reboot survives what takes its driver away: `kill -9` of the `racklift worker` process holding the
//! cluster's job, twice, while other workers run; and PostgreSQL restarting under the API and the workers, twice.
//! And the worker holding the run cut off from PostgreSQL (no FIN, no RST) right after it asked a member to
//! reboot, before it could record what it saw. The run must finish, every member rebooted exactly once, never two
//! members out at once, and no Incus mutation stale or unfenced (the simulator's cluster audit).

use std::time::Duration;

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_netfault::FreezableProxy;
use racklift_pgembed::EmbeddedPostgres;
use racklift_tests::Racklift;
use racklift_tests::cluster::{CLUSTER, form_cluster, start_reboot};
use racklift_tests::rack::Rack;
use serde_json::Value;

const SCALE: f64 = 0.01;
const MEMBERS: usize = 4;

fn worker(rack: &Rack) -> Racklift {
    rack.worker_process(SCALE, &[])
}

/// The pid of the worker process holding the cluster's job, once one does.
async fn holder(rack: &Rack) -> i32 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let leased: Option<String> =
            sqlx::query_scalar("SELECT leased_by FROM jobs WHERE resource_key = $1 AND state = 'running'")
                .bind(format!("cluster/{CLUSTER}"))
                .fetch_optional(&rack.db.pool)
                .await
                .ok()
                .flatten();
        if let Some(pid) = leased.and_then(|l| l.split(':').nth(1).and_then(|p| p.parse().ok())) {
            return pid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no worker took the cluster's job"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn operation(rack: &Rack) -> Value {
    let view: Value = rack
        .admin(
            reqwest::Method::GET,
            format!("/1.0/provisioning/clusters/{CLUSTER}"),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    view["operation"].clone()
}

async fn wait_done(rack: &Rack, done: u64) {
    racklift_testdb::wait_for(Duration::from_secs(120), "members done", || async {
        let op = operation(rack).await;
        op["done"].as_u64() >= Some(done) || op["status"] != "running"
    })
    .await;
}

/// Deploys the rack's servers, forms them into one cluster, creates it in racklift and starts a rolling reboot.
/// The servers' names.
async fn start_rolling_reboot(rack: &Rack) -> Vec<String> {
    rack.deploy_all().await;
    let names = form_cluster(rack, MEMBERS, Duration::from_secs(180), None).await;
    start_reboot(rack).await;
    names
}

/// Waits for the run's end and checks it completed as if nothing had happened: one member out at a time,
/// every Incus mutation fenced and current, each member evacuated, rebooted and restored exactly once.
async fn assert_completed_once_each(rack: &Rack, names: &[String]) {
    racklift_testdb::wait_for(Duration::from_secs(180), "the run's end", || async {
        operation(rack).await["status"] != "running"
    })
    .await;
    let op = operation(rack).await;
    assert_eq!(op["status"], "completed", "{op:#}");
    let audit = rack.sim.cluster_audit(CLUSTER).unwrap();
    assert_eq!(audit.max_evacuated_at_once, 1, "{audit:#?}");
    assert_eq!(audit.unfenced_mutations, 0, "{audit:#?}");
    assert!(audit.stale_mutations.is_empty(), "{audit:#?}");
    for (i, name) in names.iter().enumerate() {
        let hostname = rack.sim.truth(i)["os"]["hostname"].as_str().unwrap().to_owned();
        let counts = &audit.members[&hostname];
        assert_eq!(counts.reboots, 1, "{name}: {audit:#?}");
        assert_eq!(counts.evacuations, 1, "{name}: {audit:#?}");
        assert_eq!(counts.restores, 1, "{name}: {audit:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_worker_that_drives_a_rolling_reboot_loses_nothing() {
    let rack = Rack::start_with(
        MEMBERS,
        PersonalityChoice::Single(Personality::Generic),
        SCALE,
        false,
    )
    .await;
    let mut workers = vec![worker(&rack), worker(&rack)];
    let names = start_rolling_reboot(&rack).await;

    // Twice: kill the holder of the cluster's job as soon as it holds it, after a member is done, and start a
    // fresh worker so two keep running.
    for done in [0, 1] {
        wait_done(&rack, done).await;
        let pid = holder(&rack).await;
        let at = workers
            .iter()
            .position(|w| w.pid() == pid)
            .expect("the holder is one of the test's workers");
        workers[at].signal("KILL");
        let _ = workers[at].child.wait().await;
        workers.remove(at);
        workers.push(worker(&rack));
    }

    assert_completed_once_each(&rack, &names).await;
    rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restarting_postgresql_mid_run_loses_nothing() {
    // A server of the test's own, so restarting it touches no other test's database.
    let dir = std::env::temp_dir().join(format!("racklift-pg-restart-{}", uuid::Uuid::new_v4()));
    let pg = EmbeddedPostgres::start(&dir).expect("start a PostgreSQL of the test's own");
    let db = racklift_testdb::TestDb::new_on(&pg.admin_url()).await;
    let rack = Rack::start_on(
        db,
        MEMBERS,
        PersonalityChoice::Single(Personality::Generic),
        SCALE,
    )
    .await;
    let _workers = [worker(&rack), worker(&rack)];
    let names = start_rolling_reboot(&rack).await;

    // Twice: as soon as a worker holds the cluster's job, and after two members are done.
    for done in [0, 2] {
        wait_done(&rack, done).await;
        holder(&rack).await;
        let restarted = tokio::task::block_in_place(|| pg.restart());
        restarted.expect("PostgreSQL restarts");
    }

    assert_completed_once_each(&rack, &names).await;
    rack.stop().await;
    pg.stop().expect("stop the test's PostgreSQL");
    let _ = std::fs::remove_dir_all(pg.root());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reboot calls the simulated members have received, all members together.
fn reboots_received(rack: &Rack) -> u64 {
    rack.sim
        .cluster_audit(CLUSTER)
        .map_or(0, |audit| audit.members.values().map(|m| m.reboots).sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cutting_off_the_worker_that_sent_a_reboot_loses_nothing() {
    // Only a later holder's own reads can tell it the member rebooted: the cut-off worker saw the reboot start (or
    // not) and could write none of it. The member is back up before that holder polls it, at the same version,
    // so only the boot time it reports says the reboot happened.
    let rack = Rack::start_with(
        MEMBERS,
        PersonalityChoice::Single(Personality::Generic),
        SCALE,
        false,
    )
    .await;
    let db = reqwest::Url::parse(&rack.db.url).expect("the database URL");
    let upstream = std::net::SocketAddr::new(
        db.host_str()
            .and_then(|h| h.parse().ok())
            .expect("a loopback address"),
        db.port().expect("a port"),
    );
    let proxy = FreezableProxy::start(upstream).await.expect("the proxy");
    let through_proxy = proxy
        .url_for(&rack.db.url, upstream)
        .expect("the URL names the database's port");
    let mut cut_off = rack.worker_process_on(&through_proxy, SCALE, &[]);
    let names = start_rolling_reboot(&rack).await;

    let before = reboots_received(&rack);
    racklift_testdb::wait_for(Duration::from_secs(120), "the first reboot call", || async {
        reboots_received(&rack) > before
    })
    .await;
    proxy.freeze();
    let _takeover = worker(&rack);

    assert_completed_once_each(&rack, &names).await;
    cut_off.signal("KILL");
    let _ = cut_off.child.wait().await;
    rack.stop().await;
}

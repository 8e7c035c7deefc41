//! racklift rides through a database failover, not only a restart: the API and the `racklift worker` processes
//! reach PostgreSQL through HAProxy, whose primary has a synchronous streaming standby. While four deployments of
//! mixed vendors and a rolling reboot of a three-member cluster run, the primary is killed (`kill -9` of every
//! process of it, a host crash) and the standby promoted; the proxy moves to it. It already sends connections to
//! the standby while that is still read-only, and the promotion waits until racklift has had a write refused
//! there. Every committed row survives, every job alive at the crash completes, every deployment completes, the
//! run completes with each member rebooted exactly once and never two out at once, and neither a BMC nor Incus
//! sees a stale or unfenced mutation.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use racklift_bmc_sim::PersonalityChoice;
use racklift_deploy::State;
use racklift_pgembed::haproxy::{HaProxy, Upstream};
use racklift_pgembed::{Node, ReplicatedPostgres};
use racklift_testdb::TestDb;
use racklift_tests::Racklift;
use racklift_tests::cluster::{CLUSTER, form_cluster, start_reboot};
use racklift_tests::rack::Rack;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};

const SCALE: f64 = 0.01;
/// Servers 0..MEMBERS form the cluster; the next DEPLOYMENTS are deployed during the run.
const MEMBERS: usize = 3;
const DEPLOYMENTS: usize = 4;
const LIMIT: Duration = Duration::from_secs(90);

fn worker(rack: &Rack) -> Racklift {
    rack.worker_process(SCALE, &[])
}

/// The cluster's operation as the API shows it; `None` while the API answers with an error (its database is
/// failing over).
async fn operation(rack: &Rack) -> Option<Value> {
    let r = rack
        .admin(
            reqwest::Method::GET,
            format!("/1.0/provisioning/clusters/{CLUSTER}"),
        )
        .send()
        .await
        .ok()?;
    if !r.status().is_success() {
        return None;
    }
    let view: Value = r.json().await.ok()?;
    Some(view["operation"].clone())
}

/// Whether a server log line is a statement refused because the server is in recovery.
fn is_refusal(line: &str) -> bool {
    line.contains("ERROR:") && (line.contains("read-only transaction") || line.contains("during recovery"))
}

/// How many statements a server in recovery refused, by its log.
fn refusals(log: &str) -> usize {
    log.lines().filter(|l| is_refusal(l)).count()
}

/// What the database holds at one moment: each deployment's `seq`, each server's number of events, the
/// operation's `seq`, and the live jobs.
#[derive(Debug)]
struct Committed {
    deployments: BTreeMap<i64, i64>,
    events: BTreeMap<String, i64>,
    operation_seq: i64,
    live_jobs: Vec<i64>,
}

async fn committed(pool: &sqlx::PgPool) -> Result<Committed, sqlx::Error> {
    let deployments: Vec<(i64, i64)> = sqlx::query_as("SELECT id, seq FROM deployments")
        .fetch_all(pool)
        .await?;
    let events: Vec<(String, i64)> =
        sqlx::query_as("SELECT server, count(*) FROM server_events GROUP BY server")
            .fetch_all(pool)
            .await?;
    let operation_seq: i64 = sqlx::query_scalar("SELECT seq FROM cluster_operations WHERE cluster = $1")
        .bind(CLUSTER)
        .fetch_one(pool)
        .await?;
    let live_jobs: Vec<i64> = sqlx::query_scalar("SELECT id FROM jobs ORDER BY id")
        .fetch_all(pool)
        .await?;
    Ok(Committed {
        deployments: deployments.into_iter().collect(),
        events: events.into_iter().collect(),
        operation_seq,
        live_jobs,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_failover_mid_run_loses_nothing() {
    let test_start = Instant::now();
    let mut pg =
        tokio::task::block_in_place(ReplicatedPostgres::start).expect("a primary with a synchronous standby");
    let proxy = HaProxy::start(&[
        Upstream {
            name: "primary",
            port: pg.primary().port(),
            backup: false,
        },
        Upstream {
            name: "standby",
            port: pg.standby().port(),
            backup: true,
        },
    ])
    .expect("HAProxy in front of both");
    let admin = proxy
        .url_for(&pg.primary().admin_url(), pg.primary().port())
        .expect("the admin URL through the proxy");
    let db = TestDb::new_on(&admin).await;
    let rack = Rack::start_on(db, MEMBERS + DEPLOYMENTS, PersonalityChoice::Mix, SCALE).await;
    let workers = [worker(&rack), worker(&rack)];

    // The cluster's members, deployed and formed before the run.
    for i in 0..MEMBERS {
        assert_eq!(rack.deploy(rack.sim.name(i), json!({})).await.status(), 202);
    }
    let members = form_cluster(&rack, MEMBERS, LIMIT, None).await;
    let formed = test_start.elapsed();

    // Four deployments and the rolling reboot, all at once.
    for i in MEMBERS..MEMBERS + DEPLOYMENTS {
        let name = rack.sim.name(i).to_owned();
        let response = rack.deploy(&name, json!({})).await;
        assert_eq!(response.status(), 202, "{name}");
    }
    start_reboot(&rack).await;

    // Mid-run: one member done and the deployments under way.
    racklift_tests::wait_for(LIMIT, "the first member done", || async {
        operation(&rack)
            .await
            .is_some_and(|op| op["done"].as_u64() >= Some(1) || op["status"] != "running")
    })
    .await;
    let before = committed(&rack.db.pool)
        .await
        .expect("read the primary before the crash");
    let unfinished: i64 = sqlx::query_scalar("SELECT count(*) FROM deployments WHERE finished_at IS NULL")
        .fetch_one(&rack.db.pool)
        .await
        .unwrap();
    assert!(unfinished > 0, "the failover should hit deployments in flight");
    let op = operation(&rack).await.unwrap();
    assert_eq!(op["status"], "running", "{op:#}");

    // The crash and the failover.
    let crash = Instant::now();
    let crashed_at = test_start.elapsed();
    tokio::task::block_in_place(|| pg.kill_primary()).expect("kill the primary");
    racklift_tests::wait_for(
        Duration::from_secs(10),
        "the proxy to mark the primary down",
        || async { proxy.status_of("primary").starts_with("DOWN") },
    )
    .await;
    let marked_down = crash.elapsed();
    // Until the standby is promoted, the proxy hands out connections to a server in recovery, as it would while
    // a failover manager decides: racklift's writes are refused there ("read-only transaction", "during
    // recovery") and must be retried, not acted on.
    let mut probe = PgConnection::connect(&admin)
        .await
        .expect("connect through the proxy");
    let routed: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&mut probe)
        .await
        .unwrap();
    assert!(routed, "the proxy routes to the standby once the primary is down");
    probe.close().await.ok();
    racklift_tests::wait_for(
        Duration::from_secs(30),
        "racklift to be refused by the standby",
        || async { refusals(&pg.log(Node::Standby)) > 0 },
    )
    .await;
    let refused_at = crash.elapsed();
    tokio::task::block_in_place(|| pg.promote()).expect("promote the standby");
    let promoted = crash.elapsed();
    let refused = refusals(&pg.log(Node::Standby));
    let first_refused = pg
        .log(Node::Standby)
        .lines()
        .find(|l| is_refusal(l))
        .and_then(|l| l.split("ERROR:").nth(1))
        .unwrap_or_default()
        .trim()
        .to_owned();
    assert!(!pg.in_recovery(Node::Standby).unwrap());
    assert_eq!(proxy.status_of("standby"), "UP");

    // Writes through the proxy, as racklift makes them, succeed again.
    racklift_tests::wait_for(Duration::from_secs(30), "a write through the proxy", || async {
        sqlx::query("SELECT nextval('job_fence_seq')")
            .execute(&rack.db.pool)
            .await
            .is_ok()
    })
    .await;
    let writable = crash.elapsed();

    // Nothing the primary had committed is missing from the new one.
    let after = committed(&rack.db.pool).await.expect("read the new primary");
    for (id, seq) in &before.deployments {
        let now = after.deployments.get(id).copied();
        assert!(
            now >= Some(*seq),
            "deployment {id}: seq {seq} before, {now:?} after"
        );
    }
    for (server, n) in &before.events {
        let now = after.events.get(server).copied();
        assert!(now >= Some(*n), "{server}: {n} events before, {now:?} after");
    }
    assert!(
        after.operation_seq >= before.operation_seq,
        "{before:?} {after:?}"
    );

    // Progress resumes: some deployment or the run advances past what was committed at the crash.
    let progress_before: i64 = before.deployments.values().sum::<i64>() + before.operation_seq;
    racklift_tests::wait_for(LIMIT, "progress after the failover", || async {
        committed(&rack.db.pool)
            .await
            .is_ok_and(|c| c.deployments.values().sum::<i64>() + c.operation_seq > progress_before)
    })
    .await;
    let resumed = crash.elapsed();

    // Every deployment completes.
    for i in 0..MEMBERS + DEPLOYMENTS {
        let name = rack.sim.name(i).to_owned();
        let d = rack.wait_finished(&name, LIMIT).await;
        assert_eq!(
            d.deployment.machine.state,
            State::Completed,
            "{name}: {:?}\n{}",
            d.deployment.machine.failure,
            rack.event_log(&name).await
        );
        let audit = rack.sim.audit(i);
        assert!(audit.stale_mutations.is_empty(), "{name}: {audit:?}");
        assert_eq!(audit.unfenced_mutations, 0, "{name}: {audit:?}");
        assert!(audit.max_concurrent <= 1, "{name}: {audit:?}");
    }

    // The run completes: each member evacuated, rebooted and restored once, one at a time, every Incus mutation
    // fenced and current.
    racklift_tests::wait_for(LIMIT, "the run's end", || async {
        operation(&rack).await.is_some_and(|op| op["status"] != "running")
    })
    .await;
    let op = operation(&rack).await.unwrap();
    assert_eq!(op["status"], "completed", "{op:#}");
    let audit = rack.sim.cluster_audit(CLUSTER).unwrap();
    assert_eq!(audit.max_evacuated_at_once, 1, "{audit:#?}");
    assert_eq!(audit.unfenced_mutations, 0, "{audit:#?}");
    assert!(audit.stale_mutations.is_empty(), "{audit:#?}");
    for (i, name) in members.iter().enumerate() {
        let hostname = rack.sim.truth(i)["os"]["hostname"].as_str().unwrap().to_owned();
        let counts = &audit.members[&hostname];
        assert_eq!(
            (counts.evacuations, counts.reboots, counts.restores),
            (1, 1, 1),
            "{name}: {audit:#?}"
        );
    }

    // No job lost: every job alive at the crash completed, none is left and none died.
    let completed: Vec<i64> = sqlx::query_scalar("SELECT id FROM jobs_completed WHERE id = ANY($1)")
        .bind(&before.live_jobs)
        .fetch_all(&rack.db.pool)
        .await
        .unwrap();
    let mut missing = before.live_jobs.clone();
    missing.retain(|id| !completed.contains(id));
    assert!(
        missing.is_empty(),
        "jobs alive at the crash never completed: {missing:?}"
    );
    let left: Vec<(i64, String, String)> = sqlx::query_as("SELECT id, kind, state FROM jobs")
        .fetch_all(&rack.db.pool)
        .await
        .unwrap();
    assert!(left.is_empty(), "live jobs left: {left:?}");
    let dead: Vec<(i64, String, Option<String>)> =
        sqlx::query_as("SELECT job_id, kind, last_error FROM dead_letters")
            .fetch_all(&rack.db.pool)
            .await
            .unwrap();
    assert!(dead.is_empty(), "dead letters: {dead:?}");
    let retried: Vec<(i64, String, i32, Option<String>)> = sqlx::query_as(
        "SELECT id, kind, attempts, (SELECT string_agg(e->>'class', ',') FROM jsonb_array_elements(errors) e)
         FROM jobs_completed WHERE attempts > 1 OR errors <> '[]' ORDER BY id",
    )
    .fetch_all(&rack.db.pool)
    .await
    .unwrap();
    eprintln!(
        "db failover: cluster formed after {formed:?}; crash at {crashed_at:?} with {} jobs live ({unfinished} deployments \
         unfinished); primary marked down {marked_down:?} after the crash, first statement refused by the standby at \
         {refused_at:?} ({first_refused:?}), {refused} refused before it was promoted at {promoted:?}, \
         writable through the proxy at {writable:?}, progress again at {resumed:?}; jobs with errors (id, kind, attempts, classes): {retried:?}; \
         total {:?}",
        before.live_jobs.len(),
        test_start.elapsed()
    );

    // The workers first, so none outlives the test's database.
    drop(workers);
    rack.stop().await;
    drop(proxy);
    drop(pg);
}

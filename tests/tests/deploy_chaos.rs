//! Workers die and stall mid-deployment: `kill -9` of one worker process, and `SIGSTOP` of another for longer
//! than its lease, then `SIGCONT`. Fencing must hold: the simulator's audit shows no mutation older than one it
//! already accepted and never two calls at once on a BMC, and every deployment still completes.

use std::time::Duration;

use racklift_bmc_sim::PersonalityChoice;
use racklift_deploy::State;
use racklift_tests::Racklift;
use racklift_tests::rack::Rack;
use serde_json::json;

const SCALE: f64 = 0.01;

fn worker(rack: &Rack) -> Racklift {
    rack.worker_process(SCALE, &["--concurrency", "16", "--batch", "4"])
}

/// Waits until some deployment has made `transitions` state changes in total.
async fn wait_progress(rack: &Rack, transitions: u64) {
    racklift_testdb::wait_for(
        Duration::from_secs(120),
        "deployments to make progress",
        || async {
            let seqs: Option<i64> = sqlx::query_scalar("SELECT sum(seq)::bigint FROM deployments")
                .fetch_one(&rack.db.pool)
                .await
                .ok()
                .flatten();
            seqs.unwrap_or(0) as u64 >= transitions
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_and_stalled_workers_never_issue_a_stale_mutation() {
    let rack = Rack::start_with(5, PersonalityChoice::Mix, SCALE, false).await;
    let mut a = worker(&rack);
    let b = worker(&rack);
    rack.deploy_all().await;
    wait_progress(&rack, 15).await;
    a.signal("KILL");
    let _ = a.child.wait().await;
    wait_progress(&rack, 40).await;
    // Paused past its lease (3 s): its jobs are rescued by the new worker, which takes newer fences.
    b.signal("STOP");
    let c = worker(&rack);
    // Resume it only once its leases have run out and been taken over (or, if it held none, at once).
    let paused = format!("%:{}:%", b.pid());
    racklift_testdb::wait_for(
        Duration::from_secs(60),
        "the paused worker's leases to be taken over",
        || async {
            let held: i64 =
                sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'running' AND leased_by LIKE $1")
                    .bind(&paused)
                    .fetch_one(&rack.db.pool)
                    .await
                    .unwrap_or(1);
            held == 0
        },
    )
    .await;
    b.signal("CONT");

    for i in 0..rack.sim.len() {
        let name = rack.sim.name(i).to_owned();
        let d = rack.wait_finished(&name, Duration::from_secs(240)).await;
        assert_eq!(
            d.deployment.machine.state,
            State::Completed,
            "{name}: {:?}\n{}",
            d.deployment.machine.failure,
            rack.event_log(&name).await
        );
        assert_eq!(rack.sim.truth(i)["registered"], json!(true));
        let audit = rack.sim.audit(i);
        assert!(
            audit.stale_mutations.is_empty(),
            "{name}: stale mutations {audit:?}"
        );
        assert!(audit.max_concurrent <= 1, "{name}: concurrent calls {audit:?}");
        assert_eq!(audit.unfenced_mutations, 0, "{name}: {audit:?}");
    }
    drop((b, c));
    rack.stop().await;
}

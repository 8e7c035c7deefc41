//! A server row whose password reference breaks today's rules (written by an older version, or by hand in SQL,
//! past the API's checks) is refused by the worker before a byte reaches its BMC: the job is dead-lettered with
//! the reason. The BMC is a loopback listener that records every connection and byte, and a server with a good
//! reference shows it would have seen the password.

use std::sync::Arc;
use std::time::Duration;

use racklift_bmc_access::secrets::DEFAULT_ENV_PREFIX;
use racklift_bmc_access::{AccessPolicy, ClientCache};
use racklift_bmc_sim::recorder::RecordingBmc;
use racklift_queue::{Queue, QueueConfig, WorkerConfig, WorkerPool};
use racklift_store::{BmcAction, BmcActionPayload, NewServer, Store};
use racklift_testdb::{TestDb, wait_for};
use racklift_workers::DeployStep;
use tokio_util::sync::CancellationToken;

struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn add_server(store: &Store, queue: &Queue, name: &str, bmc: &str, reference: &str) -> i64 {
    store
        .create_server(&NewServer {
            name: name.into(),
            bmc_address: bmc.into(),
            bmc_username: "root".into(),
            bmc_password_ref: Some(reference.into()),
            bmc_cert_pin: None,
            bmc_insecure: false,
            // Plain http so that a password sent would be readable in the recorded bytes.
            allow_plain_http: true,
            vendor_hint: None,
            system_id: None,
        })
        .await
        .expect("a row the API would refuse today");
    let payload = BmcActionPayload {
        server: name.into(),
        action: BmcAction::PowerOn,
        requested_by: "test".into(),
    };
    store
        .enqueue_bmc_action(queue, &payload, None)
        .await
        .expect("enqueue")
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_refuses_stored_references_outside_the_rules() {
    let db = TestDb::new().await;
    let store = Store::new(db.pool.clone());
    let queue = Queue::new(db.pool.clone(), QueueConfig::default());
    let scratch =
        Scratch(std::env::temp_dir().join(format!("racklift-worker-refs-{}", uuid::Uuid::new_v4())));
    let secrets = scratch.0.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(scratch.0.join("outside"), "not-for-bmcs").unwrap();
    std::os::unix::fs::symlink(scratch.0.join("outside"), secrets.join("link-out")).unwrap();
    std::fs::write(secrets.join("bmc"), "the-good-password\n").unwrap();
    let bmc = RecordingBmc::start().await.expect("recording BMC");

    let refused = [
        ("file:/etc/passwd", "env:NAME or file:NAME"),
        ("file:/proc/self/environ", "env:NAME or file:NAME"),
        ("file:../outside", "env:NAME or file:NAME"),
        ("file:link-out", "outside the secrets directory"),
        ("env:DATABASE_URL", DEFAULT_ENV_PREFIX),
        ("env:HOME", DEFAULT_ENV_PREFIX),
        ("hunter2", "env:NAME or file:NAME"),
    ];
    let mut jobs = Vec::new();
    for (i, (reference, _)) in refused.iter().enumerate() {
        jobs.push(add_server(&store, &queue, &format!("old-{i}"), &bmc.url, reference).await);
    }

    let policy = AccessPolicy::load(None, &secrets, DEFAULT_ENV_PREFIX).expect("the policy");
    let step = DeployStep {
        store: store.clone(),
        config: Arc::new(racklift_deploy::Config::for_simulation(0.01)),
        certificates: Arc::new(racklift_deploy::certificates::CertificateSet::incusos()),
        clients: ClientCache::new(policy),
    };
    let pool = WorkerPool::new(
        queue.clone(),
        racklift_workers::full_registry(step),
        WorkerConfig {
            poll_interval: Duration::from_millis(100),
            ..WorkerConfig::default()
        },
    );
    let shutdown = CancellationToken::new();
    let workers = tokio::spawn(pool.run(shutdown.clone()));

    for ((reference, reason), job) in refused.iter().zip(&jobs) {
        let dead_letter = || async {
            sqlx::query_as::<_, (String, Option<String>)>(
                "SELECT COALESCE(last_error, ''), error_class FROM dead_letters WHERE job_id = $1",
            )
            .bind(job)
            .fetch_optional(&db.pool)
            .await
            .expect("read the dead letters")
        };
        wait_for(Duration::from_secs(30), "the job to be dead-lettered", || async {
            dead_letter().await.is_some()
        })
        .await;
        let (error, class) = dead_letter().await.expect("dead-lettered");
        assert_eq!(class.as_deref(), Some("bmc_config"), "{reference}: {error}");
        assert!(
            error.contains("password reference") && error.contains(reason),
            "{reference}: {error}"
        );
        assert!(
            !error.contains("not-for-bmcs") && !error.contains("hunter2"),
            "{reference}: {error}"
        );
    }
    assert_eq!(bmc.seen(), (0, 0), "a refused reference reached the BMC");

    // The same BMC with a reference inside the rules: the password does reach it, so the silence above is the
    // worker's refusal, not a listener that hears nothing.
    add_server(&store, &queue, "good", &bmc.url, "file:bmc").await;
    wait_for(Duration::from_secs(30), "the good server's request", || async {
        bmc.seen().1 > 0
    })
    .await;
    let head = String::from_utf8_lossy(&bmc.heads()).to_lowercase();
    assert!(head.contains("authorization: basic "), "{head}");

    shutdown.cancel();
    workers.await.expect("the pool drains");
}

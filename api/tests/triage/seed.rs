//! Dead letters made the way the workers make them: a deployment created with its first step job, the job leased,
//! the failed machine saved through `save_machine` with its events, and the job dead-lettered in that same
//! transaction with the deployment worker's context. No BMC is involved: triage reads and writes the database.

use chrono::Utc;
use racklift_deploy::decision::{Cause, Failure};
use racklift_deploy::{Deployment, Plan, State};
use racklift_queue::{FailOutcome, Failure as JobFailure, LeasedJob, Queue, QueueConfig};
use racklift_store::{
    BMC_ACTION_KIND, BmcAction, BmcActionPayload, MediaRead, NewDeployment, NewImage, STEP_KIND, queue_error,
};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{ADMIN, Api, VIEWER};

pub const IMAGE_SIZE: u64 = 1 << 20;

pub struct Seed {
    pub queue: Queue,
    image_id: i64,
}

/// A failed deployment's ids, and the secret its media URL carries (which no answer may show).
pub struct Failed {
    pub deployment_id: i64,
    pub dead_letter_id: i64,
    pub media_secret: String,
}

impl Seed {
    pub async fn new(api: &Api) -> Seed {
        let image = api
            .store
            .create_image(
                &NewImage {
                    image_type: "iso".into(),
                    architecture: "x86_64".into(),
                    channel: "stable".into(),
                    path: "/nonexistent/incusos.img".into(),
                    size_bytes: IMAGE_SIZE as i64,
                    sha256: None,
                },
                &racklift_store::ImageFile {
                    sha256: "0".repeat(64),
                    file_stamp: None,
                    format: racklift_store::ImageFormat::Disk,
                    seed_offset: 1 << 20,
                    seed_capacity: 1 << 20,
                },
            )
            .await
            .expect("image");
        Seed {
            queue: Queue::new(api.db.pool.clone(), QueueConfig::default()),
            image_id: image.id,
        }
    }

    /// A server whose BMC is never contacted.
    pub async fn server(&self, api: &Api, name: &str, vendor: &str) {
        let body = json!({ "name": name, "bmc_address": "https://127.0.0.1:9", "bmc_username": "root",
                           "bmc_password_ref": "env:RACKLIFT_SECRET_TEST_NOPE", "vendor_hint": vendor });
        let (s, v) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(body)).await;
        assert_eq!(s, 201, "{v}");
    }

    async fn lease(&self, kind: &str) -> LeasedJob {
        let mut jobs = self.queue.lease(&[kind], 1, "seed-worker").await.expect("lease");
        jobs.pop().expect("a job to lease")
    }

    /// A deployment that failed in `failed_in` after spending its retries on a BMC error.
    pub async fn failed_deployment(
        &self,
        api: &Api,
        server: &str,
        failed_in: State,
        class: &str,
        message_id: &str,
    ) -> Failed {
        let store = &api.store;
        let now = Utc::now();
        let secret = racklift_store::new_secret();
        let plan = Plan {
            image_url: format!("http://api.example:7878/media/{secret}/incusos.img?token=t"),
            image_size_bytes: Some(IMAGE_SIZE),
            ..Plan::default()
        };
        let new = NewDeployment {
            server: server.to_owned(),
            media_secret: secret.clone(),
            image_id: self.image_id,
            token: uuid::Uuid::new_v4(),
            seed: "web".into(),
            deployment: Deployment::new(plan.clone(), now),
            media_slot: None,
            boot_target: None,
            idempotency_key: None,
            requested_by: "operator".into(),
            seed_archive: Vec::new(),
            registration_token: racklift_store::new_secret(),
            expected_hostname: None,
            bmc_system_uuid: None,
        };
        let (record, _) = store
            .create_deployment(&self.queue, &new)
            .await
            .expect("deployment");
        let job = self.lease(STEP_KIND).await;
        store
            .record_media_reads(
                &[MediaRead {
                    deployment_id: record.id,
                    source: "127.0.0.1".into(),
                    ranges: vec![(0, IMAGE_SIZE / 4)],
                    at: now,
                }],
                256,
            )
            .await
            .expect("media reads");

        let error = format!("HTTP 400 {message_id}: the value for Image is not valid");
        let mut m = record.deployment.machine.clone();
        m.retries = 4;
        m.first_error = Some(error.clone());
        m.last_error = Some(error.clone());
        m.failure = Some(Failure {
            state: failed_in,
            cause: Cause::RetriesExhausted,
            error: Some(error.clone()),
        });
        m.state = State::Failed;
        m.seq = 7;
        m.finished_at = Some(now);
        let fence = job.fence;
        let events = vec![
            (
                "transition".to_owned(),
                Some(fence),
                json!({ "from": "RefreshBMCData", "to": failed_in, "cause": "ActionSucceeded" }),
            ),
            (
                "bmc_call".to_owned(),
                Some(fence),
                json!({ "action": "attach_media", "outcome": "Retryable", "error": error, "bmc_status": 400,
                        "duration_ms": 812 }),
            ),
            (
                "transition".to_owned(),
                Some(fence),
                json!({ "from": failed_in, "to": "Failed", "cause": "RetriesExhausted" }),
            ),
        ];
        let last_error = json!({ "state": failed_in.name(), "class": class, "bmc_status": 400,
                                 "message_id": message_id, "message": error });
        let facts = json!({ "power": "On", "media": { "inserted": true, "image": plan.image_url } });
        // The worker's failure context, plus a password a careless handler might have put there.
        let context = json!({
            "operation": "deployment", "server": server, "deployment_id": record.id, "state": failed_in.name(),
            "cause": "RetriesExhausted", "first_error": error, "last_error": last_error, "last_error_text": error,
            "retries": 4, "bios_fallbacks": 0, "last_facts": facts, "bmc_password": "hunter2",
        });
        let failure = JobFailure::fatal(format!(
            "server {server}: deployment failed in {failed_in}: {error}"
        ))
        .with_error_class(class)
        .with_context(context);
        let queue = self.queue.clone();
        let job_ref = job.job_ref();
        let mut dead_letter_id = 0;
        let out = &mut dead_letter_id;
        store
            .save_machine(&record, &m, &facts, Some(&last_error), &events, async |c| {
                let outcome = queue
                    .dead_letter(c, job_ref, "deployment_failed", &failure)
                    .await
                    .map_err(queue_error)?;
                if let FailOutcome::DeadLettered { dead_letter_id } = outcome {
                    *out = dead_letter_id;
                }
                Ok(())
            })
            .await
            .expect("failed deployment saved");
        assert_ne!(dead_letter_id, 0);
        Failed {
            deployment_id: record.id,
            dead_letter_id,
            media_secret: secret,
        }
    }

    /// A power-on the BMC refused for good.
    pub async fn failed_bmc_action(&self, api: &Api, server: &str) -> i64 {
        let payload = BmcActionPayload {
            server: server.to_owned(),
            action: BmcAction::PowerOn,
            requested_by: "operator".into(),
        };
        api.store
            .enqueue_bmc_action(&self.queue, &payload, None)
            .await
            .expect("action");
        let job = self.lease(BMC_ACTION_KIND).await;
        let failure = JobFailure::fatal(format!("server {server}: power_on: connection refused"))
            .with_error_class("transport")
            .with_context(json!({ "operation": "bmc_action", "server": server, "action": "power_on" }));
        self.dead_letter(job, "fatal", &failure).await
    }

    /// A live deployment whose step job the rescuer dead-lettered (its workers kept dying): no context, and the
    /// deployment itself never failed.
    pub async fn rescued_step(&self, api: &Api, server: &str) -> (i64, i64) {
        let now = Utc::now();
        let new = NewDeployment {
            server: server.to_owned(),
            media_secret: racklift_store::new_secret(),
            image_id: self.image_id,
            token: uuid::Uuid::new_v4(),
            seed: "web".into(),
            deployment: Deployment::new(Plan::default(), now),
            media_slot: None,
            boot_target: None,
            idempotency_key: None,
            requested_by: "operator".into(),
            seed_archive: Vec::new(),
            registration_token: racklift_store::new_secret(),
            expected_hostname: None,
            bmc_system_uuid: None,
        };
        let (record, _) = api
            .store
            .create_deployment(&self.queue, &new)
            .await
            .expect("deployment");
        let job = self.lease(STEP_KIND).await;
        let failure = JobFailure::retryable("lease expired").with_error_class("lease_expired");
        (record.id, self.dead_letter(job, "lease_expired", &failure).await)
    }

    async fn dead_letter(&self, job: LeasedJob, reason: &str, failure: &JobFailure) -> i64 {
        let mut conn = self.queue.pool().acquire().await.expect("connection");
        match self
            .queue
            .dead_letter(&mut conn, job.job_ref(), reason, failure)
            .await
            .expect("dead letter")
        {
            FailOutcome::DeadLettered { dead_letter_id } => dead_letter_id,
            other => panic!("not dead-lettered: {other:?}"),
        }
    }
}

/// The open dead letters' ids, newest first.
pub async fn open_ids(api: &Api, query: &str) -> Vec<i64> {
    let (s, v) = api
        .call(Method::GET, &format!("/1.0/deadletters{query}"), VIEWER, None)
        .await;
    assert_eq!(s, 200, "{v}");
    ids(&v)
}

pub fn ids(v: &Value) -> Vec<i64> {
    v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|d| d["id"].as_i64().unwrap())
        .collect()
}

pub async fn post(api: &Api, path: &str, secret: &str, body: Value) -> (u16, Value) {
    api.call(Method::POST, path, secret, Some(body)).await
}

pub async fn get(api: &Api, path: &str) -> Value {
    let (s, v) = api.call(Method::GET, path, VIEWER, None).await;
    assert_eq!(s, 200, "{path}: {v}");
    v
}

/// Five dead letters: three deployments failed attaching media on Dell and HPE servers, one in the install wait,
/// and a BMC action. Returns the seeder and their ids in creation order.
pub async fn rack(api: &Api) -> (Seed, Vec<Failed>, i64) {
    let seed = Seed::new(api).await;
    for (name, vendor) in [
        ("node1", "dell"),
        ("node2", "dell"),
        ("node3", "hpe"),
        ("node4", "hpe"),
        ("node5", "dell"),
    ] {
        seed.server(api, name, vendor).await;
    }
    let msg = "Base.1.8.PropertyValueNotInList";
    let mut failed = Vec::new();
    for (server, state, class) in [
        ("node1", State::AttachMedia, "rejected_value"),
        ("node2", State::WaitInstall, "deadline"),
        ("node3", State::AttachMedia, "rejected_value"),
        ("node5", State::AttachMedia, "rejected_value"),
    ] {
        failed.push(seed.failed_deployment(api, server, state, class, msg).await);
    }
    let action = seed.failed_bmc_action(api, "node4").await;
    (seed, failed, action)
}

pub fn assert_no_secrets(v: &Value, media_secret: &str) {
    let text = v.to_string();
    assert!(!text.contains("hunter2"), "a password leaked: {text}");
    assert!(!text.to_ascii_lowercase().contains("password"), "{text}");
    assert!(!text.contains(media_secret), "the media secret leaked: {text}");
}

//! What the run asks of racklift's API, as an operator's script would, through faults: every deploy request
//! (retried with its `Idempotency-Key` until accepted), the clusters' creation and their `:reboot`. A retry first
//! looks in the database whether the last attempt got through, so no retry adds a pre-flight BMC read to a
//! deployment already being driven.

use std::time::{Duration, Instant};

use futures::StreamExt;
use racklift_api::{ClusterCreate, DeployRequest, RebootRequest};
use sqlx::PgPool;

use super::sim_control::expect_success;
use super::{ChaosError, Harness};

/// Deploy requests in flight at once.
const IN_FLIGHT: usize = 16;
/// Between two attempts of a refused or failed request.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// What the deploy submission task needs of the harness.
pub(crate) struct Submitter {
    pub http: reqwest::Client,
    pub api_url: String,
    pub token: String,
    pub pool: PgPool,
}

impl Submitter {
    /// Sends every deploy request, retrying each until it is accepted or `limit` passes; one line per server
    /// that never was.
    pub async fn deploy_all(&self, requests: Vec<(String, DeployRequest)>, limit: Duration) -> Vec<String> {
        let sent = futures::stream::iter(requests)
            .map(|(name, body)| async move { self.deploy(&name, &body, limit).await.err() })
            .buffer_unordered(IN_FLIGHT);
        sent.filter_map(|refused| async move { refused }).collect().await
    }

    async fn deploy(&self, name: &str, body: &DeployRequest, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        let mut last = String::new();
        for attempt in 0u32.. {
            if attempt > 0 {
                if self.has_deployment(name).await {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "{name}: deploy request not accepted within {limit:?} ({attempt} attempts): {last}"
                    ));
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            let response = self
                .http
                .post(format!("{}/1.0/provisioning/servers/{name}:deploy", self.api_url))
                .bearer_auth(&self.token)
                .header("Idempotency-Key", format!("chaos-deploy-{name}"))
                .json(body)
                .send()
                .await;
            match response {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => {
                    let status = r.status();
                    last = format!("HTTP {status}: {}", r.text().await.unwrap_or_default());
                }
                Err(e) => last = format!("{e}"),
            }
            tracing::debug!(server = name, attempt, error = %last, "deploy request failed; retrying");
        }
        Err(format!("{name}: deploy request never accepted: {last}"))
    }

    /// Whether the server has a deployment: an earlier attempt went through though its answer was lost.
    async fn has_deployment(&self, name: &str) -> bool {
        sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM deployments WHERE server = $1)")
            .bind(name)
            .fetch_one(&self.pool)
            .await
            .unwrap_or(false)
    }
}

impl Harness {
    /// Forms up to `count` clusters of `members` servers each from the completed deployments (in rack order), in
    /// the simulator as their administrator would, then creates them in racklift.
    pub(crate) async fn form_clusters(&mut self, count: usize) -> Result<(), ChaosError> {
        let completed: Vec<String> = sqlx::query_scalar(
            "SELECT server FROM deployments WHERE state = 'Completed' AND finished_at IS NOT NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut deployed: Vec<&str> = self
            .servers
            .iter()
            .map(|s| s.name.as_str())
            .filter(|n| completed.iter().any(|c| c == n))
            .collect();
        deployed.truncate(count * self.run.members);
        for (i, chunk) in deployed.chunks_exact(self.run.members).enumerate() {
            let name = format!("chaos{i:02}");
            let servers: Vec<String> = chunk.iter().map(|s| (*s).to_owned()).collect();
            self.sim.form_cluster(&name, &servers).await?;
            let body = ClusterCreate {
                name: name.clone(),
                servers: servers.clone(),
                post_restore_delay_secs: None,
                restore_mode: racklift_store::RestoreMode::default(),
            };
            self.until_accepted(
                &format!("creating cluster {name}"),
                "/1.0/provisioning/clusters",
                &body,
                &[409],
            )
            .await?;
            self.sim.reset_cluster_audit(&name).await?;
            self.members.extend(servers.iter().cloned());
            self.clusters.push((name, servers));
        }
        tracing::info!(
            clusters = self.clusters.len(),
            members = self.run.members,
            "clusters formed"
        );
        Ok(())
    }

    /// Starts every cluster's rolling reboot at once.
    pub(crate) async fn reboot_clusters(&self) -> Result<(), ChaosError> {
        let reboots = self.clusters.iter().map(|(name, _)| async move {
            let path = format!("/1.0/provisioning/clusters/{name}:reboot");
            self.until_accepted(
                &format!("rebooting cluster {name}"),
                &path,
                &RebootRequest::default(),
                &[409],
            )
            .await
        });
        for outcome in futures::future::join_all(reboots).await {
            outcome?;
        }
        Ok(())
    }

    /// POSTs `body` until the API accepts it (a status in `also_fine` counts, such as a conflict with an earlier
    /// attempt that went through), for at most two minutes.
    async fn until_accepted<T: serde::Serialize>(
        &self,
        what: &str,
        path: &str,
        body: &T,
        also_fine: &[u16],
    ) -> Result<(), ChaosError> {
        let limit = Duration::from_secs(120);
        let deadline = Instant::now() + limit;
        loop {
            let response = self
                .http
                .post(format!("{}{path}", self.api_url))
                .bearer_auth(&self.token)
                .header("Idempotency-Key", format!("chaos-{}", path.replace('/', "-")))
                .json(body)
                .send()
                .await;
            let error = match expect_success(response, what).await {
                Ok(_) => return Ok(()),
                Err(ChaosError::Refused { status, .. }) if also_fine.contains(&status) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() > deadline {
                return Err(ChaosError::Timeout {
                    what: what.to_owned(),
                    waited: limit,
                    detail: error.to_string(),
                });
            }
            tracing::debug!(what, error = %error, "request failed; retrying");
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// How long until the API answers a request that reads the database, if it does within `limit`.
    pub(crate) async fn api_answers(&self, limit: Duration) -> Option<f64> {
        let started = Instant::now();
        let probe = format!(
            "{}/1.0/servers/{}",
            self.api_url,
            self.servers.first().map_or("none", |s| s.name.as_str())
        );
        while started.elapsed() < limit {
            let answer = self
                .http
                .get(&probe)
                .bearer_auth(&self.token)
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if answer.is_ok_and(|r| r.status().is_success()) {
                return Some(started.elapsed().as_secs_f64());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }
}

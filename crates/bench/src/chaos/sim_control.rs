//! The simulator's control API (`/control/...`, see `racklift_bmc_sim::control`), as the chaos run drives it from
//! outside the simulator's process: the rack's servers, fault sets, machine truth, the BMC and Incus audits, and
//! the clusters an administrator would form with `incus cluster join`.

use std::time::Duration;

use racklift_bmc_sim::{AuditReport, ClusterAuditReport, Faults};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::ChaosError;

/// One server of `GET /control/servers`.
#[derive(Debug, Clone, Deserialize)]
pub struct SimServer {
    pub name: String,
    pub index: usize,
    pub personality: String,
    pub bmc_url: String,
}

/// The part of a machine's truth the run reads: whether the installer ran twice (a late eject took) and whether
/// the installed OS registered, plus where the machine is, for a stuck server's report.
#[derive(Debug, Clone, Deserialize)]
pub struct Truth {
    pub power: String,
    pub registered: bool,
    pub counters: TruthCounters,
    pub phase: TruthPhase,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TruthCounters {
    pub installer_runs: u64,
    pub boot_count: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TruthPhase {
    pub phase: String,
    /// Why, for the phases that say (an install that failed, say).
    #[serde(default)]
    pub detail: Option<String>,
}

/// `PUT /control/clusters/<name>`: the members, by BMC name.
#[derive(Debug, Serialize)]
struct ClusterPut<'a> {
    members: &'a [String],
}

/// A client of one simulator's control API.
#[derive(Clone)]
pub struct SimControl {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/control`.
    base: String,
}

/// A control call is local and quick; one that takes this long means the simulator is wedged.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

impl SimControl {
    pub fn new(base: String) -> Result<SimControl, ChaosError> {
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|source| ChaosError::Http {
                what: "the simulator's control client".into(),
                source,
            })?;
        Ok(SimControl { http, base })
    }

    pub async fn servers(&self) -> Result<Vec<SimServer>, ChaosError> {
        self.get("servers").await
    }

    pub async fn faults(&self, server: &str) -> Result<Faults, ChaosError> {
        self.get(&format!("servers/{server}/faults")).await
    }

    /// Replaces the server's fault set (the simulator's PUT has no merge).
    pub async fn set_faults(&self, server: &str, faults: &Faults) -> Result<(), ChaosError> {
        let what = format!("PUT faults of {server}");
        let response = self
            .http
            .put(format!("{}/servers/{server}/faults", self.base))
            .json(faults)
            .send()
            .await;
        expect_success(response, &what).await.map(drop)
    }

    pub async fn truth(&self, server: &str) -> Result<Truth, ChaosError> {
        self.get(&format!("servers/{server}/truth")).await
    }

    /// The BMC's audit: concurrency, fences of its mutations.
    pub async fn audit(&self, server: &str) -> Result<AuditReport, ChaosError> {
        self.get(&format!("servers/{server}/audit")).await
    }

    /// The server's Incus API audit, the same shape as a BMC's.
    pub async fn incus_audit(&self, server: &str) -> Result<AuditReport, ChaosError> {
        self.get(&format!("servers/{server}/incus-audit")).await
    }

    /// Forms an Incus cluster of `members` (BMC names), as its administrator would.
    pub async fn form_cluster(&self, cluster: &str, members: &[String]) -> Result<(), ChaosError> {
        let what = format!("forming cluster {cluster}");
        let response = self
            .http
            .put(format!("{}/clusters/{cluster}", self.base))
            .json(&ClusterPut { members })
            .send()
            .await;
        expect_success(response, &what).await.map(drop)
    }

    pub async fn cluster_audit(&self, cluster: &str) -> Result<ClusterAuditReport, ChaosError> {
        self.get(&format!("clusters/{cluster}/audit")).await
    }

    /// Starts the cluster's audit afresh, so it covers the rolling reboot only.
    pub async fn reset_cluster_audit(&self, cluster: &str) -> Result<(), ChaosError> {
        let what = format!("resetting the audit of cluster {cluster}");
        let response = self
            .http
            .delete(format!("{}/clusters/{cluster}/audit", self.base))
            .send()
            .await;
        expect_success(response, &what).await.map(drop)
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ChaosError> {
        let what = format!("GET /control/{path}");
        let response = self.http.get(format!("{}/{path}", self.base)).send().await;
        expect_success(response, &what)
            .await?
            .json()
            .await
            .map_err(|source| ChaosError::Http { what, source })
    }
}

/// The response when it is a success; a refusal with its status and body otherwise.
pub(crate) async fn expect_success(
    response: reqwest::Result<reqwest::Response>,
    what: &str,
) -> Result<reqwest::Response, ChaosError> {
    let response = response.map_err(|source| ChaosError::Http {
        what: what.to_owned(),
        source,
    })?;
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status().as_u16();
    let body = response.text().await.unwrap_or_default();
    Err(ChaosError::Refused {
        what: what.to_owned(),
        status,
        body,
    })
}

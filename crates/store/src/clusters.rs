//! Clusters, their members and their cluster-wide operations (rolling update, rolling reboot).
//!
//! One live operation per cluster is the database's rule (`cluster_operations_live`), and its job holds the
//! queue's resource key `cluster/<name>`: two API instances taking two requests at once make one operation and
//! one job, and the loser learns which operation runs. The worker holding the job writes the run fenced on the
//! operation's `seq`, together with the job's own next step, and moves the cluster's fence forward before every
//! Incus mutation.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Store, StoreError};

mod operations;

pub use operations::{ClusterOperation, ClusterStep, OperationControl, OperationStatus, RunUpdate};

/// A cluster as racklift knows it: its members in the order a rolling run takes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Cluster {
    pub name: String,
    pub members: Vec<String>,
    /// The delay after a member's restore before the next member is evacuated; unset, the config's.
    pub post_restore_delay_secs: Option<u64>,
    pub restore_mode: RestoreMode,
    pub created_at: DateTime<Utc>,
}

/// How a member is restored after its reboot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RestoreMode {
    /// Incus moves the member's instances back and starts them.
    #[default]
    Default,
    /// The member comes back Online; its instances stay where the evacuation put them.
    Skip,
}

impl RestoreMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RestoreMode::Default => "default",
            RestoreMode::Skip => "skip",
        }
    }

    /// Incus's spelling in `POST /1.0/cluster/members/{name}/state`.
    pub fn incus_mode(self) -> &'static str {
        match self {
            RestoreMode::Default => "",
            RestoreMode::Skip => "skip",
        }
    }

    fn parse(text: &str) -> RestoreMode {
        if text == "skip" {
            RestoreMode::Skip
        } else {
            RestoreMode::Default
        }
    }
}

/// A cluster to create.
#[derive(Debug, Clone)]
pub struct NewCluster {
    pub name: String,
    pub members: Vec<String>,
    pub post_restore_delay_secs: Option<u64>,
    pub restore_mode: RestoreMode,
}

#[derive(sqlx::FromRow)]
struct ClusterRow {
    name: String,
    post_restore_delay_secs: Option<i64>,
    restore_mode: String,
    created_at: DateTime<Utc>,
    members: Vec<String>,
}

impl From<ClusterRow> for Cluster {
    fn from(r: ClusterRow) -> Cluster {
        Cluster {
            name: r.name,
            members: r.members,
            post_restore_delay_secs: r.post_restore_delay_secs.map(|d| d as u64),
            restore_mode: RestoreMode::parse(&r.restore_mode),
            created_at: r.created_at,
        }
    }
}

#[derive(sqlx::FromRow)]
struct EndpointRow {
    name: String,
    connection_url: Option<String>,
    incus_certificate_sha256: Option<String>,
    client_certificate_sha256: Option<String>,
    cluster_certificate_sha256: Option<String>,
    repin: bool,
}

impl From<EndpointRow> for IncusEndpoint {
    fn from(r: EndpointRow) -> IncusEndpoint {
        let trust = endpoint_trust(
            r.repin,
            r.cluster_certificate_sha256,
            r.incus_certificate_sha256,
            r.client_certificate_sha256,
        );
        IncusEndpoint {
            server: r.name,
            connection_url: r.connection_url,
            trust,
        }
    }
}

/// The detail of a `certificate_pinned` event.
#[derive(serde::Serialize)]
struct PinnedDetail<'a> {
    certificate_sha256: &'a str,
}

/// The detail of a `cluster_certificate_pinned` event.
#[derive(serde::Serialize)]
struct ClusterPinnedDetail<'a> {
    cluster: &'a str,
    certificate_sha256: &'a str,
}

/// The detail of a `cluster_certificate_repin` event.
#[derive(serde::Serialize)]
struct ClusterRepinDetail<'a> {
    cluster: &'a str,
    #[serde(flatten)]
    repin: &'a crate::Repin<'a>,
    previous_certificate_sha256: Option<String>,
}

/// The names of a cluster's members, in its order.
async fn member_names(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    cluster: &str,
) -> Result<Vec<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT server FROM cluster_members WHERE cluster = $1 ORDER BY position")
            .bind(cluster)
            .fetch_all(&mut **tx)
            .await?,
    )
}

/// How a server's Incus API is trusted (Operations Center's `GetCertificate`: a clustered server by its
/// cluster's certificate, a standalone one by the certificate it registered with, which Incus also serves):
/// an operator's pending repin first (the next connection records what the server serves), then the cluster's
/// certificate, then a certificate a repin recorded, then the registration certificate. A server with none of
/// them is not called: racklift never trusts a certificate merely because it was the first one seen.
fn endpoint_trust(
    repin: bool,
    cluster: Option<String>,
    repinned: Option<String>,
    registered: Option<String>,
) -> EndpointTrust {
    if repin {
        return EndpointTrust::Repin;
    }
    match (cluster, repinned, registered) {
        (Some(pin), _, _) => EndpointTrust::Cluster(pin),
        (None, Some(pin), _) | (None, None, Some(pin)) => EndpointTrust::Server(pin),
        (None, None, None) => EndpointTrust::Unknown,
    }
}

/// The `SELECT` list and joins every endpoint read uses: a server with its cluster's certificate, if any.
const ENDPOINT_FROM: &str = "SELECT s.name, s.connection_url, s.incus_certificate_sha256, s.client_certificate_sha256, \
     c.certificate_sha256 AS cluster_certificate_sha256, s.incus_repin_requested_at IS NOT NULL AS repin \
     FROM servers s LEFT JOIN cluster_members cm ON cm.server = s.name LEFT JOIN clusters c ON c.name = cm.cluster";

fn cluster_not_found(name: &str) -> StoreError {
    StoreError::NotFound {
        what: "cluster",
        name: name.to_owned(),
    }
}

impl Store {
    /// Creates a cluster of registered servers. `Conflict` when the name is taken or a server is in another
    /// cluster; `NotFound` naming the first server that does not exist.
    pub async fn create_cluster(&self, new: &NewCluster) -> Result<Cluster, StoreError> {
        let mut tx = self.pool.begin().await?;
        let created: (DateTime<Utc>,) = sqlx::query_as(
            "INSERT INTO clusters (name, post_restore_delay_secs, restore_mode) VALUES ($1, $2, $3) RETURNING created_at",
        )
        .bind(&new.name)
        .bind(new.post_restore_delay_secs.map(|s| s as i64))
        .bind(new.restore_mode.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::on_unique("cluster", &new.name))?;
        for (position, server) in new.members.iter().enumerate() {
            let exists: Option<(String,)> =
                sqlx::query_as("SELECT name FROM servers WHERE name = $1 FOR SHARE")
                    .bind(server)
                    .fetch_optional(&mut *tx)
                    .await?;
            if exists.is_none() {
                return Err(StoreError::NotFound {
                    what: "server",
                    name: server.clone(),
                });
            }
            sqlx::query("INSERT INTO cluster_members (cluster, server, position) VALUES ($1, $2, $3)")
                .bind(&new.name)
                .bind(server)
                .bind(position as i32)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::on_unique("server already in a cluster", server))?;
        }
        tx.commit().await?;
        Ok(Cluster {
            name: new.name.clone(),
            members: new.members.clone(),
            post_restore_delay_secs: new.post_restore_delay_secs,
            restore_mode: new.restore_mode,
            created_at: created.0,
        })
    }

    pub async fn clusters(&self) -> Result<Vec<Cluster>, StoreError> {
        let rows: Vec<ClusterRow> = sqlx::query_as(
            "SELECT c.name, c.post_restore_delay_secs, c.restore_mode, c.created_at, \
             coalesce(array_agg(m.server ORDER BY m.position) FILTER (WHERE m.server IS NOT NULL), '{}') AS members \
             FROM clusters c LEFT JOIN cluster_members m ON m.cluster = c.name \
             GROUP BY c.name ORDER BY c.name",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Cluster::from).collect())
    }

    pub async fn cluster(&self, name: &str) -> Result<Cluster, StoreError> {
        let row: Option<ClusterRow> = sqlx::query_as(
            "SELECT c.name, c.post_restore_delay_secs, c.restore_mode, c.created_at, \
             coalesce(array_agg(m.server ORDER BY m.position) FILTER (WHERE m.server IS NOT NULL), '{}') AS members \
             FROM clusters c LEFT JOIN cluster_members m ON m.cluster = c.name WHERE c.name = $1 GROUP BY c.name",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(Cluster::from).ok_or_else(|| cluster_not_found(name))
    }

    /// Deletes a cluster (its members stay registered servers). `Conflict` while an operation is live.
    pub async fn delete_cluster(&self, name: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let live: Option<(i64,)> = sqlx::query_as(
            "SELECT id FROM cluster_operations WHERE cluster = $1 AND status IN ('running', 'paused')",
        )
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((id,)) = live {
            return Err(StoreError::Conflict {
                what: "operation running on cluster",
                name: format!("{name} (operation {id})"),
            });
        }
        sqlx::query("DELETE FROM cluster_operations WHERE cluster = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query("DELETE FROM clusters WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() != 1 {
            return Err(cluster_not_found(name));
        }
        tx.commit().await?;
        Ok(())
    }

    /// Moves the cluster's Incus fence up to `fence` before an Incus mutation. `Stale` when a newer token holds it.
    pub async fn advance_cluster_fence(&self, cluster: &str, fence: i64) -> Result<(), StoreError> {
        let done = sqlx::query("UPDATE clusters SET fence = $2 WHERE name = $1 AND fence <= $2")
            .bind(cluster)
            .bind(fence)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        Err(StoreError::Stale {
            what: "cluster fence",
            name: cluster.to_owned(),
        })
    }

    /// Pins the SHA-256 of the certificate a server's Incus API presented on the first connection after an
    /// operator's repin. `false` when no repin was pending any more (another connection recorded one first).
    pub async fn pin_incus_certificate(&self, server: &str, sha256: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE servers SET incus_certificate_sha256 = $2, incus_repin_requested_at = NULL, updated_at = now() \
             WHERE name = $1 AND incus_repin_requested_at IS NOT NULL",
        )
        .bind(server)
        .bind(sha256)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            crate::events::insert(
                &self.pool,
                server,
                None,
                "certificate_pinned",
                None,
                &serde_json::to_value(PinnedDetail {
                    certificate_sha256: sha256,
                })
                .expect("a pin serialises"),
            )
            .await?;
        }
        Ok(done.rows_affected() == 1)
    }

    /// Records the certificate every member of `cluster` serves as the cluster's, only while none is recorded
    /// (compare and set: two pollers learning it at once record it once). Each member gets a
    /// `cluster_certificate_pinned` event. `false` when a certificate was recorded already; `NotFound` for an
    /// unknown cluster.
    pub async fn record_cluster_certificate(&self, cluster: &str, sha256: &str) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(
            "UPDATE clusters SET certificate_sha256 = $2 WHERE name = $1 AND certificate_sha256 IS NULL",
        )
        .bind(cluster)
        .bind(sha256)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            let exists: Option<(String,)> = sqlx::query_as("SELECT name FROM clusters WHERE name = $1")
                .bind(cluster)
                .fetch_optional(&mut *tx)
                .await?;
            return match exists {
                Some(_) => Ok(false),
                None => Err(cluster_not_found(cluster)),
            };
        }
        let detail = serde_json::to_value(ClusterPinnedDetail {
            cluster,
            certificate_sha256: sha256,
        })
        .expect("a pin serialises");
        for server in member_names(&mut tx, cluster).await? {
            crate::events::insert(
                &mut *tx,
                &server,
                None,
                "cluster_certificate_pinned",
                None,
                &detail,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Clears the certificate recorded for `cluster`, so that the next read of its members records the one they
    /// then serve (the cluster's certificate was replaced on purpose); audited on each member as a
    /// `cluster_certificate_repin` event with who, why and the certificate it replaced. `NotFound` for an
    /// unknown cluster.
    pub async fn request_cluster_repin(
        &self,
        cluster: &str,
        repin: &crate::Repin<'_>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let previous: Option<(Option<String>,)> =
            sqlx::query_as("SELECT certificate_sha256 FROM clusters WHERE name = $1 FOR UPDATE")
                .bind(cluster)
                .fetch_optional(&mut *tx)
                .await?;
        let Some((previous,)) = previous else {
            return Err(cluster_not_found(cluster));
        };
        let done = sqlx::query("UPDATE clusters SET certificate_sha256 = NULL WHERE name = $1")
            .bind(cluster)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() != 1 {
            return Err(cluster_not_found(cluster));
        }
        let detail = serde_json::to_value(ClusterRepinDetail {
            cluster,
            repin,
            previous_certificate_sha256: previous,
        })
        .expect("a repin serialises");
        for server in member_names(&mut tx, cluster).await? {
            crate::events::insert(
                &mut *tx,
                &server,
                None,
                "cluster_certificate_repin",
                None,
                &detail,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The certificate recorded for `cluster`, if any.
    pub async fn cluster_certificate(&self, cluster: &str) -> Result<Option<String>, StoreError> {
        let row: Option<(Option<String>,)> =
            sqlx::query_as("SELECT certificate_sha256 FROM clusters WHERE name = $1")
                .bind(cluster)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|(c,)| c).ok_or_else(|| cluster_not_found(cluster))
    }

    /// Where each member's Incus API is and how to trust it, in the cluster's order.
    pub async fn cluster_endpoints(&self, cluster: &str) -> Result<Vec<IncusEndpoint>, StoreError> {
        let rows: Vec<EndpointRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{ENDPOINT_FROM} WHERE cm.cluster = $1 ORDER BY cm.position"
        )))
        .bind(cluster)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(IncusEndpoint::from).collect())
    }

    /// Servers' endpoints by name (for a cluster being created).
    pub async fn incus_endpoints(&self, servers: &[String]) -> Result<Vec<IncusEndpoint>, StoreError> {
        let mut out = Vec::with_capacity(servers.len());
        for name in servers {
            let row: Option<EndpointRow> =
                sqlx::query_as(sqlx::AssertSqlSafe(format!("{ENDPOINT_FROM} WHERE s.name = $1")))
                    .bind(name)
                    .fetch_optional(&self.pool)
                    .await?;
            out.push(row.map(IncusEndpoint::from).ok_or_else(|| StoreError::NotFound {
                what: "server",
                name: name.clone(),
            })?);
        }
        Ok(out)
    }
}

/// A member's Incus API: its address (from registration) and how its certificate is trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncusEndpoint {
    pub server: String,
    pub connection_url: Option<String>,
    pub trust: EndpointTrust,
}

impl IncusEndpoint {
    /// The SHA-256 the server's certificate is pinned to, when there is one.
    pub fn pin(&self) -> Option<&str> {
        match &self.trust {
            EndpointTrust::Cluster(pin) | EndpointTrust::Server(pin) => Some(pin),
            EndpointTrust::Repin | EndpointTrust::Unknown => None,
        }
    }
}

/// Which certificate a server's Incus API must present ([`endpoint_trust`] says which applies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointTrust {
    /// Its cluster's certificate (SHA-256): the server is a member of a cluster whose certificate is pinned.
    Cluster(String),
    /// Its own certificate (SHA-256): the one it registered with, or the one a repin recorded.
    Server(String),
    /// An operator asked to trust what the server serves now: the next connection records it.
    Repin,
    /// None known (the server registered without a certificate): it is not called.
    Unknown,
}

#[cfg(test)]
mod trust_tests {
    use super::{EndpointTrust, endpoint_trust};

    #[test]
    fn a_pending_repin_then_the_cluster_then_the_server_certificate_is_trusted() {
        let pin = |s: &str| Some(s.to_owned());
        #[rustfmt::skip]
        let cases = [
            (true, pin("c"), pin("r"), pin("g"), EndpointTrust::Repin),
            (false, pin("c"), pin("r"), pin("g"), EndpointTrust::Cluster("c".into())),
            (false, None, pin("r"), pin("g"), EndpointTrust::Server("r".into())),
            (false, None, None, pin("g"), EndpointTrust::Server("g".into())),
            (false, None, None, None, EndpointTrust::Unknown),
            (true, None, None, None, EndpointTrust::Repin),
        ];
        for (repin, cluster, repinned, registered, trust) in cases {
            let label = format!("{repin} {cluster:?} {repinned:?} {registered:?}");
            assert_eq!(
                endpoint_trust(repin, cluster, repinned, registered),
                trust,
                "{label}"
            );
        }
    }
}

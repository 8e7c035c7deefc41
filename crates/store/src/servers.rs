//! Servers and their BMCs.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgExecutor;

use crate::{Store, StoreError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerStatus {
    Unregistered,
    Deploying,
    Registered,
    Failed,
}

impl ServerStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerStatus::Unregistered => "unregistered",
            ServerStatus::Deploying => "deploying",
            ServerStatus::Registered => "registered",
            ServerStatus::Failed => "failed",
        }
    }

    fn parse(s: &str) -> ServerStatus {
        match s {
            "deploying" => ServerStatus::Deploying,
            "registered" => ServerStatus::Registered,
            "failed" => ServerStatus::Failed,
            _ => ServerStatus::Unregistered,
        }
    }
}

/// A server as stored. The password is only ever a reference (`file:NAME`, `env:NAME`), never the value.
#[derive(Debug, Clone, Serialize)]
pub struct Server {
    pub name: String,
    pub bmc_address: String,
    pub bmc_username: String,
    pub bmc_password_ref: Option<String>,
    pub bmc_cert_pin: Option<String>,
    pub bmc_insecure: bool,
    /// The operator's explicit consent to an `http://` BMC address (credentials in the clear).
    pub allow_plain_http: bool,
    pub vendor_hint: Option<String>,
    /// The `Id` of the Redfish ComputerSystem that is this server, for BMCs that list several; `None` lets the
    /// client choose (the only System, else the only one that could be the host).
    pub system_id: Option<String>,
    pub status: ServerStatus,
    pub status_detail: String,
    pub fence: i64,
    pub registered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Server {
    /// A BMC address and credentials are set.
    pub fn bmc_configured(&self) -> bool {
        !self.bmc_address.is_empty() && !self.bmc_username.is_empty() && self.bmc_password_ref.is_some()
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct ServerRow {
    name: String,
    bmc_address: String,
    bmc_username: String,
    bmc_password_ref: Option<String>,
    bmc_cert_pin: Option<String>,
    bmc_insecure: bool,
    allow_plain_http: bool,
    vendor_hint: Option<String>,
    system_id: Option<String>,
    status: String,
    status_detail: String,
    fence: i64,
    pub(crate) registered_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<ServerRow> for Server {
    fn from(r: ServerRow) -> Server {
        Server {
            name: r.name,
            bmc_address: r.bmc_address,
            bmc_username: r.bmc_username,
            bmc_password_ref: r.bmc_password_ref,
            bmc_cert_pin: r.bmc_cert_pin,
            bmc_insecure: r.bmc_insecure,
            allow_plain_http: r.allow_plain_http,
            vendor_hint: r.vendor_hint,
            system_id: r.system_id,
            status: ServerStatus::parse(&r.status),
            status_detail: r.status_detail,
            fence: r.fence,
            registered_at: r.registered_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewServer {
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,62}$", example = "rack1-node07")]
    pub name: String,
    /// The BMC's Redfish root, `https://HOST[:PORT]`; `http://` only with `allow_plain_http`.
    #[serde(default)]
    #[schema(
        pattern = r"^$|^[Hh][Tt][Tt][Pp][Ss]?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[A-Za-z0-9._~!$&()*+,;=:@%/-]*)?$",
        example = "https://10.0.40.7"
    )]
    pub bmc_address: String,
    #[serde(default)]
    pub bmc_username: String,
    /// A reference to the password, never the password: `file:NAME` inside the secrets directory or
    /// `env:RACKLIFT_SECRET_…`.
    #[schema(
        pattern = r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*)$",
        example = "file:bmc-rack1"
    )]
    pub bmc_password_ref: Option<String>,
    /// SHA-256 of the BMC's certificate (`cert-sha256:` or `sha256:`) or of its public key (`spki-sha256:`), hex
    /// with optional `:` separators, for a self-signed certificate.
    #[schema(pattern = r"^(cert-sha256|sha256|spki-sha256):(:*[0-9a-fA-F]){64}:*$")]
    pub bmc_cert_pin: Option<String>,
    #[serde(default)]
    pub bmc_insecure: bool,
    /// Required for an `http://` BMC address: the password would cross the network in the clear.
    #[serde(default)]
    pub allow_plain_http: bool,
    pub vendor_hint: Option<String>,
    /// The `Id` of the BMC's ComputerSystem that is this server (`1`, `System.Embedded.1`, `System_0`), needed
    /// when its `Systems` lists more than one that could be the host, as beside a baseboard System; a DPU is
    /// passed over without it. Empty is the same as absent.
    #[schema(pattern = r"^$|^[A-Za-z0-9._~-]{1,64}$", example = "System.Embedded.1")]
    pub system_id: Option<String>,
}

/// A partial update: absent fields keep their value.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerUpdate {
    #[schema(
        pattern = r"^$|^[Hh][Tt][Tt][Pp][Ss]?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[A-Za-z0-9._~!$&()*+,;=:@%/-]*)?$"
    )]
    pub bmc_address: Option<String>,
    pub bmc_username: Option<String>,
    #[schema(pattern = r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*)$")]
    pub bmc_password_ref: Option<String>,
    #[schema(pattern = r"^(cert-sha256|sha256|spki-sha256):(:*[0-9a-fA-F]){64}:*$")]
    pub bmc_cert_pin: Option<String>,
    pub bmc_insecure: Option<bool>,
    pub allow_plain_http: Option<bool>,
    pub vendor_hint: Option<String>,
    /// The `Id` of the BMC's ComputerSystem that is this server; `""` clears it (racklift chooses again).
    #[schema(pattern = r"^$|^[A-Za-z0-9._~-]{1,64}$", example = "System.Embedded.1")]
    pub system_id: Option<String>,
}

const COLUMNS: &str = "name, bmc_address, bmc_username, bmc_password_ref, bmc_cert_pin, bmc_insecure, \
                       allow_plain_http, vendor_hint, system_id, \
                       status, status_detail, fence, registered_at, created_at, updated_at";

/// [`COLUMNS`] qualified with a table alias, for joins.
pub(crate) fn qualified_columns(alias: &str) -> String {
    COLUMNS
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn not_found(name: &str) -> StoreError {
    StoreError::NotFound {
        what: "server",
        name: name.to_owned(),
    }
}

impl Store {
    pub async fn create_server(&self, new: &NewServer) -> Result<Server, StoreError> {
        let row: ServerRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "INSERT INTO servers (name, bmc_address, bmc_username, bmc_password_ref, bmc_cert_pin, bmc_insecure, \
             vendor_hint, allow_plain_http, system_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, nullif($9, '')) \
             RETURNING {COLUMNS}"
        )))
        .bind(&new.name)
        .bind(&new.bmc_address)
        .bind(&new.bmc_username)
        .bind(&new.bmc_password_ref)
        .bind(&new.bmc_cert_pin)
        .bind(new.bmc_insecure)
        .bind(&new.vendor_hint)
        .bind(new.allow_plain_http)
        .bind(&new.system_id)
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::on_unique("server", &new.name))?;
        Ok(row.into())
    }

    pub async fn list_servers(&self) -> Result<Vec<Server>, StoreError> {
        let rows: Vec<ServerRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM servers ORDER BY name"
        )))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Server::from).collect())
    }

    pub async fn server(&self, name: &str) -> Result<Server, StoreError> {
        server_in(&self.pool, name).await
    }

    pub async fn update_server(&self, name: &str, u: &ServerUpdate) -> Result<Server, StoreError> {
        let row: Option<ServerRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "UPDATE servers SET bmc_address = coalesce($2, bmc_address), bmc_username = coalesce($3, bmc_username), \
             bmc_password_ref = coalesce($4, bmc_password_ref), bmc_cert_pin = coalesce($5, bmc_cert_pin), \
             bmc_insecure = coalesce($6, bmc_insecure), vendor_hint = coalesce($7, vendor_hint), \
             allow_plain_http = coalesce($8, allow_plain_http), \
             system_id = CASE WHEN $9::text IS NULL THEN system_id ELSE nullif($9, '') END, \
             updated_at = now() WHERE name = $1 RETURNING {COLUMNS}"
        )))
        .bind(name)
        .bind(&u.bmc_address)
        .bind(&u.bmc_username)
        .bind(&u.bmc_password_ref)
        .bind(&u.bmc_cert_pin)
        .bind(u.bmc_insecure)
        .bind(&u.vendor_hint)
        .bind(u.allow_plain_http)
        .bind(&u.system_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(Server::from).ok_or_else(|| not_found(name))
    }

    /// The `machine_id` of the server's last registration (IncusOS sends its `/etc/machine-id`), when it has
    /// registered with one: a reinstall of the same IncusOS version is confirmed with its first six characters.
    pub async fn registered_machine_id(&self, name: &str) -> Result<Option<String>, StoreError> {
        let row: Option<Option<String>> =
            sqlx::query_scalar("SELECT registration->>'machine_id' FROM servers WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
        match row {
            Some(id) => Ok(id.filter(|id| !id.is_empty())),
            None => Err(not_found(name)),
        }
    }

    /// The server whose registration presented the client certificate with this fingerprint (lower-case hex
    /// SHA-256 of its DER), if any: how a registered IncusOS server's own calls are authenticated.
    pub async fn server_by_client_certificate(&self, sha256: &str) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT name FROM servers WHERE client_certificate_sha256 = $1")
                .bind(sha256)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Records (or, with `None`, forgets) the fingerprint of the client certificate a server registered with.
    /// Another server holding the same fingerprint is a conflict.
    pub async fn set_client_certificate(&self, name: &str, sha256: Option<&str>) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE servers SET client_certificate_sha256 = $2, updated_at = now() WHERE name = $1",
        )
        .bind(name)
        .bind(sha256)
        .execute(&self.pool)
        .await
        .map_err(StoreError::on_unique(
            "client certificate",
            sha256.unwrap_or_default(),
        ))?;
        if done.rows_affected() == 0 {
            return Err(not_found(name));
        }
        Ok(())
    }

    /// Deletes a server that has no running deployment and is in no cluster.
    pub async fn delete_server(&self, name: &str) -> Result<(), StoreError> {
        let cluster: Option<(String,)> =
            sqlx::query_as("SELECT cluster FROM cluster_members WHERE server = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
        if let Some((cluster,)) = cluster {
            return Err(StoreError::Conflict {
                what: "server is a member of cluster",
                name: cluster,
            });
        }
        let done = sqlx::query(
            "DELETE FROM servers WHERE name = $1 AND NOT EXISTS \
             (SELECT 1 FROM deployments WHERE server = $1 AND finished_at IS NULL)",
        )
        .bind(name)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        self.server(name).await?;
        Err(StoreError::Conflict {
            what: "running deployment on server",
            name: name.to_owned(),
        })
    }

    /// Moves the server's BMC fence up to `fence` before a BMC mutation (ARCHITECTURE invariant 3). `Stale` when a
    /// newer token already holds it: the caller must not touch the BMC.
    pub async fn advance_server_fence(&self, name: &str, fence: i64) -> Result<(), StoreError> {
        advance_fence(&self.pool, name, fence).await
    }
}

/// [`Store::advance_server_fence`] inside a caller's transaction.
pub async fn advance_fence<'e>(db: impl PgExecutor<'e>, name: &str, fence: i64) -> Result<(), StoreError> {
    let done = sqlx::query("UPDATE servers SET fence = $2 WHERE name = $1 AND fence <= $2")
        .bind(name)
        .bind(fence)
        .execute(db)
        .await?;
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        Err(StoreError::Stale {
            what: "server fence",
            name: name.to_owned(),
        })
    }
}

pub(crate) async fn server_in<'e>(db: impl PgExecutor<'e>, name: &str) -> Result<Server, StoreError> {
    let row: Option<ServerRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM servers WHERE name = $1"
    )))
    .bind(name)
    .fetch_optional(db)
    .await?;
    row.map(Server::from).ok_or_else(|| not_found(name))
}

pub(crate) async fn set_status<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
    status: ServerStatus,
    detail: &str,
) -> Result<(), StoreError> {
    // Unchanged, the row is left alone: a wait polled every few seconds would otherwise rewrite it each time.
    sqlx::query(
        "UPDATE servers SET status = $2, status_detail = $3, updated_at = now() \
         WHERE name = $1 AND (status, status_detail) IS DISTINCT FROM ($2, $3)",
    )
    .bind(name)
    .bind(status.as_str())
    .bind(detail)
    .execute(db)
    .await?;
    Ok(())
}

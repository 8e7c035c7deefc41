//! `POST /1.0/servers/{name}:repin`: an operator tells racklift to trust the certificate a server's Incus API
//! serves now. racklift pins a standalone server to the certificate it registered with and a clustered one to
//! its cluster's certificate; when a server legitimately changes certificate outside racklift (Incus' certificate
//! replaced by hand, a disk restored), its calls fail until an operator repins it. A repin clears the pin, and the
//! next connection to the server records the certificate it then serves and pins that (trust on that one use,
//! asked for and audited). Setting a PEM instead was not chosen: the operator would have to fetch the
//! certificate out of band, and a typo would lock racklift out just as well.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use racklift_store::{Repin, StoreError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Admin;
use crate::error::{ApiError, Body, ErrorBody};
use crate::openapi::AdminErrors;

/// Why the certificate is to be trusted anew; kept in the server's event log with the caller.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RepinRequest {
    #[schema(
        min_length = 1,
        max_length = 1024,
        example = "Incus certificate replaced during maintenance"
    )]
    pub reason: String,
}

/// The repin as recorded.
#[derive(Serialize, ToSchema)]
pub struct RepinAccepted {
    pub server: String,
    /// The next connection to the server pins the certificate it serves.
    pub repin_pending: bool,
}

/// Trust the certificate the server's Incus API serves at the next connection (admin; audited).
#[utoipa::path(post, path = "/1.0/servers/{name}/_action/repin", tag = "servers", security(("bearer" = ["admin"])),
    params(("name" = String, Path, example = "s1", description = "Server name")),
    request_body = RepinRequest,
    responses(
        (status = 200, description = "The pin is cleared; the next connection records the certificate",
            body = RepinAccepted),
        (status = 404, description = "No such server", body = ErrorBody),
        AdminErrors))]
pub async fn repin(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Body(req): Body<RepinRequest>,
) -> Result<Json<RepinAccepted>, ApiError> {
    let reason = checked_reason(&req)?;
    let repin = Repin {
        by: caller.name(),
        reason,
    };
    state
        .store
        .request_incus_repin(&name, &repin)
        .await
        .map_err(not_found("server_not_found"))?;
    tracing::info!(server = %name, by = caller.name(), reason, "Incus certificate repin requested");
    Ok(Json(RepinAccepted {
        server: name,
        repin_pending: true,
    }))
}

/// A cluster's certificate repin as recorded.
#[derive(Serialize, ToSchema)]
pub struct ClusterRepinAccepted {
    pub cluster: String,
    /// The next read of the members records the certificate they then all serve.
    pub repin_pending: bool,
}

/// Forget the cluster's recorded certificate, so the next read of its members records the one they all serve
/// (admin; audited on each member). For a cluster whose certificate was replaced on purpose (Incus'
/// `UpdateClusterCertificate`); the members must still agree, or nothing is trusted.
#[utoipa::path(post, path = "/1.0/provisioning/clusters/{name}/_action/repin", tag = "clusters",
    security(("bearer" = ["admin"])),
    params(("name" = String, Path, example = "rack1", description = "Cluster name")),
    request_body = RepinRequest,
    responses(
        (status = 200, description = "The cluster's certificate is cleared; the next read records it",
            body = ClusterRepinAccepted),
        (status = 404, description = "No such cluster", body = ErrorBody),
        AdminErrors))]
pub async fn cluster_repin(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Body(req): Body<RepinRequest>,
) -> Result<Json<ClusterRepinAccepted>, ApiError> {
    let reason = checked_reason(&req)?;
    let repin = Repin {
        by: caller.name(),
        reason,
    };
    state
        .store
        .request_cluster_repin(&name, &repin)
        .await
        .map_err(not_found("cluster_not_found"))?;
    tracing::info!(cluster = %name, by = caller.name(), reason, "cluster certificate repin requested");
    Ok(Json(ClusterRepinAccepted {
        cluster: name,
        repin_pending: true,
    }))
}

/// The request's reason, trimmed: 1 to 1024 characters.
fn checked_reason(req: &RepinRequest) -> Result<&str, ApiError> {
    let reason = req.reason.trim();
    if reason.is_empty() || reason.chars().count() > 1024 {
        return Err(ApiError::invalid("reason", "must be 1 to 1024 characters"));
    }
    Ok(reason)
}

/// A store error as the answer: the named thing missing is a 404 with `code`, field `name`.
fn not_found(code: &'static str) -> impl Fn(StoreError) -> ApiError {
    move |e| match e {
        StoreError::NotFound { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, code, e.to_string()).field("name")
        }
        other => other.into(),
    }
}

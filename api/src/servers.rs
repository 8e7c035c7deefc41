//! `/1.0/servers`: the server catalog and each server's status, newest deployment and event log.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use racklift_bmc_access::SecretError;
use racklift_store::{DeploymentRecord, NewServer, Role, Server, ServerUpdate, Store};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, Body};
use crate::validate;

/// A server as answered. The password reference is reduced to "set": even a reference tells an attacker
/// where to look.
pub fn server_view(s: &Server) -> Value {
    let mut v = json!({
        "name": s.name,
        "bmc_address": s.bmc_address,
        "bmc_username": s.bmc_username,
        "bmc_cert_pin": s.bmc_cert_pin,
        "bmc_insecure": s.bmc_insecure,
        "allow_plain_http": s.allow_plain_http,
        "vendor_hint": s.vendor_hint,
        "status": s.status.as_str(),
        "status_detail": s.status_detail,
        "registered_at": s.registered_at,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
    });
    if s.bmc_password_ref.is_some() {
        v["bmc_password_ref"] = json!("set");
    }
    v
}

/// A deployment as answered: the machine's progress plus the media read progress recorded so far.
pub async fn deployment_view(store: &Store, d: &DeploymentRecord) -> Result<Value, ApiError> {
    let m = &d.deployment.machine;
    let (readers, last_read_at) = store.media_progress(d.id).await?;
    // The API does not know which address the BMC reads from; the largest reader is the useful number.
    let media_bytes_read = readers.values().map(|r| r.total()).max();
    Ok(json!({
        "id": d.id,
        "server": d.server,
        "state": m.state.name(),
        "attempts": m.retries,
        "started_at": m.started_at,
        "state_entered_at": m.state_entered_at,
        "finished_at": d.finished_at,
        "first_error": m.first_error,
        "last_error": m.last_error,
        "media_bytes_read": media_bytes_read,
        "media_last_read_at": last_read_at,
        "media_size": d.deployment.plan.image_size_bytes,
        "media_slot": d.media_slot,
        "image_id": d.image_id,
        "token": d.token,
        "seed": d.seed,
        "force": d.deployment.plan.force,
        // Which catalog entries the snapshotted BIOS plan came from; they may have changed since.
        "bios_profiles": d.deployment.plan.bios_profiles,
        "cancel": d.cancel,
        "requested_by": d.requested_by,
        "created_at": d.created_at,
    }))
}

async fn check_bmc_fields(
    state: &AppState,
    address: Option<&str>,
    password_ref: Option<&str>,
    pin: Option<&str>,
) -> Result<(), ApiError> {
    if let Some(a) = address.filter(|a| !a.is_empty()) {
        validate::http_url("bmc_address", a)?;
    }
    if let Some(p) = password_ref {
        state
            .config
            .bmc_access
            .secrets()
            .check(p)
            .await
            .map_err(|e| password_ref_error(&e))?;
    }
    if let Some(p) = pin {
        validate::cert_pin("bmc_cert_pin", p)?;
    }
    Ok(())
}

/// A password reference refused or unreadable, as answered: 422 naming `bmc_password_ref`. Refusals by form say
/// what the rule is; failures to read say what is wrong without naming the host's paths (the secrets directory
/// included), which the log has.
pub(crate) fn password_ref_error(e: &SecretError) -> ApiError {
    let field = "bmc_password_ref";
    let reason = match e {
        SecretError::BadForm { .. } | SecretError::EnvPrefix { .. } => {
            return ApiError::unprocessable("bad_password_ref", field, e.to_string());
        }
        SecretError::Outside { .. } => {
            return ApiError::unprocessable(
                "outside_secrets_dir",
                field,
                "file references must stay inside the secrets directory, symbolic links included",
            );
        }
        SecretError::EnvNotSet { .. } => "the variable is not set",
        SecretError::DirUnavailable { .. } => "the secrets directory is not available",
        SecretError::Unreadable { .. } => "the file does not exist or cannot be read",
        SecretError::NotRegularFile { .. } => "the file is not a regular file",
        SecretError::TooLarge { .. } => "the file is larger than a password can be",
        SecretError::Deadline { .. } => "the file was not read in time",
        SecretError::Empty { .. } => "the password is empty",
        SecretError::NotText { .. } => "the password is not UTF-8 text",
    };
    ApiError::unprocessable(
        "bmc_password_unreadable",
        field,
        format!("the BMC password bmc_password_ref names cannot be used: {reason}"),
    )
}

/// An `http://` BMC gets its password in the clear: 422 naming `bmc_address` unless the server explicitly
/// allows it.
fn check_plain_http(address: &str, allowed: bool) -> Result<(), ApiError> {
    if address
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
        && !allowed
    {
        return Err(ApiError::unprocessable(
            "plain_http_bmc",
            "bmc_address",
            format!(
                "{address:?} is plain http://, so the BMC password would cross the network in the clear: use \
                 https:// (with bmc_cert_pin for a self-signed certificate), or set allow_plain_http: true for \
                 this server"
            ),
        ));
    }
    Ok(())
}

pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    let servers = state.store.list_servers().await?;
    Ok(Json(Value::Array(servers.iter().map(server_view).collect())))
}

pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Body(new): Body<NewServer>,
) -> Result<impl IntoResponse, ApiError> {
    caller.require(Role::Admin)?;
    validate::name("name", &new.name)?;
    check_bmc_fields(
        &state,
        Some(&new.bmc_address),
        new.bmc_password_ref.as_deref(),
        new.bmc_cert_pin.as_deref(),
    )
    .await?;
    check_plain_http(&new.bmc_address, new.allow_plain_http)?;
    let server = state
        .store
        .create_server(&new)
        .await
        .map_err(|e| conflict_code(e, "server_exists", "name"))?;
    tracing::info!(server = %server.name, by = caller.name(), "server created");
    Ok((StatusCode::CREATED, Json(server_view(&server))))
}

/// A store conflict answered with a specific code naming the field.
pub fn conflict_code(e: racklift_store::StoreError, code: &'static str, field: &str) -> ApiError {
    match e {
        racklift_store::StoreError::Conflict { .. } => {
            ApiError::new(StatusCode::CONFLICT, code, e.to_string()).field(field)
        }
        other => other.into(),
    }
}

fn server_not_found(e: racklift_store::StoreError) -> ApiError {
    match e {
        racklift_store::StoreError::NotFound { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "server_not_found", e.to_string()).field("name")
        }
        other => other.into(),
    }
}

pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    let server = state.store.server(&name).await.map_err(server_not_found)?;
    let mut v = server_view(&server);
    v["deployment"] = match state.store.latest_deployment(&name).await? {
        Some(d) => deployment_view(&state.store, &d).await?,
        None => Value::Null,
    };
    Ok(Json(v))
}

pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Body(u): Body<ServerUpdate>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Admin)?;
    check_bmc_fields(
        &state,
        u.bmc_address.as_deref(),
        u.bmc_password_ref.as_deref(),
        u.bmc_cert_pin.as_deref(),
    )
    .await?;
    if u.bmc_address.is_some() || u.allow_plain_http.is_some() {
        let current = state.store.server(&name).await.map_err(server_not_found)?;
        check_plain_http(
            u.bmc_address.as_deref().unwrap_or(&current.bmc_address),
            u.allow_plain_http.unwrap_or(current.allow_plain_http),
        )?;
    }
    let server = state
        .store
        .update_server(&name, &u)
        .await
        .map_err(server_not_found)?;
    tracing::info!(server = %name, by = caller.name(), "server updated");
    Ok(Json(server_view(&server)))
}

pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require(Role::Admin)?;
    state.store.delete_server(&name).await.map_err(|e| match e {
        racklift_store::StoreError::Conflict { .. } => {
            ApiError::new(StatusCode::CONFLICT, "deployment_running", e.to_string()).field("name")
        }
        other => server_not_found(other),
    })?;
    tracing::info!(server = %name, by = caller.name(), "server deleted");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
pub struct EventsQuery {
    #[serde(default)]
    after: i64,
    limit: Option<i64>,
}

pub async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    state.store.server(&name).await.map_err(server_not_found)?;
    let limit = q.limit.unwrap_or(500).clamp(1, 1000);
    let events = state.store.events(&name, q.after, limit).await?;
    Ok(Json(
        serde_json::to_value(events).map_err(|e| ApiError::internal(e.to_string()))?,
    ))
}

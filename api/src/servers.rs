//! `/1.0/servers`: the server catalog and each server's status, newest deployment and event log.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use racklift_bmc_access::SecretError;
use racklift_store::{Event, NewServer, ServerUpdate};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::AppState;
use crate::auth::{Admin, Viewer};
use crate::error::{ApiError, Body, ErrorBody};
use crate::openapi::{AdminErrors, ViewerErrors};
use crate::validate;
use crate::views::{DeploymentView, ServerDetail, ServerView};

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

/// A Redfish System `Id` as racklift stores it: 1 to 64 of `A-Z a-z 0-9 . _ ~ -` (the characters a URI segment
/// carries unescaped, which covers `1`, `System.Embedded.1`, `System_0`, `437XR1138R2`), or empty for none.
fn check_system_id(value: Option<&str>) -> Result<(), ApiError> {
    let Some(id) = value.filter(|id| !id.is_empty()) else {
        return Ok(());
    };
    let ok = id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "system_id",
            format!(
                "{id:?} is not a Redfish System Id: 1 to 64 letters, digits, '.', '_', '~' or '-', the last segment \
                 of the System's URI (such as System.Embedded.1)"
            ),
        ))
    }
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

/// List servers.
#[utoipa::path(get, path = "/1.0/servers", tag = "servers", security(("bearer" = ["viewer"])),
    responses((status = 200, description = "Every server", body = Vec<ServerView>), ViewerErrors))]
pub async fn list(State(state): State<AppState>, _: Viewer) -> Result<Json<Vec<ServerView>>, ApiError> {
    let servers = state.store.list_servers().await?;
    Ok(Json(servers.iter().map(ServerView::of).collect()))
}

/// Create a server.
#[utoipa::path(post, path = "/1.0/servers", tag = "servers", security(("bearer" = ["admin"])),
    request_body = NewServer,
    responses(
        (status = 201, description = "Created", body = ServerView),
        (status = 409, description = "A server of that name exists", body = ErrorBody),
        (status = 422, description = "A plain http:// BMC without allow_plain_http, or a password reference \
            outside the secrets directory", body = ErrorBody),
        AdminErrors))]
pub async fn create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(new): Body<NewServer>,
) -> Result<impl IntoResponse, ApiError> {
    validate::name("name", &new.name)?;
    check_system_id(new.system_id.as_deref())?;
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
    Ok((StatusCode::CREATED, Json(ServerView::of(&server))))
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

/// Show a server with its status and newest deployment.
#[utoipa::path(get, path = "/1.0/servers/{name}", tag = "servers", security(("bearer" = ["viewer"])),
    params(("name" = String, Path, example = "s1", description = "Server name")),
    responses(
        (status = 200, description = "The server", body = ServerDetail),
        (status = 404, description = "No such server", body = ErrorBody),
        ViewerErrors))]
pub async fn show(
    State(state): State<AppState>,
    Viewer(caller): Viewer,
    Path(name): Path<String>,
) -> Result<Json<ServerDetail>, ApiError> {
    let server = state.store.server(&name).await.map_err(server_not_found)?;
    let deployment = match state.store.latest_deployment(&name).await? {
        Some(d) => Some(DeploymentView::of(&state.store, &d, caller.0.role).await?),
        None => None,
    };
    Ok(Json(ServerDetail {
        server: ServerView::of(&server),
        deployment,
    }))
}

/// Update a server's BMC settings; absent fields keep their value.
#[utoipa::path(patch, path = "/1.0/servers/{name}", tag = "servers", security(("bearer" = ["admin"])),
    params(("name" = String, Path, example = "s1", description = "Server name")),
    request_body = ServerUpdate,
    responses(
        (status = 200, description = "Updated", body = ServerView),
        (status = 404, description = "No such server", body = ErrorBody),
        (status = 422, description = "A plain http:// BMC without allow_plain_http, or a password reference \
            outside the secrets directory", body = ErrorBody),
        AdminErrors))]
pub async fn update(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Body(u): Body<ServerUpdate>,
) -> Result<Json<ServerView>, ApiError> {
    check_system_id(u.system_id.as_deref())?;
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
    Ok(Json(ServerView::of(&server)))
}

/// Delete a server without a running deployment.
#[utoipa::path(delete, path = "/1.0/servers/{name}", tag = "servers", security(("bearer" = ["admin"])),
    params(("name" = String, Path, example = "s1", description = "Server name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such server", body = ErrorBody),
        (status = 409, description = "A deployment is running", body = ErrorBody),
        AdminErrors))]
pub async fn remove(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.store.delete_server(&name).await.map_err(|e| match e {
        racklift_store::StoreError::Conflict { .. } => {
            ApiError::new(StatusCode::CONFLICT, "deployment_running", e.to_string()).field("name")
        }
        other => server_not_found(other),
    })?;
    tracing::info!(server = %name, by = caller.name(), "server deleted");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a larger id.
    #[serde(default)]
    #[param(minimum = 0)]
    after: i64,
    /// At most this many (default 500).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// A server's events after `?after=ID`, oldest first.
#[utoipa::path(get, path = "/1.0/servers/{name}/events", tag = "servers", security(("bearer" = ["viewer"])),
    params(("name" = String, Path, example = "s1", description = "Server name"), EventsQuery),
    responses(
        (status = 200, description = "Events", body = Vec<Event>),
        (status = 404, description = "No such server", body = ErrorBody),
        ViewerErrors))]
pub async fn events(
    State(state): State<AppState>,
    _: Viewer,
    Path(name): Path<String>,
    crate::error::Params(q): crate::error::Params<EventsQuery>,
) -> Result<Json<Vec<Event>>, ApiError> {
    state.store.server(&name).await.map_err(server_not_found)?;
    let limit = q.limit.unwrap_or(500);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::invalid("limit", "must be 1 to 1000"));
    }
    if q.after < 0 {
        return Err(ApiError::invalid("after", "must not be negative"));
    }
    Ok(Json(state.store.events(&name, q.after, limit).await?))
}

//! The catalog a deployment is resolved from: provisioning tokens and seeds, BIOS profiles, images and the
//! public address. Reads need viewer, writes admin: a catalog change alters every later deployment.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use racklift_store::{NewBiosProfile, NewImage, NewSeed, NewToken, PUBLIC_ADDRESS, Role, StoreError};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, Body};
use crate::servers::conflict_code;
use crate::validate;

fn to_json<T: serde::Serialize>(v: &T) -> Result<Json<Value>, ApiError> {
    serde_json::to_value(v)
        .map(Json)
        .map_err(|e| ApiError::internal(e.to_string()))
}

fn parse_token(s: &str) -> Result<Uuid, ApiError> {
    s.parse().map_err(|_| ApiError::invalid("token", "not a UUID"))
}

fn token_not_found(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "token_not_found", e.to_string()).field("token")
        }
        other => other.into(),
    }
}

// --- provisioning tokens ----------------------------------------------------------------------------------------

pub async fn list_tokens(State(state): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    to_json(&state.store.list_tokens().await?)
}

pub async fn create_token(
    State(state): State<AppState>,
    caller: Caller,
    Body(new): Body<NewToken>,
) -> Result<impl IntoResponse, ApiError> {
    caller.require(Role::Admin)?;
    if new.uses_remaining < 0 {
        return Err(ApiError::invalid("uses_remaining", "must not be negative"));
    }
    if new.expires_at <= chrono::Utc::now() {
        return Err(ApiError::invalid("expires_at", "must be in the future"));
    }
    let token = state.store.create_token(&new).await?;
    Ok((StatusCode::CREATED, to_json(&token)?))
}

pub async fn show_token(
    State(state): State<AppState>,
    caller: Caller,
    Path(token): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    to_json(
        &state
            .store
            .token(parse_token(&token)?)
            .await
            .map_err(token_not_found)?,
    )
}

pub async fn delete_token(
    State(state): State<AppState>,
    caller: Caller,
    Path(token): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require(Role::Admin)?;
    state
        .store
        .delete_token(parse_token(&token)?)
        .await
        .map_err(token_not_found)?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list_seeds(
    State(state): State<AppState>,
    caller: Caller,
    Path(token): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    let token = parse_token(&token)?;
    state.store.token(token).await.map_err(token_not_found)?;
    to_json(&state.store.seeds(token).await?)
}

pub async fn create_seed(
    State(state): State<AppState>,
    caller: Caller,
    Path(token): Path<String>,
    Body(new): Body<NewSeed>,
) -> Result<impl IntoResponse, ApiError> {
    caller.require(Role::Admin)?;
    let token = parse_token(&token)?;
    validate::name("name", &new.name)?;
    if !(new.install_config.is_null() || new.install_config.is_object()) {
        return Err(ApiError::invalid("install_config", "must be a JSON object"));
    }
    if let Some(v) = new.install_config.get("force_reboot")
        && !v.is_boolean()
    {
        return Err(ApiError::invalid(
            "install_config.force_reboot",
            "must be a boolean",
        ));
    }
    let seed = state.store.create_seed(token, &new).await.map_err(|e| match e {
        StoreError::NotFound { .. } => token_not_found(e),
        other => conflict_code(other, "seed_exists", "name"),
    })?;
    Ok((StatusCode::CREATED, to_json(&seed)?))
}

// --- BIOS profiles ----------------------------------------------------------------------------------------------

pub async fn list_profiles(State(state): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    to_json(&state.store.bios_profiles().await?)
}

/// Checks a profile's shape up front, so the deploy endpoint can rely on it when resolving a plan.
fn check_profile(p: &NewBiosProfile) -> Result<(), ApiError> {
    validate::name("name", &p.name)?;
    let object = |field: &str, v: &Value| -> Result<(), ApiError> {
        if v.is_null() || v.is_object() {
            Ok(())
        } else {
            Err(ApiError::invalid(field, "must be a JSON object"))
        }
    };
    object("match_rules", &p.match_rules)?;
    if let Some(rules) = p.match_rules.as_object() {
        for (k, v) in rules {
            if !matches!(k.as_str(), "vendor" | "name_prefix") || !v.is_string() {
                return Err(ApiError::invalid(
                    &format!("match_rules.{k}"),
                    "only \"vendor\" and \"name_prefix\" with string values are supported",
                ));
            }
        }
    }
    for (field, attrs) in [
        ("attributes", &p.attributes),
        ("deferred_attributes", &p.deferred_attributes),
    ] {
        object(field, attrs)?;
        for (k, v) in attrs.as_object().into_iter().flatten() {
            if crate::deploy::attr_value(v).is_none() {
                return Err(ApiError::invalid(
                    &format!("{field}.{k}"),
                    "must be a boolean, an integer or a string",
                ));
            }
        }
    }
    object("secure_boot", &p.secure_boot)?;
    if crate::deploy::allow_overrides(&p.secure_boot).is_none() {
        return Err(ApiError::invalid(
            "secure_boot",
            "must map PK/KEK/db/dbx to a list of SHA-256 fingerprints or to {fingerprint: true|false|null}",
        ));
    }
    Ok(())
}

pub async fn put_profile(
    State(state): State<AppState>,
    caller: Caller,
    Body(p): Body<NewBiosProfile>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Admin)?;
    check_profile(&p)?;
    to_json(&state.store.put_bios_profile(&p).await?)
}

pub async fn delete_profile(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require(Role::Admin)?;
    state
        .store
        .delete_bios_profile(&name)
        .await
        .map_err(|e| match e {
            StoreError::NotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "bios_profile_not_found", e.to_string()).field("name")
            }
            other => other.into(),
        })?;
    Ok(StatusCode::NO_CONTENT)
}

// --- images -----------------------------------------------------------------------------------------------------

pub async fn list_images(State(state): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    to_json(&state.store.images().await?)
}

pub async fn create_image(
    State(state): State<AppState>,
    caller: Caller,
    Body(mut i): Body<NewImage>,
) -> Result<impl IntoResponse, ApiError> {
    caller.require(Role::Admin)?;
    validate::non_empty("type", &i.image_type)?;
    validate::non_empty("architecture", &i.architecture)?;
    validate::non_empty("channel", &i.channel)?;
    validate::non_empty("path", &i.path)?;
    // Stored resolved, so the catalog shows the file that is served.
    let resolved = crate::media::image_in_dir(&state.config.images_dir, std::path::Path::new(&i.path)).await;
    i.path = resolved
        .as_deref()
        .and_then(std::path::Path::to_str)
        .ok_or_else(|| {
            ApiError::unprocessable(
                "outside_images_dir",
                "path",
                format!(
                    "images must be regular files inside the images directory {} (absolute, or relative to it)",
                    state.config.images_dir.display()
                ),
            )
        })?
        .to_owned();
    if i.size_bytes < 0 {
        return Err(ApiError::invalid("size_bytes", "must not be negative"));
    }
    validate::sha256_hex("sha256", &i.sha256)?;
    let image = state
        .store
        .create_image(&i)
        .await
        .map_err(|e| conflict_code(e, "image_exists", "type"))?;
    Ok((StatusCode::CREATED, to_json(&image)?))
}

// --- settings ---------------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub struct PublicAddress {
    address: String,
}

pub async fn get_public_address(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Viewer)?;
    let address = state.store.setting(PUBLIC_ADDRESS).await?;
    Ok(Json(json!({ "address": address })))
}

pub async fn put_public_address(
    State(state): State<AppState>,
    caller: Caller,
    Body(p): Body<PublicAddress>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Admin)?;
    validate::http_url("address", &p.address)?;
    // Stored without a trailing slash: URLs are built by appending paths to it.
    let address = p.address.trim_end_matches('/').to_owned();
    state.store.put_setting(PUBLIC_ADDRESS, &json!(address)).await?;
    tracing::info!(%address, by = caller.name(), "public address set");
    Ok(Json(json!({ "address": address })))
}

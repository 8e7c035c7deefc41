//! The catalog a deployment is resolved from: provisioning tokens and seeds, BIOS profiles, images and the
//! public address. Reads need viewer, writes admin: a catalog change alters every later deployment.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use racklift_deploy::profile_match::MatchRules;
use racklift_store::{
    BiosProfile, Image, ImageFile, ImageFormat, NewBiosProfile, NewImage, NewSeed, NewToken, PUBLIC_ADDRESS,
    ProvisioningToken, Seed, StoreError,
};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::AppState;
use crate::auth::{Admin, Operator, Viewer};
use crate::error::{ApiError, Body, ErrorBody};
use crate::openapi::{AdminErrors, OperatorErrors, ViewerErrors};
use crate::servers::conflict_code;
use crate::validate;
use crate::views::{PublicAddressView, TokenView};

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

/// List provisioning tokens; their values only to operators and admins.
#[utoipa::path(get, path = "/1.0/tokens", tag = "catalog", security(("bearer" = ["viewer"])),
    responses((status = 200, description = "Every token", body = Vec<TokenView>), ViewerErrors))]
pub async fn list_tokens(
    State(state): State<AppState>,
    Viewer(caller): Viewer,
) -> Result<Json<Vec<TokenView>>, ApiError> {
    let role = caller.0.role;
    let tokens = state.store.list_tokens().await?;
    Ok(Json(tokens.iter().map(|t| TokenView::of(t, role)).collect()))
}

/// Create a provisioning token.
#[utoipa::path(post, path = "/1.0/tokens", tag = "catalog", security(("bearer" = ["admin"])),
    request_body = NewToken,
    responses((status = 201, description = "Created", body = ProvisioningToken), AdminErrors))]
pub async fn create_token(
    State(state): State<AppState>,
    _: Admin,
    Body(new): Body<NewToken>,
) -> Result<impl IntoResponse, ApiError> {
    if new.uses_remaining < 0 {
        return Err(ApiError::invalid("uses_remaining", "must not be negative"));
    }
    if new.expires_at <= chrono::Utc::now() {
        return Err(ApiError::unprocessable(
            "expires_in_past",
            "expires_at",
            "must be in the future",
        ));
    }
    let token = state.store.create_token(&new).await?;
    Ok((StatusCode::CREATED, Json(token)))
}

/// Show a provisioning token (operators and admins: the token is a credential).
#[utoipa::path(get, path = "/1.0/tokens/{token}", tag = "catalog", security(("bearer" = ["operator"])),
    params(("token" = Uuid, Path, example = "00000000-0000-4000-8000-000000000001", description = "The token")),
    responses(
        (status = 200, description = "The token", body = ProvisioningToken),
        (status = 404, description = "No such token", body = ErrorBody),
        OperatorErrors))]
pub async fn show_token(
    State(state): State<AppState>,
    _: Operator,
    Path(token): Path<String>,
) -> Result<Json<ProvisioningToken>, ApiError> {
    let token = parse_token(&token)?;
    Ok(Json(state.store.token(token).await.map_err(token_not_found)?))
}

/// Delete a provisioning token.
#[utoipa::path(delete, path = "/1.0/tokens/{token}", tag = "catalog", security(("bearer" = ["admin"])),
    params(("token" = Uuid, Path, example = "00000000-0000-4000-8000-000000000001", description = "The token")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such token", body = ErrorBody),
        AdminErrors))]
pub async fn delete_token(
    State(state): State<AppState>,
    _: Admin,
    Path(token): Path<String>,
) -> Result<StatusCode, ApiError> {
    state
        .store
        .delete_token(parse_token(&token)?)
        .await
        .map_err(token_not_found)?;
    Ok(StatusCode::NO_CONTENT)
}

/// List a token's seeds (operators and admins: the path names the token).
#[utoipa::path(get, path = "/1.0/tokens/{token}/seeds", tag = "catalog", security(("bearer" = ["operator"])),
    params(("token" = Uuid, Path, example = "00000000-0000-4000-8000-000000000001", description = "The token")),
    responses(
        (status = 200, description = "The token's seeds", body = Vec<Seed>),
        (status = 404, description = "No such token", body = ErrorBody),
        OperatorErrors))]
pub async fn list_seeds(
    State(state): State<AppState>,
    _: Operator,
    Path(token): Path<String>,
) -> Result<Json<Vec<Seed>>, ApiError> {
    let token = parse_token(&token)?;
    state.store.token(token).await.map_err(token_not_found)?;
    Ok(Json(state.store.seeds(token).await?))
}

/// Create a seed of a token.
#[utoipa::path(post, path = "/1.0/tokens/{token}/seeds", tag = "catalog", security(("bearer" = ["admin"])),
    params(("token" = Uuid, Path, example = "00000000-0000-4000-8000-000000000001", description = "The token")),
    request_body = NewSeed,
    responses(
        (status = 201, description = "Created", body = Seed),
        (status = 404, description = "No such token", body = ErrorBody),
        (status = 409, description = "The token has a seed of that name", body = ErrorBody),
        AdminErrors))]
pub async fn create_seed(
    State(state): State<AppState>,
    _: Admin,
    Path(token): Path<String>,
    Body(new): Body<NewSeed>,
) -> Result<impl IntoResponse, ApiError> {
    let token = parse_token(&token)?;
    validate::name("name", &new.name)?;
    if !(new.install_config.is_null() || new.install_config.is_object()) {
        return Err(ApiError::invalid("install_config", "must be a JSON object"));
    }
    // Sections are objects (serde would also read a struct from an array).
    for key in ["target", "security", "network", "incus_preseed"] {
        if let Some(v) = new.install_config.get(key)
            && !(v.is_null() || v.is_object())
        {
            return Err(ApiError::invalid(
                &format!("install_config.{key}"),
                "must be an object",
            ));
        }
    }
    if let Some(c) = new.install_config.get("force_install_confirmation")
        && !c.is_null()
        && !c
            .as_str()
            .is_some_and(|c| c.len() == 6 && c.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    {
        return Err(ApiError::invalid(
            "install_config.force_install_confirmation",
            "must be six lower-case hex characters, the start of the machine-id IncusOS compares it with",
        ));
    }
    // What IncusOS would not read is refused now, naming the key, not at the first deployment.
    if !new.install_config.is_null()
        && let Err(e) =
            serde_path_to_error::deserialize::<_, racklift_media::seed::SeedConfig>(&new.install_config)
    {
        return Err(ApiError::invalid(
            &format!("install_config.{}", e.path()),
            e.inner().to_string(),
        ));
    }
    let seed = state.store.create_seed(token, &new).await.map_err(|e| match e {
        StoreError::NotFound { .. } => token_not_found(e),
        other => conflict_code(other, "seed_exists", "name"),
    })?;
    Ok((StatusCode::CREATED, Json(seed)))
}

// --- BIOS profiles ----------------------------------------------------------------------------------------------

/// List BIOS profiles.
#[utoipa::path(get, path = "/1.0/bios-profiles", tag = "catalog", security(("bearer" = ["viewer"])),
    responses((status = 200, description = "Every profile", body = Vec<BiosProfile>), ViewerErrors))]
pub async fn list_profiles(
    State(state): State<AppState>,
    _: Viewer,
) -> Result<Json<Vec<BiosProfile>>, ApiError> {
    Ok(Json(state.store.bios_profiles().await?))
}

/// Checks a profile's shape up front, so the deploy endpoint can rely on it when resolving a plan.
pub(crate) fn check_profile(p: &NewBiosProfile) -> Result<(), ApiError> {
    validate::name("name", &p.name)?;
    let object = |field: &str, v: &Value| -> Result<(), ApiError> {
        if v.is_null() || v.is_object() {
            Ok(())
        } else {
            Err(ApiError::invalid(field, "must be a JSON object"))
        }
    };
    object("match_rules", &p.match_rules)?;
    // A key this version does not know would otherwise never match, or match where it should not, silently.
    for (k, v) in p.match_rules.as_object().into_iter().flatten() {
        let field = format!("match_rules.{k}");
        if !MatchRules::KEYS.contains(&k.as_str()) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "unknown_match_key",
                format!(
                    "unknown match key {k:?}; the keys are {}",
                    MatchRules::KEYS.join(", ")
                ),
            )
            .field(field));
        }
        if v.as_str().is_none_or(|s| s.trim().is_empty()) {
            return Err(ApiError::invalid(&field, "must be a non-empty string"));
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

/// Create or replace a BIOS profile.
#[utoipa::path(post, path = "/1.0/bios-profiles", tag = "catalog", security(("bearer" = ["admin"])),
    request_body = NewBiosProfile,
    responses((status = 200, description = "Stored", body = BiosProfile), AdminErrors))]
pub async fn put_profile(
    State(state): State<AppState>,
    _: Admin,
    Body(p): Body<NewBiosProfile>,
) -> Result<Json<BiosProfile>, ApiError> {
    check_profile(&p)?;
    Ok(Json(state.store.put_bios_profile(&p).await?))
}

/// Delete a BIOS profile.
#[utoipa::path(delete, path = "/1.0/bios-profiles/{name}", tag = "catalog", security(("bearer" = ["admin"])),
    params(("name" = String, Path, example = "incusos-baseline", description = "Profile name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such profile", body = ErrorBody),
        AdminErrors))]
pub async fn delete_profile(
    State(state): State<AppState>,
    _: Admin,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
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

/// List images.
#[utoipa::path(get, path = "/1.0/images", tag = "catalog", security(("bearer" = ["viewer"])),
    responses((status = 200, description = "Every image", body = Vec<Image>), ViewerErrors))]
pub async fn list_images(State(state): State<AppState>, _: Viewer) -> Result<Json<Vec<Image>>, ApiError> {
    Ok(Json(state.store.images().await?))
}

/// Register an image file.
///
/// IncusOS's `.img` (512-byte sectors, booted from a USB slot) or `.iso` (2048-byte sectors, booted from a CD
/// slot), either one gzip-compressed or not. `size_bytes` is the registered file's size; racklift computes its
/// SHA-256 (a `sha256` given must be the same); a compressed file is decompressed beside itself (the name without
/// `.gz`) and the image record names that file, its size and its SHA-256. The file is hashed again before it is
/// served whenever it changed since.
#[utoipa::path(post, path = "/1.0/images", tag = "catalog", security(("bearer" = ["admin"])),
    request_body = NewImage,
    responses(
        (status = 201, description = "Registered", body = Image),
        (status = 409, description = "An image of that type, architecture and channel exists", body = ErrorBody),
        (status = 422, description = "The path is outside the images directory, or the image has no partition 2 with room for a seed (found at 512-, 2048- or 4096-byte sectors), or its size is not `size_bytes`, or its SHA-256 is not `sha256`, or it is gzip that does not decompress", body = ErrorBody),
        AdminErrors))]
pub async fn create_image(
    State(state): State<AppState>,
    _: Admin,
    Body(mut i): Body<NewImage>,
) -> Result<impl IntoResponse, ApiError> {
    validate::non_empty("type", &i.image_type)?;
    validate::non_empty("architecture", &i.architecture)?;
    validate::non_empty("channel", &i.channel)?;
    validate::non_empty("path", &i.path)?;
    if i.size_bytes < 0 {
        return Err(ApiError::invalid("size_bytes", "must not be negative"));
    }
    if let Some(claimed) = &i.sha256 {
        validate::sha256_hex("sha256", claimed)?;
    }
    // Named by its catalog name in every answer, never by where it lies on the host.
    let catalog_name = format!("{}/{}/{}", i.image_type, i.architecture, i.channel);
    let unreadable = |e: std::io::Error| {
        tracing::error!(image = %catalog_name, error = %e, "image unreadable");
        ApiError::unprocessable(
            "image_unreadable",
            "path",
            format!("the image {catalog_name} cannot be read"),
        )
    };
    let dir = &state.config.images_dir;
    let opened = crate::image_files::open_off_runtime(dir, std::path::Path::new(&i.path))
        .await
        .map_err(unreadable)?
        .ok_or_else(|| {
            ApiError::unprocessable(
                "outside_images_dir",
                "path",
                "images must be regular files inside the images directory (absolute, or relative to it)",
            )
        })?;
    if i64::try_from(opened.size).ok() != Some(i.size_bytes) {
        return Err(ApiError::unprocessable(
            "size_mismatch",
            "size_bytes",
            format!("the file is {} bytes, not {}", opened.size, i.size_bytes),
        ));
    }
    // racklift's own digest of the bytes it opened; the request's, when given, must be the same.
    let (digest, _) = crate::image_files::sha256(opened.file.clone())
        .await
        .map_err(unreadable)?;
    if let Some(claimed) = &i.sha256
        && *claimed != digest
    {
        return Err(ApiError::unprocessable(
            "sha256_mismatch",
            "sha256",
            format!("the file's SHA-256 is {digest}"),
        ));
    }
    // A published `.img.gz` / `.iso.gz` is served from its decompressed copy: Range requests need raw bytes.
    let served = match crate::seeding::gunzip_image(dir, &opened, &catalog_name).await? {
        Some(raw) => raw,
        None => crate::seeding::Served {
            sha256: digest,
            opened,
        },
    };
    let layout = crate::seeding::image_layout(served.opened.file.clone()).await?;
    let format = match layout.format() {
        racklift_media::MediaFormat::Cd => ImageFormat::Cd,
        racklift_media::MediaFormat::Disk => ImageFormat::Disk,
    };
    i.path = served.opened.stored.to_string_lossy().into_owned();
    i.size_bytes = i64::try_from(served.opened.size).unwrap_or(i64::MAX);
    let file = ImageFile {
        sha256: served.sha256,
        file_stamp: Some(served.opened.stamp.as_str().to_owned()),
        format,
        seed_offset: layout.seed_offset as i64,
        seed_capacity: layout.seed_capacity as i64,
    };
    let image = state
        .store
        .create_image(&i, &file)
        .await
        .map_err(|e| conflict_code(e, "image_exists", "type"))?;
    tracing::info!(image = image.id, path = %image.path, format = format.as_str(),
        sector_size = layout.sector_size, "image registered");
    Ok((StatusCode::CREATED, Json(image)))
}

// --- settings ---------------------------------------------------------------------------------------------------

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublicAddress {
    /// An http:// or https:// URL with a host, as BMCs and servers reach the API.
    #[schema(
        pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[A-Za-z0-9._~!$&()*+,;=:@%/-]*)?$",
        example = "https://racklift.example.net:8080"
    )]
    address: String,
}

/// The public address media URLs are built from.
#[utoipa::path(get, path = "/1.0/settings/public-address", tag = "catalog", security(("bearer" = ["viewer"])),
    responses((status = 200, description = "The address", body = PublicAddressView), ViewerErrors))]
pub async fn get_public_address(
    State(state): State<AppState>,
    _: Viewer,
) -> Result<Json<PublicAddressView>, ApiError> {
    let address = state.store.setting(PUBLIC_ADDRESS).await?;
    Ok(Json(PublicAddressView {
        address: address.as_ref().and_then(Value::as_str).map(str::to_owned),
    }))
}

/// Set the public address.
#[utoipa::path(put, path = "/1.0/settings/public-address", tag = "catalog", security(("bearer" = ["admin"])),
    request_body = PublicAddress,
    responses((status = 200, description = "Stored", body = PublicAddressView), AdminErrors))]
pub async fn put_public_address(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(p): Body<PublicAddress>,
) -> Result<Json<PublicAddressView>, ApiError> {
    validate::http_url("address", &p.address)?;
    // Stored without a trailing slash: URLs are built by appending paths to it.
    let address = p.address.trim_end_matches('/').to_owned();
    state
        .store
        .put_setting(PUBLIC_ADDRESS, &Value::String(address.clone()))
        .await?;
    tracing::info!(%address, by = caller.name(), "public address set");
    Ok(Json(PublicAddressView {
        address: Some(address),
    }))
}

//! Publishing updates (`POST /1.0/provisioning/updates`, admin) and the rule that classifies an update's files.
//!
//! A file's bytes are not uploaded: they must already be a regular file inside `paths.images_dir`, like a
//! catalog image, and are served from there. The API and its callers share no upload channel (every request
//! body is capped at 1 MiB), an OS update is gigabytes that would otherwise be stored twice, and the directory
//! is the one the media server is already confined to. The API checks each file where it lies: confined,
//! regular, the size and the SHA-256 the publisher computed.

use std::path::Path;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use racklift_store::{NewUpdate, UpdateFile};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Admin;
use crate::error::{ApiError, Body, ErrorBody};
use crate::openapi::AdminErrors;
use crate::updates::UpdateView;
use crate::validate;

/// IncusOS's update file types (its `api/images` package), `""` being "undefined".
pub const FILE_TYPES: [&str; 9] = [
    "",
    "image-raw",
    "image-iso",
    "image-manifest",
    "update-efi",
    "update-usr",
    "update-usr-verity",
    "update-usr-verity-signature",
    "application",
];

/// IncusOS's architecture names, `""` being "any".
pub const ARCHITECTURES: [&str; 3] = ["", "x86_64", "aarch64"];

/// What a file of an update is, from its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub component: String,
    pub file_type: &'static str,
    /// The architecture the name states (`usr-x86-64`, `usr-arm64`), if it states one.
    pub architecture: Option<&'static str>,
}

/// Classifies an update file by its name, as IncusOS's own update index names them:
///
/// | name | component | type |
/// |---|---|---|
/// | `<app>.raw.gz` (`<app>` of `a-z 0-9 -`: `incus`, `debug`, ...) | `<app>` | `application` |
/// | `<app>.manifest.json.gz` | `<app>` | `image-manifest` |
/// | `*.manifest.json.gz` (any other) | `os` | `image-manifest` |
/// | `*.efi.gz` | `os` | `update-efi` |
/// | `*.usr-<arch>-verity-sig.*` | `os` | `update-usr-verity-signature` |
/// | `*.usr-<arch>-verity.*` | `os` | `update-usr-verity` |
/// | `*.usr-<arch>.*` | `os` | `update-usr` |
/// | `*.img.gz` | `os` | `image-raw` |
/// | `*.iso.gz` | `os` | `image-iso` |
///
/// `<arch>` is `x86-64` (architecture `x86_64`) or `arm64` (`aarch64`); other names state no architecture.
/// Anything else is not an update file (`None`).
pub fn classify(filename: &str) -> Option<Classified> {
    let os = |file_type, architecture| Classified {
        component: "os".to_owned(),
        file_type,
        architecture,
    };
    let app_name = |name: &str| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if let Some(app) = filename.strip_suffix(".raw.gz")
        && app_name(app)
    {
        return Some(Classified {
            component: app.to_owned(),
            file_type: "application",
            architecture: None,
        });
    }
    if let Some(stem) = filename.strip_suffix(".manifest.json.gz") {
        let component = if app_name(stem) { stem } else { "os" };
        return Some(Classified {
            component: component.to_owned(),
            file_type: "image-manifest",
            architecture: None,
        });
    }
    if filename.ends_with(".efi.gz") {
        return Some(os("update-efi", None));
    }
    for (marker, architecture) in [("x86-64", "x86_64"), ("arm64", "aarch64")] {
        for (suffix, file_type) in [
            ("-verity-sig.", "update-usr-verity-signature"),
            ("-verity.", "update-usr-verity"),
            (".", "update-usr"),
        ] {
            if filename.contains(&format!(".usr-{marker}{suffix}")) {
                return Some(os(file_type, Some(architecture)));
            }
        }
    }
    if filename.ends_with(".img.gz") {
        return Some(os("image-raw", None));
    }
    if filename.ends_with(".iso.gz") {
        return Some(os("image-iso", None));
    }
    None
}

/// An update to publish.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishUpdate {
    /// IncusOS versions are timestamps; compared as text.
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$", example = "202612010000")]
    pub version: String,
    /// The update channels it is offered on (at least one).
    #[schema(value_type = Vec<ChannelName>, min_items = 1, example = json!(["stable"]))]
    pub channels: Vec<String>,
    /// At least one file.
    #[schema(min_items = 1)]
    pub files: Vec<PublishFile>,
}

/// The schema of an update channel's name: what `validate::name` accepts.
pub struct ChannelName;

impl utoipa::PartialSchema for ChannelName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some("^[a-z0-9][a-z0-9._-]{0,62}$"))
            .examples(["stable"])
            .into()
    }
}

impl ToSchema for ChannelName {}

/// One file of an update to publish, as its publisher measured it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishFile {
    /// The name IncusOS fetches it by: one path segment.
    #[schema(
        pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$",
        example = "IncusOS_202612010000.efi.gz"
    )]
    pub filename: String,
    /// A regular file inside the images directory, absolute or relative to it.
    #[schema(example = "updates/202612010000/IncusOS_202612010000.efi.gz")]
    pub path: String,
    #[schema(minimum = 0)]
    pub size: i64,
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub sha256: String,
    /// `os` or an application name.
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$", example = "os")]
    pub component: String,
    /// One of IncusOS's update file types (`FILE_TYPES`).
    #[serde(rename = "type")]
    #[schema(
        example = "update-efi",
        pattern = "^(|image-raw|image-iso|image-manifest|update-efi|update-usr|update-usr-verity|update-usr-verity-signature|application)$"
    )]
    pub file_type: String,
    /// `x86_64`, `aarch64`, or empty for any.
    #[schema(example = "x86_64", pattern = "^(|x86_64|aarch64)$")]
    pub architecture: String,
}

fn token_rule(
    field: &str,
    value: &str,
    max: usize,
    first: fn(u8) -> bool,
    rest: fn(u8) -> bool,
) -> Result<(), ApiError> {
    let ok = value.len() <= max && value.bytes().next().is_some_and(first) && value.bytes().skip(1).all(rest);
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!("{value:?} does not follow the documented pattern"),
        ))
    }
}

fn version_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

fn component_byte(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'
}

/// SHA-256 and length of a file, read on the blocking pool.
async fn measure(path: std::path::PathBuf) -> std::io::Result<(String, u64)> {
    tokio::task::spawn_blocking(move || {
        use sha2::Digest;
        use std::io::Read;
        let mut file = std::fs::File::open(path)?;
        let mut hasher = sha2::Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut len = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            len += n as u64;
        }
        let sha256 = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Ok((sha256, len))
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Publish an update whose files lie inside the images directory.
#[utoipa::path(post, path = "/1.0/provisioning/updates", tag = "provisioning", security(("bearer" = ["admin"])),
    request_body = PublishUpdate,
    responses(
        (status = 201, description = "Published", body = UpdateView),
        (status = 409, description = "That version is published already", body = ErrorBody),
        (status = 422, description = "A file is outside the images directory, or its size or SHA-256 differs \
            from what the request says (`field` names it)", body = ErrorBody),
        AdminErrors))]
pub async fn publish(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(p): Body<PublishUpdate>,
) -> Result<impl IntoResponse, ApiError> {
    token_rule("version", &p.version, 64, version_byte, version_byte)?;
    if p.channels.is_empty() {
        return Err(ApiError::invalid("channels", "name at least one channel"));
    }
    for (i, channel) in p.channels.iter().enumerate() {
        validate::name(&format!("channels[{i}]"), channel)?;
    }
    if p.files.is_empty() {
        return Err(ApiError::invalid("files", "an update needs at least one file"));
    }
    let mut files = Vec::with_capacity(p.files.len());
    for (i, f) in p.files.iter().enumerate() {
        let at = |name: &str| format!("files[{i}].{name}");
        token_rule(
            &at("filename"),
            &f.filename,
            255,
            |b| b.is_ascii_alphanumeric(),
            version_byte,
        )?;
        if p.files[..i].iter().any(|other| other.filename == f.filename) {
            return Err(ApiError::unprocessable(
                "duplicate_filename",
                &at("filename"),
                "named twice in this update",
            ));
        }
        token_rule(
            &at("component"),
            &f.component,
            63,
            |b| b.is_ascii_lowercase() || b.is_ascii_digit(),
            component_byte,
        )?;
        if !FILE_TYPES.contains(&f.file_type.as_str()) {
            return Err(ApiError::invalid(&at("type"), format!("one of {FILE_TYPES:?}")));
        }
        if !ARCHITECTURES.contains(&f.architecture.as_str()) {
            return Err(ApiError::invalid(
                &at("architecture"),
                format!("one of {ARCHITECTURES:?}"),
            ));
        }
        validate::sha256_hex(&at("sha256"), &f.sha256)?;
        if f.size < 0 {
            return Err(ApiError::invalid(&at("size"), "must not be negative"));
        }
        let path = crate::media::image_in_dir(&state.config.images_dir, Path::new(&f.path))
            .await
            .ok_or_else(|| {
                ApiError::unprocessable(
                    "outside_images_dir",
                    &at("path"),
                    "update files must be regular files inside the images directory (absolute, or relative to it)",
                )
            })?;
        let (sha256, size) = measure(path.clone()).await.map_err(|e| {
            tracing::error!(path = %path.display(), error = %e, "update file unreadable");
            ApiError::unprocessable("unreadable_file", &at("path"), "the file cannot be read")
        })?;
        if size != f.size as u64 {
            return Err(ApiError::unprocessable(
                "size_mismatch",
                &at("size"),
                format!("the file is {size} bytes, not {}", f.size),
            ));
        }
        if sha256 != f.sha256 {
            return Err(ApiError::unprocessable(
                "sha256_mismatch",
                &at("sha256"),
                format!("the file's SHA-256 is {sha256}"),
            ));
        }
        files.push(UpdateFile {
            filename: f.filename.clone(),
            size_bytes: f.size,
            component: f.component.clone(),
            file_type: f.file_type.clone(),
            architecture: f.architecture.clone(),
            sha256,
            path: path.to_string_lossy().into_owned(),
        });
    }
    let update = state
        .store
        .publish_update(&NewUpdate {
            version: p.version.clone(),
            channels: p.channels.clone(),
            published_by: caller.name().to_owned(),
            files,
        })
        .await
        .map_err(|e| match e {
            racklift_store::StoreError::Conflict { .. } => ApiError::new(
                StatusCode::CONFLICT,
                "update_exists",
                format!("version {} is published already", p.version),
            )
            .field("version"),
            other => other.into(),
        })?;
    tracing::info!(version = %update.version, uuid = %update.uuid, by = caller.name(), "update published");
    Ok((StatusCode::CREATED, Json(UpdateView::from(update))))
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn files_are_classified_as_incusos_names_them() {
        for (name, component, file_type, arch) in [
            ("incus.raw.gz", "incus", "application", None),
            ("gpu-support.raw.gz", "gpu-support", "application", None),
            ("incus.manifest.json.gz", "incus", "image-manifest", None),
            (
                "IncusOS_202612010000.manifest.json.gz",
                "os",
                "image-manifest",
                None,
            ),
            ("IncusOS_202612010000.efi.gz", "os", "update-efi", None),
            (
                "IncusOS_202612010000.usr-x86-64-verity-sig.gz",
                "os",
                "update-usr-verity-signature",
                Some("x86_64"),
            ),
            (
                "IncusOS_202612010000.usr-x86-64-verity.raw.gz",
                "os",
                "update-usr-verity",
                Some("x86_64"),
            ),
            (
                "IncusOS_202612010000.usr-arm64.raw.gz",
                "os",
                "update-usr",
                Some("aarch64"),
            ),
            ("IncusOS_202612010000.img.gz", "os", "image-raw", None),
            ("IncusOS_202612010000.iso.gz", "os", "image-iso", None),
        ] {
            let c = classify(name).unwrap_or_else(|| panic!("{name} unclassified"));
            assert_eq!(
                (c.component.as_str(), c.file_type, c.architecture),
                (component, file_type, arch),
                "{name}"
            );
        }
        for name in ["SHA256SUMS", "IncusOS.Usr.raw.gz", "notes.txt", ".raw.gz"] {
            assert_eq!(classify(name), None, "{name}");
        }
    }
}

#[cfg(test)]
mod schema_tests {
    use utoipa::PartialSchema;

    use super::{ARCHITECTURES, FILE_TYPES, PublishFile};

    /// The document's patterns for `type` and `architecture` are the lists the handler checks, no more or less.
    #[test]
    fn the_documented_patterns_are_the_checked_lists() {
        let schema = serde_json::to_value(PublishFile::schema()).unwrap();
        for (property, list) in [("type", &FILE_TYPES[..]), ("architecture", &ARCHITECTURES[..])] {
            assert_eq!(
                schema["properties"][property]["pattern"],
                format!("^({})$", list.join("|")),
                "{property}"
            );
        }
    }
}

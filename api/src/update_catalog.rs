//! Publishing updates (`POST /1.0/provisioning/updates`, admin) and the rule that classifies an update's files.
//!
//! A file's bytes are not uploaded: they must already be a regular file inside `paths.images_dir`, like a
//! catalog image, and are served from there. The API and its callers share no upload channel (every request
//! body is capped at 1 MiB), an OS update is gigabytes that would otherwise be stored twice, and the directory
//! is the one the media server is already confined to. The API opens each file beneath the directory's handle,
//! checks it is regular and of the size given, and computes its SHA-256 itself (a `sha256` given must match);
//! a file changed since is hashed again before it is served (`crate::image_files`).

use std::path::Path;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use racklift_store::{Image, NewUpdate, Update, UpdateFile};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Admin;
use crate::error::{ApiError, Body, ErrorBody};
use crate::openapi::AdminErrors;
use crate::updates::UpdateView;
use crate::validate;

/// IncusOS's update file types (`osd/api/images/update_file_type.go`), `""` being "undefined". Its own
/// `UpdateFileTypes` map omits `update-secureboot`, which it nevertheless downloads; the wire value is this one.
pub const FILE_TYPES: [&str; 11] = [
    "",
    "image-raw",
    "image-iso",
    "image-manifest",
    "changelog",
    "update-efi",
    "update-usr",
    "update-usr-verity",
    "update-usr-verity-signature",
    "update-secureboot",
    "application",
];

/// The four file types IncusOS stages an OS update from (`provider_operations_center.go`, the OS update's
/// `Download`): an update holding any `os` file and lacking one of these fails to apply.
pub const OS_UPDATE_TYPES: [&str; 4] = [
    "update-efi",
    "update-usr",
    "update-usr-verity",
    "update-usr-verity-signature",
];

/// IncusOS's update file components (`osd/api/images/update_file_component.go`).
pub const COMPONENTS: [&str; 9] = [
    "os",
    "debug",
    "gpu-support",
    "incus",
    "incus-ceph",
    "incus-linstor",
    "migration-manager",
    "openfga",
    "operations-center",
];

/// IncusOS's architecture names (`osd/api/images/update_file_architecture.go`), `""` being "any".
pub const ARCHITECTURES: [&str; 3] = ["", "x86_64", "aarch64"];

/// The application every fresh IncusOS installs from the update its provider offers (the applications seed
/// defaults to it), by the file name IncusOS looks for.
pub const INCUS_FILE: &str = "incus.raw.gz";

/// What a file of an update is, from its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub component: String,
    pub file_type: &'static str,
    /// The architecture the name states (its `x86_64/` or `aarch64/` directory, or `usr-x86-64`, `usr-arm64`),
    /// if it states one.
    pub architecture: Option<&'static str>,
}

/// Classifies an update file by its name, as IncusOS's publisher names them (`cmd/image-publisher/main_sync.go`,
/// `changelog.go`): a relative path whose directory, when there is one, is the architecture (`x86_64/`,
/// `aarch64/`), and whose base name says the rest:
///
/// | base name | component | type |
/// |---|---|---|
/// | `<app>.raw.gz` (`<app>` a component; `incus-lts-<v>` is `incus`) | `<app>` | `application` |
/// | `<app>.manifest.json.gz` | `<app>` | `image-manifest` |
/// | `*.manifest.json.gz` (any other) | `os` | `image-manifest` |
/// | `changelog-<channel>.yaml.gz` | `os` | `changelog` |
/// | `*.efi.gz` | `os` | `update-efi` |
/// | `*.usr-<arch>-verity-sig.*` | `os` | `update-usr-verity-signature` |
/// | `*.usr-<arch>-verity.*` | `os` | `update-usr-verity` |
/// | `*.usr-<arch>.*` | `os` | `update-usr` |
/// | `*.img.gz` | `os` | `image-raw` |
/// | `*.iso.gz` | `os` | `image-iso` |
/// | `*.tar.gz` at the top level (the Secure Boot key tarball, `sb.tar.gz` in IncusOS's build) | `os` | `update-secureboot` |
///
/// `<arch>` is `x86-64` (architecture `x86_64`) or `arm64` (`aarch64`). A name whose directory and `usr-<arch>`
/// disagree, a directory that is not an architecture, or any other base name is not an update file (`None`).
pub fn classify(filename: &str) -> Option<Classified> {
    let (architecture, base) = match filename.split_once('/') {
        None => (None, filename),
        Some((dir, base)) => {
            let arch = ARCHITECTURES[1..].iter().find(|a| **a == dir).copied()?;
            if base.contains('/') {
                return None;
            }
            (Some(arch), base)
        }
    };
    let mut c = classify_base(base)?;
    match (c.architecture, architecture) {
        (Some(named), Some(dir)) if named != dir => return None,
        (None, dir) => c.architecture = dir,
        _ => {}
    }
    // The Secure Boot keys are one tarball for every architecture, published beside the directories.
    if c.file_type == "update-secureboot" && architecture.is_some() {
        return None;
    }
    Some(c)
}

fn classify_base(filename: &str) -> Option<Classified> {
    let os = |file_type, architecture| Classified {
        component: "os".to_owned(),
        file_type,
        architecture,
    };
    let app_component = |stem: &str| -> Option<&'static str> {
        let stem = if stem.starts_with("incus-lts-") {
            "incus"
        } else {
            stem
        };
        COMPONENTS[1..].iter().find(|c| **c == stem).copied()
    };
    if let Some(app) = filename.strip_suffix(".raw.gz")
        && let Some(component) = app_component(app)
    {
        return Some(Classified {
            component: component.to_owned(),
            file_type: "application",
            architecture: None,
        });
    }
    if let Some(stem) = filename.strip_suffix(".manifest.json.gz") {
        let component = app_component(stem).unwrap_or("os");
        return Some(Classified {
            component: component.to_owned(),
            file_type: "image-manifest",
            architecture: None,
        });
    }
    if filename.starts_with("changelog-") && filename.ends_with(".yaml.gz") {
        return Some(os("changelog", None));
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
    if filename.ends_with(".tar.gz") && filename.len() > ".tar.gz".len() {
        return Some(os("update-secureboot", None));
    }
    None
}

/// What an update lacks that IncusOS will need from it, for one architecture (`""`: an update that names
/// none, every file being for any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incomplete {
    /// It has `os` files for this architecture (IncusOS then stages an OS update from it) but not this one of
    /// the four `update-*` files.
    OsUpdateFile {
        architecture: String,
        file_type: &'static str,
    },
    /// No `incus.raw.gz` application for this architecture: a fresh install would get no Incus.
    NoIncus { architecture: String },
}

impl Incomplete {
    /// The error code the API answers with.
    pub fn code(&self) -> &'static str {
        match self {
            Incomplete::OsUpdateFile { .. } => "incomplete_os_update",
            Incomplete::NoIncus { .. } => "missing_incus",
        }
    }
}

impl std::fmt::Display for Incomplete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let arch = |a: &str| {
            if a.is_empty() {
                "any architecture".to_owned()
            } else {
                a.to_owned()
            }
        };
        match self {
            Incomplete::OsUpdateFile {
                architecture,
                file_type,
            } => write!(
                f,
                "{} has `os` files but no {file_type} file: IncusOS stages an OS update from all four of \
                 {OS_UPDATE_TYPES:?}",
                arch(architecture)
            ),
            Incomplete::NoIncus { architecture } => write!(
                f,
                "{} has no {INCUS_FILE} (type application): IncusOS installs Incus from the update it is offered",
                arch(architecture)
            ),
        }
    }
}

/// One file as the completeness rule sees it.
#[derive(Debug, Clone, Copy)]
pub struct FileFacts<'a> {
    pub filename: &'a str,
    pub component: &'a str,
    pub file_type: &'a str,
    pub architecture: &'a str,
}

/// Whether a file is kept by an IncusOS of `architecture`: IncusOS keeps files whose architecture is empty or its
/// own (`checkRelease`). `""` stands for "the update names no architecture" and keeps only files for any.
fn kept_by(file: &FileFacts<'_>, architecture: &str) -> bool {
    file.architecture.is_empty() || file.architecture == architecture
}

/// Whether the files an IncusOS of `architecture` keeps hold the Incus application by the name IncusOS looks
/// for (the base name `incus.raw.gz`, type `application`).
pub fn has_incus(files: &[FileFacts<'_>], architecture: &str) -> bool {
    files.iter().any(|f| {
        kept_by(f, architecture)
            && f.file_type == "application"
            && f.filename.rsplit('/').next() == Some(INCUS_FILE)
    })
}

/// The first thing an update lacks that IncusOS will need from it, for each architecture it names (or, naming
/// none, for any): with any `os` file kept, all four [`OS_UPDATE_TYPES`] with component `os`; and always an
/// [`INCUS_FILE`]. IncusOS takes its OS, its applications and its Secure Boot keys from the one update it selects
/// and falls back to no other, so a partial update is a broken one.
pub fn incomplete(files: &[FileFacts<'_>]) -> Option<Incomplete> {
    let mut architectures: Vec<&str> = ARCHITECTURES[1..]
        .iter()
        .copied()
        .filter(|a| files.iter().any(|f| f.architecture == *a))
        .collect();
    if architectures.is_empty() {
        architectures.push("");
    }
    for arch in architectures {
        let kept: Vec<&FileFacts<'_>> = files.iter().filter(|f| kept_by(f, arch)).collect();
        if kept.iter().any(|f| f.component == "os") {
            for file_type in OS_UPDATE_TYPES {
                if !kept
                    .iter()
                    .any(|f| f.component == "os" && f.file_type == file_type)
                {
                    return Some(Incomplete::OsUpdateFile {
                        architecture: arch.to_owned(),
                        file_type,
                    });
                }
            }
        }
        if !has_incus(files, arch) {
            return Some(Incomplete::NoIncus {
                architecture: arch.to_owned(),
            });
        }
    }
    None
}

/// A file name as IncusOS fetches it: a relative path of at most 255 bytes whose segments start with a letter or
/// digit and hold only `A-Z a-z 0-9 . _ -` (so no `..`, no leading `/`, no empty segment); what migration 0016's
/// check allows.
pub fn valid_filename(name: &str) -> bool {
    name.len() <= 255
        && name.split('/').all(|segment| {
            segment.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
                && segment.bytes().all(version_byte)
        })
}

/// The update IncusOS on `channel` takes from the listing (`updates` in listing order, highest version first):
/// the first one on its channel, or simply the first when the channel is empty (`checkRelease` in IncusOS's
/// `operations-center` provider). It does not look further, so neither does this.
pub fn offered_on<'a>(updates: &'a [Update], channel: &str) -> Option<&'a Update> {
    updates
        .iter()
        .find(|u| channel.is_empty() || u.channels.iter().any(|c| c == channel))
}

/// The deploy pre-flight's catalog check: a server installed from `image` checks for updates on the image's
/// channel on its first start-up and installs Incus from the update it is offered there, before it can register.
/// When that update holds no `incus.raw.gz` for the image's architecture (or the channel has none), the server
/// would never register: refused with `no_incus_update`, naming `channel`.
pub(crate) async fn check_incus_offered(
    store: &racklift_store::Store,
    image: &Image,
) -> Result<(), ApiError> {
    let updates = store.updates().await?;
    let refuse = |why: String| {
        Err(ApiError::unprocessable(
            "no_incus_update",
            "channel",
            format!(
                "{why}; a server installed from image {} would get no Incus and never register: publish an update \
                 holding {}/{INCUS_FILE} on channel {:?}",
                image.id, image.architecture, image.channel
            ),
        ))
    };
    let Some(update) = offered_on(&updates, &image.channel) else {
        return refuse(format!(
            "the update catalog has nothing on channel {:?}",
            image.channel
        ));
    };
    let files = store.update_files(update.uuid).await?;
    let facts: Vec<FileFacts<'_>> = files
        .iter()
        .map(|f| FileFacts {
            filename: &f.filename,
            component: &f.component,
            file_type: &f.file_type,
            architecture: &f.architecture,
        })
        .collect();
    if !has_incus(&facts, &image.architecture) {
        return refuse(format!(
            "update {} (the first listed on channel {:?}, the one IncusOS takes) holds no {INCUS_FILE} for {}",
            update.version, image.channel, image.architecture
        ));
    }
    Ok(())
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
    /// The name IncusOS fetches it by, slashes and all: a relative path (at most 255 bytes) whose directory is
    /// the architecture where IncusOS's publisher puts one (`x86_64/incus.raw.gz`).
    #[schema(
        pattern = "^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$",
        max_length = 255,
        example = "x86_64/IncusOS_202612010000.efi.gz"
    )]
    pub filename: String,
    /// A regular file inside the images directory, absolute or relative to it.
    #[schema(example = "updates/202612010000/IncusOS_202612010000.efi.gz")]
    pub path: String,
    #[schema(minimum = 0)]
    pub size: i64,
    /// The SHA-256 its publisher computed, checked against racklift's own (422 `sha256_mismatch` naming it when
    /// they differ); racklift's is what IncusOS is offered either way.
    #[serde(default)]
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub sha256: Option<String>,
    /// `os` or an application name: one of IncusOS's components (`COMPONENTS`).
    #[schema(
        example = "os",
        pattern = "^(os|debug|gpu-support|incus|incus-ceph|incus-linstor|migration-manager|openfga|operations-center)$"
    )]
    pub component: String,
    /// One of IncusOS's update file types (`FILE_TYPES`).
    #[serde(rename = "type")]
    #[schema(
        example = "update-efi",
        pattern = "^(|image-raw|image-iso|image-manifest|changelog|update-efi|update-usr|update-usr-verity|update-usr-verity-signature|update-secureboot|application)$"
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

/// Publish an update whose files lie inside the images directory.
#[utoipa::path(post, path = "/1.0/provisioning/updates", tag = "provisioning", security(("bearer" = ["admin"])),
    request_body = PublishUpdate,
    responses(
        (status = 201, description = "Published", body = UpdateView),
        (status = 409, description = "That version is published already", body = ErrorBody),
        (status = 422, description = "A file is outside the images directory, or its size or SHA-256 differs \
            from what the request says (`field` names it); or the update lacks what IncusOS needs from it \
            (`incomplete_os_update`: `os` files without all four `update-*` files for an architecture; \
            `missing_incus`: no `incus.raw.gz` for an architecture it names; `field` is `files`)", body = ErrorBody),
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
    for (i, f) in p.files.iter().enumerate() {
        let at = |name: &str| format!("files[{i}].{name}");
        if !valid_filename(&f.filename) {
            return Err(ApiError::invalid(
                &at("filename"),
                format!(
                    "{:?} is not a relative path of at most 255 bytes whose segments start with a letter or digit \
                     and hold only A-Z a-z 0-9 . _ -",
                    f.filename
                ),
            ));
        }
        if p.files[..i].iter().any(|other| other.filename == f.filename) {
            return Err(ApiError::unprocessable(
                "duplicate_filename",
                &at("filename"),
                "named twice in this update",
            ));
        }
        if !COMPONENTS.contains(&f.component.as_str()) {
            return Err(ApiError::invalid(
                &at("component"),
                format!("one of {COMPONENTS:?}"),
            ));
        }
        if !FILE_TYPES.contains(&f.file_type.as_str()) {
            return Err(ApiError::invalid(&at("type"), format!("one of {FILE_TYPES:?}")));
        }
        if !ARCHITECTURES.contains(&f.architecture.as_str()) {
            return Err(ApiError::invalid(
                &at("architecture"),
                format!("one of {ARCHITECTURES:?}"),
            ));
        }
        if let Some(claimed) = &f.sha256 {
            validate::sha256_hex(&at("sha256"), claimed)?;
        }
        if f.size < 0 {
            return Err(ApiError::invalid(&at("size"), "must not be negative"));
        }
    }
    let facts: Vec<FileFacts<'_>> = p
        .files
        .iter()
        .map(|f| FileFacts {
            filename: &f.filename,
            component: &f.component,
            file_type: &f.file_type,
            architecture: &f.architecture,
        })
        .collect();
    if let Some(missing) = incomplete(&facts) {
        return Err(ApiError::unprocessable(
            missing.code(),
            "files",
            missing.to_string(),
        ));
    }
    let mut files = Vec::with_capacity(p.files.len());
    for (i, f) in p.files.iter().enumerate() {
        let at = |name: &str| format!("files[{i}].{name}");
        let unreadable = |e: std::io::Error| {
            tracing::error!(file = %f.filename, error = %e, "update file unreadable");
            ApiError::unprocessable(
                "unreadable_file",
                &at("path"),
                format!("the file {} cannot be read", f.filename),
            )
        };
        let opened = crate::image_files::open_off_runtime(&state.config.images_dir, Path::new(&f.path))
            .await
            .map_err(unreadable)?
            .ok_or_else(|| {
                ApiError::unprocessable(
                    "outside_images_dir",
                    &at("path"),
                    "update files must be regular files inside the images directory (absolute, or relative to it)",
                )
            })?;
        let (sha256, size) = crate::image_files::sha256(opened.file.clone())
            .await
            .map_err(unreadable)?;
        if size != f.size as u64 {
            return Err(ApiError::unprocessable(
                "size_mismatch",
                &at("size"),
                format!("the file is {size} bytes, not {}", f.size),
            ));
        }
        if f.sha256.as_ref().is_some_and(|claimed| *claimed != sha256) {
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
            path: opened.stored.to_string_lossy().into_owned(),
            file_stamp: Some(opened.stamp.as_str().to_owned()),
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
    use super::{FileFacts, Incomplete, classify, incomplete, offered_on, valid_filename};

    /// IncusOS takes the first listed update of its channel (or the very first with no channel), never a later
    /// one, however much better a later one would suit.
    #[test]
    fn the_offered_update_is_the_first_listed_on_the_channel() {
        let update = |version: &str, channels: &[&str]| racklift_store::Update {
            uuid: uuid::Uuid::new_v4(),
            version: version.to_owned(),
            channels: channels.iter().map(|c| (*c).to_owned()).collect(),
            published_at: chrono::Utc::now(),
            published_by: String::new(),
        };
        let listing = [
            update("3", &["testing"]),
            update("2", &["stable", "testing"]),
            update("1", &["stable"]),
        ];
        for (channel, expected) in [
            ("stable", Some("2")),
            ("testing", Some("3")),
            ("", Some("3")),
            ("edge", None),
        ] {
            assert_eq!(
                offered_on(&listing, channel).map(|u| u.version.as_str()),
                expected,
                "{channel:?}"
            );
        }
        assert_eq!(offered_on(&[], "stable"), None);
    }

    #[test]
    fn files_are_classified_as_incusos_names_them() {
        for (name, component, file_type, arch) in [
            ("incus.raw.gz", "incus", "application", None),
            ("x86_64/incus.raw.gz", "incus", "application", Some("x86_64")),
            (
                "aarch64/gpu-support.raw.gz",
                "gpu-support",
                "application",
                Some("aarch64"),
            ),
            (
                "x86_64/incus-lts-7.0.raw.gz",
                "incus",
                "application",
                Some("x86_64"),
            ),
            (
                "x86_64/incus.manifest.json.gz",
                "incus",
                "image-manifest",
                Some("x86_64"),
            ),
            (
                "x86_64/IncusOS_202612010000.manifest.json.gz",
                "os",
                "image-manifest",
                Some("x86_64"),
            ),
            (
                "x86_64/changelog-stable.yaml.gz",
                "os",
                "changelog",
                Some("x86_64"),
            ),
            ("IncusOS_202612010000.efi.gz", "os", "update-efi", None),
            (
                "aarch64/IncusOS_202612010000.efi.gz",
                "os",
                "update-efi",
                Some("aarch64"),
            ),
            (
                "x86_64/IncusOS_202612010000.usr-x86-64-verity-sig.gz",
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
            (
                "x86_64/IncusOS_202612010000.img.gz",
                "os",
                "image-raw",
                Some("x86_64"),
            ),
            ("IncusOS_202612010000.iso.gz", "os", "image-iso", None),
            ("sb.tar.gz", "os", "update-secureboot", None),
        ] {
            let c = classify(name).unwrap_or_else(|| panic!("{name} unclassified"));
            assert_eq!(
                (c.component.as_str(), c.file_type, c.architecture),
                (component, file_type, arch),
                "{name}"
            );
        }
        for name in [
            "SHA256SUMS",
            "IncusOS.Usr.raw.gz",
            "notes.txt",
            ".raw.gz",
            "nginx.raw.gz",
            // The directory and the name disagree, or the directory is no architecture.
            "aarch64/IncusOS_1.usr-x86-64.raw.gz",
            "amd64/incus.raw.gz",
            "x86_64/x86_64/incus.raw.gz",
            // The Secure Boot keys serve every architecture.
            "x86_64/sb.tar.gz",
        ] {
            assert_eq!(classify(name), None, "{name}");
        }
    }

    #[test]
    fn filenames_are_relative_paths_without_dot_segments() {
        for (name, ok) in [
            ("incus.raw.gz", true),
            ("x86_64/incus.raw.gz", true),
            ("a/b/c", true),
            ("/incus.raw.gz", false),
            ("x86_64//incus.raw.gz", false),
            ("x86_64/", false),
            ("../incus.raw.gz", false),
            ("x86_64/../../etc", false),
            (".hidden", false),
            ("x86_64/a b", false),
            ("x86_64\\incus.raw.gz", false),
            ("", false),
        ] {
            assert_eq!(valid_filename(name), ok, "{name:?}");
        }
        assert!(!valid_filename(&"a".repeat(256)));
    }

    const OS: [&str; 4] = [
        "update-efi",
        "update-usr",
        "update-usr-verity",
        "update-usr-verity-signature",
    ];

    /// `(filename, component, type, architecture)`.
    type Row = (&'static str, &'static str, &'static str, &'static str);

    fn os_files(arch: &'static str) -> Vec<Row> {
        OS.iter()
            .map(|t| {
                (
                    if arch == "aarch64" {
                        "aarch64/os"
                    } else {
                        "x86_64/os"
                    },
                    "os",
                    *t,
                    arch,
                )
            })
            .collect()
    }

    #[test]
    fn an_update_is_complete_when_each_architecture_has_its_os_files_and_incus() {
        let incus = |arch: &'static str| -> Row {
            match arch {
                "x86_64" => ("x86_64/incus.raw.gz", "incus", "application", "x86_64"),
                "aarch64" => ("aarch64/incus.raw.gz", "incus", "application", "aarch64"),
                _ => ("incus.raw.gz", "incus", "application", ""),
            }
        };
        let with = |rows: &[Vec<Row>]| rows.concat();
        let missing_os = |arch: &str, t: &'static str| {
            Some(Incomplete::OsUpdateFile {
                architecture: arch.to_owned(),
                file_type: t,
            })
        };
        let no_incus = |arch: &str| {
            Some(Incomplete::NoIncus {
                architecture: arch.to_owned(),
            })
        };
        let cases: Vec<(&str, Vec<Row>, Option<Incomplete>)> = vec![
            ("incus alone", vec![incus("x86_64")], None),
            ("incus for any architecture", vec![incus("")], None),
            (
                "a full x86_64 update",
                with(&[os_files("x86_64"), vec![incus("x86_64")]]),
                None,
            ),
            (
                "both architectures, one incus for any",
                with(&[os_files("x86_64"), os_files("aarch64"), vec![incus("")]]),
                None,
            ),
            ("no incus at all", os_files("x86_64"), no_incus("x86_64")),
            (
                "aarch64 listed without its incus",
                with(&[
                    os_files("x86_64"),
                    vec![
                        incus("x86_64"),
                        ("aarch64/changelog-stable.yaml.gz", "os", "changelog", "aarch64"),
                    ],
                ]),
                missing_os("aarch64", "update-efi"),
            ),
            (
                "aarch64 application without its incus",
                vec![
                    incus("x86_64"),
                    ("aarch64/debug.raw.gz", "debug", "application", "aarch64"),
                ],
                no_incus("aarch64"),
            ),
            (
                "an EFI file alone",
                vec![
                    ("x86_64/IncusOS_1.efi.gz", "os", "update-efi", "x86_64"),
                    incus("x86_64"),
                ],
                missing_os("x86_64", "update-usr"),
            ),
            (
                "a verity signature missing",
                with(&[os_files("x86_64")[..3].to_vec(), vec![incus("x86_64")]]),
                missing_os("x86_64", "update-usr-verity-signature"),
            ),
            (
                "Secure Boot keys make every architecture stage an OS update",
                vec![("sb.tar.gz", "os", "update-secureboot", ""), incus("x86_64")],
                missing_os("x86_64", "update-efi"),
            ),
            (
                "an image is an os file too",
                vec![
                    ("x86_64/IncusOS_1.img.gz", "os", "image-raw", "x86_64"),
                    incus("x86_64"),
                ],
                missing_os("x86_64", "update-efi"),
            ),
            (
                "incus under another type is not the application",
                vec![("x86_64/incus.raw.gz", "incus", "image-manifest", "x86_64")],
                no_incus("x86_64"),
            ),
        ];
        for (what, rows, expected) in cases {
            let facts: Vec<FileFacts<'_>> = rows
                .iter()
                .map(|(filename, component, file_type, architecture)| FileFacts {
                    filename,
                    component,
                    file_type,
                    architecture,
                })
                .collect();
            assert_eq!(incomplete(&facts), expected, "{what}");
        }
    }
}

#[cfg(test)]
mod schema_tests {
    use utoipa::PartialSchema;

    use super::{ARCHITECTURES, COMPONENTS, FILE_TYPES, PublishFile};

    /// The document's patterns for `type`, `component` and `architecture` are the lists the handler checks, no
    /// more or less.
    #[test]
    fn the_documented_patterns_are_the_checked_lists() {
        let schema = serde_json::to_value(PublishFile::schema()).unwrap();
        for (property, list) in [
            ("type", &FILE_TYPES[..]),
            ("component", &COMPONENTS[..]),
            ("architecture", &ARCHITECTURES[..]),
        ] {
            assert_eq!(
                schema["properties"][property]["pattern"],
                format!("^({})$", list.join("|")),
                "{property}"
            );
        }
    }
}

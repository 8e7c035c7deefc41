//! A deployment's install seed: what IncusOS reads from partition 2 of the media racklift serves it
//! (`racklift_media`), built once when the deployment is created and kept with it.

use std::sync::Arc;

use racklift_media::seed::{Manager, SeedConfig};
use racklift_media::{SeedArchive, SeedFiles};
use racklift_store::{Image, ImageFormat, Seed};

use crate::DeployRequest;

use crate::error::ApiError;

/// The seed of one deployment, and what registration will check against it.
pub struct DeploymentSeed {
    pub archive: SeedArchive,
    /// provider.yaml's `server_token`: registers this deployment and no other.
    pub registration_token: String,
    /// The hostname the server will register with, when the seed's network config names one.
    pub expected_hostname: Option<String>,
}

/// The operator's token seed as IncusOS seed settings; a key IncusOS would not read is refused, naming it.
pub fn seed_config(seed: &Seed) -> Result<SeedConfig, ApiError> {
    serde_path_to_error::deserialize(&seed.install_config).map_err(|e| {
        let path = e.path().to_string();
        ApiError::unprocessable(
            "invalid_seed",
            "seed",
            format!(
                "the install config of seed {:?} does not hold at {path}: {}",
                seed.name,
                e.inner()
            ),
        )
    })
}

/// A deployment that reinstalls a server racklift has seen registered (the request's `force_install`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reinstall {
    /// The `machine_id` of the server's last registration, if it sent one.
    pub machine_id: Option<String>,
}

/// What IncusOS asks for before it reinstalls the very version installed: the first six characters of the
/// installed `/etc/machine-id` (`internal/install/install.go`, the same-version check). `None` when the
/// registration carried no usable machine-id (an installed different version needs only `force_install`).
pub fn confirmation(machine_id: &str) -> Option<String> {
    let id = machine_id.trim().to_ascii_lowercase();
    let prefix = id.get(..6)?;
    prefix
        .bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then(|| prefix.to_owned())
}

/// The seed's install settings for a reinstall: `force_install`, and the confirmation when the registration
/// gives one (it replaces any the catalog seed names, which would confirm another machine).
pub fn apply_reinstall(config: &mut SeedConfig, reinstall: &Reinstall) {
    config.force_install = true;
    if let Some(c) = reinstall.machine_id.as_deref().and_then(confirmation) {
        config.force_install_confirmation = Some(c);
    }
}

/// The media URL's file name: the configured name with the extension IncusOS publishes the image's format with
/// (`incusos.img` → `incusos.iso` for a CD image). BMCs go by the extension: a CD image named `.img` is
/// mounted as a disk, or refused.
pub fn media_file_name(configured: &str, format: ImageFormat) -> String {
    let stem = match configured.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && matches!(ext, "img" | "iso" | "raw") => stem,
        _ => configured,
    };
    let ext = match format {
        ImageFormat::Cd => "iso",
        ImageFormat::Disk => "img",
    };
    format!("{stem}.{ext}")
}

/// Builds the seed for a deployment of `image` with the token seed `seed`; the server will find racklift at
/// `public_address` (trusting `server_certificate` when racklift's certificate is self-signed). A `reinstall`
/// sets `force_install` and its confirmation.
pub fn for_deployment(
    seed: &Seed,
    image: &Image,
    public_address: &str,
    server_certificate: Option<String>,
    reinstall: Option<&Reinstall>,
) -> Result<DeploymentSeed, ApiError> {
    let mut config = seed_config(seed)?;
    if let Some(reinstall) = reinstall {
        apply_reinstall(&mut config, reinstall);
    }
    let registration_token = racklift_store::new_secret();
    let manager = Manager {
        server_url: public_address.trim_end_matches('/').to_owned(),
        server_token: registration_token.clone(),
        server_certificate,
    };
    let archive = SeedFiles::for_deployment(&config, &manager, &image.channel)
        .archive()
        .map_err(|e| ApiError::unprocessable("invalid_seed", "seed", format!("{e}")))?;
    Ok(DeploymentSeed {
        archive,
        registration_token,
        expected_hostname: config.hostname(),
    })
}

/// The image's partition table, read off the runtime from the open file: each deployment's seed goes to
/// partition 2, so an image without room for one is refused now rather than at its first deployment.
pub async fn image_layout(file: Arc<std::fs::File>) -> Result<racklift_media::ImageLayout, ApiError> {
    let read = tokio::task::spawn_blocking(move || racklift_media::ImageLayout::read(&mut &*file))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    read.map_err(|e| {
        ApiError::unprocessable(
            "no_seed_partition",
            "path",
            format!("the image cannot carry an install seed: {e}"),
        )
    })
}

/// The file an image is served from, opened beneath the images directory, and its SHA-256.
pub struct Served {
    pub opened: crate::image_files::Opened,
    pub sha256: String,
}

/// Decompresses the image `opened` (from its handle) beside itself when it is gzip (by its magic bytes, not its
/// name) and returns the decompressed copy, opened beneath `images_dir` like every image; `None` for an image
/// that is not compressed. `catalog_name` names it in answers.
pub async fn gunzip_image(
    images_dir: &std::path::Path,
    opened: &crate::image_files::Opened,
    catalog_name: &str,
) -> Result<Option<Served>, ApiError> {
    let (dir, file, name) = (images_dir.to_owned(), opened.file.clone(), opened.name.clone());
    let done = tokio::task::spawn_blocking(move || {
        if !racklift_media::gz::is_gzip(&file)? {
            return Ok(None);
        }
        let root = std::fs::canonicalize(&dir)?;
        let raw = racklift_media::gz::gunzip_beside(&file, &root.join(&name))?;
        let raw_name = racklift_media::gz::raw_path(&name);
        // The copy is beside a confined file, but a link planted under its name would lead elsewhere: what is
        // recorded is what opens beneath the directory.
        Ok(Some((crate::image_files::open(&dir, &raw_name)?, raw.sha256)))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e: std::io::Error| {
        tracing::warn!(image = %catalog_name, error = %e, "image does not decompress");
        ApiError::unprocessable(
            "image_not_decompressible",
            "path",
            format!("the image {catalog_name} is gzip but does not decompress: {e}"),
        )
    })?;
    match done {
        None => Ok(None),
        Some((Some(opened), sha256)) => Ok(Some(Served { opened, sha256 })),
        Some((None, _)) => Err(ApiError::unprocessable(
            "outside_images_dir",
            "path",
            format!(
                "the decompressed copy of {catalog_name} is not a regular file inside the images directory"
            ),
        )),
    }
}

/// The newest image matching every filter the request gives.
/// The newest image matching the request's type, architecture and channel, refused when it has no seed
/// partition on record.
pub fn select_image(images: Vec<Image>, req: &DeployRequest) -> Result<Image, ApiError> {
    let want = |filter: &Option<String>, v: &str| filter.as_deref().is_none_or(|f| f == v);
    images
        .into_iter()
        .filter(|i| {
            want(&req.image_type, &i.image_type)
                && want(&req.architecture, &i.architecture)
                && want(&req.channel, &i.channel)
        })
        .max_by_key(|i| i.id)
        .ok_or_else(|| {
            ApiError::unprocessable(
                "image_not_found",
                "image_type",
                "no image matches the requested type, architecture and channel",
            )
        })
        .and_then(|i| {
            // Registered before the catalog read partition tables: where its seed goes is unknown.
            if i.seed_offset.is_none() {
                return Err(ApiError::unprocessable(
                    "image_without_seed_partition",
                    "image_type",
                    format!(
                        "image {} was registered without its seed partition; register it again",
                        i.id
                    ),
                ));
            }
            Ok(i)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_confirmation_is_the_first_six_characters_of_the_machine_id() {
        let cases = [
            ("3f9a1c0d2b7e4f6a8c1d3e5f7a9b0c2d", Some("3f9a1c")),
            ("3F9A1C0D2B7E4F6A8C1D3E5F7A9B0C2D", Some("3f9a1c")),
            ("abc", None),
            ("zz9a1c0d", None),
            ("", None),
        ];
        for (id, want) in cases {
            assert_eq!(confirmation(id).as_deref(), want, "{id}");
        }
    }

    #[test]
    fn a_reinstall_forces_the_install_and_confirms_the_registered_machine() {
        let cases = [
            // (catalog confirmation, registered machine-id, want confirmation)
            (None, Some("0123456789abcdef0123456789abcdef"), Some("012345")),
            (
                Some("ffffff"),
                Some("0123456789abcdef0123456789abcdef"),
                Some("012345"),
            ),
            (Some("ffffff"), None, Some("ffffff")),
            (None, None, None),
        ];
        for (catalog, machine_id, want) in cases {
            let mut config = SeedConfig {
                force_install_confirmation: catalog.map(str::to_owned),
                ..SeedConfig::default()
            };
            apply_reinstall(
                &mut config,
                &Reinstall {
                    machine_id: machine_id.map(str::to_owned),
                },
            );
            assert!(config.force_install);
            assert_eq!(config.force_install_confirmation.as_deref(), want);
        }
    }

    #[test]
    fn the_media_file_name_carries_the_format_extension() {
        let cases = [
            ("incusos.img", ImageFormat::Cd, "incusos.iso"),
            ("incusos.img", ImageFormat::Disk, "incusos.img"),
            ("seed.iso", ImageFormat::Disk, "seed.img"),
            ("media", ImageFormat::Cd, "media.iso"),
            ("my.image.bin", ImageFormat::Disk, "my.image.bin.img"),
        ];
        for (configured, format, want) in cases {
            assert_eq!(media_file_name(configured, format), want, "{configured}");
        }
    }
}

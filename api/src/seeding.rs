//! A deployment's install seed: what IncusOS reads from partition 2 of the media racklift serves it
//! (`racklift_media`), built once when the deployment is created and kept with it.

use racklift_media::seed::{Manager, SeedConfig};
use racklift_media::{SeedArchive, SeedFiles};
use racklift_store::{Image, Seed};

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

/// Builds the seed for a deployment of `image` with the token seed `seed`; the server will find racklift at
/// `public_address` (trusting `server_certificate` when racklift's certificate is self-signed).
pub fn for_deployment(
    seed: &Seed,
    image: &Image,
    public_address: &str,
    server_certificate: Option<String>,
) -> Result<DeploymentSeed, ApiError> {
    let config = seed_config(seed)?;
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

/// The image's partition table, read off the runtime: each deployment's seed goes to partition 2, so an image
/// without room for one is refused now rather than at its first deployment.
pub async fn image_layout(path: std::path::PathBuf) -> Result<racklift_media::ImageLayout, ApiError> {
    let read = tokio::task::spawn_blocking(move || {
        let mut file = std::fs::File::open(&path)?;
        Ok::<_, std::io::Error>(racklift_media::ImageLayout::read(&mut file))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?;
    match read {
        Ok(Ok(layout)) => Ok(layout),
        Ok(Err(e)) => Err(ApiError::unprocessable(
            "no_seed_partition",
            "path",
            format!("the image cannot carry an install seed: {e}"),
        )),
        Err(e) => Err(ApiError::unprocessable(
            "image_unreadable",
            "path",
            format!("the image cannot be read: {e}"),
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

//! A deployment's install seed: what IncusOS reads from partition 2 of the media racklift serves it
//! (`racklift_media`), built once when the deployment is created and kept with it.

use racklift_media::seed::{Manager, SeedConfig};
use racklift_media::{SeedArchive, SeedFiles};
use racklift_store::{Image, Seed};

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

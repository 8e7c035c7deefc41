//! The catalog `racklift up` and the end-to-end tests start from: servers for a rack of BMCs, a provisioning
//! token with a public seed, a BIOS profile, a generated image, an update on the image's channel holding the
//! Incus application, the public address, and an admin API token.

use std::io::Seek;
use std::path::{Path, PathBuf};

use chrono::{Duration as TimeDelta, Utc};
use racklift_store::{
    Image, ImageFile, ImageFormat, NewBiosProfile, NewImage, NewSeed, NewServer, NewToken, NewUpdate,
    PUBLIC_ADDRESS, Role, ServerUpdate, Store, StoreError, UpdateFile,
};
use serde_json::json;

use crate::deploy::DeployRequest;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// One BMC of the rack.
#[derive(Debug, Clone)]
pub struct RackServer {
    pub name: String,
    pub bmc_url: String,
    pub vendor: String,
    /// The BMC certificate's pin (`cert-sha256:…`) when the rack serves https with self-signed certificates.
    pub bmc_cert_pin: Option<String>,
}

/// What was created.
#[derive(Debug, Clone)]
pub struct DemoCatalog {
    pub admin_token: String,
    pub token: Uuid,
    pub seed: String,
    pub image: Image,
    /// The version of the update published on the image's channel ([`DEMO_UPDATE_VERSION`]).
    pub update_version: String,
}

/// The version of the demo catalog's update: the version the simulated IncusOS installs as (so it finds nothing
/// newer to reboot into), holding only the Incus application a fresh install fetches before it registers.
pub const DEMO_UPDATE_VERSION: &str = "202611010000";

/// `data` as gzip: IncusOS gunzips every file it downloads (`internal/providers/utils.go` `downloadAsset`).
fn gzip(data: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data)?;
    encoder.finish()
}

/// Publishes [`DEMO_UPDATE_VERSION`] on `image`'s channel: `<architecture>/incus.raw.gz`, a small gzip file
/// written into `dir` (inside the images directory, where the catalog serves files from). A fresh IncusOS installs
/// Incus from the first update of its channel before it can register, and the deploy pre-flight refuses a channel
/// without one. Already published (a restart of `racklift up`): left as it is.
pub async fn publish_demo_update(store: &Store, dir: &Path, image: &Image) -> Result<String, DemoError> {
    let filename = format!("{}/{}", image.architecture, crate::update_catalog::INCUS_FILE);
    let path = dir.join("updates").join(DEMO_UPDATE_VERSION).join(&filename);
    let data = gzip(
        format!(
            "racklift demo: stands in for the Incus system extension of IncusOS {DEMO_UPDATE_VERSION} ({})\n",
            image.architecture
        )
        .as_bytes(),
    )
    .map_err(DemoError::Update)?;
    let write = |path: &Path| -> std::io::Result<PathBuf> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, &data)?;
        std::fs::canonicalize(path)
    };
    let path = write(&path).map_err(DemoError::Update)?;
    let architecture = if crate::update_catalog::ARCHITECTURES.contains(&image.architecture.as_str()) {
        image.architecture.clone()
    } else {
        String::new()
    };
    let published = store
        .publish_update(&NewUpdate {
            version: DEMO_UPDATE_VERSION.to_owned(),
            channels: vec![image.channel.clone()],
            published_by: "demo".to_owned(),
            files: vec![UpdateFile {
                filename,
                size_bytes: data.len() as i64,
                component: "incus".to_owned(),
                file_type: "application".to_owned(),
                architecture,
                sha256: racklift_store::sha256_hex(&data),
                path: path.to_string_lossy().into_owned(),
                // Hashed at its first download.
                file_stamp: None,
            }],
        })
        .await;
    match published {
        Ok(_) | Err(StoreError::Conflict { .. }) => Ok(DEMO_UPDATE_VERSION.to_owned()),
        Err(e) => Err(e.into()),
    }
}

/// Writes the demo catalog's image: a deterministic `.iso` of `size` bytes laid out like IncusOS's (a GPT with
/// 2048-byte sectors whose partition 2 is where each deployment's seed goes; a pseudo-random stream elsewhere,
/// so ranges differ), as DIR/incusos-demo.iso, and returns its path and SHA-256.
pub fn generate_image(dir: &Path, size: u64) -> std::io::Result<(PathBuf, String)> {
    generate_image_as(dir, &racklift_media::layout::DemoImage::iso(size))
}

/// Writes a demo image of `spec` as DIR/incusos-demo.iso (2048-byte sectors) or DIR/incusos-demo.img (512 or
/// 4096), and returns its path and SHA-256.
pub fn generate_image_as(
    dir: &Path,
    spec: &racklift_media::layout::DemoImage,
) -> std::io::Result<(PathBuf, String)> {
    std::fs::create_dir_all(dir)?;
    let format = racklift_media::MediaFormat::of_sector_size(spec.sector_size);
    let path = dir.join(format!("incusos-demo.{}", format.extension()));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    racklift_media::layout::write_demo_image(&mut file, spec, |block| {
        for chunk in block.chunks_mut(8) {
            // xorshift64: fast, deterministic filler.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let bytes = state.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    })?;
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    let sha = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((path, sha))
}

/// Why the demo catalog could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the demo image")]
    Image(#[from] racklift_media::LayoutError),
    #[error("the demo seed: {0}")]
    Seed(String),
    #[error("writing the demo update's file")]
    Update(#[source] std::io::Error),
}

/// Creates the catalog for `servers`. `password_ref` is how every BMC's password is found (`file:NAME`, a name in
/// the secrets directory).
pub async fn seed_catalog(
    store: &Store,
    servers: &[RackServer],
    username: &str,
    password_ref: &str,
    public_address: &str,
    image: (&Path, u64, &str),
) -> Result<DemoCatalog, DemoError> {
    for s in servers {
        let created = store
            .create_server(&NewServer {
                name: s.name.clone(),
                bmc_address: s.bmc_url.clone(),
                bmc_username: username.to_owned(),
                bmc_password_ref: Some(password_ref.to_owned()),
                bmc_cert_pin: s.bmc_cert_pin.clone(),
                bmc_insecure: false,
                // A plain-http simulated rack is on loopback (tests, benchmarks); `racklift up` serves https.
                allow_plain_http: s.bmc_url.starts_with("http://"),
                vendor_hint: Some(s.vendor.clone()),
                system_id: None,
            })
            .await;
        match created {
            Ok(_) => {}
            // A restart of `racklift up`: the simulator listens on a new port, so the BMC moved.
            Err(StoreError::Conflict { .. }) => {
                store
                    .update_server(
                        &s.name,
                        &ServerUpdate {
                            bmc_address: Some(s.bmc_url.clone()),
                            bmc_username: Some(username.to_owned()),
                            bmc_password_ref: Some(password_ref.to_owned()),
                            bmc_cert_pin: s.bmc_cert_pin.clone(),
                            allow_plain_http: Some(s.bmc_url.starts_with("http://")),
                            ..ServerUpdate::default()
                        },
                    )
                    .await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let token = store
        .create_token(&NewToken {
            description: "demo rack".into(),
            uses_remaining: (servers.len() as i32).max(1) * 4,
            expires_at: Utc::now() + TimeDelta::days(30),
        })
        .await?;
    let seed = store
        .create_seed(
            token.token,
            &NewSeed {
                name: "default".into(),
                public: true,
                install_config: json!({ "force_reboot": true }),
            },
        )
        .await?;
    store
        .put_bios_profile(&NewBiosProfile {
            name: "incusos-baseline".into(),
            // Two passes: SR-IOV is only accepted once the IOMMU setting is in effect.
            attributes: json!({ "BootMode": "Uefi", "IommuSupport": "Enabled" }),
            deferred_attributes: json!({ "SriovGlobalEnable": "Enabled" }),
            ..NewBiosProfile::default()
        })
        .await?;
    let (path, size, sha256) = image;
    let new_image = NewImage {
        image_type: "iso".into(),
        architecture: "x86_64".into(),
        channel: "stable".into(),
        path: path.display().to_string(),
        size_bytes: size as i64,
        sha256: None,
    };
    let layout = std::fs::File::open(path)
        .map_err(racklift_media::LayoutError::Io)
        .and_then(|mut f| racklift_media::ImageLayout::read(&mut f))?;
    let format = match layout.format() {
        racklift_media::MediaFormat::Cd => ImageFormat::Cd,
        racklift_media::MediaFormat::Disk => ImageFormat::Disk,
    };
    let image = match store
        .create_image(
            &new_image,
            &ImageFile {
                sha256: sha256.to_owned(),
                // Hashed at its first request, like an image registered before stamps were kept.
                file_stamp: None,
                format,
                seed_offset: layout.seed_offset as i64,
                seed_capacity: layout.seed_capacity as i64,
            },
        )
        .await
    {
        Ok(image) => image,
        Err(StoreError::Conflict { name, .. }) => store
            .images()
            .await?
            .into_iter()
            .find(|i| {
                i.image_type == new_image.image_type
                    && i.architecture == new_image.architecture
                    && i.channel == new_image.channel
            })
            .ok_or(StoreError::NotFound { what: "image", name })?,
        Err(e) => return Err(e.into()),
    };
    let update_version = publish_demo_update(store, path.parent().unwrap_or(Path::new(".")), &image).await?;
    store.put_setting(PUBLIC_ADDRESS, &json!(public_address)).await?;
    let admin_token = racklift_store::new_secret();
    store.put_api_token("admin", &admin_token, Role::Admin).await?;
    Ok(DemoCatalog {
        admin_token,
        token: token.token,
        seed: seed.name,
        image,
        update_version,
    })
}

/// The simulated vendors whose BMCs (like the real ones) expose no writable key databases: the deploy pre-flight
/// refuses them unless the request sets `skip_secure_boot_certificates`.
pub fn skips_secure_boot_certificates(vendor: &str) -> bool {
    matches!(vendor, "hpe" | "lenovo")
}

/// The deploy request body for a demo server. The HPE-like and Lenovo-like simulated BMCs (like the real ones)
/// do not let Redfish modify the UEFI key databases, so their deployments skip the secure boot certificates.
pub fn deploy_request(catalog: &DemoCatalog, vendor: &str) -> DeployRequest {
    DeployRequest {
        token: Some(catalog.token.to_string()),
        seed: Some(catalog.seed.clone()),
        skip_secure_boot_certificates: skips_secure_boot_certificates(vendor),
        ..DeployRequest::default()
    }
}

/// A live deployment of `server` from the demo catalog, made without its BMC (no pre-flight, no job run): its
/// media is served, seed and all, exactly as a real deployment's. For measuring the media server
/// (`racklift bench media`); returns the media URL's path (`/media/<secret>/<file>`).
pub async fn media_only_deployment(
    store: &Store,
    queue: &racklift_queue::Queue,
    catalog: &DemoCatalog,
    server: &str,
    public_address: &str,
    file_name: &str,
) -> Result<String, DemoError> {
    let seed = store.seed(catalog.token, &catalog.seed).await?;
    let seeded = crate::seeding::for_deployment(&seed, &catalog.image, public_address, None, None)
        .map_err(|e| DemoError::Seed(e.to_string()))?;
    let media_secret = racklift_store::new_secret();
    let path = format!("/media/{media_secret}/{file_name}");
    let plan = racklift_deploy::Plan {
        image_url: format!("{}{path}", public_address.trim_end_matches('/')),
        image_size_bytes: u64::try_from(catalog.image.size_bytes).ok(),
        skip_secure_boot_certificates: true,
        ..racklift_deploy::Plan::default()
    };
    let new = racklift_store::NewDeployment {
        server: server.to_owned(),
        media_secret,
        image_id: catalog.image.id,
        token: catalog.token,
        seed: catalog.seed.clone(),
        deployment: racklift_deploy::Deployment::new(plan, Utc::now()),
        media_slot: None,
        boot_target: None,
        idempotency_key: None,
        requested_by: "benchmark".to_owned(),
        seed_archive: seeded.archive.bytes,
        registration_token: seeded.registration_token,
        expected_hostname: seeded.expected_hostname,
        bmc_system_uuid: None,
    };
    store.create_deployment(queue, &new).await?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::gzip;

    #[test]
    fn the_demo_update_file_gunzips_to_its_bytes() {
        for data in [&b""[..], b"incus", &vec![7u8; 70_000][..]] {
            let mut out = Vec::new();
            std::io::Read::read_to_end(
                &mut flate2::read::GzDecoder::new(&gzip(data).unwrap()[..]),
                &mut out,
            )
            .unwrap();
            assert_eq!(out, data);
        }
    }
}

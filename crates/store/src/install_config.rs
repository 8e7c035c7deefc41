//! The documented schema of a token seed's `install_config`: what IncusOS's seed reads beyond what racklift
//! fills in (the API checks it against `racklift_media::seed::SeedConfig`).

use serde::Deserialize;
use serde_json::Value;

/// The schema of a seed's `install_config` (checked against `racklift_media::seed::SeedConfig`).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct InstallConfig {
    /// Reboot when the install is done instead of waiting for the media to be removed.
    #[serde(default)]
    force_reboot: bool,
    /// Install over existing partitions of the target disk.
    #[serde(default)]
    force_install: bool,
    /// The first six characters of the installed system's machine-id, which IncusOS asks for before it
    /// reinstalls the very version already installed. A redeployment with `force_install` fills it in from the
    /// server's last registration.
    #[serde(default)]
    #[schema(pattern = "^[0-9a-f]{6}$", example = "3f9a1c")]
    force_install_confirmation: Option<String>,
    /// Which disk to install to when there is more than one.
    #[serde(default)]
    target: Option<InstallTargetSchema>,
    /// Let IncusOS run without a TPM or secure boot.
    #[serde(default)]
    security: Option<InstallSecuritySchema>,
    /// IncusOS's network configuration; absent, every interface is configured by DHCP/SLAAC.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    network: Option<Value>,
    /// Incus's `InitPreseed`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    incus_preseed: Option<Value>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
#[schema(as = InstallTarget)]
pub struct InstallTargetSchema {
    #[serde(default)]
    bus: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    max_size: Option<String>,
    #[serde(default)]
    min_size: Option<String>,
    #[serde(default)]
    sort_order: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
#[schema(as = InstallSecurity)]
pub struct InstallSecuritySchema {
    #[serde(default)]
    missing_tpm: bool,
    #[serde(default)]
    missing_secure_boot: bool,
}

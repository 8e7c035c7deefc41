//! The seed's files and their tar archive, typed after IncusOS's `incus-osd/api/seed` structures (the names
//! of the YAML keys are IncusOS's), so a field racklift writes is one IncusOS reads.

use std::collections::BTreeMap;
use std::io::Read;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::layout::MAX_SEED_BYTES;

/// The seed format version every file carries.
const VERSION: &str = "1";

/// `install.yaml`: its presence starts the installation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Install {
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub force_install: bool,
    /// The first six characters of the installed system's `/etc/machine-id`: IncusOS reinstalls over the very
    /// version it is booted from only with it (`internal/install/install.go`, the same-version check). Omitted
    /// when empty, as IncusOS's `omitempty` writes it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub force_install_confirmation: String,
    /// Reboot when done instead of waiting for the media to be removed (spec 000's `force_reboot`).
    #[serde(default)]
    pub force_reboot: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<InstallSecurity>,
    #[serde(default)]
    pub target: Option<InstallTarget>,
}

/// Degraded-security options of the install (IncusOS refuses to run without secure boot and a TPM otherwise).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallSecurity {
    #[serde(default)]
    pub missing_tpm: bool,
    #[serde(default)]
    pub missing_secure_boot: bool,
}

/// Which disk to install to when there is more than one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort_order: Option<String>,
}

/// `provider.yaml`: who the installed server registers with and fetches its updates from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provider {
    #[serde(default)]
    pub version: String,
    pub name: String,
    pub config: BTreeMap<String, String>,
}

/// `applications.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applications {
    #[serde(default)]
    pub version: String,
    pub applications: Vec<Application>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Application {
    pub name: String,
}

/// `incus.yaml`: Incus's own preseed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incus {
    #[serde(default)]
    pub version: String,
    pub apply_defaults: bool,
    /// Incus's `InitPreseed`, as given.
    #[serde(default)]
    pub preseed: Option<Value>,
}

/// `update.yaml`: the update policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Update {
    #[serde(default)]
    pub version: String,
    /// Off under racklift: only racklift reboots racklift's servers, one at a time.
    pub auto_reboot: bool,
    pub channel: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub check_frequency: String,
}

/// What an operator's token seed (`install_config` in the catalog) may say, beside what racklift fills in.
/// Unknown keys are refused so a typo is not silently an install without it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedConfig {
    #[serde(default)]
    pub force_reboot: bool,
    #[serde(default)]
    pub force_install: bool,
    /// `install.yaml`'s `force_install_confirmation`: the first six characters of the machine-id of the
    /// installation to replace when it is the very version being installed. A redeployment of a server racklift
    /// has seen registered fills it in from that registration's `machine_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_install_confirmation: Option<String>,
    #[serde(default)]
    pub target: Option<InstallTarget>,
    #[serde(default)]
    pub security: Option<InstallSecurity>,
    /// IncusOS's network configuration (`network.yaml`); absent, IncusOS configures every interface by
    /// DHCP/SLAAC.
    #[serde(default)]
    pub network: Option<Map<String, Value>>,
    /// Incus's `InitPreseed` (`incus.yaml`'s `preseed`).
    #[serde(default)]
    pub incus_preseed: Option<Map<String, Value>>,
}

impl SeedConfig {
    /// The hostname IncusOS will register with when the network config names one (`dns.hostname`, with
    /// `dns.domain` appended), as IncusOS's `State.Hostname` derives it; otherwise IncusOS uses the product UUID.
    pub fn hostname(&self) -> Option<String> {
        let dns = self.network.as_ref()?.get("dns")?;
        let host = dns.get("hostname")?.as_str().filter(|h| !h.is_empty())?;
        Some(
            match dns
                .get("domain")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty())
            {
                Some(domain) => format!("{host}.{domain}"),
                None => host.to_owned(),
            },
        )
    }
}

/// Everything one deployment's seed holds.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedFiles {
    pub install: Install,
    pub provider: Provider,
    pub applications: Applications,
    pub incus: Incus,
    pub update: Update,
    pub network: Option<Value>,
}

/// Where the installed server finds racklift.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manager {
    /// racklift's public HTTPS address.
    pub server_url: String,
    /// The deployment's own registration token.
    pub server_token: String,
    /// The PEM of racklift's certificate when it is self-signed (IncusOS then trusts exactly it).
    pub server_certificate: Option<String>,
}

impl SeedFiles {
    /// The seed of one deployment: the operator's `config`, racklift as the `operations-center` provider, Incus
    /// as the application, updates from `channel` without automatic reboots.
    pub fn for_deployment(config: &SeedConfig, manager: &Manager, channel: &str) -> SeedFiles {
        let mut provider = BTreeMap::from([
            ("server_url".to_owned(), manager.server_url.clone()),
            ("server_token".to_owned(), manager.server_token.clone()),
        ]);
        if let Some(pem) = &manager.server_certificate {
            provider.insert("server_certificate".to_owned(), pem.clone());
        }
        SeedFiles {
            install: Install {
                version: VERSION.into(),
                force_install: config.force_install,
                force_install_confirmation: config.force_install_confirmation.clone().unwrap_or_default(),
                force_reboot: config.force_reboot,
                security: config.security.clone(),
                target: config.target.clone(),
            },
            provider: Provider {
                version: VERSION.into(),
                name: "operations-center".into(),
                config: provider,
            },
            applications: Applications {
                version: VERSION.into(),
                applications: vec![Application { name: "incus".into() }],
            },
            incus: Incus {
                version: VERSION.into(),
                apply_defaults: true,
                preseed: config.incus_preseed.clone().map(Value::Object),
            },
            update: Update {
                version: VERSION.into(),
                auto_reboot: false,
                channel: channel.to_owned(),
                check_frequency: String::new(),
            },
            network: config.network.clone().map(Value::Object),
        }
    }

    /// The tar archive IncusOS reads from partition 2: one YAML file per part, in a fixed order with fixed
    /// metadata, so the same seed is the same bytes (and the same ETag) on every API instance.
    pub fn archive(&self) -> Result<SeedArchive, SeedError> {
        let mut files: Vec<(&str, String)> = vec![
            ("install.yaml", yaml(&self.install)?),
            ("provider.yaml", yaml(&self.provider)?),
            ("applications.yaml", yaml(&self.applications)?),
            ("incus.yaml", yaml(&self.incus)?),
            ("update.yaml", yaml(&self.update)?),
        ];
        if let Some(network) = &self.network {
            files.push(("network.yaml", yaml(network)?));
        }
        let mut builder = tar::Builder::new(Vec::new());
        for (name, body) in files {
            let mut header = tar::Header::new_ustar();
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            header.set_mtime(0);
            header.set_entry_type(tar::EntryType::Regular);
            builder
                .append_data(&mut header, name, body.as_bytes())
                .map_err(SeedError::Archive)?;
        }
        let bytes = builder.into_inner().map_err(SeedError::Archive)?;
        if bytes.len() as u64 > MAX_SEED_BYTES {
            return Err(SeedError::TooLarge {
                size: bytes.len() as u64,
            });
        }
        Ok(SeedArchive::new(bytes))
    }

    /// Reads an archive back (the `racklift media compose --check` path and the tests): every file must parse.
    pub fn from_archive(bytes: &[u8]) -> Result<SeedFiles, SeedError> {
        let mut found: BTreeMap<String, String> = BTreeMap::new();
        let mut archive = tar::Archive::new(bytes);
        for entry in archive.entries().map_err(SeedError::Archive)? {
            let mut entry = entry.map_err(SeedError::Archive)?;
            let name = entry
                .path()
                .map_err(SeedError::Archive)?
                .to_string_lossy()
                .into_owned();
            let mut body = String::new();
            entry.read_to_string(&mut body).map_err(SeedError::Archive)?;
            found.insert(name, body);
        }
        fn part<T: serde::de::DeserializeOwned>(
            found: &BTreeMap<String, String>,
            name: &'static str,
        ) -> Result<T, SeedError> {
            let body = found.get(name).ok_or(SeedError::Missing { file: name })?;
            yaml_serde::from_str(body).map_err(|source| SeedError::Parse { file: name, source })
        }
        Ok(SeedFiles {
            install: part(&found, "install.yaml")?,
            provider: part(&found, "provider.yaml")?,
            applications: part(&found, "applications.yaml")?,
            incus: part(&found, "incus.yaml")?,
            update: part(&found, "update.yaml")?,
            network: found
                .contains_key("network.yaml")
                .then(|| part(&found, "network.yaml"))
                .transpose()?,
        })
    }
}

fn yaml<T: Serialize>(v: &T) -> Result<String, SeedError> {
    yaml_serde::to_string(v).map_err(SeedError::Serialize)
}

/// A seed archive and its digest (what the media's ETag is made of).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedArchive {
    pub bytes: Vec<u8>,
    /// Lower-case hex SHA-256 of `bytes`.
    pub sha256: String,
}

impl SeedArchive {
    pub fn new(bytes: Vec<u8>) -> SeedArchive {
        let sha256 = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        SeedArchive { bytes, sha256 }
    }
}

/// Why a seed could not be built or read.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("writing a seed file as YAML")]
    Serialize(#[source] yaml_serde::Error),
    #[error("building or reading the seed's tar archive")]
    Archive(#[source] std::io::Error),
    #[error("the seed archive is {size} bytes, more than the {MAX_SEED_BYTES} a seed may take")]
    TooLarge { size: u64 },
    #[error("the seed has no {file}")]
    Missing { file: &'static str },
    #[error("{file} does not parse")]
    Parse {
        file: &'static str,
        #[source]
        source: yaml_serde::Error,
    },
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn manager() -> Manager {
        Manager {
            server_url: "https://racklift.example.net:8443".into(),
            server_token: "tok".into(),
            server_certificate: Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into()),
        }
    }

    #[test]
    fn the_archive_reads_back_as_written_and_is_the_same_bytes_every_time() {
        let config = SeedConfig {
            force_reboot: true,
            network: json!({ "dns": { "hostname": "node07", "domain": "rack1" } })
                .as_object()
                .cloned(),
            ..SeedConfig::default()
        };
        let seed = SeedFiles::for_deployment(&config, &manager(), "stable");
        let a = seed.archive().expect("archive");
        assert_eq!(a, seed.archive().expect("again"));
        assert_eq!(a.bytes.len() % 512, 0);
        let back = SeedFiles::from_archive(&a.bytes).expect("parse");
        assert_eq!(back, seed);
        assert!(back.install.force_reboot);
        assert!(!back.update.auto_reboot);
        assert_eq!(back.provider.name, "operations-center");
        assert_eq!(back.provider.config["server_token"], "tok");
        assert!(back.provider.config["server_certificate"].starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(config.hostname().as_deref(), Some("node07.rack1"));
    }

    #[test]
    fn token_seeds_refuse_unknown_keys_and_default_to_no_hostname() {
        assert!(
            serde_json::from_value::<SeedConfig>(json!({ "force_reboot": true, "forse_install": true }))
                .is_err()
        );
        let c: SeedConfig = serde_json::from_value(json!({ "force_reboot": true })).expect("config");
        assert_eq!(c.hostname(), None);
        let seed = SeedFiles::for_deployment(
            &c,
            &Manager {
                server_certificate: None,
                ..manager()
            },
            "stable",
        );
        let back = SeedFiles::from_archive(&seed.archive().expect("archive").bytes).expect("parse");
        assert!(!back.provider.config.contains_key("server_certificate"));
        assert_eq!(back.network, None);
    }

    /// `force_install_confirmation` is written only when set, as IncusOS's `omitempty` writes it, and reads back.
    #[test]
    fn the_install_confirmation_is_omitted_when_empty() {
        let plain = SeedFiles::for_deployment(&SeedConfig::default(), &manager(), "stable");
        let text = yaml(&plain.install).unwrap();
        assert!(!text.contains("force_install_confirmation"), "{text}");
        let config = SeedConfig {
            force_install: true,
            force_install_confirmation: Some("3f9a1c".into()),
            ..SeedConfig::default()
        };
        let seed = SeedFiles::for_deployment(&config, &manager(), "stable");
        let text = yaml(&seed.install).unwrap();
        assert!(text.contains("force_install_confirmation: 3f9a1c"), "{text}");
        let back = SeedFiles::from_archive(&seed.archive().unwrap().bytes).unwrap();
        assert!(back.install.force_install);
        assert_eq!(back.install.force_install_confirmation, "3f9a1c");
        let c: SeedConfig =
            serde_json::from_value(json!({ "force_install_confirmation": "abcdef" })).expect("config");
        assert_eq!(c.force_install_confirmation.as_deref(), Some("abcdef"));
    }

    #[test]
    fn a_seed_too_large_for_its_partition_is_refused() {
        let huge = SeedConfig {
            incus_preseed: json!({ "blob": "x".repeat(MAX_SEED_BYTES as usize) })
                .as_object()
                .cloned(),
            ..SeedConfig::default()
        };
        let seed = SeedFiles::for_deployment(&huge, &manager(), "stable");
        assert!(matches!(seed.archive(), Err(SeedError::TooLarge { .. })));
    }
}

//! The install seed as IncusOS reads it from its install media.
//!
//! IncusOS (`doc/reference/seed.md`, `incus-osd/internal/seed`) keeps its seed as a tar archive written at the
//! start of the install image's second GPT partition. Its reader checks for the `ustar` magic at offset 257 of
//! the partition (otherwise "no seed data"), then walks the archive's entries and decodes the first one named
//! `<section>.json`, `<section>.yaml` or `<section>.yml`; a section with no entry is "missing", which callers
//! treat as absent, while a file that does not decode is an error. The types below follow IncusOS's `api/seed`
//! structures, with its JSON/YAML field names; an unknown field is an error, as IncusOS decodes JSON with
//! `DisallowUnknownFields` and YAML with `WithKnownFields` (`internal/seed/seed.go`).
//!
//! Public so that tests and tools can read what a simulated server read. This module is pure: [`read_gpt`] finds
//! the GPT in the bytes the installer's boot read gave it through the media's own logical sector size (512 for
//! IncusOS's `.img`, 2048 for its `.iso`, as `scripts/convert-img-to-iso.sh` makes it), and with it partition 2
//! and the version the media carries; [`SeedFiles::from_partition`] reads the archive from the bytes at the
//! start of that partition.

use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::ops::Range;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most of partition 2 the installer reads for the seed: a few small YAML files take a few KiB, and IncusOS's
/// own reader stops at the archive's end as well.
pub const SEED_READ_BYTES: u64 = 1 << 20;

/// The offset of the tar magic IncusOS checks before reading the archive (`ustar` at bytes 257..262).
const TAR_MAGIC_AT: usize = 257;

/// Where the seed partition could not be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocateError {
    #[error("the media has no readable GPT: {0}")]
    NoGpt(String),
    #[error("no seed partition could be found: the GPT has no partition 2")]
    NoPartition2,
}

/// Why a seed section could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeedError {
    /// The partition does not start with a tar archive (IncusOS: "no seed data present in the partition").
    #[error("no seed data present in the partition")]
    NoSeedData,
    /// The archive could not be read (truncated, corrupt headers).
    #[error("reading the seed archive: {0}")]
    Archive(String),
    /// The section's file holds no document (IncusOS's decoders answer `io.EOF`).
    #[error("{file}: empty")]
    Empty { file: String },
    /// The section's file does not decode into the section's structure.
    #[error("{file}: {message}")]
    Malformed { file: String, message: String },
}

/// The logical sector sizes a GPT is looked for with: IncusOS's `.img` (512), its `.iso` (2048), 4Kn (4096). The
/// GPT header is at LBA 1 of the size the media was made with.
pub const SECTOR_SIZES: [u64; 3] = [512, 2048, 4096];

/// What the GPT at the start of the media says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaGpt {
    /// The logical sector size the GPT was found with.
    pub sector_size: u64,
    /// The byte range of partition 2 (`seed-data`), when the GPT has one.
    pub partition2: Option<Range<u64>>,
    /// The IncusOS version the media carries: IncusOS names its `/usr` partition `<ImageId>_<ImageVersion>`
    /// (`mkosi.repart/12-usr.conf`, `Label=%M_%A`; `ImageId=IncusOS`), and its verity partitions with
    /// `_verity` and `_verity_sig` appended.
    pub version: Option<String>,
}

/// The GPT at the start of `head` (the first bytes of the media), tried at each of [`SECTOR_SIZES`]: the first
/// size whose LBA 1 holds a GPT signature wins; a damaged table at that size is an error.
pub fn read_gpt(head: &[u8]) -> Result<MediaGpt, LocateError> {
    let mut found = None;
    for size in SECTOR_SIZES {
        match gptman::GPT::read_from(&mut Cursor::new(head), size) {
            Ok(gpt) => {
                found = Some(gpt);
                break;
            }
            Err(gptman::Error::InvalidSignature) => continue,
            Err(e) => return Err(LocateError::NoGpt(e.to_string())),
        }
    }
    let gpt = found.ok_or_else(|| LocateError::NoGpt(gptman::Error::InvalidSignature.to_string()))?;
    let partition2 = gpt
        .iter()
        .find(|(i, e)| *i == 2 && e.is_used())
        .map(|(_, e)| e.starting_lba * gpt.sector_size..(e.ending_lba + 1) * gpt.sector_size);
    let version = gpt
        .iter()
        .filter(|(_, e)| e.is_used())
        .find_map(|(_, e)| usr_version(e.partition_name.as_str()));
    Ok(MediaGpt {
        sector_size: gpt.sector_size,
        partition2,
        version,
    })
}

/// The version in a `/usr` partition's name (`IncusOS_202611010000`), not its verity partitions'.
fn usr_version(name: &str) -> Option<String> {
    let version = name.strip_prefix("IncusOS_")?;
    (!version.is_empty() && !version.ends_with("_verity") && !version.ends_with("_verity_sig"))
        .then(|| version.to_owned())
}

/// The byte range of partition 2 within the image, from the GPT at the start of `head` (the first bytes of the
/// media), located through the media's own sector size ([`read_gpt`]).
pub fn partition2(head: &[u8]) -> Result<Range<u64>, LocateError> {
    read_gpt(head)?.partition2.ok_or(LocateError::NoPartition2)
}

/// The regular files of a seed archive, in archive order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeedFiles {
    entries: Vec<(String, Vec<u8>)>,
}

impl SeedFiles {
    /// Read the archive at the start of `partition` (the bytes read from the start of partition 2).
    pub fn from_partition(partition: &[u8]) -> Result<SeedFiles, SeedError> {
        if partition.get(TAR_MAGIC_AT..TAR_MAGIC_AT + 5) != Some(b"ustar".as_slice()) {
            return Err(SeedError::NoSeedData);
        }
        let mut archive = tar::Archive::new(partition);
        let mut entries = Vec::new();
        for entry in archive.entries().map_err(|e| SeedError::Archive(e.to_string()))? {
            let mut entry = entry.map_err(|e| SeedError::Archive(e.to_string()))?;
            if !entry.header().entry_type().is_file() {
                continue;
            }
            let name = entry
                .path()
                .map_err(|e| SeedError::Archive(e.to_string()))?
                .to_string_lossy()
                .into_owned();
            let mut data = Vec::new();
            entry
                .read_to_end(&mut data)
                .map_err(|e| SeedError::Archive(e.to_string()))?;
            entries.push((name, data));
        }
        Ok(SeedFiles { entries })
    }

    /// The file names, in archive order.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The same files without the install configuration: what IncusOS leaves in the installed system's seed
    /// partition (its installer deletes `install.*` from the copy).
    pub fn without_install(&self) -> SeedFiles {
        let entries = self
            .entries
            .iter()
            .filter(|(n, _)| !is_section_file(n, "install"))
            .cloned()
            .collect();
        SeedFiles { entries }
    }

    /// The first file of `section` and its name, if any.
    fn file(&self, section: &str) -> Option<(&str, &[u8])> {
        self.entries
            .iter()
            .find(|(n, _)| is_section_file(n, section))
            .map(|(n, d)| (n.as_str(), d.as_slice()))
    }

    /// Decode `section`: `Ok(None)` when the archive has no file for it.
    pub fn section<T: DeserializeOwned>(&self, section: &str) -> Result<Option<T>, SeedError> {
        let Some((file, data)) = self.file(section) else {
            return Ok(None);
        };
        if is_empty_document(data) {
            return Err(SeedError::Empty {
                file: file.to_owned(),
            });
        }
        yaml_serde::from_slice(data)
            .map(Some)
            .map_err(|e| SeedError::Malformed {
                file: file.to_owned(),
                message: e.to_string(),
            })
    }

    /// The install configuration. An empty install file still starts an installation, with every default
    /// (IncusOS `internal/seed/install.go`, `GetInstall`).
    pub fn install(&self) -> Result<Option<Install>, SeedError> {
        match self.section::<Install>("install") {
            Err(SeedError::Empty { .. }) => Ok(Some(Install::default())),
            other => other,
        }
    }

    pub fn provider(&self) -> Result<Option<Provider>, SeedError> {
        self.section("provider")
    }

    pub fn network(&self) -> Result<Option<Network>, SeedError> {
        self.section("network")
    }

    pub fn applications(&self) -> Result<Option<Applications>, SeedError> {
        self.section("applications")
    }

    pub fn incus(&self) -> Result<Option<Incus>, SeedError> {
        self.section("incus")
    }

    pub fn update(&self) -> Result<Option<Update>, SeedError> {
        self.section("update")
    }
}

fn is_section_file(name: &str, section: &str) -> bool {
    let name = name.strip_prefix("./").unwrap_or(name);
    name.strip_prefix(section)
        .is_some_and(|ext| matches!(ext, ".json" | ".yaml" | ".yml"))
}

/// No YAML document at all: only whitespace and comments.
fn is_empty_document(data: &[u8]) -> bool {
    String::from_utf8_lossy(data)
        .lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#'))
}

/// `install.{json,yaml,yml}` (IncusOS `api/seed/install.go`); its presence starts the installation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Install {
    pub version: String,
    /// Install over a disk that already holds partitions.
    pub force_install: bool,
    /// The first six characters of the installed system's machine-id: needed to reinstall the very version
    /// installed (`internal/install/install.go`, the same-version check).
    pub force_install_confirmation: String,
    /// Reboot when done instead of waiting for the install media to be removed.
    pub force_reboot: bool,
    /// Which disk to install to; without it exactly one candidate disk must be present.
    pub target: Option<InstallTarget>,
    pub security: Option<InstallSecurity>,
}

/// `install.target`: a disk whose `/dev/disk/by-id` name contains `id`, and the other selectors.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InstallTarget {
    pub id: String,
    pub bus: String,
    pub min_size: String,
    pub max_size: String,
    pub sort_order: String,
}

/// `install.security`: the degraded modes an install accepts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InstallSecurity {
    pub missing_tpm: bool,
    pub missing_secure_boot: bool,
}

/// `provider.{json,yaml,yml}` (IncusOS `api/seed/provider.go`, `api/system_provider.go`): where updates come
/// from and whom the server registers with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Provider {
    pub version: String,
    pub name: String,
    /// For `operations-center`: `server_url`, `server_token`, `server_certificate`.
    pub config: BTreeMap<String, String>,
}

/// `applications.{json,yaml,yml}` (IncusOS `api/seed/applications.go`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Applications {
    pub version: String,
    pub applications: Vec<Application>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Application {
    pub name: String,
}

/// `incus.{json,yaml,yml}` (IncusOS `api/seed/incus.go`); `preseed` is Incus's `InitPreseed`, kept as data.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Incus {
    pub version: String,
    pub apply_defaults: bool,
    pub preseed: Option<Value>,
}

/// `update.{json,yaml,yml}` (IncusOS `api/seed/update.go`, the update policy).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Update {
    pub version: String,
    pub auto_reboot: bool,
    pub channel: String,
    pub check_frequency: String,
    pub maintenance_windows: Option<Value>,
}

/// `network.{json,yaml,yml}` (IncusOS `api/seed/network.go`, `api/system_network.go`): every top-level key of
/// `SystemNetworkConfig` is known; only what the simulator uses is typed, the rest kept as data.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Network {
    pub version: String,
    pub dns: Option<NetworkDns>,
    pub interfaces: Option<Vec<Value>>,
    pub bonds: Option<Vec<Value>>,
    pub vlans: Option<Vec<Value>>,
    pub wireguard: Option<Vec<Value>>,
    pub time: Option<Value>,
    pub proxy: Option<Value>,
}

/// `network.dns`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkDns {
    pub hostname: String,
    pub domain: String,
    pub search_domains: Vec<String>,
    pub nameservers: Vec<String>,
    pub dns_over_tls: bool,
}

impl Incus {
    /// The client certificates the preseed trusts (`certificates[].certificate` of Incus's `InitPreseed`).
    pub fn preseed_certificates(&self) -> Vec<String> {
        let list = self
            .preseed
            .as_ref()
            .and_then(|p| p.get("certificates"))
            .and_then(Value::as_array);
        list.into_iter()
            .flatten()
            .filter_map(|c| c.get("certificate").and_then(Value::as_str))
            .map(str::to_owned)
            .collect()
    }
}

impl Network {
    /// The hostname IncusOS prefers (`internal/state`, `State.Hostname`): the configured DNS hostname, with
    /// `.domain` when a domain is set.
    pub fn hostname(&self) -> Option<String> {
        let dns = self.dns.as_ref().filter(|d| !d.hostname.is_empty())?;
        Some(if dns.domain.is_empty() {
            dns.hostname.clone()
        } else {
            format!("{}.{}", dns.hostname, dns.domain)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(files: &[(&str, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, body) in files {
            let mut h = tar::Header::new_ustar();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, body.as_bytes()).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn every_extension_is_read_and_the_first_file_of_a_section_wins() {
        for name in ["install.yaml", "install.yml", "install.json"] {
            let seed = SeedFiles::from_partition(&archive(&[(name, "{\"force_reboot\": true}")])).unwrap();
            assert!(seed.install().unwrap().unwrap().force_reboot, "{name}");
        }
        let seed = SeedFiles::from_partition(&archive(&[
            ("install.yml", "force_reboot: false"),
            ("install.yaml", "force_reboot: true"),
        ]))
        .unwrap();
        assert!(!seed.install().unwrap().unwrap().force_reboot);
    }

    #[test]
    fn an_empty_install_file_installs_with_defaults_other_empty_files_are_errors() {
        let seed = SeedFiles::from_partition(&archive(&[
            ("install.yaml", ""),
            ("provider.yaml", "# nothing\n"),
        ]))
        .unwrap();
        assert_eq!(seed.install().unwrap(), Some(Install::default()));
        assert!(matches!(seed.provider(), Err(SeedError::Empty { .. })));
        assert_eq!(seed.network().unwrap(), None);
    }

    #[test]
    fn no_tar_magic_is_no_seed_data_and_bad_yaml_is_malformed() {
        assert_eq!(
            SeedFiles::from_partition(&[0u8; 4096]),
            Err(SeedError::NoSeedData)
        );
        let seed = SeedFiles::from_partition(&archive(&[("install.yaml", "force_reboot: [")])).unwrap();
        assert!(matches!(seed.install(), Err(SeedError::Malformed { file, .. }) if file == "install.yaml"));
        let seed = SeedFiles::from_partition(&archive(&[("install.yaml", "force_reboot: maybe")])).unwrap();
        assert!(matches!(seed.install(), Err(SeedError::Malformed { .. })));
    }

    #[test]
    fn the_installed_copy_drops_the_install_file_only() {
        let seed = SeedFiles::from_partition(&archive(&[
            ("install.yaml", ""),
            ("provider.yaml", "name: images"),
        ]))
        .unwrap();
        assert_eq!(seed.without_install().names(), vec!["provider.yaml"]);
    }

    #[test]
    fn hostname_joins_the_domain() {
        let n: Network = yaml_serde::from_str("dns: {hostname: web-1, domain: example.test}").unwrap();
        assert_eq!(n.hostname().as_deref(), Some("web-1.example.test"));
        let n: Network = yaml_serde::from_str("dns: {hostname: web-1}").unwrap();
        assert_eq!(n.hostname().as_deref(), Some("web-1"));
        assert_eq!(Network::default().hostname(), None);
    }

    #[test]
    fn partition2_comes_from_the_gpt() {
        let mut image = Cursor::new(vec![0u8; 1 << 20]);
        let mut gpt = gptman::GPT::new_from(&mut image, 512, [7; 16]).unwrap();
        gpt[1] = gptman::GPTPartitionEntry {
            partition_type_guid: [1; 16],
            unique_partition_guid: [2; 16],
            starting_lba: 64,
            ending_lba: 127,
            attribute_bits: 0,
            partition_name: "esp".into(),
        };
        assert_eq!(
            partition2(&{
                let mut c = image.clone();
                gpt.write_into(&mut c).unwrap();
                c.into_inner()
            }),
            Err(LocateError::NoPartition2)
        );
        gpt[2] = gptman::GPTPartitionEntry {
            partition_type_guid: [3; 16],
            unique_partition_guid: [4; 16],
            starting_lba: 128,
            ending_lba: 255,
            attribute_bits: 0,
            partition_name: "seed-data".into(),
        };
        gpt.write_into(&mut image).unwrap();
        assert_eq!(partition2(image.get_ref()), Ok(128 * 512..256 * 512));
        assert!(matches!(partition2(&[0u8; 65536]), Err(LocateError::NoGpt(_))));
    }

    /// The GPT is found at LBA 1 of the media's own sector size (512 for `.img`, 2048 for `.iso`, 4096), partition
    /// 2 is located through it, and the `/usr` partition's name gives the version.
    #[test]
    fn the_gpt_is_read_through_the_media_sector_size_with_its_version() {
        for sector in SECTOR_SIZES {
            let mut image = Cursor::new(vec![0u8; 2 << 20]);
            let mut gpt = gptman::GPT::new_from(&mut image, sector, [7; 16]).unwrap();
            let entry = |n: u8, start: u64, end: u64, name: &str| gptman::GPTPartitionEntry {
                partition_type_guid: [n; 16],
                unique_partition_guid: [n + 10; 16],
                starting_lba: start,
                ending_lba: end,
                attribute_bits: 0,
                partition_name: name.into(),
            };
            let lba = |kib: u64| kib * 1024 / sector;
            gpt[1] = entry(1, lba(64), lba(128) - 1, "esp");
            gpt[2] = entry(2, lba(128), lba(384) - 1, "seed-data");
            gpt[3] = entry(3, lba(384), lba(400) - 1, "IncusOS_202612010000_verity_sig");
            gpt[4] = entry(4, lba(400), lba(448) - 1, "IncusOS_202612010000_verity");
            gpt[5] = entry(5, lba(448), lba(1024) - 1, "IncusOS_202612010000");
            gptman::GPT::write_protective_mbr_into(&mut image, sector).unwrap();
            gpt.write_into(&mut image).unwrap();
            let head = &image.get_ref()[..64 << 10];
            let found = read_gpt(head).unwrap();
            assert_eq!(found.sector_size, sector);
            assert_eq!(found.partition2, Some(128 << 10..384 << 10), "{sector}");
            assert_eq!(found.version.as_deref(), Some("202612010000"));
        }
        assert_eq!(usr_version("IncusOS_1_verity"), None);
        assert_eq!(usr_version("root"), None);
    }

    /// IncusOS decodes seeds with `DisallowUnknownFields` / `WithKnownFields`: a key it does not know is an error,
    /// never ignored.
    #[test]
    fn an_unknown_key_is_an_error() {
        let cases = [
            ("install.yaml", "forse_install: true\n"),
            ("install.yaml", "target: {idd: nvme}\n"),
            ("provider.yaml", "name: operations-center\nconfig: {}\nextra: 1\n"),
            ("update.yaml", "channel: stable\ncheck_frequncy: never\n"),
            ("network.yaml", "dns: {hostname: a, host: b}\n"),
        ];
        for (name, body) in cases {
            let files = SeedFiles::from_partition(&archive(&[(name, body)])).unwrap();
            let err = match name {
                "install.yaml" => files.install().map(drop),
                "provider.yaml" => files.provider().map(drop),
                "update.yaml" => files.update().map(drop),
                _ => files.network().map(drop),
            };
            assert!(
                matches!(err, Err(SeedError::Malformed { .. })),
                "{name}: {body}: {err:?}"
            );
        }
        let files = SeedFiles::from_partition(&archive(&[(
            "install.yaml",
            "force_install: true\nforce_install_confirmation: 3f9a1c\ntarget: null\n",
        )]))
        .unwrap();
        let install = files.install().unwrap().unwrap();
        assert_eq!(install.force_install_confirmation, "3f9a1c");
    }
}

//! Install images as IncusOS ships them, built here with gptman and tar (independently of racklift's media
//! code): a GPT with an ESP as partition 1 and `seed-data` as partition 2, the seed's tar archive at the start of
//! partition 2, and a byte pattern everywhere else.

use std::io::Cursor;

use gptman::{GPT, GPTPartitionEntry};
use serde_json::json;

/// 2048-byte sectors, as IncusOS's `.iso` (`scripts/convert-img-to-iso.sh`): the images are served as
/// `image.iso` and inserted into CD slots, which boot only a GPT of that sector size.
const SECTOR: u64 = 2048;
/// Partition 1 (ESP) and partition 2 (seed) start here, in sectors (32 KiB and 512 KiB).
const ESP_START: u64 = 16;
const SEED_START: u64 = 256;
/// Partition 2 holds 256 KiB.
const SEED_SECTORS: u64 = 128;

/// An image of `size` bytes whose content outside the partition table is `i % 251`.
pub fn plain_image(size: u64) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

fn entry(n: u8, start: u64, sectors: u64, name: &str) -> GPTPartitionEntry {
    GPTPartitionEntry {
        partition_type_guid: [n; 16],
        unique_partition_guid: [n + 100; 16],
        starting_lba: start,
        ending_lba: start + sectors - 1,
        attribute_bits: 0,
        partition_name: name.into(),
    }
}

/// A GPT image of `size` bytes (at least 1 MiB) with partition 2 only when `with_seed_partition`.
fn gpt_image(size: u64, with_seed_partition: bool) -> (Vec<u8>, u64) {
    gpt_image_of(size, with_seed_partition, SECTOR)
}

/// As [`gpt_image`], with `sector`-byte sectors; the partitions at the same byte offsets.
fn gpt_image_of(size: u64, with_seed_partition: bool, sector: u64) -> (Vec<u8>, u64) {
    assert!(size >= 1 << 20, "images hold a GPT and a seed partition");
    let lba = |n: u64| n * SECTOR / sector;
    let mut disk = Cursor::new(plain_image(size));
    let mut gpt = GPT::new_from(&mut disk, sector, [9; 16]).expect("new GPT");
    gpt[1] = entry(1, lba(ESP_START), lba(SEED_START - ESP_START), "esp");
    if with_seed_partition {
        gpt[2] = entry(2, lba(SEED_START), lba(SEED_SECTORS), "seed-data");
    }
    GPT::write_protective_mbr_into(&mut disk, sector).expect("protective MBR");
    gpt.write_into(&mut disk).expect("write GPT");
    (disk.into_inner(), SEED_START * SECTOR)
}

/// An `.img`-like image: [`seeded_image`] with 512-byte sectors, as IncusOS's raw disk image.
pub fn seeded_disk_image(size: u64, files: &[(&str, String)]) -> Vec<u8> {
    let (mut image, at) = gpt_image_of(size, true, 512);
    let archive = seed_archive(files);
    image[at as usize..at as usize + archive.len()].copy_from_slice(&archive);
    image
}

/// A tar archive of `files` (name, content), ustar headers as IncusOS's reader expects.
pub fn seed_archive(files: &[(&str, String)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, body) in files {
        let mut h = tar::Header::new_ustar();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, body.as_bytes()).expect("tar entry");
    }
    b.into_inner().expect("tar")
}

/// An image of `size` bytes whose partition 2 starts with the seed archive of `files`.
pub fn seeded_image(size: u64, files: &[(&str, String)]) -> Vec<u8> {
    let (mut image, at) = gpt_image(size, true);
    let archive = seed_archive(files);
    image[at as usize..at as usize + archive.len()].copy_from_slice(&archive);
    image
}

/// A GPT image with partition 1 only.
pub fn image_without_partition2(size: u64) -> Vec<u8> {
    gpt_image(size, false).0
}

/// An image whose partition 2 holds something that is not a tar archive (the pattern).
pub fn image_without_seed_data(size: u64) -> Vec<u8> {
    gpt_image(size, true).0
}

/// `install.yaml` with `force_reboot`.
pub fn install_yaml(force_reboot: bool) -> (&'static str, String) {
    (
        "install.yaml",
        format!("version: \"1\"\nforce_reboot: {force_reboot}\n"),
    )
}

/// `provider.json` for an Operations Center at `url` (JSON: the PEM needs no YAML quoting).
pub fn provider_json(url: &str, token: &str, certificate: Option<&str>) -> (&'static str, String) {
    let mut config = json!({"server_url": url, "server_token": token});
    if let Some(pem) = certificate {
        config["server_certificate"] = json!(pem);
    }
    let body = json!({"version": "1", "name": "operations-center", "config": config});
    ("provider.json", body.to_string())
}

/// The seed a manager would write: install, provider, applications, incus and update.
pub fn full_seed(force_reboot: bool, provider: (&'static str, String)) -> Vec<(&'static str, String)> {
    vec![
        install_yaml(force_reboot),
        provider,
        (
            "applications.yaml",
            "version: \"1\"\napplications:\n  - name: incus\n".to_owned(),
        ),
        ("incus.yaml", "version: \"1\"\napply_defaults: true\n".to_owned()),
        (
            "update.yml",
            "version: \"1\"\nauto_reboot: false\nchannel: stable\n".to_owned(),
        ),
    ]
}

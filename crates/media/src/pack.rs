//! An operator's own seed, for `racklift media compose`: a directory of seed files or a tar archive of them,
//! checked the way IncusOS will read them before it is written to a stick.
//!
//! IncusOS looks in the archive for `<section>.yaml`, `.yml` or `.json` (JSON is YAML) and parses each section
//! it knows; an archive without `install.*` boots the live image and installs nothing. So a seed is accepted
//! only when every file is a regular file with such a name whose body parses as YAML, and `install.*` is among
//! them. A directory is packed in name order with fixed metadata, so the same directory gives the same bytes.

use std::io::Read;

use crate::layout::MAX_SEED_BYTES;
use crate::seed::SeedArchive;

/// Why an operator's seed cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("reading the seed")]
    Io(#[from] std::io::Error),
    #[error("{name}: not a seed file (IncusOS reads <section>.yaml, .yml or .json)")]
    NotASeedFile { name: String },
    #[error("{name}: not a regular file")]
    NotRegular { name: String },
    #[error("{name} does not parse as YAML")]
    Parse {
        name: String,
        #[source]
        source: yaml_serde::Error,
    },
    #[error(
        "the seed has no install.yaml (nor .yml, .json): IncusOS would boot the live image and install nothing"
    )]
    NoInstall,
    #[error("the seed is {size} bytes, more than the {MAX_SEED_BYTES} a seed may take")]
    TooLarge { size: u64 },
}

/// The section a seed file name is for (`install` for `install.yaml`), if it is a seed file name.
fn section(name: &str) -> Option<&str> {
    let (stem, ext) = name.rsplit_once('.')?;
    let valid = matches!(ext, "yaml" | "yml" | "json")
        && !stem.is_empty()
        && stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    valid.then_some(stem)
}

/// Checks one file of a seed.
fn check_file(name: &str, body: &[u8]) -> Result<(), PackError> {
    if section(name).is_none() {
        return Err(PackError::NotASeedFile {
            name: name.to_owned(),
        });
    }
    yaml_serde::from_slice::<yaml_serde::Value>(body)
        .map(drop)
        .map_err(|source| PackError::Parse {
            name: name.to_owned(),
            source,
        })
}

fn check_all(files: &[(String, Vec<u8>)]) -> Result<(), PackError> {
    for (name, body) in files {
        check_file(name, body)?;
    }
    if !files.iter().any(|(n, _)| section(n) == Some("install")) {
        return Err(PackError::NoInstall);
    }
    Ok(())
}

/// Packs seed files (name, body) into the archive IncusOS reads, after checking them.
pub fn pack(mut files: Vec<(String, Vec<u8>)>) -> Result<SeedArchive, PackError> {
    check_all(&files)?;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut builder = tar::Builder::new(Vec::new());
    for (name, body) in &files {
        let mut header = tar::Header::new_ustar();
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, name, body.as_slice())?;
    }
    within_limit(builder.into_inner()?)
}

/// Reads every regular file of `dir` (not its subdirectories' contents: a seed is flat) and packs them.
pub fn pack_dir(dir: &std::path::Path) -> Result<SeedArchive, PackError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.file_type()?.is_file() {
            return Err(PackError::NotRegular { name });
        }
        files.push((name, std::fs::read(entry.path())?));
    }
    pack(files)
}

/// Takes an existing archive as it is, after checking each file in it as [`pack`] would.
pub fn check_archive(bytes: Vec<u8>) -> Result<SeedArchive, PackError> {
    let mut files = Vec::new();
    for entry in tar::Archive::new(bytes.as_slice()).entries()? {
        let mut entry = entry?;
        let name = entry.path()?.to_string_lossy().into_owned();
        let name = name.strip_prefix("./").unwrap_or(&name).to_owned();
        if !entry.header().entry_type().is_file() {
            return Err(PackError::NotRegular { name });
        }
        let mut body = Vec::new();
        entry.read_to_end(&mut body)?;
        files.push((name, body));
    }
    check_all(&files)?;
    within_limit(bytes)
}

fn within_limit(bytes: Vec<u8>) -> Result<SeedArchive, PackError> {
    if bytes.len() as u64 > MAX_SEED_BYTES {
        return Err(PackError::TooLarge {
            size: bytes.len() as u64,
        });
    }
    Ok(SeedArchive::new(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, body: &str) -> (String, Vec<u8>) {
        (name.to_owned(), body.as_bytes().to_vec())
    }

    /// Files of a seed, and the refusal expected (`None`: accepted).
    type Case = (&'static [(&'static str, &'static str)], Option<&'static str>);

    #[test]
    fn a_seed_is_accepted_only_with_an_install_file_and_every_file_parsing() {
        let cases: &[Case] = &[
            (&[("install.yaml", "force_reboot: true\n")], None),
            (
                &[("install.json", "{}"), ("network.yml", "dns: {hostname: a}\n")],
                None,
            ),
            (&[("provider.yaml", "name: images\n")], Some("no install.yaml")),
            (
                &[("install.yaml", ""), ("notes.txt", "hi")],
                Some("notes.txt: not a seed file"),
            ),
            (
                &[("install.yaml", "a: [1,\n")],
                Some("install.yaml does not parse"),
            ),
            (&[("../install.yaml", "{}")], Some("not a seed file")),
        ];
        for (files, refused) in cases {
            let files = files.iter().map(|(n, b)| file(n, b)).collect();
            match (pack(files), refused) {
                (Ok(_), None) => {}
                (Err(e), Some(want)) => assert!(e.to_string().contains(want), "{e} vs {want}"),
                (got, want) => panic!("{got:?}, wanted refusal {want:?}"),
            }
        }
    }

    #[test]
    fn packing_is_deterministic_and_an_archive_round_trips_through_the_check() {
        let a = pack(vec![
            file("update.yaml", "channel: stable\n"),
            file("install.yaml", "{}"),
        ])
        .unwrap();
        let b = pack(vec![
            file("install.yaml", "{}"),
            file("update.yaml", "channel: stable\n"),
        ])
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(check_archive(a.bytes.clone()).unwrap(), a);
        let too_big = vec![file("install.yaml", &"#".repeat(MAX_SEED_BYTES as usize))];
        assert!(matches!(pack(too_big), Err(PackError::TooLarge { .. })));
    }
}

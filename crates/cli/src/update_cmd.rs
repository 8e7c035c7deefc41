//! `racklift update publish DIR --version V --channel C`: publishes an IncusOS update whose files lie in DIR,
//! inside the API's images directory (the API serves them from there; nothing is uploaded). DIR is laid out as
//! IncusOS's publisher lays out a release: one directory per architecture (`x86_64/`, `aarch64/`) and the
//! architecture-independent files (the Secure Boot key tarball) beside them; each file is published under its path
//! relative to DIR (`x86_64/incus.raw.gz`), which is the name IncusOS fetches it by. Each file's size and SHA-256
//! are read here, and its component, type and architecture follow from that name by
//! [`racklift_api::update_catalog::classify`]; a name the rule does not know stops the publish, naming the file.
//! The API refuses an update IncusOS could not use (OS files without all four `update-*` files, an architecture
//! without `incus.raw.gz`).

use std::path::PathBuf;

use anyhow::{Context, bail};
use racklift_api::update_catalog::{PublishFile, PublishUpdate, classify};

use crate::client::ApiArgs;
use crate::output::print_json;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    api: ApiArgs,
    #[command(subcommand)]
    command: UpdateCommand,
}

#[derive(clap::Subcommand)]
enum UpdateCommand {
    /// Publish the files of DIR as one update (as an admin).
    Publish(PublishArgs),
}

#[derive(clap::Args)]
struct PublishArgs {
    /// The directory of the update's files, inside the API's images directory: files at its top and in its
    /// `x86_64/` and `aarch64/` subdirectories (other subdirectories are ignored).
    dir: PathBuf,
    /// The IncusOS version (a timestamp such as 202612010000).
    #[arg(long)]
    version: String,
    /// A channel to offer it on; repeat for several.
    #[arg(long = "channel", required = true)]
    channels: Vec<String>,
    /// The architecture of the top-level files whose name states none (`x86_64` or `aarch64`); without it they
    /// are for any architecture. Files in an architecture's directory are that architecture's.
    #[arg(long)]
    architecture: Option<String>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.api.client()?;
    let UpdateCommand::Publish(p) = args.command;
    let dir = std::fs::canonicalize(&p.dir).with_context(|| format!("cannot read {}", p.dir.display()))?;
    let list = |dir: &std::path::Path| -> anyhow::Result<Vec<PathBuf>> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        Ok(files)
    };
    let mut entries = list(&dir)?;
    for arch in ["x86_64", "aarch64"] {
        let sub = dir.join(arch);
        if sub.is_dir() {
            entries.extend(list(&sub)?);
        }
    }
    if entries.is_empty() {
        bail!("{} holds no files", dir.display());
    }
    let mut files = Vec::with_capacity(entries.len());
    for path in entries {
        let filename = path
            .strip_prefix(&dir)
            .ok()
            .and_then(|n| n.to_str())
            .with_context(|| format!("{}: not a UTF-8 file name", path.display()))?
            .to_owned();
        let Some(c) = classify(&filename) else {
            bail!(
                "{filename}: not an IncusOS update file name (<app>.raw.gz, *.efi.gz, *.usr-<arch>[-verity[-sig]].*, \
                 *.img.gz, *.iso.gz, *.manifest.json.gz, changelog-<channel>.yaml.gz, a top-level *.tar.gz of \
                 Secure Boot keys): nothing published"
            );
        };
        let top_level = !filename.contains('/');
        let architecture = match (c.architecture, &p.architecture) {
            (Some(stated), Some(given)) if top_level && stated != given => {
                bail!("{filename}: its name says {stated}, not --architecture {given}")
            }
            (Some(stated), _) => stated.to_owned(),
            (None, Some(given)) if top_level && c.file_type != "update-secureboot" => given.clone(),
            (None, _) => String::new(),
        };
        let hashed = path.clone();
        let (size, sha256) =
            tokio::task::spawn_blocking(move || crate::image_cmd::hash_file(&hashed)).await??;
        files.push(PublishFile {
            filename,
            path: path.display().to_string(),
            size: i64::try_from(size).context("the file is too large")?,
            sha256: Some(sha256),
            component: c.component,
            file_type: c.file_type.to_owned(),
            architecture,
        });
    }
    let body = PublishUpdate {
        version: p.version,
        channels: p.channels,
        files,
    };
    let published = client
        .post("/1.0/provisioning/updates", &serde_json::to_value(&body)?, |r| r)
        .await?;
    print_json(&published)
}

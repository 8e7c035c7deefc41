//! `racklift image …`: the installation images deployments are served from. The API only records an image (its
//! path on the API's host, size and SHA-256) and cannot check the file, so `add` reads it here: the size and
//! checksum it registers are the file's, not typed by hand.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use racklift_store::{Image, NewImage};
use sha2::{Digest, Sha256};

use crate::client::{ApiArgs, Client, decode};
use crate::output::{key_values, print_json, table, truncate};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    api: ApiArgs,
    #[command(subcommand)]
    command: ImageCommand,
}

#[derive(clap::Subcommand)]
enum ImageCommand {
    /// Register an image file; its size and SHA-256 are read from the file.
    Add(AddArgs),
    /// List the registered images.
    List {
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct AddArgs {
    /// The image type, e.g. iso.
    #[arg(long = "type", value_name = "TYPE")]
    image_type: String,
    /// The architecture, e.g. x86_64.
    #[arg(long, value_name = "ARCH")]
    architecture: String,
    /// The release channel, e.g. stable.
    #[arg(long, value_name = "CHANNEL")]
    channel: String,
    /// The image file, inside the API's images directory (paths.images_dir). The API serves it from this path,
    /// so run this where the API runs (or where the same path holds the same file); a relative path is made
    /// absolute.
    #[arg(long, value_name = "PATH")]
    path: PathBuf,
    /// The SHA-256 the file must have (say, the published one); the file is checked against it.
    #[arg(long, value_name = "HEX", value_parser = sha256_hex)]
    sha256: Option<String>,
    /// Print the API's JSON instead of key: value lines.
    #[arg(long)]
    json: bool,
}

/// Files at least this big get a progress bar while they are hashed (a few hundred MiB take seconds).
const PROGRESS_FROM_BYTES: u64 = 64 * 1024 * 1024;

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.api.client()?;
    match args.command {
        ImageCommand::Add(add_args) => add(&client, add_args).await,
        ImageCommand::List { json } => list(&client, json).await,
    }
}

/// 64 hex digits, lower-cased as the API stores them.
fn sha256_hex(s: &str) -> Result<String, String> {
    if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err("must be 64 hex digits (a SHA-256)".into())
    }
}

async fn add(client: &Client, args: AddArgs) -> anyhow::Result<()> {
    let path = std::fs::canonicalize(&args.path)
        .with_context(|| format!("cannot read the image {}", args.path.display()))?;
    let hashed = path.clone();
    let (size, digest) = tokio::task::spawn_blocking(move || hash_file(&hashed)).await??;
    if let Some(expected) = &args.sha256
        && *expected != digest
    {
        bail!(
            "{} has SHA-256 {digest}, not the --sha256 given ({expected}): nothing registered",
            path.display()
        );
    }
    let body = NewImage {
        image_type: args.image_type,
        architecture: args.architecture,
        channel: args.channel,
        path: path.display().to_string(),
        size_bytes: i64::try_from(size).context("the image is too large")?,
        sha256: Some(digest),
    };
    let image = client
        .post("/1.0/images", &serde_json::to_value(&body)?, |r| r)
        .await?;
    if args.json {
        return print_json(&image);
    }
    let image: Image = decode(&image)?;
    print!(
        "{}",
        key_values(&[
            ("id", image.id.to_string()),
            ("type", image.image_type),
            ("architecture", image.architecture),
            ("channel", image.channel),
            ("path", image.path),
            (
                "size",
                format!("{} ({} bytes)", bytes(image.size_bytes), image.size_bytes)
            ),
            ("sha256", image.sha256),
        ])
    );
    Ok(())
}

/// The file's size and lower-case hex SHA-256, with a progress bar on the terminal for big files.
pub(crate) fn hash_file(path: &Path) -> anyhow::Result<(u64, String)> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot open the image {}", path.display()))?;
    let size = file.metadata()?.len();
    let bar = if size >= PROGRESS_FROM_BYTES {
        ProgressBar::new(size).with_style(ProgressStyle::with_template(
            "hashing {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )?)
    } else {
        ProgressBar::hidden()
    };
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1024 * 1024];
    let mut read_total = 0u64;
    loop {
        let n = file
            .read(&mut buffer)
            .with_context(|| format!("reading the image {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        read_total += n as u64;
        bar.set_position(read_total);
    }
    bar.finish_and_clear();
    if read_total != size {
        bail!(
            "{} changed while it was read ({size} bytes before, {read_total} read)",
            path.display()
        );
    }
    let digest = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((size, digest))
}

/// A size for people (the API never answers a negative one).
fn bytes(n: i64) -> HumanBytes {
    HumanBytes(u64::try_from(n).unwrap_or_default())
}

async fn list(client: &Client, as_json: bool) -> anyhow::Result<()> {
    let images = client.get("/1.0/images").await?;
    if as_json {
        return print_json(&images);
    }
    let rows: Vec<[String; 7]> = decode::<Vec<Image>>(&images)?
        .into_iter()
        .map(|i| {
            [
                i.id.to_string(),
                i.image_type,
                i.architecture,
                i.channel,
                bytes(i.size_bytes).to_string(),
                truncate(&i.sha256, 13),
                i.path,
            ]
        })
        .collect();
    print!(
        "{}",
        table(["ID", "TYPE", "ARCH", "CHANNEL", "SIZE", "SHA256", "PATH"], &rows)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_are_64_hex_digits_lower_cased() {
        let upper = "AB".repeat(32);
        assert_eq!(sha256_hex(&upper).unwrap(), "ab".repeat(32));
        assert!(sha256_hex("abc").is_err());
        assert!(sha256_hex(&"zz".repeat(32)).is_err());
    }

    #[test]
    fn hashing_reads_the_whole_file() {
        let path = std::env::temp_dir().join(format!("racklift-hash-{}", std::process::id()));
        std::fs::write(&path, b"abc").unwrap();
        let (size, digest) = hash_file(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(size, 3);
        // The SHA-256 of "abc" (FIPS 180-2, appendix B.1).
        assert_eq!(
            digest,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

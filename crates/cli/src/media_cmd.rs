//! `racklift media`: installation media on this machine.

use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Options of `racklift media`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: MediaCommand,
}

#[derive(clap::Subcommand, Debug)]
enum MediaCommand {
    /// Write a disk image laid out like an IncusOS install image (a GPT whose partition 2 takes the seed, the
    /// rest pseudo-random) as DIR/incusos-demo.img (512-byte sectors, as IncusOS's `.img`), or with --iso as
    /// DIR/incusos-demo.iso (2048-byte sectors, as IncusOS's `.iso`), for trying racklift without a real image;
    /// prints its path, size and SHA-256 as JSON.
    DemoImage {
        /// Directory to write into (created if missing).
        #[arg(long)]
        dir: PathBuf,
        /// Size in bytes (at least 2 MiB).
        #[arg(long, default_value_t = 64 << 20)]
        size: u64,
        /// Write the `.iso` form: a GPT with 2048-byte sectors, booted from a CD drive.
        #[arg(long)]
        iso: bool,
    },
    /// Write IMAGE with SEED laid over the start of its partition 2 to FILE, the bytes the media server serves
    /// a deployment with that seed (for a USB stick); prints FILE's path, size and SHA-256 as JSON.
    Compose {
        /// The IncusOS install image (a GPT image whose partition 2 takes the seed).
        #[arg(long)]
        image: PathBuf,
        /// The seed: a directory of seed files (install.yaml, provider.yaml, network.yaml, …) or a tar archive
        /// of them. It must hold install.yaml (or .yml, .json), and every file must parse.
        #[arg(long)]
        seed: PathBuf,
        /// Where to write the composed image (refused if it exists, unless --force).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
    },
}

/// What `demo-image` prints.
#[derive(serde::Serialize)]
struct Written {
    path: PathBuf,
    size_bytes: u64,
    sha256: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        MediaCommand::DemoImage { dir, size, iso } => {
            let spec = if iso {
                racklift_media::layout::DemoImage::iso(size)
            } else {
                racklift_media::layout::DemoImage::img(size)
            };
            let (path, sha256) = racklift_api::demo::generate_image_as(&dir, &spec)
                .with_context(|| format!("writing a demo image into {}", dir.display()))?;
            let written = Written {
                path,
                size_bytes: size,
                sha256,
            };
            println!("{}", serde_json::to_string(&written)?);
            Ok(())
        }
        MediaCommand::Compose {
            image,
            seed,
            output,
            force,
        } => {
            let written = compose(&image, &seed, &output, force)?;
            println!("{}", serde_json::to_string(&written)?);
            Ok(())
        }
    }
}

/// `compose`: the seed checked, the image's partition table read, then one pass over the image.
fn compose(image: &Path, seed: &Path, output: &Path, force: bool) -> anyhow::Result<Written> {
    use sha2::Digest;
    let archive = if seed.is_dir() {
        racklift_media::pack::pack_dir(seed)
    } else {
        std::fs::read(seed)
            .map_err(racklift_media::pack::PackError::Io)
            .and_then(racklift_media::pack::check_archive)
    }
    .with_context(|| format!("--seed {}", seed.display()))?;
    let mut file = std::fs::File::open(image).with_context(|| format!("--image {}", image.display()))?;
    let layout = racklift_media::ImageLayout::read(&mut file)
        .with_context(|| format!("--image {}: cannot carry a seed", image.display()))?;
    file.seek(std::io::SeekFrom::Start(0))?;
    let overlay = racklift_media::Overlay::new(&layout, &archive);
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let out = options
        .open(output)
        .with_context(|| format!("-o {}", output.display()))?;
    let mut hashing = HashingWriter {
        inner: std::io::BufWriter::new(out),
        hasher: sha2::Sha256::new(),
    };
    let size = racklift_media::write_composed(std::io::BufReader::new(file), &overlay, &mut hashing)
        .with_context(|| format!("writing {}", output.display()))?;
    hashing
        .inner
        .into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()?;
    Ok(Written {
        path: output.to_owned(),
        size_bytes: size,
        sha256: hashing
            .hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    })
}

/// Hashes what it writes, so the composed file's digest costs no second read.
struct HashingWriter<W> {
    inner: W,
    hasher: sha2::Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        sha2::Digest::update(&mut self.hasher, &buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

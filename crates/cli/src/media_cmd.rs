//! `racklift media`: installation media on this machine.

use std::path::PathBuf;

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
    /// rest pseudo-random) as DIR/incusos-demo.img, for trying racklift without a real image; prints its path,
    /// size and SHA-256 as JSON.
    DemoImage {
        /// Directory to write into (created if missing).
        #[arg(long)]
        dir: PathBuf,
        /// Size in bytes (at least 2 MiB).
        #[arg(long, default_value_t = 64 << 20)]
        size: u64,
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
        MediaCommand::DemoImage { dir, size } => {
            let (path, sha256) = racklift_api::demo::generate_image(&dir, size)
                .with_context(|| format!("writing a demo image into {}", dir.display()))?;
            let written = Written {
                path,
                size_bytes: size,
                sha256,
            };
            println!("{}", serde_json::to_string(&written)?);
            Ok(())
        }
    }
}

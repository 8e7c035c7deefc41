//! `racklift`: one binary for every role.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "racklift", version, about = "Deploy IncusOS through BMCs and roll clusters, durably.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply the database migrations.
    Migrate,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Migrate => Ok(()),
    }
}

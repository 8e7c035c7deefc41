//! `racklift`: one binary for every role.

use clap::{Parser, Subcommand};

mod bmc_sim_cmd;

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
    /// Serve a rack of simulated Redfish BMCs (and IncusOS servers) for tests and development.
    BmcSim(bmc_sim_cmd::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Migrate => Ok(()),
        Command::BmcSim(args) => bmc_sim_cmd::run(args),
    }
}

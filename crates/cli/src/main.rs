//! `racklift`: one binary for every role.

use clap::{Parser, Subcommand};

mod deploy_cmd;

#[derive(Parser)]
#[command(
    name = "racklift",
    version,
    about = "Deploy IncusOS through BMCs and roll clusters, durably."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply the database migrations.
    Migrate,
    /// Inspect the deployment state machine.
    #[command(subcommand)]
    Deploy(deploy_cmd::DeployCommand),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Migrate => Ok(()),
        Command::Deploy(cmd) => deploy_cmd::run(cmd),
    }
}

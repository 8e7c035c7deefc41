//! `racklift`: one binary for every role. Each subcommand's logic lives in a library crate; this crate parses
//! arguments, wires configuration and runs.

mod api_cmd;
mod bench_cmd;
mod client;
mod db;
mod deadletter_cmd;
mod events_cmd;
mod logging;
mod output;
mod up_cmd;
mod worker_cmd;

use clap::{Parser, Subcommand};

/// mimalloc rather than glibc's malloc: see the workspace Cargo.toml for the measurement.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bmc_sim_cmd;
mod deploy_cmd;
mod server_cmd;

#[derive(Parser)]
#[command(
    name = "racklift",
    version,
    about = "Deploy IncusOS through BMCs and roll clusters, durably."
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = logging::Format::Text)]
    log_format: logging::Format,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start everything on this machine: the database (embedded unless DATABASE_URL is set), migrations and a
    /// worker pool, until Ctrl-C.
    Up(up_cmd::Args),
    /// Apply the database migrations to DATABASE_URL.
    Migrate,
    /// Run a worker pool against DATABASE_URL until Ctrl-C (or SIGTERM), then drain; serves /metrics meanwhile.
    Worker(worker_cmd::Args),
    /// Serve the API (with the installation media and /metrics) against DATABASE_URL until Ctrl-C (or SIGTERM).
    Api(api_cmd::Args),
    /// Start or stop an embedded PostgreSQL in a directory (used by ops/test).
    Db(db::DbArgs),
    /// Benchmarks.
    Bench(bench_cmd::Args),
    /// Inspect the deployment state machine.
    #[command(subcommand)]
    Deploy(deploy_cmd::DeployCommand),
    /// Serve a rack of simulated Redfish BMCs (and IncusOS servers) for tests and development.
    BmcSim(bmc_sim_cmd::Args),
    /// Operate servers through a running API: list, show, deploy (optionally waiting), cancel, power, media.
    Server(server_cmd::Args),
    /// Triage dead letters through a running API: list, groups, show, retry, discard, cancel, bulk-retry.
    #[command(name = "deadletter")]
    DeadLetter(deadletter_cmd::Args),
    /// Print a server's event log through a running API; --follow keeps printing new events.
    Events(events_cmd::Args),
}

/// Errors end the process with one line (the error and its causes), never a backtrace: operators read these.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    logging::init(cli.log_format);
    match cli.command {
        Command::Up(args) => runtime()?.block_on(up_cmd::run(args)),
        Command::Migrate => runtime()?.block_on(db::migrate_command()),
        Command::Worker(args) => runtime()?.block_on(worker_cmd::run(args)),
        Command::Api(args) => runtime()?.block_on(api_cmd::run(args)),
        Command::Db(args) => db::db_command(args),
        Command::Bench(args) => runtime()?.block_on(bench_cmd::run(args)),
        Command::Deploy(cmd) => deploy_cmd::run(cmd),
        Command::BmcSim(args) => bmc_sim_cmd::run(args),
        Command::Server(args) => runtime()?.block_on(server_cmd::run(args)),
        Command::DeadLetter(args) => runtime()?.block_on(deadletter_cmd::run(args)),
        Command::Events(args) => runtime()?.block_on(events_cmd::run(args)),
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()
}

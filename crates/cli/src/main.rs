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
mod settings;
mod up_cmd;
mod up_demo;
mod worker_cmd;

use clap::{Parser, Subcommand};

/// mimalloc rather than glibc's malloc: see the workspace Cargo.toml for the measurement.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bmc_sim_cmd;
mod bulk;
mod catalog_cmd;
mod cluster_cmd;
mod deploy_cmd;
mod image_cmd;
mod media_cmd;
mod server_cmd;
mod token_cmd;
mod update_cmd;

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
    /// The configuration file of `api`, `worker`, `up`, `migrate`, `token` and `config show` (default: the
    /// RACKLIFT_CONFIG variable; none when unset).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start everything on this machine: the database (embedded unless DATABASE_URL is set), the API, a worker
    /// pool and a simulated rack, until Ctrl-C, SIGTERM or SIGHUP.
    Up(up_cmd::Args),
    /// Apply the database migrations to DATABASE_URL.
    Migrate,
    /// Run a worker pool against DATABASE_URL until Ctrl-C (or SIGTERM), then drain; serves /metrics meanwhile.
    Worker(worker_cmd::Args),
    /// Serve the API (with the installation media and /metrics) against DATABASE_URL until Ctrl-C (or SIGTERM).
    Api(api_cmd::Args),
    /// The configuration (racklift.toml, RACKLIFT_* variables): show the effective values or the defaults.
    Config(settings::ConfigArgs),
    /// Start or stop an embedded PostgreSQL in a directory (used by ops/test).
    Db(db::DbArgs),
    /// Benchmarks.
    Bench(bench_cmd::Args),
    /// Inspect the deployment state machine.
    #[command(subcommand)]
    Deploy(deploy_cmd::DeployCommand),
    /// Serve a rack of simulated Redfish BMCs (and IncusOS servers) for tests and development.
    BmcSim(bmc_sim_cmd::Args),
    /// Operate servers through a running API: add, remove, list, show, deploy (optionally waiting), cancel,
    /// power, media; deploy and cancel also in bulk (--all with filters).
    Server(server_cmd::Args),
    /// Register and list installation images through a running API (size and SHA-256 read from the file).
    Image(image_cmd::Args),
    /// Publish IncusOS updates (files inside the API's images directory) that installed servers fetch.
    Update(update_cmd::Args),
    /// Clusters of registered servers through a running API: create, list, show, delete; rolling update and
    /// reboot (optionally waiting), and cancel, pause or resume the operation in progress.
    Cluster(cluster_cmd::Args),
    /// Create and list provisioning tokens (what installed servers register with) through a running API.
    ProvisioningToken(catalog_cmd::TokenArgs),
    /// Create and list a provisioning token's seeds (install configurations) through a running API.
    Seed(catalog_cmd::SeedArgs),
    /// Create or replace, list and remove BIOS profiles through a running API.
    BiosProfile(catalog_cmd::ProfileArgs),
    /// Show and change the API's settings (the public address) through a running API.
    Settings(catalog_cmd::SettingsArgs),
    /// Triage dead letters through a running API: list, groups, show, retry, discard, cancel, bulk-retry.
    #[command(name = "deadletter")]
    DeadLetter(deadletter_cmd::Args),
    /// Print a server's event log through a running API; --follow keeps printing new events.
    Events(events_cmd::Args),
    /// Create, list and revoke API tokens straight in DATABASE_URL, so the first admin token can be made before
    /// the API has any.
    Token(token_cmd::Args),
    /// Installation media on this machine: write a demo image laid out like an IncusOS install image.
    Media(media_cmd::Args),
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
    settings::set_config_path(cli.config);
    let log_file = match &cli.command {
        Command::Up(args) => up_cmd::log_file(args)?,
        _ => None,
    };
    logging::init(cli.log_format, log_file.as_deref())?;
    match cli.command {
        Command::Up(args) => runtime()?.block_on(up_cmd::run(args, log_file)),
        Command::Config(args) => settings::config_command(args),
        Command::Migrate => runtime()?.block_on(db::migrate_command()),
        Command::Worker(args) => runtime()?.block_on(worker_cmd::run(args)),
        Command::Api(args) => runtime()?.block_on(api_cmd::run(args)),
        Command::Db(args) => db::db_command(args),
        Command::Bench(args) => runtime()?.block_on(bench_cmd::run(args)),
        Command::Deploy(cmd) => deploy_cmd::run(cmd),
        Command::BmcSim(args) => bmc_sim_cmd::run(args),
        Command::Server(args) => runtime()?.block_on(server_cmd::run(args)),
        Command::Image(args) => runtime()?.block_on(image_cmd::run(args)),
        Command::Update(args) => runtime()?.block_on(update_cmd::run(args)),
        Command::Cluster(args) => runtime()?.block_on(cluster_cmd::run(args)),
        Command::ProvisioningToken(args) => runtime()?.block_on(catalog_cmd::token(args)),
        Command::Seed(args) => runtime()?.block_on(catalog_cmd::seed(args)),
        Command::BiosProfile(args) => runtime()?.block_on(catalog_cmd::bios_profile(args)),
        Command::Settings(args) => runtime()?.block_on(catalog_cmd::settings(args)),
        Command::DeadLetter(args) => runtime()?.block_on(deadletter_cmd::run(args)),
        Command::Events(args) => runtime()?.block_on(events_cmd::run(args)),
        Command::Token(args) => runtime()?.block_on(token_cmd::run(args)),
        Command::Media(args) => media_cmd::run(args),
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()
}

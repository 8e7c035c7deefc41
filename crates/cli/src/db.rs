//! Finding the database: `DATABASE_URL` or racklift.toml's `database.url_file` (never a flag or a key of its own,
//! because it carries a password), otherwise, for `racklift up`, the embedded server.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use racklift_config::Settings;
use racklift_pgembed::EmbeddedPostgres;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

#[derive(clap::Args)]
pub struct DbArgs {
    #[command(subcommand)]
    command: DbCommand,
}

#[derive(clap::Subcommand)]
enum DbCommand {
    /// Start (initialising on first use) the embedded server under DIR; print its admin URL and leave it running.
    Start {
        #[arg(long, default_value = ".racklift/postgres")]
        data_dir: PathBuf,
    },
    /// Stop the embedded server under DIR.
    Stop {
        #[arg(long, default_value = ".racklift/postgres")]
        data_dir: PathBuf,
    },
}

pub fn db_command(args: DbArgs) -> anyhow::Result<()> {
    match args.command {
        DbCommand::Start { data_dir } => {
            let pg = EmbeddedPostgres::start(&data_dir)?;
            println!("{}", pg.admin_url());
        }
        DbCommand::Stop { data_dir } => {
            if !EmbeddedPostgres::stop_dir(&data_dir)? {
                eprintln!("no embedded PostgreSQL is running under {}", data_dir.display());
            }
        }
    }
    Ok(())
}

/// `DATABASE_URL` alone: the benchmarks create databases of their own on that server and read no racklift.toml.
pub fn database_url_from_env() -> Option<String> {
    std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty())
}

/// The configured database URL (`DATABASE_URL` or `database.url_file`), or what to do about its absence.
pub fn require_database_url() -> anyhow::Result<String> {
    crate::settings::database_url(&crate::settings::load(None, |_| {})?)
}

/// A pool on `url` of at most `max_connections`.
pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    connect_with(url, max_connections, Duration::from_secs(30)).await
}

/// A pool on the configured database, sized and timed by `[database]`.
pub async fn connect_configured(settings: &Settings) -> anyhow::Result<PgPool> {
    let url = crate::settings::database_url(settings)?;
    connect_with(
        &url,
        settings.database.max_connections,
        Duration::from_secs(settings.database.acquire_timeout_secs),
    )
    .await
}

async fn connect_with(url: &str, max_connections: u32, acquire_timeout: Duration) -> anyhow::Result<PgPool> {
    racklift_queue::primary_only(PgPoolOptions::new())
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .connect(url)
        .await
        .context("cannot connect to PostgreSQL")
}

pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    racklift_schema::migrate(pool)
        .await
        .context("applying migrations")
}

pub async fn migrate_command() -> anyhow::Result<()> {
    let pool = connect(&require_database_url()?, 2).await?;
    migrate(&pool).await?;
    println!("migrations applied");
    Ok(())
}

/// Creates the racklift database in the embedded server unless it exists.
pub async fn ensure_embedded_database(pg: &EmbeddedPostgres) -> anyhow::Result<()> {
    let admin = connect(&pg.admin_url(), 1).await?;
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(racklift_pgembed::DATABASE)
        .fetch_one(&admin)
        .await?;
    if !exists {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE DATABASE {}",
            racklift_pgembed::DATABASE
        )))
        .execute(&admin)
        .await?;
    }
    admin.close().await;
    Ok(())
}

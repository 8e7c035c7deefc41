//! Finding the database: `DATABASE_URL` or racklift.toml's `database.url_file` (never a flag or a key of its own,
//! because it carries a password), otherwise, for `racklift up`, the embedded server.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use racklift_config::Settings;
use racklift_pgembed::EmbeddedPostgres;
use racklift_queue::SessionBounds;
use sqlx::Connection;
use sqlx::PgPool;

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

/// A pool on `url` of at most `max_connections`, for one-off commands that read no `[queue]`: its sessions are
/// bounded as for the default lease.
pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    let bounds = SessionBounds::for_lease(racklift_queue::QueueConfig::default().lease_ttl);
    connect_with(url, max_connections, Duration::from_secs(30), &bounds).await
}

/// A pool on the configured database, sized and timed by `[database]`.
pub async fn connect_configured(settings: &Settings) -> anyhow::Result<PgPool> {
    let url = crate::settings::database_url(settings)?;
    connect_sized(settings, &url, settings.database.max_connections).await
}

/// A pool on `url` of at most `max_connections`, timed by `[database]`, its sessions bounded for the lease of
/// `[queue]` (ARCHITECTURE.md, invariant 27).
pub async fn connect_sized(settings: &Settings, url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    let lease_ttl = Duration::from_millis(settings.queue.lease_ttl_ms);
    connect_with(
        url,
        max_connections,
        Duration::from_secs(settings.database.acquire_timeout_secs),
        &SessionBounds::for_lease(lease_ttl),
    )
    .await
}

async fn connect_with(
    url: &str,
    max_connections: u32,
    acquire_timeout: Duration,
    bounds: &SessionBounds,
) -> anyhow::Result<PgPool> {
    let options =
        racklift_queue::session::connect_options(url, bounds).context("reading the database URL")?;
    racklift_queue::session::pool_options()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .connect_with(options)
        .await
        .context("cannot connect to PostgreSQL")
}

/// Applies pending migrations on a connection of the pool taken out of it, with the statement and lock timeouts
/// lifted: a migration may rewrite a large table or wait for another process's migration, and the connection is
/// closed afterwards so the lifted bounds never reach another borrower.
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await?.detach();
    sqlx::raw_sql("SET statement_timeout = 0; SET lock_timeout = 0")
        .execute(&mut conn)
        .await
        .context("lifting the statement and lock timeouts for migrations")?;
    let migrated = racklift_schema::migrate_on(&mut conn)
        .await
        .context("applying migrations");
    conn.close().await.ok();
    migrated
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

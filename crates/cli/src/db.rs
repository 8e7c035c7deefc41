//! Finding the database: `DATABASE_URL` when set (read from the environment only, never a flag, because it
//! carries a password), otherwise the embedded server.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
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

pub fn database_url_from_env() -> Option<String> {
    std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty())
}

pub fn require_database_url() -> anyhow::Result<String> {
    database_url_from_env().context(
        "DATABASE_URL is not set: set it to a PostgreSQL URL, or use `racklift up`, which embeds one",
    )
}

pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(30))
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

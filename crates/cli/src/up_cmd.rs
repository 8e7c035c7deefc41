//! `racklift up`: the whole system on one machine.

use std::path::PathBuf;

use racklift_pgembed::EmbeddedPostgres;
use racklift_queue::{Queue, WorkerPool};

use crate::{db, worker_cmd};

#[derive(clap::Args)]
pub struct Args {
    /// Where the embedded database keeps its files (ignored when DATABASE_URL is set).
    #[arg(long, default_value = ".racklift")]
    data_dir: PathBuf,
    #[command(flatten)]
    pool: worker_cmd::PoolArgs,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let (url, embedded) = match db::database_url_from_env() {
        Some(url) => (url, None),
        None => {
            let pg = EmbeddedPostgres::start(&args.data_dir.join("postgres"))?;
            db::ensure_embedded_database(&pg).await?;
            (pg.url(), Some(pg))
        }
    };
    let result = serve(&url, &args, embedded.is_some()).await;
    if let Some(pg) = embedded {
        pg.stop()?;
    }
    result
}

async fn serve(url: &str, args: &Args, embedded: bool) -> anyhow::Result<()> {
    let pool = db::connect(url, 16).await?;
    db::migrate(&pool).await?;
    let where_from = if embedded {
        "embedded PostgreSQL"
    } else {
        "DATABASE_URL"
    };
    println!("racklift is up: database from {where_from}, migrations applied, worker pool running.");
    println!("Press Ctrl-C to stop (in-flight jobs finish first).");
    let queue = Queue::new(pool.clone(), args.pool.queue_config());
    let shutdown = worker_cmd::shutdown_on_signal();
    WorkerPool::new(queue, racklift_workers::registry(), args.pool.worker_config())
        .run(shutdown)
        .await;
    pool.close().await;
    Ok(())
}

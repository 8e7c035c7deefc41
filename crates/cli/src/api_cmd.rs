//! `racklift api`: the API alone (operators, registration, installation media, `/metrics`) against DATABASE_URL,
//! as ops/systemd and ops/kubernetes run it, separately from the workers. SIGINT or SIGTERM stops it gracefully:
//! in-flight requests finish and the media ranges served so far are written.

use std::net::SocketAddr;

use anyhow::Context;
use racklift_api::{ApiConfig, AppState};
use racklift_queue::{Queue, QueueConfig};
use racklift_store::Store;

use crate::{db, worker_cmd};

#[derive(clap::Args)]
pub struct Args {
    /// Address of the API, the installation media and `/metrics`.
    #[arg(long, env = "RACKLIFT_API_LISTEN", default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// Deployment timing for simulated hardware at this time scale (as `racklift worker --sim-time-scale`); the
    /// API checks token validity and caps media ranges with it. Real hardware timing when absent.
    #[arg(long)]
    sim_time_scale: Option<f64>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let pool = db::connect(&db::require_database_url()?, 16).await?;
    db::migrate(&pool).await?;
    let deploy = match args.sim_time_scale {
        Some(scale) => racklift_deploy::Config::for_simulation(scale),
        None => racklift_deploy::Config::default(),
    };
    deploy.validate()?;
    let listener = bind(args.listen).await?;
    tracing::info!(listen = %listener.local_addr()?, "API listening");
    let state = AppState::new(
        Store::new(pool.clone()),
        // The API enqueues, revokes and wakes jobs; it never leases, so the queue's lease settings do not apply.
        Queue::new(pool.clone(), QueueConfig::default()),
        ApiConfig {
            deploy,
            ..ApiConfig::default()
        },
    );
    let shutdown = worker_cmd::shutdown_on_signal();
    racklift_api::serve(listener, state, shutdown).await?;
    pool.close().await;
    Ok(())
}

/// The API's listening socket; a taken port says which flag picks another.
pub async fn bind(listen: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding the API to {listen} (use --listen to pick another)"))
}

//! `racklift worker`: one worker pool, until a signal, then a graceful drain.

use std::time::Duration;

use racklift_queue::{Queue, QueueConfig, WorkerConfig, WorkerPool};
use tokio_util::sync::CancellationToken;

use crate::db;

#[derive(clap::Args, Clone)]
pub struct PoolArgs {
    /// Jobs run at once.
    #[arg(long, default_value_t = 100)]
    pub concurrency: usize,
    /// The most jobs one lease claims.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Lease time to live in milliseconds (heartbeats every third of it).
    #[arg(long, default_value_t = 30_000)]
    pub lease_ttl_ms: u64,
    /// How often to look for expired leases, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub rescue_interval_ms: u64,
    /// Fallback poll interval in milliseconds (notifications wake the pool sooner).
    #[arg(long, default_value_t = 1_000)]
    pub poll_interval_ms: u64,
    /// Keep completed jobs this many seconds (0 deletes them on completion).
    #[arg(long, default_value_t = 86_400)]
    pub completed_retention_s: u64,
}

impl PoolArgs {
    pub fn queue_config(&self) -> QueueConfig {
        QueueConfig {
            lease_ttl: Duration::from_millis(self.lease_ttl_ms),
            completed_retention: Duration::from_secs(self.completed_retention_s),
            ..QueueConfig::default()
        }
    }

    pub fn worker_config(&self) -> WorkerConfig {
        WorkerConfig {
            concurrency: self.concurrency,
            batch: self.batch,
            poll_interval: Duration::from_millis(self.poll_interval_ms),
            rescue_interval: Duration::from_millis(self.rescue_interval_ms),
            ..WorkerConfig::default()
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pool: PoolArgs,
    /// Deployment timing for simulated hardware at this time scale (as `racklift bmc-sim --time-scale`); real
    /// hardware timing when absent.
    #[arg(long)]
    sim_time_scale: Option<f64>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let pool = db::connect(&db::require_database_url()?, 16).await?;
    db::migrate(&pool).await?;
    let queue = Queue::new(pool.clone(), args.pool.queue_config());
    let config = match args.sim_time_scale {
        Some(scale) => racklift_deploy::Config::for_simulation(scale),
        None => racklift_deploy::Config::default(),
    };
    config.validate()?;
    let step = racklift_workers::DeployStep {
        store: racklift_store::Store::new(pool),
        config: std::sync::Arc::new(config),
        certificates: std::sync::Arc::new(Default::default()),
        clients: Default::default(),
    };
    let shutdown = shutdown_on_signal();
    WorkerPool::new(
        queue,
        racklift_workers::full_registry(step),
        args.pool.worker_config(),
    )
    .run(shutdown)
    .await;
    Ok(())
}

/// A token that fires on the first SIGINT or SIGTERM; a second signal exits at once.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let fire = token.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        for round in 0.. {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            if round == 0 {
                tracing::info!("shutting down: finishing in-flight jobs (signal again to exit at once)");
                fire.cancel();
            } else {
                tracing::warn!("second signal: exiting without draining");
                std::process::exit(130);
            }
        }
    });
    token
}

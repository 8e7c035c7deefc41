//! `racklift worker`: one worker pool, until a signal, then a graceful drain, with `/metrics` served alongside.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use racklift_queue::{Queue, QueueConfig, WorkerConfig, WorkerPool};
use racklift_store::Store;
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
    /// Where to serve Prometheus metrics (`GET /metrics`, also the probes' endpoint). Port 0 picks a free port.
    /// Every worker on a host needs its own.
    #[arg(long, env = "RACKLIFT_METRICS_LISTEN", default_value = "127.0.0.1:9187")]
    metrics_listen: SocketAddr,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    // Bound first: a worker whose metrics port is taken fails at once, before leasing anything, rather than
    // running unseen by Prometheus and the probes.
    let metrics_listener = tokio::net::TcpListener::bind(args.metrics_listen)
        .await
        .with_context(|| {
            format!(
                "binding the metrics server to {} (set --metrics-listen or RACKLIFT_METRICS_LISTEN)",
                args.metrics_listen
            )
        })?;
    let pool = db::connect(&db::require_database_url()?, 16).await?;
    db::migrate(&pool).await?;
    let queue = Queue::new(pool.clone(), args.pool.queue_config());
    let config = match args.sim_time_scale {
        Some(scale) => racklift_deploy::Config::for_simulation(scale),
        None => racklift_deploy::Config::default(),
    };
    config.validate()?;
    let store = Store::new(pool);
    let step = racklift_workers::DeployStep {
        store: store.clone(),
        config: std::sync::Arc::new(config),
        certificates: std::sync::Arc::new(Default::default()),
        clients: Default::default(),
    };
    let registry = racklift_workers::full_registry(step);
    let kinds = registry.kinds();
    // Built before the metrics server starts, so the first scrape already shows the pool's counters at zero.
    let workers = WorkerPool::new(queue.clone(), registry, args.pool.worker_config());
    let metrics_stop = CancellationToken::new();
    let metrics = serve_metrics(metrics_listener, store, queue, kinds, &metrics_stop)?;
    workers.run(shutdown_on_signal()).await;
    // Metrics stop only once the pool has drained: the probes keep passing through a long drain.
    metrics_stop.cancel();
    metrics.await??;
    Ok(())
}

/// Serves `/metrics` on `listener` until `stop`: the process's counters, plus the queue and deployment gauges
/// sampled from the database at each scrape (zeros for this pool's `kinds`).
fn serve_metrics(
    listener: tokio::net::TcpListener,
    store: Store,
    queue: Queue,
    kinds: Vec<String>,
    stop: &CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    tracing::info!(listen = %listener.local_addr()?, "serving metrics at /metrics");
    let kinds = std::sync::Arc::new(kinds);
    let sample = move || {
        let (store, queue, kinds) = (store.clone(), queue.clone(), kinds.clone());
        async move {
            let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
            if let Err(error) = store.sample_gauges(&queue, &kinds).await {
                let message = format!("{:#}", anyhow::Error::from(error));
                tracing::warn!(error = %message, "sampling the database for /metrics failed; serving the last values");
            }
        }
    };
    let stop = stop.clone();
    Ok(tokio::spawn(racklift_metrics::serve(
        listener,
        sample,
        async move { stop.cancelled().await },
    )))
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

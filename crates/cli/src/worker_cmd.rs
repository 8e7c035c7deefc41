//! `racklift worker`: one worker pool, until a signal, then a graceful drain, with `/metrics` served alongside.

use std::net::SocketAddr;

use anyhow::Context;
use racklift_config::Sources;
use racklift_queue::{Queue, WorkerPool};
use racklift_store::Store;
use tokio_util::sync::CancellationToken;

use crate::{db, settings};

/// A worker pool's flags; each, when given, wins over racklift.toml and the environment.
#[derive(clap::Args, Clone)]
pub struct PoolArgs {
    /// Jobs run at once [worker.concurrency].
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// The most jobs one lease claims [worker.batch].
    #[arg(long)]
    pub batch: Option<usize>,
    /// Lease time to live in milliseconds; heartbeats every third of it [queue.lease_ttl_ms].
    #[arg(long)]
    pub lease_ttl_ms: Option<u64>,
    /// How often to look for expired leases, in milliseconds [worker.rescue_interval_ms].
    #[arg(long)]
    pub rescue_interval_ms: Option<u64>,
    /// Fallback poll interval in milliseconds; notifications wake the pool sooner [worker.poll_interval_ms].
    #[arg(long)]
    pub poll_interval_ms: Option<u64>,
    /// Keep completed jobs this many seconds; 0 deletes them on completion [queue.completed_retention_secs].
    #[arg(long, alias = "completed-retention-s")]
    pub completed_retention_secs: Option<u64>,
}

impl PoolArgs {
    /// Adds the flags that were given to the configuration's sources.
    pub fn apply(&self, sources: &mut Sources) {
        sources
            .flag("worker.concurrency", self.concurrency)
            .flag("worker.batch", self.batch)
            .flag("queue.lease_ttl_ms", self.lease_ttl_ms)
            .flag("worker.rescue_interval_ms", self.rescue_interval_ms)
            .flag("worker.poll_interval_ms", self.poll_interval_ms)
            .flag("queue.completed_retention_secs", self.completed_retention_secs);
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pool: PoolArgs,
    /// Deployment timing for simulated hardware at this time scale (as `racklift bmc-sim --time-scale`); real
    /// hardware timing when absent [simulation.time_scale].
    #[arg(long)]
    sim_time_scale: Option<f64>,
    /// Where to serve Prometheus metrics (`GET /metrics`, also the probes' endpoint). Port 0 picks a free port.
    /// Every worker on a host needs its own [worker.metrics_listen; RACKLIFT_METRICS_LISTEN].
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let settings = settings::load(None, |s| {
        args.pool.apply(s);
        s.flag("simulation.time_scale", args.sim_time_scale).flag(
            "worker.metrics_listen",
            args.metrics_listen.map(|a| a.to_string()),
        );
    })?;
    let access = settings::access_policy(&settings)?;
    let metrics_listen = settings.worker.metrics_listen;
    // Bound first: a worker whose metrics port is taken fails at once, before leasing anything, rather than
    // running unseen by Prometheus and the probes.
    let metrics_listener = racklift_listener::bind(metrics_listen)
        .with_context(|| {
            format!(
                "binding the metrics server to {metrics_listen} (set --metrics-listen, RACKLIFT_METRICS_LISTEN or \
                 worker.metrics_listen)"
            )
        })?;
    let pool = db::connect_configured(&settings).await?;
    db::migrate(&pool).await?;
    let queue = Queue::new(pool.clone(), settings::queue_config(&settings));
    let store = Store::new(pool);
    let step = racklift_workers::DeployStep {
        store: store.clone(),
        config: std::sync::Arc::new(settings.deploy.clone()),
        certificates: std::sync::Arc::new(racklift_deploy::certificates::CertificateSet::incusos()),
        clients: racklift_bmc_access::ClientCache::new(access),
    };
    let registry = racklift_workers::full_registry(step);
    let kinds = registry.kinds();
    // Built before the metrics server starts, so the first scrape already shows the pool's counters at zero.
    let workers = WorkerPool::new(queue.clone(), registry, settings::worker_config(&settings));
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

/// A token that fires on the first SIGINT, SIGTERM or SIGHUP (the terminal closed); a second signal exits at once.
pub fn shutdown_on_signal() -> CancellationToken {
    shutdown_on_signal_then(|| {})
}

/// As [`shutdown_on_signal`]; `before_exit` runs before a second signal ends the process, for what must not
/// outlive it (`racklift up`'s embedded PostgreSQL).
pub fn shutdown_on_signal_then(before_exit: impl Fn() + Send + 'static) -> CancellationToken {
    use tokio::signal::unix::{SignalKind, signal};
    let token = CancellationToken::new();
    let fire = token.clone();
    tokio::spawn(async move {
        let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
        let mut hangup = signal(SignalKind::hangup()).expect("installing a SIGHUP handler");
        for round in 0.. {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
                _ = hangup.recv() => {}
            }
            if round == 0 {
                // Cancelled before anything is written: the terminal may be gone.
                fire.cancel();
                tracing::info!("shutting down: finishing in-flight jobs (signal again to exit at once)");
            } else {
                tracing::warn!("second signal: exiting without draining");
                before_exit();
                std::process::exit(130);
            }
        }
    });
    token
}

//! `racklift api`: the API alone (operators, registration, installation media, `/metrics`) against the configured
//! database, as ops/systemd and ops/kubernetes run it, separately from the workers. SIGINT or SIGTERM stops it
//! gracefully: in-flight requests finish and the media ranges served so far are written.

use std::net::SocketAddr;

use anyhow::Context;
use racklift_api::AppState;
use racklift_queue::Queue;
use racklift_store::Store;

use crate::{db, settings, worker_cmd};

#[derive(clap::Args)]
pub struct Args {
    /// Address of the API, the installation media and `/metrics` [api.listen; RACKLIFT_API_LISTEN].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Deployment timing for simulated hardware at this time scale (as `racklift worker --sim-time-scale`); the
    /// API checks token validity and caps media ranges with it. Real hardware timing when absent
    /// [simulation.time_scale].
    #[arg(long)]
    sim_time_scale: Option<f64>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let settings = settings::load(None, |s| {
        s.flag("api.listen", args.listen.map(|a| a.to_string()))
            .flag("simulation.time_scale", args.sim_time_scale);
    })?;
    let access = settings::access_policy(&settings)?;
    let transport = settings::api_transport(&settings)?.ok_or_else(|| {
        anyhow::anyhow!(
            "api.tls_certificate: not set. IncusOS reaches the API over TLS only: set api.tls_certificate and \
             api.tls_key, or api.plain_http = true behind a TLS-terminating proxy"
        )
    })?;
    let pool = db::connect_configured(&settings).await?;
    db::migrate(&pool).await?;
    let listener = bind(settings.api.listen).await?;
    let media = match settings.api.media_listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    tracing::info!(listen = %listener.local_addr()?, scheme = transport.scheme(),
        media_listen = ?settings.api.media_listen, "API listening");
    let mut config = settings::api_config(&settings, access);
    transport.apply(&mut config);
    let state = AppState::new(
        Store::new(pool.clone()),
        // The API enqueues, revokes and wakes jobs; it never leases, so the lease settings do not matter here, but
        // the idempotency retention does: it is applied where the request's key is claimed.
        Queue::new(pool.clone(), settings::queue_config(&settings)),
        config,
    );
    let shutdown = worker_cmd::shutdown_on_signal();
    racklift_api::serve_all(listener, media, state, shutdown).await?;
    pool.close().await;
    Ok(())
}

/// The API's listening socket; a taken port says which setting picks another.
pub async fn bind(listen: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    racklift_listener::bind(listen)
        .with_context(|| format!("binding the API to {listen} (use --listen or api.listen to pick another)"))
}

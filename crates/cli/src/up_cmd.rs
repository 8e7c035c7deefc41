//! `racklift up`: the whole system on one machine — embedded PostgreSQL, the API with its media server, a worker
//! pool and a simulated rack whose BMCs are registered as servers — until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use racklift_api::demo::{self, RackServer};
use racklift_api::{ApiConfig, AppState};
use racklift_bmc_sim::{PersonalityChoice, Sim, SimConfig};
use racklift_pgembed::EmbeddedPostgres;
use racklift_queue::{Queue, WorkerPool};
use racklift_store::Store;
use racklift_workers::DeployStep;
use tokio_util::sync::CancellationToken;

use crate::{db, worker_cmd};

#[derive(clap::Args)]
pub struct Args {
    /// Where the embedded database, the generated image and the simulator's secrets live.
    #[arg(long, default_value = ".racklift")]
    data_dir: PathBuf,
    /// Address of the API (and the installation media it serves).
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// Simulated servers in the rack (mixed vendor personalities).
    #[arg(long, default_value_t = 8)]
    servers: usize,
    /// Simulated hardware time scale: 0.01 makes a 25-minute install take 15 s.
    #[arg(long, default_value_t = 0.01)]
    time_scale: f64,
    /// Deploy the whole rack at once and show one progress bar per server until each is deployed or failed.
    #[arg(long)]
    demo: bool,
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
    let pool = db::connect(url, 32).await?;
    db::migrate(&pool).await?;
    let store = Store::new(pool.clone());
    let queue = Queue::new(pool.clone(), args.pool.queue_config());
    let deploy_config = racklift_deploy::Config::for_simulation(args.time_scale);

    let sim_config = SimConfig::for_deployments(args.servers, PersonalityChoice::Mix, args.time_scale);
    let sim = Sim::start(sim_config)
        .await
        .context("starting the simulated rack")?;
    let secrets = args.data_dir.join("sim");
    std::fs::create_dir_all(&secrets)?;
    let password_file = secrets.join("bmc-password");
    write_private(&password_file, sim.credentials().1)?;
    let image_size = 16 * 1024 * 1024;
    let (image_path, sha256) = demo::generate_image(&secrets, image_size)?;
    let listener = crate::api_cmd::bind(args.listen).await?;
    let api_url = format!("http://{}", listener.local_addr()?);
    let rack: Vec<RackServer> = (0..sim.len())
        .map(|i| RackServer {
            name: sim.name(i).to_owned(),
            bmc_url: sim.bmc_url(i),
            vendor: sim.personality(i).as_str().to_owned(),
        })
        .collect();
    let password_ref = format!("file:{}", std::fs::canonicalize(&password_file)?.display());
    let catalog = demo::seed_catalog(
        &store,
        &rack,
        sim.credentials().0,
        &password_ref,
        &api_url,
        (&image_path, image_size, &sha256),
    )
    .await?;

    let shutdown = worker_cmd::shutdown_on_signal();
    let state = AppState::new(
        store.clone(),
        queue.clone(),
        ApiConfig {
            deploy: deploy_config.clone(),
            ..ApiConfig::default()
        },
    );
    let api = tokio::spawn(racklift_api::serve(listener, state, shutdown.clone()));
    let step = DeployStep {
        store: store.clone(),
        config: Arc::new(deploy_config),
        certificates: Arc::new(Default::default()),
        clients: Default::default(),
    };
    let workers = tokio::spawn(
        WorkerPool::new(
            queue.clone(),
            racklift_workers::full_registry(step),
            args.pool.worker_config(),
        )
        .run(shutdown.clone()),
    );

    let where_from = if embedded {
        "embedded PostgreSQL"
    } else {
        "DATABASE_URL"
    };
    println!("racklift is up (database: {where_from}).");
    println!("  API:            {api_url}/1.0  (OpenAPI: {api_url}/1.0/openapi.json)");
    println!("  simulated rack: {} servers at {}", sim.len(), sim.base_url());
    println!("  admin token:    export RACKLIFT_TOKEN={}", catalog.admin_token);
    println!("Try:");
    println!("  curl -s -H \"Authorization: Bearer $RACKLIFT_TOKEN\" {api_url}/1.0/servers");
    println!(
        "  curl -s -X POST -H \"Authorization: Bearer $RACKLIFT_TOKEN\" -d '{{\"token\":\"{}\",\"seed\":\"{}\"}}' \\\n       {api_url}/1.0/provisioning/servers/{}:deploy",
        catalog.token,
        catalog.seed,
        sim.name(0)
    );
    println!(
        "  curl -s -H \"Authorization: Bearer $RACKLIFT_TOKEN\" {api_url}/1.0/servers/{}",
        sim.name(0)
    );
    println!("Press Ctrl-C to stop (in-flight jobs finish first).");

    if args.demo {
        demo_deploy(&api_url, &catalog, &rack, &store, &shutdown).await?;
    }
    shutdown.cancelled().await;
    let _ = workers.await;
    api.await??;
    sim.shutdown().await;
    pool.close().await;
    Ok(())
}

/// Deploys every server through the API and draws one bar per server until each has finished.
async fn demo_deploy(
    api_url: &str,
    catalog: &demo::DemoCatalog,
    rack: &[RackServer],
    store: &Store,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let http = reqwest_client()?;
    let names: Vec<String> = rack.iter().map(|s| s.name.clone()).collect();
    for server in rack {
        let name = &server.name;
        let response = http
            .post(format!("{api_url}/1.0/provisioning/servers/{name}:deploy"))
            .bearer_auth(&catalog.admin_token)
            .json(&demo::deploy_request(catalog, &server.vendor))
            .send()
            .await?;
        if !response.status().is_success() {
            anyhow::bail!("deploying {name} was refused: {}", response.text().await?);
        }
    }
    let bars = MultiProgress::new();
    let style = ProgressStyle::with_template("{prefix:>10} {spinner} [{elapsed_precise}] {wide_msg}")?;
    let tracked: Vec<(String, ProgressBar)> = names
        .iter()
        .map(|n| {
            let bar = bars.add(ProgressBar::new_spinner().with_style(style.clone()));
            bar.set_prefix(n.clone());
            bar.enable_steady_tick(Duration::from_millis(200));
            (n.clone(), bar)
        })
        .collect();
    let mut open = tracked.len();
    while open > 0 && !shutdown.is_cancelled() {
        open = 0;
        for (name, bar) in &tracked {
            if bar.is_finished() {
                continue;
            }
            match store.latest_deployment(name).await? {
                Some(d) if d.is_finished() => {
                    let m = &d.deployment.machine;
                    let how = match &m.failure {
                        Some(f) => format!("{} in {} ({:?})", m.state.name(), f.state.name(), f.cause),
                        None => m.state.name().to_owned(),
                    };
                    bar.finish_with_message(how);
                }
                Some(d) => {
                    open += 1;
                    bar.set_message(d.deployment.machine.state.name().to_owned());
                }
                None => open += 1,
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
    }
    Ok(())
}

fn reqwest_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?)
}

/// Writes a secret readable by this user only.
fn write_private(path: &std::path::Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(contents.as_bytes())
}

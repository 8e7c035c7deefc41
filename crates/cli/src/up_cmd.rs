//! `racklift up`: the whole system on one machine — embedded PostgreSQL, the API with its media server, a worker
//! pool and a simulated rack whose BMCs are registered as servers — until Ctrl-C.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use racklift_api::AppState;
use racklift_api::demo::{self, RackServer};
use racklift_bmc_access::AccessPolicy;
use racklift_bmc_sim::{PersonalityChoice, Sim, SimConfig};
use racklift_config::Settings;
use racklift_pgembed::EmbeddedPostgres;
use racklift_queue::{Queue, WorkerPool};
use racklift_store::Store;
use racklift_workers::DeployStep;
use tokio_util::sync::CancellationToken;

use crate::{db, settings, up_demo, worker_cmd};

#[derive(clap::Args)]
pub struct Args {
    /// Where the embedded database, the generated image (`images/`, unless paths.images_dir is set), the
    /// simulator's secret (`secrets/`, unless paths.secrets_dir is set) and the demo's log live [paths.data_dir;
    /// default .racklift]. As root, the database moves under /var/lib/racklift when the `postgres` user cannot
    /// reach this directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address of the API (and the installation media it serves) [api.listen].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Simulated servers in the rack (mixed vendor personalities).
    #[arg(long, default_value_t = 8)]
    servers: usize,
    /// Simulated hardware time scale: 0.01 makes a 25-minute install take 15 s [simulation.time_scale; default
    /// 0.01].
    #[arg(long)]
    time_scale: Option<f64>,
    /// Deploy the whole rack at once and show one line per server until each is deployed or failed; on a
    /// terminal the logs go to a file (named at start) so they do not cross the table.
    #[arg(long)]
    demo: bool,
    #[command(flatten)]
    pool: worker_cmd::PoolArgs,
}

/// The simulated rack's time scale when nothing else sets one.
const DEFAULT_TIME_SCALE: f64 = 0.01;

fn settings(args: &Args) -> anyhow::Result<Settings> {
    settings::load(Some(DEFAULT_TIME_SCALE), |s| {
        // Secrets and images under the data directory: whoever tries racklift has no /etc/racklift.
        s.paths_in_data_dir = true;
        args.pool.apply(s);
        s.flag(
            "paths.data_dir",
            args.data_dir.as_ref().map(|d| d.display().to_string()),
        )
        .flag("api.listen", args.listen.map(|a| a.to_string()))
        .flag("simulation.time_scale", args.time_scale);
    })
}

/// Where the logs go instead of the terminal: with `--demo` on a terminal the live table owns the screen.
pub fn log_file(args: &Args) -> anyhow::Result<Option<PathBuf>> {
    if !(args.demo && std::io::stdout().is_terminal()) {
        return Ok(None);
    }
    let dir = settings(args)?.paths.data_dir;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(Some(std::path::absolute(dir.join("racklift.log"))?))
}

pub async fn run(args: Args, log_file: Option<PathBuf>) -> anyhow::Result<()> {
    let settings = settings(&args)?;
    // Made before the policy reads them, so a first run does not warn about a directory it is about to create.
    create_private_dir(&settings.paths.secrets_dir)?;
    std::fs::create_dir_all(&settings.paths.images_dir)
        .with_context(|| format!("creating {}", settings.paths.images_dir.display()))?;
    let access = settings::access_policy(&settings)?;
    // Installed before the embedded server starts, so no signal can leave it running: a second signal exits
    // without draining, after stopping the server whose directory is known by then.
    let started: Arc<Mutex<Option<PathBuf>>> = Arc::default();
    let shutdown = worker_cmd::shutdown_on_signal_then({
        let started = started.clone();
        move || {
            if let Some(root) = started.lock().unwrap_or_else(|e| e.into_inner()).as_deref() {
                let _ = EmbeddedPostgres::stop_dir(root);
            }
        }
    });
    let embedded = match &settings.database.url {
        Some(_) => None,
        None => {
            let pg = EmbeddedPostgres::start(&settings.paths.data_dir.join("postgres"))?;
            *started.lock().unwrap_or_else(|e| e.into_inner()) = Some(pg.root().to_owned());
            if let Err(e) = db::ensure_embedded_database(&pg).await {
                let _ = pg.stop();
                return Err(e);
            }
            Some(pg)
        }
    };
    let url = match &embedded {
        Some(pg) => pg.url(),
        None => settings::database_url(&settings)?,
    };
    let up = Up {
        args: &args,
        settings: &settings,
        access,
        embedded: embedded.as_ref(),
        log_file: log_file.as_deref(),
        shutdown,
    };
    let result = serve(up, &url).await;
    if let Some(pg) = embedded {
        pg.stop()?;
    }
    result
}

/// What `serve` needs besides the database URL.
struct Up<'a> {
    args: &'a Args,
    settings: &'a Settings,
    access: AccessPolicy,
    embedded: Option<&'a EmbeddedPostgres>,
    log_file: Option<&'a Path>,
    shutdown: CancellationToken,
}

async fn serve(up: Up<'_>, url: &str) -> anyhow::Result<()> {
    let Up {
        args,
        settings,
        access,
        embedded,
        log_file,
        shutdown,
    } = up;
    let time_scale = settings.simulation.time_scale.unwrap_or(DEFAULT_TIME_SCALE);
    // The API and the worker pool share this one pool: room for both roles' connections.
    let pool = db::connect_sized(settings, url, settings.database.max_connections.saturating_mul(2)).await?;
    db::migrate(&pool).await?;
    let store = Store::new(pool.clone());
    let queue = Queue::new(pool.clone(), settings::queue_config(settings));
    let deploy_config = settings.deploy.clone();

    // The rack serves https with a self-signed certificate, pinned per server, as a careful operator would set
    // up a real BMC: no password crosses even the loopback in the clear.
    let sim_config =
        SimConfig::for_deployments(args.servers, PersonalityChoice::Mix, time_scale).with_tls(true);
    let sim = Sim::start(sim_config)
        .await
        .context("starting the simulated rack")?;
    // The simulated BMCs' password and the generated image go where the configuration confines references and
    // images: under the data directory unless racklift.toml names other directories.
    write_private(
        &settings.paths.secrets_dir.join(SIM_PASSWORD_FILE),
        sim.credentials().1,
    )?;
    let image_size = 16 * 1024 * 1024;
    let (image_path, sha256) = demo::generate_image(&settings.paths.images_dir, image_size)?;
    // Registered resolved: the media server finds it whatever its working directory.
    let image_path = std::fs::canonicalize(&image_path)?;
    let listener = crate::api_cmd::bind(settings.api.listen).await?;
    let listen = listener.local_addr()?;
    // HTTPS as `racklift api` serves it: the configured certificate, else one generated for this address and
    // kept in the data directory, so the CLI and curl can trust it across restarts.
    let (transport, ca_file) = match settings::api_transport(settings)? {
        Some(transport) => (transport, settings.api.tls_certificate.clone()),
        None => {
            let (transport, cert) = generated_tls(&settings.paths.data_dir, listen)?;
            (transport, Some(cert))
        }
    };
    let api_url = format!("{}://{listen}", transport.scheme());
    let pin = sim
        .cert_der()
        .map(|der| racklift_redfish::Pin::cert_of(der).to_string());
    let rack: Vec<RackServer> = (0..sim.len())
        .map(|i| RackServer {
            name: sim.name(i).to_owned(),
            bmc_url: sim.bmc_url(i),
            vendor: sim.personality(i).as_str().to_owned(),
            bmc_cert_pin: pin.clone(),
        })
        .collect();
    let password_ref = format!("file:{SIM_PASSWORD_FILE}");
    let catalog = demo::seed_catalog(
        &store,
        &rack,
        sim.credentials().0,
        &password_ref,
        &api_url,
        (&image_path, image_size, &sha256),
    )
    .await?;

    let mut api_config = settings::api_config(settings, access.clone());
    transport.apply(&mut api_config);
    // Every simulated server reaches the API from this host's own address: one peer, which may hold the whole cap.
    api_config.listener.max_connections_per_peer = api_config.listener.max_connections;
    let state = AppState::new(store.clone(), queue.clone(), api_config);
    let api = tokio::spawn(racklift_api::serve(listener, state, shutdown.clone()));
    let step = DeployStep {
        store: store.clone(),
        config: Arc::new(deploy_config),
        certificates: Arc::new(racklift_deploy::certificates::CertificateSet::incusos()),
        clients: racklift_bmc_access::ClientCache::new(access),
    };
    let workers = tokio::spawn(
        WorkerPool::new(
            queue.clone(),
            racklift_workers::full_registry(step),
            settings::worker_config(settings),
        )
        .run(shutdown.clone()),
    );

    match embedded {
        Some(pg) => {
            println!(
                "racklift is up (database: embedded PostgreSQL in {}).",
                pg.root().display()
            );
            if let Some(from) = pg.relocated_from() {
                println!(
                    "  (the postgres user cannot reach {}, so the database lives in the directory above)",
                    from.display()
                );
            }
        }
        None => println!(
            "racklift is up (database: {}).",
            settings
                .database
                .url
                .as_ref()
                .map(|u| u.source())
                .unwrap_or("DATABASE_URL")
        ),
    }
    println!("  API:            {api_url}/1.0  (OpenAPI: {api_url}/1.0/openapi.json)");
    println!("  simulated rack: {} servers at {}", sim.len(), sim.base_url());
    println!("  admin token:    export RACKLIFT_TOKEN={}", catalog.admin_token);
    if let Some(log) = log_file {
        println!("  logs:           {}", log.display());
    }
    println!(
        "Try, in another terminal with the racklift binary on PATH (target/release after cargo run --release):"
    );
    println!("  export RACKLIFT_TOKEN=...   # the admin token above");
    println!("  export RACKLIFT_API={api_url}");
    if let Some(ca) = &ca_file {
        println!(
            "  export RACKLIFT_CA_CERT={}   # the API's certificate",
            ca.display()
        );
    }
    println!("  racklift server list");
    // The pre-flight refuses an HPE-like or Lenovo-like server without the flag, so the hint carries it there.
    let first_skips = racklift_api::demo::skips_secure_boot_certificates(sim.personality(0).as_str());
    println!(
        "  racklift server deploy {} --token {} --seed {}{} --wait",
        sim.name(0),
        catalog.token,
        catalog.seed,
        if first_skips {
            " --skip-secure-boot-certificates"
        } else {
            ""
        }
    );
    println!(
        "  racklift server deploy --all --filter vendor=hpe --filter vendor=lenovo --skip-secure-boot-certificates \\\n      --token {} --seed {} --yes   # BMCs whose key databases Redfish cannot write",
        catalog.token, catalog.seed
    );
    println!("  racklift events {} --follow", sim.name(0));
    let cacert = ca_file
        .as_ref()
        .map(|ca| format!("--cacert {} ", ca.display()))
        .unwrap_or_default();
    println!("  curl -s {cacert}-H \"Authorization: Bearer $RACKLIFT_TOKEN\" {api_url}/1.0/servers");
    println!("Press Ctrl-C to stop (in-flight jobs finish first).");

    if args.demo {
        up_demo::deploy_rack(&api_url, ca_file.as_deref(), &catalog, &rack, &store, &shutdown).await?;
    }
    shutdown.cancelled().await;
    let _ = workers.await;
    api.await??;
    sim.shutdown().await;
    pool.close().await;
    Ok(())
}

/// The API's certificate and key under `<data>/tls/`, generated on first use for `localhost`, the listen address
/// and this host's name (when it has one); the key readable by this user only. Returns the transport and the
/// certificate's path.
fn generated_tls(
    data_dir: &Path,
    listen: std::net::SocketAddr,
) -> anyhow::Result<(settings::ApiTransport, std::path::PathBuf)> {
    let dir = data_dir.join("tls");
    let (cert, key) = (dir.join("api.crt"), dir.join("api.key"));
    if !(cert.is_file() && key.is_file()) {
        create_private_dir(&dir)?;
        let mut names = vec!["localhost".to_owned(), listen.ip().to_string()];
        if listen.ip().is_unspecified() {
            names.push("127.0.0.1".to_owned());
        }
        let generated = racklift_listener::tls::self_signed(&names, "racklift API")?;
        write_private(&key, &generated.key_pem).with_context(|| format!("writing {}", key.display()))?;
        std::fs::write(&cert, &generated.certificate_pem)
            .with_context(|| format!("writing {}", cert.display()))?;
    }
    let cert_pem = std::fs::read_to_string(&cert).with_context(|| format!("reading {}", cert.display()))?;
    let key_pem = std::fs::read_to_string(&key).with_context(|| format!("reading {}", key.display()))?;
    let transport = settings::ApiTransport::tls(&cert_pem, &key_pem)
        .with_context(|| format!("the generated certificate {}", cert.display()))?;
    Ok((transport, cert))
}

/// The simulated rack's password, a name in the secrets directory.
const SIM_PASSWORD_FILE: &str = "bmc-password";

/// Creates `dir` (and its parents) when missing, itself readable by this user only; an existing one is left as
/// it is, since racklift.toml may name a directory another tool provisions.
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
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

//! A whole racklift in one test process: a fresh database, the simulated rack, the API on a local port with its
//! media server, and a worker pool running the deployment steps. Everything talks over real sockets.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use racklift_api::demo::{self, DemoCatalog, RackServer};
use racklift_api::{ApiConfig, AppState};
use racklift_bmc_access::secrets::DEFAULT_ENV_PREFIX;
use racklift_bmc_access::{AccessPolicy, ClientCache};
use racklift_bmc_sim::{Faults, Personality, PersonalityChoice, Sim, SimConfig, SimHandle};
use racklift_deploy::{Config, Transition};
use racklift_queue::{Queue, QueueConfig, WorkerConfig, WorkerPool};
use racklift_store::{DeploymentRecord, Store};
use racklift_testdb::TestDb;
use racklift_workers::DeployStep;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The API's self-signed certificate, one per test process, and the file holding its PEM: clients trust it
/// (`Rack::http`, the CLI through `RACKLIFT_CA_CERT`), and every deployment's seed hands it to IncusOS.
struct ApiCertificate {
    pem: racklift_listener::tls::CertifiedKeyPem,
    file: PathBuf,
}

fn api_certificate() -> &'static ApiCertificate {
    static CERT: OnceLock<ApiCertificate> = OnceLock::new();
    CERT.get_or_init(|| {
        // One file for every test process, made by the first: a new temporary file per process would pile up.
        let file = std::env::temp_dir().join("racklift-tests-api-certificate.pem");
        if !file.exists() {
            let made = racklift_listener::tls::self_signed(
                &["localhost".to_owned(), "127.0.0.1".to_owned()],
                "racklift API",
            )
            .expect("the API's certificate");
            let tmp = file.with_extension(format!("{}.tmp", std::process::id()));
            std::fs::write(&tmp, format!("{}{}", made.certificate_pem, made.key_pem))
                .expect("write the certificate");
            // Linking fails when another process got there first; its file is then the one used.
            let _ = std::fs::hard_link(&tmp, &file);
            let _ = std::fs::remove_file(&tmp);
        }
        let text = std::fs::read_to_string(&file).expect("read the API's certificate");
        let split = text
            .find("-----BEGIN PRIVATE KEY-----")
            .expect("a key after the certificate");
        let pem = racklift_listener::tls::CertifiedKeyPem {
            certificate_pem: text[..split].to_owned(),
            key_pem: text[split..].to_owned(),
        };
        ApiCertificate { pem, file }
    })
}

/// The file holding the PEM of the certificate every rack's API serves (what `--ca-cert` names).
pub fn api_ca_file() -> &'static Path {
    &api_certificate().file
}

/// An HTTP client that trusts the racks' API certificate.
pub fn api_client() -> reqwest::Client {
    let cert = reqwest::Certificate::from_pem(api_certificate().pem.certificate_pem.as_bytes()).expect("PEM");
    reqwest::Client::builder()
        .add_root_certificate(cert)
        .build()
        .expect("an HTTP client")
}

pub struct Rack {
    pub db: TestDb,
    pub sim: SimHandle,
    pub store: Store,
    pub queue: Queue,
    pub api_url: String,
    /// Where BMCs fetch the media: the API's plain-HTTP media listener.
    pub media_url: String,
    pub catalog: DemoCatalog,
    pub http: reqwest::Client,
    shutdown: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
    api: Option<ApiTask>,
    api_config: ApiConfig,
    dir: PathBuf,
}

impl Rack {
    /// `servers` simulated servers of `personality`, the simulator at `time_scale`, one worker pool.
    pub async fn start(servers: usize, personality: PersonalityChoice, time_scale: f64) -> Rack {
        Rack::start_with(servers, personality, time_scale, true).await
    }

    /// As [`Rack::start`]; without `workers` no worker pool runs in this process (the test runs `racklift worker`
    /// children instead).
    pub async fn start_with(
        servers: usize,
        personality: PersonalityChoice,
        time_scale: f64,
        workers: bool,
    ) -> Rack {
        Rack::launch(
            SimConfig::for_deployments(servers, personality, time_scale),
            workers,
            Config::for_simulation(time_scale),
        )
        .await
    }

    /// As [`Rack::start`], with the API and the worker pool running `config` instead of
    /// [`Config::for_simulation`]`(time_scale)`: for a test that needs, say, a shorter step timeout than the
    /// simulation floor.
    pub async fn start_with_config(
        servers: usize,
        personality: PersonalityChoice,
        time_scale: f64,
        config: Config,
    ) -> Rack {
        Rack::launch(
            SimConfig::for_deployments(servers, personality, time_scale),
            true,
            config,
        )
        .await
    }

    /// A racklift with no simulated server, running `config`: the caller registers its own BMCs through the API
    /// (a third-party emulator's), with the rack's `file:bmc-password` or a password file of its own in
    /// [`Rack::secrets_dir`]. The helpers that look a server up in the simulator do not apply to them.
    pub async fn start_empty(config: Config) -> Rack {
        let sim = SimConfig::for_deployments(0, PersonalityChoice::Single(Personality::Generic), 1.0);
        Rack::launch(sim, true, config).await
    }

    /// As [`Rack::start_with_config`], with the simulator's own settings (its machines' timings, say).
    pub async fn start_with_sim(sim_config: SimConfig, config: Config) -> Rack {
        Rack::launch(sim_config, true, config).await
    }

    /// As [`Rack::start_with`], on `db` (a database on a server the test controls, to restart it) and with no
    /// worker pool in this process.
    pub async fn start_on(
        db: TestDb,
        servers: usize,
        personality: PersonalityChoice,
        time_scale: f64,
    ) -> Rack {
        Rack::launch_on(
            db,
            SimConfig::for_deployments(servers, personality, time_scale),
            false,
            Config::for_simulation(time_scale),
        )
        .await
    }

    async fn launch(sim_config: SimConfig, workers: bool, config: Config) -> Rack {
        Rack::launch_on(TestDb::new().await, sim_config, workers, config).await
    }

    async fn launch_on(db: TestDb, sim_config: SimConfig, workers: bool, config: Config) -> Rack {
        let servers = sim_config.servers;
        let sim = Sim::start(sim_config).await.expect("start the simulator");
        let dir = std::env::temp_dir().join(format!("racklift-rack-{}", uuid::Uuid::new_v4()));
        // The rack's own secrets and images directories: the API and the workers are confined to them.
        let (secrets, images) = (dir.join("secrets"), dir.join("images"));
        std::fs::create_dir_all(&secrets).expect("rack secrets dir");
        std::fs::write(secrets.join("bmc-password"), sim.credentials().1)
            .expect("write the BMC password file");
        let (image_path, sha256) =
            demo::generate_image(&images, 4 * 1024 * 1024).expect("generate the image");
        let access =
            AccessPolicy::load(None, &secrets, DEFAULT_ENV_PREFIX).expect("the rack's access policy");

        // The API over HTTPS, as IncusOS requires; the media also on a plain listener, as BMCs fetch it.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the API");
        let api_url = format!("https://{}", listener.local_addr().expect("API address"));
        let media = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the media listener");
        let media_url = format!("http://{}", media.local_addr().expect("media address"));
        let store = Store::new(db.pool.clone());
        let queue = Queue::new(
            db.pool.clone(),
            QueueConfig {
                lease_ttl: Duration::from_secs(10),
                ..QueueConfig::default()
            },
        );
        let rack: Vec<RackServer> = (0..servers)
            .map(|i| RackServer {
                name: sim.name(i).to_owned(),
                bmc_url: sim.bmc_url(i),
                vendor: sim.personality(i).as_str().to_owned(),
                bmc_cert_pin: None,
            })
            .collect();
        let catalog = demo::seed_catalog(
            &store,
            &rack,
            sim.credentials().0,
            "file:bmc-password",
            &api_url,
            (&image_path, 4 * 1024 * 1024, &sha256),
        )
        .await
        .expect("seed the catalog");

        let shutdown = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        let cert = &api_certificate().pem;
        let mut api_config = ApiConfig {
            deploy: config.clone(),
            bmc_access: access.clone(),
            images_dir: images,
            transport: racklift_listener::Transport::Tls(
                racklift_listener::tls::server_config(&cert.certificate_pem, &cert.key_pem).expect("TLS"),
            ),
            server_certificate_pem: racklift_listener::tls::self_signed_leaf(&cert.certificate_pem),
            ..ApiConfig::default()
        };
        api_config.media.public_address = Some(media_url.clone());
        let api = ApiTask::start(listener, media, store.clone(), queue.clone(), api_config.clone());
        let step = DeployStep {
            store: store.clone(),
            config: Arc::new(config),
            certificates: Arc::new(racklift_deploy::certificates::CertificateSet::incusos()),
            clients: ClientCache::new(access),
        };
        let pool = WorkerPool::new(
            queue.clone(),
            racklift_workers::full_registry(step),
            WorkerConfig {
                concurrency: 64,
                batch: 16,
                poll_interval: Duration::from_millis(200),
                rescue_interval: Duration::from_secs(1),
                ..WorkerConfig::default()
            },
        );
        if workers {
            tasks.spawn(pool.run(shutdown.clone()));
        }
        Rack {
            db,
            sim,
            store,
            queue,
            api_url,
            media_url,
            catalog,
            http: api_client(),
            shutdown,
            tasks,
            api: Some(api),
            api_config,
            dir,
        }
    }

    /// The SHA-256 of the client certificate the catalog knows server `name` by (set at its registration).
    pub async fn stored_client_certificate(&self, name: &str) -> Option<String> {
        sqlx::query_scalar("SELECT client_certificate_sha256 FROM servers WHERE name = $1")
            .bind(name)
            .fetch_one(&self.db.pool)
            .await
            .expect("the server's row")
    }

    /// The secrets directory the rack's BMC password is in: `racklift worker` processes of the test need it
    /// (`RACKLIFT_PATHS__SECRETS_DIR`).
    /// A `racklift worker` process on the rack's database, with the simulation's budgets at `scale`, a 3 s lease
    /// (so a killed or stopped worker's jobs are taken over within seconds), 200 ms polls and `extra` arguments;
    /// cluster runs settle for no time after a restore.
    pub fn worker_process(&self, scale: f64, extra: &[&str]) -> crate::Racklift {
        self.worker_process_on(&self.db.url, scale, extra)
    }

    /// As [`Rack::worker_process`], reaching the rack's database at `database_url` (through a proxy, say).
    pub fn worker_process_on(&self, database_url: &str, scale: f64, extra: &[&str]) -> crate::Racklift {
        let secrets = self.secrets_dir();
        let scale = scale.to_string();
        let mut args = vec![
            "worker",
            "--sim-time-scale",
            &scale,
            "--lease-ttl-ms",
            "3000",
            "--rescue-interval-ms",
            "500",
            "--poll-interval-ms",
            "200",
        ];
        args.extend_from_slice(extra);
        crate::Racklift::spawn_with(
            &args,
            database_url,
            &[
                ("RACKLIFT_PATHS__SECRETS_DIR", secrets.as_os_str()),
                ("RACKLIFT_DEPLOY__ROLLING__POST_RESTORE_DELAY_SECS", "0".as_ref()),
            ],
        )
    }

    pub fn secrets_dir(&self) -> PathBuf {
        self.dir.join("secrets")
    }

    /// The images directory the API serves images from; an image registered in a test must be inside.
    pub fn images_dir(&self) -> PathBuf {
        self.dir.join("images")
    }

    /// Stops the API (letting it flush its media reads) and starts a new one on the same address: what an API
    /// restart or a failover to another instance looks like to BMCs and installers.
    pub async fn restart_api(&mut self) {
        if let Some(api) = self.api.take() {
            api.stop().await;
        }
        let addr = self.api_url.trim_start_matches("https://").to_owned();
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .expect("bind the API again");
        let media = tokio::net::TcpListener::bind(self.media_url.trim_start_matches("http://"))
            .await
            .expect("bind the media listener again");
        self.api = Some(ApiTask::start(
            listener,
            media,
            self.store.clone(),
            self.queue.clone(),
            self.api_config.clone(),
        ));
    }

    /// A request to the API's `path` (`/1.0/…`) with the admin's token.
    pub fn admin(&self, method: reqwest::Method, path: impl AsRef<str>) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{}", self.api_url, path.as_ref()))
            .bearer_auth(&self.catalog.admin_token)
    }

    /// `POST …/{name}/:deploy` as the admin with the demo token and seed, plus `extra` fields.
    pub async fn deploy(&self, name: &str, extra: Value) -> reqwest::Response {
        let vendor = self.sim.personality(self.index(name)).as_str();
        let mut body =
            serde_json::to_value(demo::deploy_request(&self.catalog, vendor)).expect("deploy request");
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        self.admin(
            reqwest::Method::POST,
            format!("/1.0/provisioning/servers/{name}:deploy"),
        )
        .json(&body)
        .send()
        .await
        .expect("deploy request")
    }

    /// Deploys every server of the rack with the demo request, asserting each was accepted.
    pub async fn deploy_all(&self) {
        for i in 0..self.sim.len() {
            let name = self.sim.name(i);
            let response = self.deploy(name, json!({})).await;
            let status = response.status();
            assert_eq!(
                status,
                202,
                "{name}: {}",
                response.text().await.unwrap_or_default()
            );
        }
    }

    /// Makes server `i`'s BMC answer every mutation with HTTP 500, deploys it and waits until the deployment has
    /// failed (its retries spent), returning it: the common way to get a dead letter to triage.
    pub async fn deploy_into_failure(&self, i: usize) -> DeploymentRecord {
        self.sim.set_faults(
            i,
            Faults {
                status: Some(500),
                only_mutations: true,
                ..Faults::default()
            },
        );
        let name = self.sim.name(i).to_owned();
        assert_eq!(self.deploy(&name, json!({})).await.status(), 202);
        let failed = self.wait_finished(&name, Duration::from_secs(120)).await;
        let machine = &failed.deployment.machine;
        assert_eq!(machine.state, racklift_deploy::State::Failed, "{machine:?}");
        failed
    }

    /// As [`Rack::wait_finished`], and fails unless the deployment completed, with its failure and the server's
    /// event log.
    pub async fn wait_completed(&self, name: &str, limit: Duration) -> DeploymentRecord {
        let d = self.wait_finished(name, limit).await;
        assert_eq!(
            d.deployment.machine.state,
            racklift_deploy::State::Completed,
            "{name}: {:?}\n{}",
            d.deployment.machine.failure,
            self.event_log(name).await
        );
        d
    }

    /// Waits until the server's newest deployment has finished and returns it; on timeout, fails with the
    /// deployment's state and the server's event log, which is what a human would look at first.
    pub async fn wait_finished(&self, name: &str, limit: Duration) -> DeploymentRecord {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let latest = self
                .store
                .latest_deployment(name)
                .await
                .expect("read the deployment");
            if let Some(d) = &latest
                && d.is_finished()
            {
                return d.clone();
            }
            if tokio::time::Instant::now() > deadline {
                let jobs: Vec<(i64, String, i32, Option<String>)> = sqlx::query_as(
                    "SELECT id, state, attempts, errors::text FROM jobs WHERE resource_key = $1 ORDER BY id",
                )
                .bind(format!("server/{name}"))
                .fetch_all(&self.db.pool)
                .await
                .unwrap_or_default();
                panic!(
                    "{name}: deployment not finished after {limit:?}\nmachine: {:?}\nlast facts: {:?}\njobs: {jobs:?}\ntruth: {}\nevents:\n{}",
                    latest.as_ref().map(|d| &d.deployment.machine),
                    latest.as_ref().and_then(|d| d.last_facts.clone()),
                    self.sim.truth(self.index(name)),
                    self.event_log(name).await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the server's newest deployment is in `state`.
    pub async fn wait_state(&self, name: &str, state: racklift_deploy::State, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let latest = self
                .store
                .latest_deployment(name)
                .await
                .expect("read the deployment");
            let now = latest.as_ref().map(|d| d.deployment.machine.state);
            if now == Some(state) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline && !latest.as_ref().is_some_and(|d| d.is_finished()),
                "{name}: never reached {state:?} (now {now:?})\n{}",
                self.event_log(name).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The server's event log, one line per event.
    pub async fn event_log(&self, name: &str) -> String {
        let events = self.store.events(name, 0, 1000).await.unwrap_or_default();
        let lines: Vec<String> = events
            .iter()
            .map(|e| format!("{} {} {}", e.at.format("%H:%M:%S%.3f"), e.kind, e.detail))
            .collect();
        lines.join("\n")
    }

    /// The state changes of the server's newest deployment, in order (its `transition` events).
    pub async fn transitions(&self, name: &str) -> Vec<Transition> {
        let latest = self
            .store
            .latest_deployment(name)
            .await
            .expect("read the deployment");
        let Some(id) = latest.map(|d| d.id) else {
            return Vec::new();
        };
        let events = self.store.events(name, 0, 10_000).await.expect("read the events");
        events
            .into_iter()
            .filter(|e| e.kind == "transition" && e.deployment_id == Some(id))
            .map(|e| {
                serde_json::from_value(e.detail.clone())
                    .unwrap_or_else(|err| panic!("{name}: transition event {}: {err}", e.detail))
            })
            .collect()
    }

    fn index(&self, name: &str) -> usize {
        (0..self.sim.len())
            .find(|&i| self.sim.name(i) == name)
            .expect("a simulated server")
    }

    pub async fn stop(mut self) {
        if let Some(api) = self.api.take() {
            api.stop().await;
        }
        self.shutdown.cancel();
        while self.tasks.join_next().await.is_some() {}
        let _ = std::fs::remove_dir_all(&self.dir);
        self.sim.shutdown().await;
    }
}

/// The API served in this process, stoppable on its own.
struct ApiTask {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl ApiTask {
    fn start(
        listener: tokio::net::TcpListener,
        media: tokio::net::TcpListener,
        store: Store,
        queue: Queue,
        config: ApiConfig,
    ) -> ApiTask {
        let shutdown = CancellationToken::new();
        let state = AppState::new(store, queue, config);
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            racklift_api::serve_all(listener, Some(media), state, stop)
                .await
                .expect("serve the API");
        });
        ApiTask { shutdown, task }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }
}

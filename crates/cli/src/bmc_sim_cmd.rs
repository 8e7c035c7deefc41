//! `racklift bmc-sim`: serve a rack of simulated Redfish BMCs until interrupted.

use std::net::SocketAddr;

use anyhow::Context;
use racklift_bmc_sim::{PersonalityChoice, Sim, SimConfig};

/// Options of `racklift bmc-sim`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of simulated servers.
    #[arg(long, default_value_t = 1)]
    servers: usize,
    /// generic, dell, hpe, lenovo, supermicro or mix (round-robin).
    #[arg(long, default_value = "generic")]
    personality: PersonalityChoice,
    /// Address to listen on; port 0 picks a free port (the URL is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Multiplier for every machine timing (0.01 makes a 40-minute deployment take 24 s).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Let POST stages shrink with the time scale below half a real second. By default each lasts at least that
    /// (as under `racklift up` and the tests): the reboot that ends install stage 1 must leave a deployment,
    /// polling every second, the time to eject the media before the server boots it again.
    #[arg(long)]
    no_post_floor: bool,
    /// Serve HTTPS with a generated self-signed certificate.
    #[arg(long)]
    tls: bool,
    /// Basic-auth user name of every BMC.
    #[arg(long, default_value = "admin")]
    username: String,
    /// Basic-auth password of every BMC.
    #[arg(long, default_value = "password")]
    password: String,
}

/// Start the simulator, print where it is, and serve until Ctrl-C, SIGTERM or SIGHUP.
pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the Tokio runtime")?;
    runtime.block_on(async move {
        let config = if args.no_post_floor {
            SimConfig::new(args.servers, args.personality).with_time_scale(args.time_scale)
        } else {
            SimConfig::for_deployments(args.servers, args.personality, args.time_scale)
        };
        let mut config = config.with_tls(args.tls);
        config.listen = args.listen;
        config.username = args.username;
        config.password = args.password;
        let sim = Sim::start(config).await.context("starting the BMC simulator")?;
        println!("bmc-sim listening on {}", sim.base_url());
        println!("control: {}/servers", sim.control_url());
        for i in 0..sim.len().min(5) {
            println!(
                "bmc {}: {}/redfish/v1 ({})",
                sim.name(i),
                sim.bmc_url(i),
                sim.personality(i).as_str()
            );
        }
        if sim.len() > 5 {
            println!("... {} more (see {}/servers)", sim.len() - 5, sim.control_url());
        }
        if let Some(pem) = sim.cert_pem() {
            println!("{pem}");
        }
        crate::worker_cmd::shutdown_on_signal().cancelled().await;
        sim.shutdown().await;
        Ok(())
    })
}

//! A stored server's `system_id` reaches its BMC client, and the client cache, which keeps the System a client
//! resolved, builds a new client when the server names another System.

use std::time::Duration;

use racklift_bmc_access::secrets::DEFAULT_ENV_PREFIX;
use racklift_bmc_access::{AccessPolicy, ClientCache};
use racklift_bmc_sim::{ExtraSystem, Faults, Personality, PersonalityChoice, Sim, SimConfig};
use racklift_store::Server;

mod common;

fn server(address: String, username: &str, system_id: Option<&str>) -> Server {
    Server {
        allow_plain_http: true,
        system_id: system_id.map(str::to_owned),
        ..common::server("multi1", address, username)
    }
}

#[tokio::test]
async fn the_cached_client_follows_the_servers_system_id() {
    let sim =
        Sim::start(SimConfig::new(1, PersonalityChoice::Single(Personality::Dell)).with_time_scale(0.001))
            .await
            .expect("simulator starts");
    sim.set_faults(
        0,
        Faults {
            extra_systems: vec![
                ExtraSystem {
                    id: "Bluefield_0".into(),
                    system_type: "DPU".into(),
                },
                ExtraSystem {
                    id: "HGX_Baseboard_0".into(),
                    system_type: "Physical".into(),
                },
            ],
            ..Faults::default()
        },
    );
    let dir = std::env::temp_dir().join(format!("racklift-system-choice-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bmc-password"), sim.credentials().1).unwrap();
    let policy = AccessPolicy::load(None, &dir, DEFAULT_ENV_PREFIX).expect("load the policy");
    let cache = ClientCache::new(policy);
    let (address, user) = (sim.bmc_url(0), sim.credentials().0);
    let read = async |system_id: Option<&str>| {
        cache
            .client_for(&server(address.clone(), user, system_id), Duration::from_secs(10))
            .await
            .expect("client")
            .read_system()
            .await
    };

    let cases = [
        (Some("System.Embedded.1"), Ok("System.Embedded.1")),
        (Some("HGX_Baseboard_0"), Ok("HGX_Baseboard_0")),
        (None, Err("AmbiguousSystem")),
        (Some("System_0"), Err("SystemNotFound")),
        (Some("System.Embedded.1"), Ok("System.Embedded.1")),
    ];
    for (system_id, want) in cases {
        let got = read(system_id).await;
        match (&got, want) {
            (Ok(system), Ok(id)) => assert_eq!(system.id, id, "{system_id:?}"),
            (Err(e), Err(variant)) => assert!(format!("{e:?}").starts_with(variant), "{system_id:?}: {e:?}"),
            _ => panic!("{system_id:?}: got {got:?}, want {want:?}"),
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

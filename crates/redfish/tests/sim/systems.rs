//! BMCs that list several ComputerSystems: a DPU beside the host is passed over, two possible hosts need the
//! System named, and a named System that is not there is an error naming the ones that are.

use std::time::Duration;

use racklift_bmc_sim::{ExtraSystem, Faults, SimHandle};
use racklift_redfish::{BmcClient, Error, ErrorClass, Fence, PowerOutcome};

use crate::common::{client, config, eventually, fleet};

const PERSONALITIES: [(&str, &str); 5] = [
    ("generic", "437XR1138R2"),
    ("dell", "System.Embedded.1"),
    ("hpe", "1"),
    ("lenovo", "1"),
    ("supermicro", "1"),
];

fn extra(id: &str, system_type: &str) -> ExtraSystem {
    ExtraSystem {
        id: id.to_owned(),
        system_type: system_type.to_owned(),
    }
}

fn with_systems(sim: &SimHandle, systems: Vec<ExtraSystem>) {
    sim.set_faults(
        0,
        Faults {
            extra_systems: systems,
            ..Faults::default()
        },
    );
}

fn hinted(sim: &SimHandle, hint: &str) -> BmcClient {
    let mut config = config(sim, 0);
    config.system_path = Some(hint.to_owned());
    BmcClient::new(config).expect("client").with_fence(Fence(1))
}

#[tokio::test]
async fn a_dpu_beside_the_host_is_passed_over_on_every_personality() {
    for (personality, host) in PERSONALITIES {
        let sim = fleet(1, personality).await;
        with_systems(&sim, vec![extra("Bluefield_0", "DPU")]);
        let c = client(&sim, 0);
        assert_eq!(c.read_system().await.expect("read").id, host, "{personality}");
        let uri = c.system_uri().await.expect("resolved");
        assert!(uri.ends_with(&format!("/Systems/{host}")), "{personality}: {uri}");
        // Whatever the boot state, a power-off now reaches the host: the DPU has no actions to take one.
        c.power_off().await.expect("power off");
        eventually("the host to be off", Duration::from_secs(10), || async {
            sim.truth(0)["power"] == "Off"
        })
        .await;
        assert!(
            matches!(c.power_on().await, Ok(PowerOutcome::Sent(_))),
            "{personality}"
        );
        eventually("the host to be on", Duration::from_secs(10), || async {
            sim.truth(0)["power"] == "On"
        })
        .await;
        let touched_dpu: Vec<_> = sim
            .audit(0)
            .mutation_log
            .into_iter()
            .filter(|m| m.path.contains("Bluefield_0"))
            .collect();
        assert!(touched_dpu.is_empty(), "{personality}: {touched_dpu:?}");
        sim.shutdown().await;
    }
}

#[tokio::test]
async fn two_possible_hosts_need_the_system_named() {
    let sim = fleet(1, "dell").await;
    with_systems(
        &sim,
        vec![extra("Bluefield_0", "DPU"), extra("HGX_Baseboard_0", "Physical")],
    );
    let err = client(&sim, 0).read_system().await.expect_err("ambiguous");
    assert!(
        matches!(&err, Error::AmbiguousSystem { candidates }
            if candidates == &["System.Embedded.1", "HGX_Baseboard_0"]),
        "{err:?}"
    );
    assert_eq!(err.class(), ErrorClass::Client);
    assert!(err.to_string().contains("\"HGX_Baseboard_0\""), "{err}");

    let cases = [
        ("System.Embedded.1", "System.Embedded.1"),
        ("/redfish/v1/Systems/System.Embedded.1", "System.Embedded.1"),
        ("HGX_Baseboard_0", "HGX_Baseboard_0"),
        ("Bluefield_0", "Bluefield_0"),
    ];
    for (hint, id) in cases {
        assert_eq!(
            hinted(&sim, hint).read_system().await.expect(hint).id,
            id,
            "{hint}"
        );
    }

    let err = hinted(&sim, "System_0")
        .read_system()
        .await
        .expect_err("not there");
    assert!(
        matches!(&err, Error::SystemNotFound { id, available }
            if id == "System_0" && available == &["System.Embedded.1", "Bluefield_0", "HGX_Baseboard_0"]),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    sim.shutdown().await;
}

#[tokio::test]
async fn a_hint_is_checked_even_where_there_is_one_system() {
    let sim = fleet(1, "generic").await;
    assert_eq!(
        hinted(&sim, "437XR1138R2").read_system().await.expect("named").id,
        "437XR1138R2"
    );
    let err = hinted(&sim, "1").read_system().await.expect_err("not there");
    assert!(
        matches!(&err, Error::SystemNotFound { available, .. } if available == &["437XR1138R2"]),
        "{err:?}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn an_extra_system_is_a_read_only_computer_system() {
    let sim = fleet(1, "generic").await;
    with_systems(&sim, vec![extra("Bluefield_0", "DPU")]);
    let (user, pass) = sim.credentials();
    let http = reqwest::Client::new();
    let url = |path: &str| format!("{}{path}", sim.bmc_url(0));
    let collection: serde_json::Value = http
        .get(url("/redfish/v1/Systems"))
        .basic_auth(user, Some(pass))
        .send()
        .await
        .expect("collection")
        .json()
        .await
        .expect("json");
    assert_eq!(collection["Members@odata.count"], 2, "{collection}");
    let dpu_uri = collection["Members"][1]["@odata.id"]
        .as_str()
        .expect("a member link")
        .to_owned();
    assert!(dpu_uri.ends_with("/redfish/v1/Systems/Bluefield_0"), "{dpu_uri}");

    let dpu = http
        .get(url("/redfish/v1/Systems/Bluefield_0"))
        .basic_auth(user, Some(pass))
        .send()
        .await
        .expect("the DPU");
    assert_eq!(dpu.status(), 200);
    assert_eq!(dpu.headers()["allow"], "GET, HEAD");
    let body: serde_json::Value = dpu.json().await.expect("json");
    assert_eq!(body["@odata.type"], "#ComputerSystem.v1_20_0.ComputerSystem");
    assert_eq!(
        (&body["Id"], &body["SystemType"]),
        (&"Bluefield_0".into(), &"DPU".into())
    );
    assert_eq!(body["@odata.id"], dpu_uri);
    assert!(body["Links"]["ManagedBy"][0]["@odata.id"].is_string(), "{body}");
    assert!(body.get("Actions").is_none(), "{body}");

    let patch = http
        .patch(url("/redfish/v1/Systems/Bluefield_0"))
        .basic_auth(user, Some(pass))
        .json(&serde_json::json!({"AssetTag": "x"}))
        .send()
        .await
        .expect("answered");
    assert_eq!(patch.status(), 405);
    let reset = http
        .post(url(
            "/redfish/v1/Systems/Bluefield_0/Actions/ComputerSystem.Reset",
        ))
        .basic_auth(user, Some(pass))
        .json(&serde_json::json!({"ResetType": "ForceOff"}))
        .send()
        .await
        .expect("answered");
    assert_eq!(reset.status(), 404);
    sim.shutdown().await;
}

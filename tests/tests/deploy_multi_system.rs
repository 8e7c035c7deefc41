//! BMCs whose `/redfish/v1/Systems` lists more than the server, end to end. With a second System that could be
//! the host (a baseboard, as on NVIDIA GH200/GB200 boards) the deploy is refused naming `system_id` and the
//! candidates until the server says which System it is; then the deployment completes and only that System was
//! powered and booted. A DPU beside a single host needs no `system_id` at all.

use std::time::Duration;

use racklift_bmc_sim::{ExtraSystem, Faults, Personality, PersonalityChoice};
use racklift_tests::cli::{as_admin, assert_refused, describe, json_out};
use racklift_tests::rack::Rack;
use serde_json::{Value, json};

const SCALE: f64 = 0.01;
const HOST: &str = "437XR1138R2";
const DPU: &str = "Bluefield_0";
const BASEBOARD: &str = "HGX_Baseboard_0";

fn extra(id: &str, system_type: &str) -> ExtraSystem {
    ExtraSystem {
        id: id.to_owned(),
        system_type: system_type.to_owned(),
    }
}

async fn start(extra_systems: Vec<ExtraSystem>) -> (Rack, String) {
    let rack = Rack::start(1, PersonalityChoice::Single(Personality::Generic), SCALE).await;
    rack.sim.set_faults(
        0,
        Faults {
            extra_systems,
            ..Faults::default()
        },
    );
    let name = rack.sim.name(0).to_owned();
    (rack, name)
}

/// `PATCH /1.0/servers/{name}` as the admin: status and body.
async fn update(rack: &Rack, name: &str, body: Value) -> (u16, Value) {
    let r = rack
        .admin(reqwest::Method::PATCH, format!("/1.0/servers/{name}"))
        .json(&body)
        .send()
        .await
        .expect("the API answers");
    (r.status().as_u16(), r.json().await.expect("a JSON body"))
}

/// The deploy answer's status and error, asserting nothing was started when it was refused.
async fn refused(rack: &Rack, name: &str) -> Value {
    let r = rack.deploy(name, json!({})).await;
    assert_eq!(r.status(), 422);
    let body: Value = r.json().await.expect("an error body");
    assert!(
        rack.store.latest_deployment(name).await.expect("read").is_none(),
        "nothing was started: {body}"
    );
    body["error"].clone()
}

/// Deploys, waits for completion and checks in the simulator that the host System was powered and booted and
/// that no mutation reached any other System.
async fn deploys_the_host(rack: &Rack, name: &str, others: &[&str]) {
    let r = rack.deploy(name, json!({})).await;
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap_or_default());
    rack.wait_completed(name, Duration::from_secs(120)).await;
    let truth = rack.sim.truth(0);
    assert!(
        truth["counters"]["power_on_requests"].as_u64() > Some(0),
        "{truth}"
    );
    assert!(truth["boot_count"].as_u64() > Some(0), "{truth}");
    let log = rack.sim.audit(0).mutation_log;
    let host_resets = log
        .iter()
        .filter(|m| {
            m.path
                .ends_with(&format!("/Systems/{HOST}/Actions/ComputerSystem.Reset"))
        })
        .count();
    assert!(host_resets > 0, "{log:?}");
    let elsewhere: Vec<_> = log
        .iter()
        .filter(|m| others.iter().any(|id| m.path.contains(&format!("/Systems/{id}"))))
        .collect();
    assert!(elsewhere.is_empty(), "{elsewhere:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_possible_hosts_are_refused_until_the_server_names_its_system() {
    let (rack, name) = start(vec![extra(DPU, "DPU"), extra(BASEBOARD, "Physical")]).await;

    let error = refused(&rack, &name).await;
    assert_eq!(
        (&error["code"], &error["field"]),
        (&"system_ambiguous".into(), &"system_id".into()),
        "{error}"
    );
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("{HOST:?}")) && message.contains(&format!("{BASEBOARD:?}")),
        "{message}"
    );
    assert!(!message.contains(DPU), "a DPU is no candidate: {message}");

    // A value that cannot be a System Id is the API's 400 naming the field; nothing is stored.
    for bad in ["System/1", "a b", &"x".repeat(65)] {
        let (status, body) = update(&rack, &name, json!({"system_id": bad})).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["field"], "system_id", "{bad}: {body}");
    }
    // An Id the BMC does not list is the pre-flight's refusal, naming what it lists.
    let (status, body) = update(&rack, &name, json!({"system_id": "System_0"})).await;
    assert_eq!((status, &body["system_id"]), (200, &"System_0".into()), "{body}");
    let error = refused(&rack, &name).await;
    assert_eq!(
        (&error["code"], &error["field"]),
        (&"system_not_found".into(), &"system_id".into()),
        "{error}"
    );
    assert!(
        error["message"].as_str().unwrap_or_default().contains(BASEBOARD),
        "{error}"
    );

    let (status, body) = update(&rack, &name, json!({"system_id": HOST})).await;
    assert_eq!((status, &body["system_id"]), (200, &HOST.into()), "{body}");
    deploys_the_host(&rack, &name, &[DPU, BASEBOARD]).await;

    // An empty value clears it: racklift chooses again, and is refused again.
    let (status, body) = update(&rack, &name, json!({"system_id": ""})).await;
    assert_eq!((status, &body["system_id"]), (200, &Value::Null), "{body}");
    rack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dpu_beside_one_host_deploys_without_a_system_id() {
    let (rack, name) = start(vec![extra(DPU, "DPU")]).await;
    deploys_the_host(&rack, &name, &[DPU]).await;

    // The CLI sends system_id when adding a server and shows it back; the API refuses a malformed one.
    let out = as_admin(
        &rack,
        &[
            "server",
            "add",
            "gh200-1",
            "--bmc-address",
            "https://10.0.0.9",
            "--bmc-username",
            "root",
            "--bmc-password-ref",
            "env:RACKLIFT_SECRET_GH200_1",
            "--system-id",
            "System_0",
            "--json",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(json_out(&out)["system_id"], "System_0");
    let out = as_admin(
        &rack,
        &[
            "server",
            "add",
            "gh200-2",
            "--bmc-address",
            "https://10.0.0.10",
            "--bmc-username",
            "root",
            "--bmc-password-ref",
            "env:RACKLIFT_SECRET_GH200_2",
            "--system-id",
            "../System_0",
        ],
    )
    .await;
    assert_refused(&out, "system_id");
    rack.stop().await;
}

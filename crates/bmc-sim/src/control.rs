//! Sim-only control endpoints (no auth): list servers, read a machine's truth and audit, set
//! faults, reset a BMC, publish an OS update. What a server installs and whom it registers with come from the
//! seed inside its install media only, as on a real server: there is no endpoint for them.
//!
//! | Method | Path | Body / answer |
//! |---|---|---|
//! | GET | `/control/servers` | `[{name, index, personality, bmc_url, incus_url, serial, uuid}]` (`incus_url` null until Incus starts) |
//! | GET | `/control/audit` | fleet summary: max concurrency, stale mutations |
//! | GET | `/control/servers/<name>/truth` | power, boot progress, installed, registered, media bytes read, boot count, … |
//! | GET, DELETE | `/control/servers/<name>/audit` | [`AuditReport`](crate::AuditReport); DELETE resets it |
//! | GET, PUT, DELETE | `/control/servers/<name>/faults` | [`Faults`] (PUT replaces, DELETE clears) |
//! | POST | `/control/servers/<name>/bmc-reset` | forget task monitors and sessions |
//! | GET, DELETE | `/control/servers/<name>/incus-audit` | the Incus API's [`AuditReport`](crate::AuditReport); DELETE resets it |
//! | GET | `/control/clusters` | `{<cluster>: [<bmc name>, ...]}` |
//! | GET, PUT | `/control/clusters/<cluster>` | `{"members": ["<bmc name>", ...]}`: PUT forms the Incus cluster (GET adds `status` by member name and the `certificate` every member serves) |
//! | GET, DELETE | `/control/clusters/<cluster>/audit` | [`ClusterAuditReport`](crate::ClusterAuditReport); DELETE resets it |

use std::sync::Arc;
use std::time::Instant;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::bmc::Bmc;
use crate::faults::Faults;
use crate::reply;
use crate::server::Fleet;

#[expect(
    clippy::result_large_err,
    reason = "the error is the answer, built once per bad request"
)]
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, Response> {
    serde_json::from_slice(body).map_err(|e| {
        reply::json(
            StatusCode::BAD_REQUEST,
            &json!({"error": format!("invalid body: {e}")}),
        )
    })
}

/// The summary of one server.
pub fn server_summary(fleet: &Fleet, bmc: &Bmc) -> Value {
    json!({
        "name": bmc.name,
        "index": bmc.index,
        "personality": bmc.profile.personality.as_str(),
        "bmc_url": format!("{}/bmc/{}", fleet.shared.base_url, bmc.name),
        "incus_url": bmc.incus_url(),
        "serial": bmc.serial,
        "uuid": bmc.uuid,
    })
}

pub async fn handle(fleet: &Arc<Fleet>, method: &Method, rest: &str, body: &[u8]) -> Response {
    let parts: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        (&Method::GET, ["servers"]) => {
            let list: Vec<Value> = fleet.bmcs.iter().map(|b| server_summary(fleet, b)).collect();
            reply::ok(&Value::Array(list))
        }
        (&Method::GET, ["audit"]) => fleet_audit(fleet),
        (&Method::GET, ["clusters"]) => {
            let clusters = fleet.clusters();
            let map: serde_json::Map<String, Value> = clusters
                .iter()
                .map(|(n, c)| (n.clone(), json!(bmc_names(fleet, &c.members))))
                .collect();
            reply::ok(&Value::Object(map))
        }
        (_, ["clusters", name, tail @ ..]) => cluster(fleet, name, method, tail, body),
        (_, ["servers", name, tail @ ..]) => {
            let Some(bmc) = fleet.get(name) else {
                return reply::not_found();
            };
            server(fleet, bmc, method, tail, body)
        }
        _ => reply::not_found(),
    }
}

fn fleet_audit(fleet: &Fleet) -> Response {
    let mut max_concurrent = 0;
    let mut stale = Vec::new();
    let mut unfenced = 0;
    for bmc in &fleet.bmcs {
        let r = bmc.audit.report();
        max_concurrent = max_concurrent.max(r.max_concurrent);
        unfenced += r.unfenced_mutations;
        for s in r.stale_mutations {
            stale.push(json!({"server": bmc.name, "mutation": s}));
        }
    }
    reply::ok(&json!({
        "servers": fleet.bmcs.len(),
        "max_concurrent": max_concurrent,
        "unfenced_mutations": unfenced,
        "stale_mutations": stale,
    }))
}

fn server(fleet: &Fleet, bmc: &Arc<Bmc>, method: &Method, tail: &[&str], body: &[u8]) -> Response {
    match (method, tail) {
        (&Method::GET, []) => reply::ok(&server_summary(fleet, bmc)),
        (&Method::GET, ["truth"]) => reply::ok(&bmc.machine().truth(Instant::now())),
        (&Method::GET, ["audit"]) => reply::ok(&json!(bmc.audit.report())),
        (&Method::DELETE, ["audit"]) => {
            bmc.audit.reset();
            reply::no_content()
        }
        (&Method::GET, ["faults"]) => reply::ok(&json!(*bmc.faults())),
        (&Method::PUT | &Method::POST, ["faults"]) => match parse::<Faults>(body) {
            Ok(f) => {
                *bmc.faults() = f;
                reply::no_content()
            }
            Err(r) => r,
        },
        (&Method::DELETE, ["faults"]) => {
            *bmc.faults() = Faults::default();
            reply::no_content()
        }
        (&Method::GET, ["incus-audit"]) => reply::ok(&json!(bmc.incus_audit.report())),
        (&Method::DELETE, ["incus-audit"]) => {
            bmc.incus_audit.reset();
            reply::no_content()
        }
        (&Method::POST, ["bmc-reset"]) => {
            bmc.reset_bmc();
            reply::no_content()
        }
        _ => reply::not_found(),
    }
}

fn bmc_names(fleet: &Fleet, members: &[usize]) -> Vec<String> {
    members.iter().map(|&i| fleet.bmcs[i].name.clone()).collect()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterPut {
    members: Vec<String>,
}

fn cluster(fleet: &Fleet, name: &str, method: &Method, tail: &[&str], body: &[u8]) -> Response {
    let members = fleet.clusters().get(name).map(|c| c.members.clone());
    match (method, tail) {
        (&Method::PUT, []) => {
            let put = match parse::<ClusterPut>(body) {
                Ok(p) => p,
                Err(r) => return r,
            };
            let mut indices = Vec::with_capacity(put.members.len());
            for server in &put.members {
                match fleet.by_name.get(server) {
                    Some(&i) => indices.push(i),
                    None => {
                        return reply::json(
                            StatusCode::BAD_REQUEST,
                            &json!({"error": format!("no server {server}")}),
                        );
                    }
                }
            }
            match fleet.form_cluster(name, &indices) {
                Ok(()) => reply::no_content(),
                Err(e) => reply::json(StatusCode::BAD_REQUEST, &json!({"error": e.to_string()})),
            }
        }
        (&Method::GET, []) => match members {
            Some(m) => reply::ok(&json!({
                "members": bmc_names(fleet, &m),
                "status": crate::cluster::members_by_name(fleet, &m),
                "certificate": fleet.clusters().get(name).map(|c| c.certificate.cert_pem.clone()),
            })),
            None => reply::not_found(),
        },
        (&Method::GET, ["audit"]) => match fleet.cluster_audit(name) {
            Some(report) => reply::ok(&json!(report)),
            None => reply::not_found(),
        },
        (&Method::DELETE, ["audit"]) => {
            if fleet.reset_cluster_audit(name) {
                reply::no_content()
            } else {
                reply::not_found()
            }
        }
        _ => reply::not_found(),
    }
}

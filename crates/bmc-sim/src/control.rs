//! Sim-only control endpoints (no auth): list servers, read a machine's truth and audit, set
//! faults, reset a BMC, publish an OS update. What a server installs and whom it registers with come from the
//! seed inside its install media only, as on a real server: there is no endpoint for them.
//!
//! | Method | Path | Body / answer |
//! |---|---|---|
//! | GET | `/control/servers` | `[{name, personality, bmc_url, incus_url}]` |
//! | GET | `/control/audit` | fleet summary: max concurrency, stale mutations |
//! | GET | `/control/servers/<name>/truth` | power, boot progress, installed, registered, media bytes read, boot count, … |
//! | GET, DELETE | `/control/servers/<name>/audit` | [`AuditReport`](crate::AuditReport); DELETE resets it |
//! | GET, PUT, DELETE | `/control/servers/<name>/faults` | [`Faults`] (PUT replaces, DELETE clears) |
//! | POST | `/control/servers/<name>/bmc-reset` | forget task monitors and sessions |

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
        "incus_url": format!("{}/incus/{}", fleet.shared.base_url, bmc.name),
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
        (&Method::POST, ["bmc-reset"]) => {
            bmc.reset_bmc();
            reply::no_content()
        }
        _ => reply::not_found(),
    }
}

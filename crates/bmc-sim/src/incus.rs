//! A minimal Incus / IncusOS API per installed server, under `/incus/<name>/`, for the cluster
//! operations (rolling reboot and update). It answers only while the installed OS runs.
//!
//! | Method | Path | |
//! |---|---|---|
//! | GET | `/1.0` | server info |
//! | GET | `/1.0/cluster/members/<member>` | `status`: `Online`, `Evacuating`, `Evacuated`, `Restoring` |
//! | POST | `/1.0/cluster/members/<member>/state` | `{"action": "evacuate" \| "restore"}` → async operation |
//! | GET | `/1.0/operations/<id>` (and `/wait`) | `Running` / `Success` |
//! | GET | `/os/1.0` | running and staged OS version |
//! | GET | `/os/1.0/system/update` | `config` (`channel`) and `state` (`last_check`, `status`, `needs_reboot`) |
//! | POST | `/os/1.0/system/update/:check` | asks the update provider (racklift) and stages a verified update |
//! | POST | `/os/1.0/system/:reboot` | reboots (the staged version becomes the running one) |

use std::sync::Arc;
use std::time::Instant;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use crate::bmc::Bmc;
use crate::driver;
use crate::machine::{MemberOperation, OsPhase};
use crate::os_update::{self, CheckOutcome};
use crate::register::OperationsCenter;
use crate::reply;

fn sync(metadata: Value) -> Response {
    reply::ok(&json!({"type": "sync", "status": "Success", "status_code": 200, "metadata": metadata}))
}

fn err(status: StatusCode, message: &str) -> Response {
    reply::json(
        status,
        &json!({"type": "error", "error": message, "error_code": status.as_u16()}),
    )
}

fn operation(id: &str, running: bool) -> Value {
    json!({
        "id": id,
        "class": "task",
        "status": if running { "Running" } else { "Success" },
        "status_code": if running { 103 } else { 200 },
    })
}

pub async fn handle(bmc: &Arc<Bmc>, method: &Method, rel: &str, body: &[u8]) -> Response {
    if bmc.machine().phase != OsPhase::OsRunning {
        return err(StatusCode::SERVICE_UNAVAILABLE, "IncusOS is not running");
    }
    let parts: Vec<&str> = rel.trim_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        (&Method::GET, ["1.0"]) => sync(json!({
            "api_version": "1.0",
            "environment": {"server_name": bmc.name, "server_clustered": true, "os_name": "IncusOS"},
        })),
        (&Method::GET, ["1.0", "cluster", "members", member]) => {
            let status = {
                let mut m = bmc.machine();
                m.os.settle_member(Instant::now());
                m.os.member_status.clone()
            };
            sync(json!({"server_name": member, "status": status, "message": ""}))
        }
        (&Method::POST, ["1.0", "cluster", "members", _member, "state"]) => member_state(bmc, body),
        (&Method::GET, ["1.0", "operations", id, rest @ ..]) => {
            let op = bmc.machine().os.operations.get(*id).copied();
            let Some(op) = op else {
                return err(StatusCode::NOT_FOUND, "operation not found");
            };
            if rest == ["wait"] {
                tokio::time::sleep_until(op.done_at.into()).await;
            }
            let now = Instant::now();
            bmc.machine().os.settle_member(now);
            sync(operation(id, now < op.done_at))
        }
        (&Method::GET, ["os", "1.0"]) => {
            let m = bmc.machine();
            sync(json!({"environment": {
                "os_name": "IncusOS",
                "os_version": m.os.running_version,
                "os_version_next": m.os.staged_version.clone().unwrap_or_else(|| m.os.running_version.clone()),
            }}))
        }
        (&Method::GET, ["os", "1.0", "system", "update"]) => {
            let m = bmc.machine();
            sync(json!({
                "config": {"channel": m.os.channel, "auto_reboot": false},
                "state": {
                    "last_check": m.os.last_check,
                    "needs_reboot": m.os.staged_version.is_some(),
                    "status": m.os.update_status,
                },
            }))
        }
        (&Method::POST, ["os", "1.0", "system", "update", ":check"]) => check_update(bmc).await,
        (&Method::POST, ["os", "1.0", "system", ":reboot"]) => {
            driver::restart(bmc, &mut bmc.machine());
            sync(json!({}))
        }
        _ => err(StatusCode::NOT_FOUND, "not found"),
    }
}

fn member_state(bmc: &Arc<Bmc>, body: &[u8]) -> Response {
    let action = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("action").and_then(Value::as_str).map(str::to_owned));
    let (during, after) = match action.as_deref() {
        Some("evacuate") => ("Evacuating", "Evacuated"),
        Some("restore") => ("Restoring", "Online"),
        _ => return err(StatusCode::BAD_REQUEST, "action must be evacuate or restore"),
    };
    let shared = bmc.shared.clone();
    let duration = shared.clock.scaled(shared.timings.incus_operation);
    let id = uuid::Uuid::new_v4().to_string();
    {
        let mut m = bmc.machine();
        m.os.member_status = during.to_owned();
        m.os.operations.insert(
            id.clone(),
            MemberOperation {
                done_at: Instant::now() + duration,
                during,
                after,
            },
        );
    }
    let task_bmc = bmc.clone();
    tokio::spawn(async move {
        if shared.clock.sleep(shared.timings.incus_operation).await.is_ok() {
            let mut m = task_bmc.machine();
            if m.os.member_status == during {
                m.os.member_status = after.to_owned();
            }
        }
    });
    reply::json(
        StatusCode::ACCEPTED,
        &json!({
            "type": "async",
            "status": "Operation created",
            "status_code": 100,
            "operation": format!("/1.0/operations/{id}"),
            "metadata": operation(&id, true),
        }),
    )
}

/// `:check`: the provider's update check, outside the machine's lock (it is network calls); its outcome is
/// written back together with the check's time. The provider is the installed seed's, as at start-up.
async fn check_update(bmc: &Arc<Bmc>) -> Response {
    let (provider, identity, running, channel) = {
        let mut m = bmc.machine();
        let provider =
            m.os.seed
                .as_ref()
                .and_then(|seed| seed.provider().ok().flatten())
                .and_then(|p| OperationsCenter::from_provider(&p).ok().flatten());
        let Some(provider) = provider else {
            m.os.update_status = "No update provider configured".to_owned();
            return err(StatusCode::BAD_REQUEST, "no update provider configured");
        };
        let Some(identity) = m.os.identity.clone() else {
            return err(StatusCode::SERVICE_UNAVAILABLE, "Incus has not started");
        };
        (
            provider,
            identity,
            m.os.running_version.clone(),
            m.os.channel.clone(),
        )
    };
    let outcome = os_update::check(&provider, &identity, &running, &channel).await;
    let mut m = bmc.machine();
    m.os.last_check = Some(chrono::Utc::now());
    match outcome {
        Ok(CheckOutcome::UpToDate) => {
            m.os.update_status = "Up to date".to_owned();
            sync(json!({}))
        }
        Ok(CheckOutcome::Staged(version)) => {
            m.os.update_status = format!("Update {version} staged");
            m.os.staged_version = Some(version);
            sync(json!({}))
        }
        Ok(CheckOutcome::Refused { version, filename }) => {
            m.os.update_status = format!("Update {version} refused: {filename} does not match its SHA-256");
            err(StatusCode::INTERNAL_SERVER_ERROR, &m.os.update_status.clone())
        }
        Err(e) => {
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            m.os.update_status = format!("Update check failed: {message}");
            err(StatusCode::INTERNAL_SERVER_ERROR, &m.os.update_status.clone())
        }
    }
}

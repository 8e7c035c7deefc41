//! The Incus / IncusOS API of one installed server, as its own TLS listener serves it (`incus_listener`). Paths are
//! the real ones; IncusOS's own API is proxied by Incus under `/os/` (IncusOS `doc/reference/api.md`).
//!
//! | Method | Path | |
//! |---|---|---|
//! | GET | `/1.0` | server info (`environment.server_name`, `server_clustered`) |
//! | GET | `/1.0/cluster` | `{server_name, enabled}` |
//! | GET | `/1.0/cluster/members` | member URLs; `?recursion=1`: member objects (see `cluster`) |
//! | GET | `/1.0/cluster/members/<member>` | one member: `status` `Online` / `Evacuated` / `Offline` |
//! | POST | `/1.0/cluster/members/<member>/state` | `{"action": "evacuate" \| "restore"}` → 202 async operation |
//! | GET | `/1.0/operations/<id>` (and `/wait?timeout=N`) | `Running` (103) / `Success` (200) / `Failure` (400, `err`) |
//! | GET | `/os/1.0` | `environment`: `hostname`, `machine_id`, OS versions, `system_is_ready`, `uptime` |
//! | GET | `/os/1.0/system/update` | `config` (`channel`) and `state` (`last_check`, `status`, `needs_reboot`) |
//! | POST | `/os/1.0/system/update/:check` | the start-up update check, run on request: applications updated, a newer OS staged |
//! | POST | `/os/1.0/system/:reboot` | reboots (the staged OS and application versions become the running ones) |
//! | POST | `/os/1.0/system/:poweroff` | powers the machine off |
//! | PUT | `/os/1.0/system/network` | takes a network configuration (the address stays) |
//! | GET | `/1.0/operations` (`?recursion=1`) | this member's operations by status: `{"running": [...], "success": [...], "failure": [...]}` |
//! | GET | `/os/1.0/applications` | installed application URLs (`/os/1.0/applications/incus`) |
//! | GET | `/os/1.0/applications/<name>` | `{state: {initialized, is_primary, version, friendly_version, available_versions}, config}` |
//! | POST | `/os/1.0/applications/<name>/:restart` | restarts the application: a staged version becomes its version |
//!
//! Applications after IncusOS `incus-osd/internal/rest/api_applications.go` and `incus-osd/api/application.go`.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use crate::bmc::Bmc;
use crate::cluster::{self, member_name};
use crate::reply;
use crate::server::Fleet;
use crate::{driver, os};

/// An Incus `sync` answer.
pub fn sync(metadata: Value) -> Response {
    reply::ok(&json!({"type": "sync", "status": "Success", "status_code": 200, "metadata": metadata}))
}

/// An Incus error envelope.
pub fn error(status: StatusCode, message: &str) -> Response {
    reply::json(
        status,
        &json!({"type": "error", "error": message, "error_code": status.as_u16()}),
    )
}

/// One authorized request.
pub struct IncusRequest<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub fence: Option<&'a str>,
    pub body: &'a [u8],
}

impl IncusRequest<'_> {
    fn param(&self, key: &str) -> Option<&str> {
        self.query?
            .split('&')
            .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

pub async fn handle(fleet: &Arc<Fleet>, bmc: &Arc<Bmc>, req: IncusRequest<'_>) -> Response {
    let parts: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    match (req.method, parts.as_slice()) {
        (&Method::GET, ["1.0"]) => {
            let name = member_name(bmc, &bmc.machine());
            // The certificate the listener serves, PEM: `cluster.crt` once clustered, else `server.crt`.
            let certificate = fleet
                .served_identity(bmc.index)
                .map(|id| id.cert_pem.clone())
                .unwrap_or_default();
            sync(json!({
                "api_version": "1.0",
                "auth": "trusted",
                "environment": {
                    "certificate": certificate,
                    "server_name": name,
                    "server_clustered": fleet.cluster_of(bmc.index).is_some(),
                    "os_name": "IncusOS",
                },
            }))
        }
        (&Method::GET, ["1.0", "cluster"]) => cluster::get_cluster(fleet, bmc),
        (&Method::GET, ["1.0", "cluster", "members"]) => {
            let recursion = req.param("recursion").is_some_and(|r| r != "0");
            cluster::list_members(fleet, bmc, recursion)
        }
        (&Method::GET, ["1.0", "cluster", "members", member]) => cluster::get_member(fleet, bmc, member),
        (&Method::POST, ["1.0", "cluster", "members", member, "state"]) => {
            cluster::post_member_state(fleet, bmc, member, req.body, req.fence, req.path)
        }
        (&Method::GET, ["1.0", "operations"]) => {
            let recursion = req.param("recursion").is_some_and(|r| r != "0");
            cluster::list_operations(bmc, recursion)
        }
        (&Method::GET, ["1.0", "operations", id]) => cluster::get_operation(fleet, bmc, id, None).await,
        (&Method::GET, ["1.0", "operations", id, "wait"]) => {
            let timeout = req.param("timeout").and_then(|t| t.parse::<f64>().ok());
            cluster::get_operation(fleet, bmc, id, Some(timeout)).await
        }
        (&Method::GET, ["os", "1.0"]) => {
            let m = bmc.machine();
            // Whole seconds since the machine was reset, the fraction cut off as `/proc/uptime`'s is
            // (`api_root.go:124-138`), counted on the wall clock (see `Machine::reset_instant`).
            let uptime = m.reset_instant.map_or(0, |reset| reset.elapsed().as_secs());
            sync(json!({"environment": {
                "hostname": m.os.hostname.clone().unwrap_or_default(),
                "machine_id": m.os.machine_id.clone().unwrap_or_default(),
                "os_name": "IncusOS",
                "os_version": m.os.running_version,
                "os_version_next": m.os.staged_version.clone().unwrap_or_else(|| m.os.running_version.clone()),
                "system_is_ready": m.os.system_is_ready,
                "uptime": uptime,
            }}))
        }
        (&Method::GET, ["os", "1.0", "system", "update"]) => {
            let m = bmc.machine();
            let needs_reboot =
                m.os.staged_version.is_some() || m.os.applications.iter().any(|a| a.staged_version.is_some());
            sync(json!({
                "config": {"channel": m.os.channel, "auto_reboot": false},
                "state": {
                    "last_check": m.os.last_check,
                    "needs_reboot": needs_reboot,
                    "status": m.os.update_status,
                },
            }))
        }
        (&Method::POST, ["os", "1.0", "system", "update", ":check"]) => {
            record_mutation(fleet, bmc, &req, false);
            check_update(bmc).await
        }
        (&Method::POST, ["os", "1.0", "system", ":reboot"]) => {
            record_mutation(fleet, bmc, &req, true);
            // The provider is told before the reboot (`main.go:875-913`); the notice may be lost with it.
            os::notify(bmc, os::SYSTEM_REBOOT_TRIGGERED);
            let never_returns = bmc.faults().reboot_never_returns;
            let mut m = bmc.machine();
            m.firmware_halt = never_returns;
            driver::restart(bmc, &mut m);
            sync(json!({}))
        }
        (&Method::POST, ["os", "1.0", "system", ":poweroff"]) => {
            record_mutation(fleet, bmc, &req, false);
            os::notify(bmc, os::SYSTEM_SHUTDOWN_TRIGGERED);
            driver::power_off(bmc, &mut bmc.machine());
            sync(json!({}))
        }
        (&Method::PUT, ["os", "1.0", "system", "network"]) => {
            record_mutation(fleet, bmc, &req, false);
            // The new configuration is taken as it is (the simulated address does not change), and the
            // reconfiguration reported as IncusOS reports every one (`internal/systemd/networkd.go:190-206`).
            match serde_json::from_slice::<Value>(req.body) {
                Ok(Value::Object(_)) => {
                    os::notify(bmc, os::NETWORK_CONFIG_CHANGED);
                    sync(json!({}))
                }
                Ok(_) => error(
                    StatusCode::BAD_REQUEST,
                    "the network configuration must be an object",
                ),
                Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
            }
        }
        (&Method::GET, ["os", "1.0", "applications"]) => {
            let m = bmc.machine();
            let mut names: Vec<&str> = m.os.applications.iter().map(|a| a.name.as_str()).collect();
            names.sort_unstable();
            let urls: Vec<String> = names
                .iter()
                .map(|n| format!("/os/1.0/applications/{n}"))
                .collect();
            sync(json!(urls))
        }
        (&Method::GET, ["os", "1.0", "applications", name]) => {
            let m = bmc.machine();
            let Some(app) = m.os.applications.iter().find(|a| a.name == *name) else {
                return error(StatusCode::NOT_FOUND, "Not Found");
            };
            let mut available = vec![app.version.clone()];
            available.extend(app.staged_version.clone());
            sync(json!({
                "state": {
                    "is_primary": os::is_incus(&app.name),
                    "initialized": true,
                    "friendly_version": app.version,
                    "version": app.version,
                    "available_versions": available,
                },
                "config": {},
            }))
        }
        (&Method::POST, ["os", "1.0", "applications", name, ":restart"]) => {
            record_mutation(fleet, bmc, &req, false);
            let mut m = bmc.machine();
            let Some(app) = m.os.applications.iter_mut().find(|a| a.name == *name) else {
                return error(StatusCode::NOT_FOUND, "Not Found");
            };
            if let Some(v) = app.staged_version.take() {
                app.version = v;
            }
            sync(json!({}))
        }
        _ => error(StatusCode::NOT_FOUND, "not found"),
    }
}

/// A mutation of the server itself, for its cluster's audit (fencing, reboot count).
fn record_mutation(fleet: &Fleet, bmc: &Bmc, req: &IncusRequest<'_>, reboot: bool) {
    let name = member_name(bmc, &bmc.machine());
    let mut clusters = fleet.clusters();
    if let Some(cluster) = clusters.values_mut().find(|c| c.members.contains(&bmc.index)) {
        cluster
            .audit
            .mutation(&name, req.method.as_str(), req.path, req.fence);
        if reboot {
            cluster.audit.counts(&name).reboots += 1;
        }
    }
}

/// `:check`: the start-up check's own code run as a requested check (`os::requested_check`), outside the
/// machine's lock (it is network calls). The provider is the installed seed's, as at start-up. A check the machine's
/// reboot interrupted is a 503.
async fn check_update(bmc: &Arc<Bmc>) -> Response {
    let provider = {
        let mut m = bmc.machine();
        let Some(provider) = os::seeded_provider(&m.os) else {
            m.os.update_status = "No update provider configured".to_owned();
            return error(StatusCode::BAD_REQUEST, "no update provider configured");
        };
        provider
    };
    match os::requested_check(bmc, &provider).await {
        Ok(Ok(())) => sync(json!({})),
        Ok(Err(status)) => error(StatusCode::INTERNAL_SERVER_ERROR, &status),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the machine rebooted during the update check",
        ),
    }
}

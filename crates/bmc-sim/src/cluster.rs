//! Incus clusters of simulated servers: which servers form one (the administrator's `incus cluster enable` / join,
//! done here through `PUT /control/clusters/<cluster>`), every member's view of the others, and the evacuate and
//! restore operations (`POST /1.0/cluster/members/<member>/state`), after Incus's `cmd/incusd/api_cluster.go` and
//! `api_cluster_evacuation.go`.
//!
//! - A member's name is its installed OS's hostname (what it registered as).
//! - `status` is `Online`, `Evacuated` or `Offline` (the OS is not running, or the `member_offline` fault), with
//!   Incus's messages. Incus records `Evacuated` when an evacuation starts and `Online` when a restore starts, and
//!   reverts on failure, so those are what a member reports while its operation runs.
//! - Any member's API takes the request for any member (Incus forwards it to that member). The operation belongs to
//!   the member acted on and any member's API answers `GET /1.0/operations/<id>` for it (Incus finds an operation's
//!   member in the cluster database and forwards).
//! - Evacuating a member already evacuated, restoring one not evacuated, or acting on an offline member is a 400
//!   error at once. (Incus checks the state inside the operation in its newer releases, so the operation fails
//!   instead; the message is the same: `Cluster member is already evacuated` / `... already restored`.)
//! - The member state survives the member's reboot: the cluster database keeps it.
//! - Forming a cluster bootstraps it: one cluster certificate is made, and every member's listener serves it from
//!   then on in place of the member's own `server.crt` (`Cluster::certificate`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::bmc::Bmc;
use crate::cluster_audit::{ClusterAudit, ClusterAuditReport};
use crate::incus::{error, sync};
use crate::machine::{IncusOperation, Machine, MemberAction, MemberState, OsPhase, Planned};
use crate::register::ClientIdentity;
use crate::reply;
use crate::server::Fleet;

/// One cluster: its members (fleet indices, in the order they joined), its certificate and its audit.
#[derive(Debug)]
pub struct Cluster {
    pub members: Vec<usize>,
    /// Made when the cluster is bootstrapped and served by every member's listener from then on (Incus answers
    /// `PUT /1.0/cluster` with it; Operations Center pins it for every member, `cluster_service.go:373-385,
    /// 430-436`). Members keep presenting their own `server.crt` as client certificate (`app_incus.go:182-184`).
    pub certificate: ClientIdentity,
    pub audit: ClusterAudit,
}

/// Why a cluster could not be formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("no server {0}")]
    UnknownServer(String),
    #[error("server {server} is a member of cluster {cluster} already")]
    InAnotherCluster { server: String, cluster: String },
    #[error("a cluster needs at least one member")]
    Empty,
    #[error("making the cluster certificate: {0}")]
    Certificate(String),
}

/// The member name of a server: its hostname (IncusOS's default is the SMBIOS UUID, until it has started).
pub fn member_name(bmc: &Bmc, m: &Machine) -> String {
    m.os.hostname.clone().unwrap_or_else(|| bmc.uuid.clone())
}

/// Whether the other members reach this one.
pub fn reachable(bmc: &Bmc, m: &Machine) -> bool {
    m.phase == OsPhase::OsRunning && !bmc.faults().member_offline
}

impl Fleet {
    /// Make `members` (fleet indices) the cluster `name`, replacing its earlier member list.
    pub fn form_cluster(&self, name: &str, members: &[usize]) -> Result<(), ClusterError> {
        if members.is_empty() {
            return Err(ClusterError::Empty);
        }
        let mut clusters = self.clusters();
        for &i in members {
            let bmc = self
                .bmcs
                .get(i)
                .ok_or_else(|| ClusterError::UnknownServer(i.to_string()))?;
            if let Some((other, _)) = clusters
                .iter()
                .find(|(n, c)| *n != name && c.members.contains(&i))
            {
                return Err(ClusterError::InAnotherCluster {
                    server: bmc.name.clone(),
                    cluster: other.clone(),
                });
            }
        }
        let mut unique = Vec::new();
        for &i in members {
            if !unique.contains(&i) {
                unique.push(i);
            }
        }
        let out = self.evacuated(&unique);
        let cluster = match clusters.entry(name.to_owned()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                // Bootstrapping: Incus makes the cluster's keypair (`incus cluster enable`, `PUT /1.0/cluster`).
                let certificate =
                    ClientIdentity::generate(name).map_err(|e| ClusterError::Certificate(e.to_string()))?;
                e.insert(Cluster {
                    members: Vec::new(),
                    certificate,
                    audit: ClusterAudit::default(),
                })
            }
        };
        cluster.members = unique;
        cluster.audit.reset(&out);
        Ok(())
    }

    /// The certificate server `index`'s Incus serves: none before Incus has made its own, then its `server.crt`,
    /// or its cluster's certificate while it is a member (`app_incus.go:204-215`: `cluster.crt` preferred).
    pub fn served_identity(&self, index: usize) -> Option<ClientIdentity> {
        let own = self.bmcs.get(index)?.machine().os.identity.clone()?;
        let clusters = self.clusters();
        Some(
            clusters
                .values()
                .find(|c| c.members.contains(&index))
                .map_or(own, |c| c.certificate.clone()),
        )
    }

    /// The audit of cluster `name`.
    pub fn cluster_audit(&self, name: &str) -> Option<ClusterAuditReport> {
        let clusters = self.clusters();
        let cluster = clusters.get(name)?;
        Some(cluster.audit.report(&self.evacuated(&cluster.members)))
    }

    /// Reset the audit of cluster `name` (false when there is no such cluster).
    pub fn reset_cluster_audit(&self, name: &str) -> bool {
        let mut clusters = self.clusters();
        let Some(cluster) = clusters.get_mut(name) else {
            return false;
        };
        let out = self.evacuated(&cluster.members);
        cluster.audit.reset(&out);
        true
    }

    /// The members of `indices` out for an evacuation now, by name.
    pub fn evacuated(&self, indices: &[usize]) -> BTreeSet<String> {
        indices
            .iter()
            .filter_map(|&i| {
                let bmc = &self.bmcs[i];
                let m = bmc.machine();
                m.os.member.in_maintenance().then(|| member_name(bmc, &m))
            })
            .collect()
    }

    /// The cluster server `index` belongs to, and its members.
    pub fn cluster_of(&self, index: usize) -> Option<(String, Vec<usize>)> {
        self.clusters()
            .iter()
            .find(|(_, c)| c.members.contains(&index))
            .map(|(n, c)| (n.clone(), c.members.clone()))
    }

    /// The member of `members` named `name`.
    fn find_member(&self, members: &[usize], name: &str) -> Option<usize> {
        members.iter().copied().find(|&i| {
            let bmc = &self.bmcs[i];
            member_name(bmc, &bmc.machine()) == name
        })
    }
}

/// A member object as `GET /1.0/cluster/members/<name>` answers it; `position` is its place in the join order
/// (the first three hold the database, the first leads it).
fn member_json(bmc: &Bmc, position: usize) -> Value {
    let m = bmc.machine();
    let (status, message) = if !reachable(bmc, &m) {
        ("Offline", "No heartbeat for 30s")
    } else if m.os.member.reported() == "Evacuated" {
        ("Evacuated", "Unavailable due to maintenance")
    } else {
        ("Online", "Fully operational")
    };
    let roles: Vec<&str> = match position {
        0 => vec!["database-leader", "database"],
        1 | 2 => vec!["database"],
        _ => Vec::new(),
    };
    json!({
        "server_name": member_name(bmc, &m),
        "url": bmc.incus_url().unwrap_or_default(),
        "database": position < 3,
        "status": status,
        "message": message,
        "architecture": "x86_64",
        "failure_domain": "default",
        "description": "",
        "config": {},
        "groups": ["default"],
        "roles": roles,
    })
}

/// `GET /1.0/cluster`.
pub fn get_cluster(fleet: &Fleet, bmc: &Bmc) -> Response {
    match fleet.cluster_of(bmc.index) {
        Some(_) => sync(json!({
            "server_name": member_name(bmc, &bmc.machine()),
            "enabled": true,
            "member_config": [],
        })),
        None => sync(json!({"server_name": "", "enabled": false, "member_config": []})),
    }
}

/// `GET /1.0/cluster/members` (URLs, or objects with `recursion=1`).
pub fn list_members(fleet: &Fleet, bmc: &Bmc, recursion: bool) -> Response {
    let Some((_, members)) = fleet.cluster_of(bmc.index) else {
        return error(StatusCode::BAD_REQUEST, "Server isn't part of a cluster");
    };
    let list: Vec<Value> = members
        .iter()
        .enumerate()
        .map(|(position, &i)| {
            let member = &fleet.bmcs[i];
            if recursion {
                member_json(member, position)
            } else {
                json!(format!(
                    "/1.0/cluster/members/{}",
                    member_name(member, &member.machine())
                ))
            }
        })
        .collect();
    sync(Value::Array(list))
}

/// `GET /1.0/cluster/members/<name>`.
pub fn get_member(fleet: &Fleet, bmc: &Bmc, name: &str) -> Response {
    let Some((_, members)) = fleet.cluster_of(bmc.index) else {
        return error(StatusCode::BAD_REQUEST, "Server isn't part of a cluster");
    };
    match fleet.find_member(&members, name) {
        Some(i) => {
            let position = members.iter().position(|&m| m == i).unwrap_or(0);
            sync(member_json(&fleet.bmcs[i], position))
        }
        None => error(StatusCode::NOT_FOUND, "Cluster member not found"),
    }
}

/// `POST /1.0/cluster/members/<name>/state`, received by `bmc`'s API.
pub fn post_member_state(
    fleet: &Arc<Fleet>,
    bmc: &Bmc,
    name: &str,
    body: &[u8],
    fence: Option<&str>,
    path: &str,
) -> Response {
    let action = match serde_json::from_slice::<Value>(body) {
        Ok(v) => v
            .get("action")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let action = match action.as_str() {
        "evacuate" => MemberAction::Evacuate,
        "restore" => MemberAction::Restore,
        other => return error(StatusCode::BAD_REQUEST, &format!("Unknown action {other:?}")),
    };
    let mut clusters = fleet.clusters();
    let Some(cluster) = clusters.values_mut().find(|c| c.members.contains(&bmc.index)) else {
        return error(StatusCode::BAD_REQUEST, "Server isn't part of a cluster");
    };
    let Some(target_index) = fleet.find_member(&cluster.members, name) else {
        return error(StatusCode::NOT_FOUND, "Cluster member not found");
    };
    cluster.audit.mutation(name, "POST", path, fence);
    let counts = cluster.audit.counts(name);
    match action {
        MemberAction::Evacuate => counts.evacuations += 1,
        MemberAction::Restore => counts.restores += 1,
    }
    let target = fleet.bmcs[target_index].clone();
    let now = target.shared.clock.now();
    let (id, generation, description) = {
        let mut m = target.machine();
        if !reachable(&target, &m) {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("Cluster member {name:?} is offline"),
            );
        }
        let next = match (action, m.os.member) {
            (MemberAction::Evacuate, MemberState::Online) => MemberState::Evacuating,
            (MemberAction::Evacuate, MemberState::Restoring) => {
                return error(StatusCode::BAD_REQUEST, "Cluster member is being restored");
            }
            (MemberAction::Evacuate, _) => {
                return error(StatusCode::BAD_REQUEST, "Cluster member is already evacuated");
            }
            (MemberAction::Restore, MemberState::Evacuated | MemberState::Evacuating) => {
                MemberState::Restoring
            }
            (MemberAction::Restore, _) => {
                return error(StatusCode::BAD_REQUEST, "Cluster member is already restored");
            }
        };
        // A restore ends an evacuation still running (the hanging one of `evacuate_hangs`).
        for op in m.os.operations.values_mut() {
            op.finish(Err("Evacuation cancelled by a restore".to_owned()), now);
        }
        let faults = target.faults().clone();
        let planned = match action {
            MemberAction::Evacuate if faults.evacuate_hangs => Planned::Hang,
            MemberAction::Evacuate if faults.evacuate_fails => Planned::Fail,
            MemberAction::Restore if faults.restore_fails => Planned::Fail,
            _ => Planned::Succeed,
        };
        m.os.member = next;
        let id = uuid::Uuid::new_v4().to_string();
        m.os.operations.insert(
            id.clone(),
            IncusOperation {
                action,
                member: name.to_owned(),
                created_at: now,
                updated_at: now,
                planned,
                outcome: None,
                done: Arc::new(tokio::sync::Notify::new()),
            },
        );
        let description = operation_json(&id, &m.os.operations[&id]);
        (id, m.boot_gen, description)
    };
    let out = fleet.evacuated(&cluster.members);
    cluster.audit.observe(&out);
    drop(clusters);
    let op_id = id.clone();
    tokio::spawn(async move {
        let shared = target.shared.clone();
        if shared.clock.sleep(shared.timings.incus_operation).await.is_ok() {
            complete(&target, &op_id, generation);
        }
    });
    let mut response = reply::json(
        StatusCode::ACCEPTED,
        &json!({
            "type": "async",
            "status": "Operation created",
            "status_code": 100,
            "operation": format!("/1.0/operations/{id}"),
            "metadata": description,
        }),
    );
    if let Ok(location) = format!("/1.0/operations/{id}").parse() {
        response
            .headers_mut()
            .insert(axum::http::header::LOCATION, location);
    }
    response
}

/// The operation's time is up: it ends as planned, unless a reboot or a restore ended it first.
fn complete(target: &Bmc, id: &str, generation: u64) {
    {
        let mut m = target.machine();
        if m.boot_gen != generation {
            return;
        }
        let now = target.shared.clock.now();
        let Some(op) = m.os.operations.get_mut(id) else {
            return;
        };
        if op.outcome.is_some() || op.planned == Planned::Hang {
            return;
        }
        let (outcome, state) = match (op.action, op.planned) {
            (MemberAction::Evacuate, Planned::Succeed) => (Ok(()), MemberState::Evacuated),
            (MemberAction::Evacuate, _) => (
                Err(format!(
                    "Failed to evacuate instances: Failed to migrate instances off {}",
                    op.member
                )),
                MemberState::Online,
            ),
            (MemberAction::Restore, Planned::Succeed) => (Ok(()), MemberState::Online),
            (MemberAction::Restore, _) => (
                Err("Failed to restore instances: Failed to start instances".to_owned()),
                MemberState::Evacuated,
            ),
        };
        op.finish(outcome, now);
        m.os.member = state;
    }
}

/// An operation as Incus describes it (`api.Operation`).
fn operation_json(id: &str, op: &IncusOperation) -> Value {
    let (status, code, err) = match &op.outcome {
        None => ("Running", 103, String::new()),
        Some(Ok(())) => ("Success", 200, String::new()),
        Some(Err(e)) => ("Failure", 400, e.clone()),
    };
    let description = match op.action {
        MemberAction::Evacuate => "Evacuating cluster member",
        MemberAction::Restore => "Restoring cluster member",
    };
    json!({
        "id": id,
        "class": "task",
        "description": description,
        "created_at": op.created_at,
        "updated_at": op.updated_at,
        "status": status,
        "status_code": code,
        "resources": {"cluster": [format!("/1.0/cluster/members/{}", op.member)]},
        "metadata": {},
        "may_cancel": false,
        "err": err,
        "location": op.member,
    })
}

/// The operation `id` among the members `bmc` reaches (its cluster, or itself): its description and the waker.
fn find_operation(fleet: &Fleet, bmc: &Bmc, id: &str) -> Option<(Value, Arc<tokio::sync::Notify>, bool)> {
    let members = fleet
        .cluster_of(bmc.index)
        .map_or_else(|| vec![bmc.index], |(_, m)| m);
    members.iter().find_map(|&i| {
        let m = fleet.bmcs[i].machine();
        m.os.operations
            .get(id)
            .map(|op| (operation_json(id, op), op.done.clone(), op.outcome.is_some()))
    })
}

/// `GET /1.0/operations`: the operations this member holds, grouped by lower-case status as Incus lists them
/// (URLs, or the objects with `recursion=1`).
pub fn list_operations(bmc: &Bmc, recursion: bool) -> Response {
    let m = bmc.machine();
    let mut groups: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (id, op) in &m.os.operations {
        let json = operation_json(id, op);
        let status = json["status"].as_str().unwrap_or("unknown").to_lowercase();
        let entry = if recursion {
            json
        } else {
            Value::String(format!("/1.0/operations/{id}"))
        };
        groups.entry(status).or_default().push(entry);
    }
    sync(serde_json::to_value(groups).unwrap_or_default())
}

/// `GET /1.0/operations/<id>`, and `/wait` with `timeout` seconds (`-1` or none: until it ends).
pub async fn get_operation(fleet: &Fleet, bmc: &Bmc, id: &str, wait: Option<Option<f64>>) -> Response {
    let Some((mut description, done, finished)) = find_operation(fleet, bmc, id) else {
        return error(StatusCode::NOT_FOUND, "Operation not found");
    };
    if let Some(timeout) = wait
        && !finished
    {
        let notified = done.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // Looked up again after enabling the waker: an end in between is not missed.
        if let Some((d, _, false)) = find_operation(fleet, bmc, id) {
            description = d;
            match timeout.filter(|t| *t >= 0.0) {
                Some(seconds) => {
                    let _ = tokio::time::timeout(Duration::from_secs_f64(seconds), notified).await;
                }
                None => notified.await,
            }
        }
        if let Some((d, _, _)) = find_operation(fleet, bmc, id) {
            description = d;
        }
    }
    sync(description)
}

/// The audit of every cluster member's evacuation state, for the control endpoint.
pub fn members_by_name(fleet: &Fleet, members: &[usize]) -> BTreeMap<String, String> {
    members
        .iter()
        .map(|&i| {
            let bmc = &fleet.bmcs[i];
            let m = bmc.machine();
            let status = if reachable(bmc, &m) {
                m.os.member.reported()
            } else {
                "Offline"
            };
            (member_name(bmc, &m), status.to_owned())
        })
        .collect()
}

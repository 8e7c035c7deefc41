//! Service-level resources: ServiceRoot, OData documents, collections, Manager, Chassis,
//! TaskService with task monitors, and SessionService.

use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::{Ctx, MONITORS, SESSIONS, TASKS};
use crate::bmc::TaskEntry;
use crate::clock::redfish_time;
use crate::reply;

pub fn root(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    reply::ok(&json!({
        "@odata.id": ctx.uri("/redfish/v1"),
        "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
        "@odata.context": "/redfish/v1/$metadata#ServiceRoot.ServiceRoot",
        "Id": "RootService",
        "Name": "Root Service",
        "RedfishVersion": "1.17.0",
        "UUID": ctx.bmc.uuid,
        "Vendor": p.manufacturer,
        "Product": "racklift BMC simulator",
        "Systems": ctx.link("/redfish/v1/Systems"),
        "Managers": ctx.link("/redfish/v1/Managers"),
        "Chassis": ctx.link("/redfish/v1/Chassis"),
        // `Tasks` is ServiceRoot's name for the link to the TaskService.
        "Tasks": ctx.link("/redfish/v1/TaskService"),
        "Registries": ctx.link("/redfish/v1/Registries"),
        "SessionService": ctx.link("/redfish/v1/SessionService"),
        "AccountService": ctx.link(super::accounts::ACCOUNT_SERVICE),
        "Links": {"Sessions": ctx.link(SESSIONS)},
    }))
}

pub fn odata(ctx: &Ctx<'_>) -> Response {
    let entry = |name: &str, path: &str| json!({"name": name, "kind": "Singleton", "url": ctx.uri(path)});
    reply::ok(&json!({
        "@odata.context": ctx.uri("/redfish/v1/$metadata"),
        "value": [
            entry("Service", "/redfish/v1"),
            entry("Systems", "/redfish/v1/Systems"),
            entry("Managers", "/redfish/v1/Managers"),
            entry("Chassis", "/redfish/v1/Chassis"),
            entry("TaskService", "/redfish/v1/TaskService"),
            entry("SessionService", "/redfish/v1/SessionService"),
            entry("AccountService", super::accounts::ACCOUNT_SERVICE),
        ],
    }))
}

/// `(schema file, namespace)` referenced by `$metadata`: every type the simulator emits.
const SCHEMAS: &[(&str, &str)] = &[
    ("ServiceRoot_v1", "ServiceRoot.v1_15_0"),
    ("AccountService_v1", "AccountService.v1_15_0"),
    ("ManagerAccountCollection_v1", "ManagerAccountCollection"),
    ("ManagerAccount_v1", "ManagerAccount.v1_10_0"),
    ("RoleCollection_v1", "RoleCollection"),
    ("Role_v1", "Role.v1_3_1"),
    ("ComputerSystemCollection_v1", "ComputerSystemCollection"),
    ("ComputerSystem_v1", "ComputerSystem.v1_20_0"),
    ("ManagerCollection_v1", "ManagerCollection"),
    ("Manager_v1", "Manager.v1_19_0"),
    ("ChassisCollection_v1", "ChassisCollection"),
    ("Chassis_v1", "Chassis.v1_25_0"),
    ("VirtualMediaCollection_v1", "VirtualMediaCollection"),
    ("VirtualMedia_v1", "VirtualMedia.v1_6_0"),
    ("Bios_v1", "Bios.v1_2_0"),
    ("Settings_v1", "Settings.v1_3_5"),
    ("SecureBoot_v1", "SecureBoot.v1_1_0"),
    ("SecureBootDatabaseCollection_v1", "SecureBootDatabaseCollection"),
    ("SecureBootDatabase_v1", "SecureBootDatabase.v1_0_3"),
    ("CertificateCollection_v1", "CertificateCollection"),
    ("Certificate_v1", "Certificate.v1_5_0"),
    ("SignatureCollection_v1", "SignatureCollection"),
    ("Signature_v1", "Signature.v1_0_2"),
    ("TaskService_v1", "TaskService.v1_2_0"),
    ("TaskCollection_v1", "TaskCollection"),
    ("Task_v1", "Task.v1_7_0"),
    ("SessionService_v1", "SessionService.v1_1_8"),
    ("SessionCollection_v1", "SessionCollection"),
    ("Session_v1", "Session.v1_7_0"),
    ("ActionInfo_v1", "ActionInfo.v1_3_0"),
    ("Message_v1", "Message.v1_1_1"),
    (
        "MessageRegistryFileCollection_v1",
        "MessageRegistryFileCollection",
    ),
    ("MessageRegistryFile_v1", "MessageRegistryFile.v1_1_3"),
    ("AttributeRegistry_v1", "AttributeRegistry.v1_3_6"),
    ("Resource_v1", "Resource.v1_19_0"),
];

/// The CSDL `$metadata` document: references to the DMTF schemas of every emitted type.
pub fn metadata_document() -> String {
    let mut s = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<edmx:Edmx xmlns:edmx=\"http://docs.oasis-open.org/odata/ns/edmx\" Version=\"4.0\">\n",
    );
    for (file, ns) in SCHEMAS {
        let base = ns.split('.').next().unwrap_or(ns);
        s.push_str(&format!(
            "  <edmx:Reference Uri=\"http://redfish.dmtf.org/schemas/v1/{file}.xml\">\n    <edmx:Include Namespace=\"{base}\"/>\n"
        ));
        if base != *ns {
            s.push_str(&format!("    <edmx:Include Namespace=\"{ns}\"/>\n"));
        }
        s.push_str("  </edmx:Reference>\n");
    }
    s.push_str(
        "  <edmx:DataServices>\n    <Schema xmlns=\"http://docs.oasis-open.org/odata/ns/edm\" Namespace=\"Service\">\n      <EntityContainer Name=\"Service\" Extends=\"ServiceRoot.v1_15_0.ServiceContainer\"/>\n    </Schema>\n  </edmx:DataServices>\n</edmx:Edmx>\n",
    );
    s
}

pub fn metadata() -> Response {
    let mut resp = Response::new(Body::from(metadata_document()));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    h.insert("odata-version", HeaderValue::from_static("4.0"));
    resp
}

pub fn systems(ctx: &Ctx<'_>) -> Response {
    reply::ok(&ctx.collection(
        "/redfish/v1/Systems",
        "#ComputerSystemCollection.ComputerSystemCollection",
        "Computer System Collection",
        &super::system::member_paths(ctx),
    ))
}

pub fn managers(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    reply::ok(&ctx.collection(
        "/redfish/v1/Managers",
        "#ManagerCollection.ManagerCollection",
        "Manager Collection",
        std::slice::from_ref(&p.manager_path),
    ))
}

pub fn manager(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    let mut body = json!({
        "@odata.id": ctx.uri(&p.manager_path),
        "@odata.type": "#Manager.v1_19_0.Manager",
        "@odata.context": "/redfish/v1/$metadata#Manager.Manager",
        "Id": p.manager_id,
        "Name": "Manager",
        "ManagerType": "BMC",
        "FirmwareVersion": "1.0.0-sim",
        "Status": {"State": "Enabled", "Health": "OK"},
        "Links": {
            "ManagerForServers": [ctx.link(&p.system_path)],
            "ManagerForChassis": [ctx.link(&p.chassis_path)],
        },
    });
    if let Some(link) = &p.manager_media_link {
        body["VirtualMedia"] = ctx.link(link);
    }
    reply::ok(&body)
}

pub fn chassis_collection(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    reply::ok(&ctx.collection(
        "/redfish/v1/Chassis",
        "#ChassisCollection.ChassisCollection",
        "Chassis Collection",
        std::slice::from_ref(&p.chassis_path),
    ))
}

pub fn chassis(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    let power = ctx.bmc.machine().power.as_str();
    reply::ok(&json!({
        "@odata.id": ctx.uri(&p.chassis_path),
        "@odata.type": "#Chassis.v1_25_0.Chassis",
        "@odata.context": "/redfish/v1/$metadata#Chassis.Chassis",
        "Id": "1",
        "Name": "Chassis",
        "ChassisType": "RackMount",
        "Manufacturer": p.manufacturer,
        "Model": p.model,
        "PowerState": power,
        "Status": {"State": "Enabled", "Health": "OK"},
        "Links": {
            "ComputerSystems": [ctx.link(&p.system_path)],
            "ManagedBy": [ctx.link(&p.manager_path)],
        },
    }))
}

pub fn task_service(ctx: &Ctx<'_>) -> Response {
    reply::ok(&json!({
        "@odata.id": ctx.uri("/redfish/v1/TaskService"),
        "@odata.type": "#TaskService.v1_2_0.TaskService",
        "@odata.context": "/redfish/v1/$metadata#TaskService.TaskService",
        "Id": "TaskService",
        "Name": "Task Service",
        "ServiceEnabled": true,
        "Status": {"State": "Enabled", "Health": "OK"},
        "Tasks": ctx.link(TASKS),
    }))
}

pub fn tasks(ctx: &Ctx<'_>) -> Response {
    let members: Vec<String> = ctx
        .bmc
        .tasks()
        .entries
        .keys()
        .map(|id| format!("{TASKS}/{id}"))
        .collect();
    reply::ok(&ctx.collection(
        TASKS,
        "#TaskCollection.TaskCollection",
        "Task Collection",
        &members,
    ))
}

fn task_body(ctx: &Ctx<'_>, id: u64, t: &TaskEntry, now: Instant) -> Value {
    let done = t.is_done(now);
    let mut body = json!({
        "@odata.id": ctx.uri(&format!("{TASKS}/{id}")),
        "@odata.type": "#Task.v1_7_0.Task",
        "@odata.context": "/redfish/v1/$metadata#Task.Task",
        "Id": id.to_string(),
        "Name": t.name,
        "TaskState": if done { "Completed" } else { "Running" },
        "TaskStatus": "OK",
        "PercentComplete": if done { 100 } else { 50 },
        "StartTime": redfish_time(t.start),
        "TaskMonitor": ctx.uri(&format!("{MONITORS}/{id}")),
        "Messages": [],
    });
    if done {
        body["EndTime"] = json!(redfish_time(t.end.unwrap_or(t.start)));
    }
    body
}

pub fn task(ctx: &Ctx<'_>, id: u64) -> Response {
    let tasks = ctx.bmc.tasks();
    match tasks.entries.get(&id) {
        Some(t) => reply::ok(&task_body(ctx, id, t, Instant::now())),
        None => reply::not_found(),
    }
}

/// Body and `Location` of a 202 for task `id`.
pub fn accepted_task(ctx: &Ctx<'_>, id: u64) -> Response {
    let tasks = ctx.bmc.tasks();
    let Some(t) = tasks.entries.get(&id) else {
        return reply::not_found();
    };
    reply::accepted(
        &ctx.uri(&format!("{MONITORS}/{id}")),
        &task_body(ctx, id, t, Instant::now()),
    )
}

/// A task monitor: 202 while running, the final answer once, then 404.
pub fn monitor(ctx: &Ctx<'_>, id: u64) -> Response {
    if *ctx.method != Method::GET {
        return reply::method_not_allowed();
    }
    if ctx.bmc.faults().forget_task_monitors {
        return reply::not_found();
    }
    let now = Instant::now();
    let mut tasks = ctx.bmc.tasks();
    let Some(t) = tasks.entries.get_mut(&id) else {
        return reply::not_found();
    };
    if t.consumed {
        return reply::not_found();
    }
    if !t.is_done(now) {
        let body = task_body(ctx, id, t, now);
        return reply::accepted(&ctx.uri(&format!("{MONITORS}/{id}")), &body);
    }
    if t.end.is_none() {
        t.end = Some(ctx.bmc.shared.clock.now());
    }
    t.consumed = true;
    let t = t.clone();
    reply::ok(&task_body(ctx, id, &t, now))
}

pub fn session_service(ctx: &Ctx<'_>) -> Response {
    reply::ok(&json!({
        "@odata.id": ctx.uri("/redfish/v1/SessionService"),
        "@odata.type": "#SessionService.v1_1_8.SessionService",
        "@odata.context": "/redfish/v1/$metadata#SessionService.SessionService",
        "Id": "SessionService",
        "Name": "Session Service",
        "ServiceEnabled": true,
        "SessionTimeout": 1800,
        "Status": {"State": "Enabled", "Health": "OK"},
        "Sessions": ctx.link(SESSIONS),
    }))
}

pub fn sessions(ctx: &Ctx<'_>) -> Response {
    let members: Vec<String> = ctx
        .bmc
        .sessions()
        .by_id
        .keys()
        .map(|id| format!("{SESSIONS}/{id}"))
        .collect();
    reply::ok(&ctx.collection(
        SESSIONS,
        "#SessionCollection.SessionCollection",
        "Session Collection",
        &members,
    ))
}

fn session_body(ctx: &Ctx<'_>, id: u64) -> Value {
    let owner = ctx.bmc.sessions().owner.get(&id).copied();
    let user = owner
        .and_then(|account| ctx.bmc.accounts().get(account).map(|a| a.user.clone()))
        .unwrap_or_default();
    json!({
        "@odata.id": ctx.uri(&format!("{SESSIONS}/{id}")),
        "@odata.type": "#Session.v1_7_0.Session",
        "@odata.context": "/redfish/v1/$metadata#Session.Session",
        "Id": id.to_string(),
        "Name": "User Session",
        "UserName": user,
    })
}

/// `POST Sessions` (unauthenticated: it is the login).
pub fn create_session(ctx: &Ctx<'_>) -> Response {
    let body = match ctx.json_body() {
        Ok(b) => b,
        Err(r) => return r,
    };
    let user = body.get("UserName").and_then(Value::as_str).unwrap_or_default();
    let pass = body.get("Password").and_then(Value::as_str).unwrap_or_default();
    let Some(principal) = ctx.bmc.accounts().authenticate(user, pass) else {
        return reply::unauthorized();
    };
    let limit = ctx.bmc.faults().session_limit;
    let mut sessions = ctx.bmc.sessions();
    if limit.is_some_and(|l| sessions.by_id.len() >= l as usize) {
        return reply::busy_rac0218();
    }
    sessions.next += 1;
    let id = sessions.next;
    let token = uuid::Uuid::new_v4().simple().to_string();
    sessions.by_id.insert(id, token.clone());
    sessions.by_token.insert(token.clone(), id);
    sessions.owner.insert(id, principal.account);
    drop(sessions);
    let location = ctx.uri(&format!("{SESSIONS}/{id}"));
    let mut resp = reply::created(&location, &session_body(ctx, id));
    if let Ok(v) = HeaderValue::from_str(&token) {
        resp.headers_mut().insert("x-auth-token", v);
    }
    resp
}

/// `GET` or `DELETE` one session.
pub fn session(ctx: &Ctx<'_>, id: u64) -> Response {
    let mut sessions = ctx.bmc.sessions();
    if !sessions.by_id.contains_key(&id) {
        return reply::not_found();
    }
    match *ctx.method {
        Method::GET => {
            drop(sessions);
            reply::ok(&session_body(ctx, id))
        }
        Method::DELETE => {
            if let Some(token) = sessions.by_id.remove(&id) {
                sessions.by_token.remove(&token);
            }
            sessions.owner.remove(&id);
            reply::status(StatusCode::NO_CONTENT)
        }
        _ => reply::method_not_allowed(),
    }
}

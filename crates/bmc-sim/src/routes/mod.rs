//! Redfish routing. Each profile gets one table from resource path to [`Route`], built once and
//! shared by its BMCs, so a request costs one hash lookup after the per-BMC prefix is stripped.
//! Every emitted `@odata.id` carries the prefix the request came in with (`/bmc/<name>` or
//! nothing for the root alias), so clients can discover everything from links.

mod accounts;
mod bios;
mod media;
mod secure_boot;
mod service;
mod system;

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::accounts::{Principal, Privilege, Role};
use crate::bmc::Bmc;
use crate::etag;
use crate::profile::{Profile, SlotLocation};
use crate::reply;
use crate::secure_boot::DATABASES;

pub use service::metadata_document;

/// A static resource or action of a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Root,
    Odata,
    Metadata,
    Systems,
    System,
    SystemReset,
    ResetActionInfo,
    Bios,
    BiosSettings,
    BiosResetBios,
    Registries,
    RegistryFile,
    RegistryDocument,
    SecureBoot,
    SecureBootResetKeys,
    SbDbs,
    SbDb(usize),
    SbDbResetKeys(usize),
    SbCerts(usize),
    SbSigs(usize),
    Managers,
    Manager,
    MediaCollection(SlotLocation),
    Media(usize),
    MediaInsert(usize),
    MediaEject(usize),
    MediaInsertInfo(usize),
    MediaOemInsert(usize),
    MediaOemEject(usize),
    ChassisCollection,
    Chassis,
    TaskService,
    Tasks,
    SessionService,
    Sessions,
    AccountService,
    Accounts,
    Roles,
    Role(Role),
}

/// A resolved request path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    Static(Route),
    Cert(usize, u64),
    Sig(usize, u64),
    Task(u64),
    Monitor(u64),
    Session(u64),
    Account(u32),
}

pub const TASKS: &str = "/redfish/v1/TaskService/Tasks";
pub const MONITORS: &str = "/redfish/v1/TaskService/TaskMonitors";
pub const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";
/// Where the Redfish specification also lets a client create a session ("POST to the Members of the
/// collection").
pub const SESSIONS_MEMBERS: &str = "/redfish/v1/SessionService/Sessions/Members";

/// Paths of the secure-boot resources of a profile.
pub fn sb_path(profile: &Profile) -> String {
    format!("{}/SecureBoot", profile.system_path)
}

pub fn sb_db_path(profile: &Profile, db: usize) -> String {
    format!(
        "{}/SecureBoot/SecureBootDatabases/{}",
        profile.system_path, DATABASES[db]
    )
}

/// The route table of one profile.
pub struct RouteTable {
    map: HashMap<String, Route>,
    /// `(collection path + "/", db, is_signature)` for dynamic entries.
    entry_prefixes: Vec<(String, usize, bool)>,
}

fn trim(path: &str) -> &str {
    if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    }
}

impl RouteTable {
    pub fn new(p: &Profile) -> RouteTable {
        let mut map = HashMap::new();
        let mut add = |path: &str, route: Route| {
            map.insert(trim(path).to_owned(), route);
        };
        add("/redfish/v1", Route::Root);
        add("/redfish/v1/odata", Route::Odata);
        add("/redfish/v1/$metadata", Route::Metadata);
        add("/redfish/v1/Systems", Route::Systems);
        add(&p.system_path, Route::System);
        add(
            &format!("{}/Actions/ComputerSystem.Reset", p.system_path),
            Route::SystemReset,
        );
        if p.reset_action_info {
            add(&p.reset_action_info_path(), Route::ResetActionInfo);
        }
        add(&p.bios_path, Route::Bios);
        add(&p.bios_settings_path, Route::BiosSettings);
        add(
            &format!("{}/Actions/Bios.ResetBios", p.bios_path),
            Route::BiosResetBios,
        );
        add("/redfish/v1/Registries", Route::Registries);
        add(&p.registry_file_path(), Route::RegistryFile);
        add(&p.registry_document_path(), Route::RegistryDocument);
        let sb = sb_path(p);
        add(&sb, Route::SecureBoot);
        add(
            &format!("{sb}/Actions/SecureBoot.ResetKeys"),
            Route::SecureBootResetKeys,
        );
        let mut entry_prefixes = Vec::new();
        if p.secure_boot_databases {
            add(&format!("{sb}/SecureBootDatabases"), Route::SbDbs);
            for db in 0..DATABASES.len() {
                let d = sb_db_path(p, db);
                add(&d, Route::SbDb(db));
                add(
                    &format!("{d}/Actions/SecureBootDatabase.ResetKeys"),
                    Route::SbDbResetKeys(db),
                );
                add(&format!("{d}/Certificates"), Route::SbCerts(db));
                add(&format!("{d}/Signatures"), Route::SbSigs(db));
                entry_prefixes.push((format!("{d}/Certificates/"), db, false));
                entry_prefixes.push((format!("{d}/Signatures/"), db, true));
            }
        }
        add("/redfish/v1/Managers", Route::Managers);
        add(&p.manager_path, Route::Manager);
        if p.slots.iter().any(|s| s.location == SlotLocation::System) {
            add(
                &format!("{}/VirtualMedia", p.system_path),
                Route::MediaCollection(SlotLocation::System),
            );
        }
        if p.slots.iter().any(|s| s.location == SlotLocation::Manager) {
            add(
                &format!("{}/VirtualMedia", p.manager_path),
                Route::MediaCollection(SlotLocation::Manager),
            );
        }
        for (i, s) in p.slots.iter().enumerate() {
            add(&s.path, Route::Media(i));
            if s.actions {
                add(
                    &format!("{}/Actions/VirtualMedia.InsertMedia", s.path),
                    Route::MediaInsert(i),
                );
                add(
                    &format!("{}/Actions/VirtualMedia.EjectMedia", s.path),
                    Route::MediaEject(i),
                );
            }
            if s.insert_action_info {
                add(
                    &format!("{}/InsertMediaActionInfo", s.path),
                    Route::MediaInsertInfo(i),
                );
            }
            if s.oem_actions {
                add(
                    &format!("{}/Actions/Oem/Hpe/HpeiLOVirtualMedia.InsertVirtualMedia", s.path),
                    Route::MediaOemInsert(i),
                );
                add(
                    &format!("{}/Actions/Oem/Hpe/HpeiLOVirtualMedia.EjectVirtualMedia", s.path),
                    Route::MediaOemEject(i),
                );
            }
        }
        add("/redfish/v1/Chassis", Route::ChassisCollection);
        add(&p.chassis_path, Route::Chassis);
        add("/redfish/v1/TaskService", Route::TaskService);
        add(TASKS, Route::Tasks);
        add("/redfish/v1/SessionService", Route::SessionService);
        add(SESSIONS, Route::Sessions);
        add(SESSIONS_MEMBERS, Route::Sessions);
        add(accounts::ACCOUNT_SERVICE, Route::AccountService);
        add(accounts::ACCOUNTS, Route::Accounts);
        add(accounts::ROLES, Route::Roles);
        for role in Role::ALL {
            add(&format!("{}/{}", accounts::ROLES, role.id()), Route::Role(role));
        }
        RouteTable { map, entry_prefixes }
    }

    /// Resolve a resource path (per-BMC prefix already stripped).
    pub fn resolve(&self, path: &str) -> Option<Resolved> {
        let path = trim(path);
        if let Some(r) = self.map.get(path) {
            return Some(Resolved::Static(*r));
        }
        let id_after = |prefix: &str| {
            path.strip_prefix(prefix)
                .and_then(|rest| rest.strip_prefix('/'))
                .and_then(|id| id.parse::<u64>().ok())
        };
        if let Some(id) = id_after(TASKS) {
            return Some(Resolved::Task(id));
        }
        if let Some(id) = id_after(MONITORS) {
            return Some(Resolved::Monitor(id));
        }
        if let Some(id) = id_after(SESSIONS) {
            return Some(Resolved::Session(id));
        }
        if let Some(id) = id_after(accounts::ACCOUNTS).and_then(|id| u32::try_from(id).ok()) {
            return Some(Resolved::Account(id));
        }
        for (prefix, db, sig) in &self.entry_prefixes {
            if let Some(id) = path
                .strip_prefix(prefix.as_str())
                .and_then(|id| id.parse::<u64>().ok())
            {
                return Some(if *sig {
                    Resolved::Sig(*db, id)
                } else {
                    Resolved::Cert(*db, id)
                });
            }
        }
        None
    }
}

/// One Redfish request, after auth, faults and audit.
pub struct Ctx<'a> {
    pub bmc: &'a Arc<Bmc>,
    /// `/bmc/<name>` or `""`.
    pub prefix: &'a str,
    pub method: &'a Method,
    pub body: &'a [u8],
    /// The authenticated account (the administrator for the public resources).
    pub principal: Principal,
}

impl Ctx<'_> {
    pub fn profile(&self) -> &Profile {
        &self.bmc.profile
    }

    /// A request-visible URI for a resource path.
    pub fn uri(&self, path: &str) -> String {
        let mut s = String::with_capacity(self.prefix.len() + path.len());
        s.push_str(self.prefix);
        s.push_str(path);
        s
    }

    /// `{"@odata.id": uri}`.
    pub fn link(&self, path: &str) -> Value {
        json!({ "@odata.id": self.uri(path) })
    }

    /// The JSON request body (an empty body is `{}`).
    #[expect(
        clippy::result_large_err,
        reason = "the error is the answer, built once per bad request"
    )]
    pub fn json_body(&self) -> Result<Value, Response> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(json!({}));
        }
        serde_json::from_slice(self.body).map_err(|_| reply::bad_json())
    }

    /// A collection body.
    pub fn collection(&self, path: &str, odata_type: &str, name: &str, members: &[String]) -> Value {
        let members: Vec<Value> = members.iter().map(|m| self.link(m)).collect();
        json!({
            "@odata.id": self.uri(path),
            "@odata.type": odata_type,
            "@odata.context": format!("/redfish/v1/$metadata#{}", odata_type.trim_start_matches('#')),
            "Name": name,
            "Members@odata.count": members.len(),
            "Members": members,
        })
    }
}

/// The methods a resource answers, for `Allow` (Redfish specification, "Allow" response header: on GET and HEAD
/// answers and on 405).
fn allowed(resolved: Resolved) -> &'static str {
    use Route as R;
    const READ: &str = "GET, HEAD";
    match resolved {
        Resolved::Static(route) => match route {
            R::System | R::SecureBoot | R::Media(_) => "GET, HEAD, PATCH",
            R::BiosSettings => "GET, HEAD, PATCH, PUT",
            R::SbCerts(_) | R::Sessions | R::Accounts => "GET, HEAD, POST",
            R::SystemReset
            | R::BiosResetBios
            | R::SecureBootResetKeys
            | R::SbDbResetKeys(_)
            | R::MediaInsert(_)
            | R::MediaEject(_)
            | R::MediaOemInsert(_)
            | R::MediaOemEject(_) => "POST",
            _ => READ,
        },
        Resolved::Cert(db, _) | Resolved::Sig(db, _) if db < 4 => "GET, DELETE",
        Resolved::Session(_) => "GET, DELETE",
        Resolved::Account(_) => "GET, HEAD, PATCH, DELETE",
        Resolved::Cert(..) | Resolved::Sig(..) | Resolved::Task(_) | Resolved::Monitor(_) => READ,
    }
}

/// The privilege a request needs before its handler runs (DMTF privilege registry, DSP8011): reads `Login`,
/// accounts `ConfigureUsers`, the manager's resources (virtual media, other users' sessions)
/// `ConfigureManager`, the system `ConfigureComponents`. Changing one's own password is decided by the handler.
fn required(ctx: &Ctx<'_>, resolved: Resolved) -> Privilege {
    use Route as R;
    if *ctx.method == Method::GET || *ctx.method == Method::HEAD {
        return Privilege::Login;
    }
    match resolved {
        Resolved::Account(_) => accounts::needs(ctx.method).unwrap_or(Privilege::Login),
        Resolved::Static(R::Accounts | R::Roles | R::Role(_) | R::AccountService) => {
            Privilege::ConfigureUsers
        }
        Resolved::Session(id) => {
            if ctx.bmc.sessions().owner.get(&id) == Some(&ctx.principal.account) {
                Privilege::ConfigureSelf
            } else {
                Privilege::ConfigureManager
            }
        }
        Resolved::Static(R::Sessions) => Privilege::Login,
        Resolved::Static(
            R::Manager
            | R::MediaCollection(_)
            | R::Media(_)
            | R::MediaInsert(_)
            | R::MediaEject(_)
            | R::MediaOemInsert(_)
            | R::MediaOemEject(_),
        ) => Privilege::ConfigureManager,
        _ => Privilege::ConfigureComponents,
    }
}

/// Route a request to its handler; a read or a refused method is told what the resource allows, and a read
/// carries the resource's ETag (header and `@odata.etag`), answering 304 to an `If-None-Match` that names it.
pub async fn dispatch(ctx: Ctx<'_>, path: &str) -> Response {
    let get = *ctx.method == Method::GET || *ctx.method == Method::HEAD;
    let style = etag::Style::of(ctx.profile().personality);
    let header_absent = ctx.bmc.faults().etag_header_absent;
    let epoch = ctx.bmc.etag_epoch.load(std::sync::atomic::Ordering::Relaxed);
    let Some(resolved) = ctx.bmc.routes.resolve(path) else {
        // The other Systems of a multi-System BMC, read-only.
        return match system::extra(&ctx, path) {
            Some(resp) if get && resp.status() == StatusCode::OK => {
                tagged(resp, style, epoch, header_absent).await
            }
            Some(resp) => resp,
            None => reply::not_found(),
        };
    };
    if ctx.bmc.faults().no_bios
        && matches!(
            resolved,
            Resolved::Static(Route::Bios | Route::BiosSettings | Route::BiosResetBios)
        )
    {
        return reply::not_found();
    }
    let privilege = required(&ctx, resolved);
    if !ctx.principal.role.has(privilege) {
        return reply::forbidden(privilege.name());
    }
    let mut resp = route(ctx, resolved, get).await;
    if get && resp.status() == StatusCode::OK {
        resp = tagged(resp, style, epoch, header_absent).await;
    }
    if get || resp.status() == StatusCode::METHOD_NOT_ALLOWED {
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allowed(resolved)));
    }
    resp
}

/// A JSON read with its tag: the one its handler set (a revision the body does not show), else one over the
/// representation; as the `ETag` header (unless the BMC leaves it out) and as `@odata.etag`.
async fn tagged(resp: Response, style: etag::Style, epoch: u64, header_absent: bool) -> Response {
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return reply::status(StatusCode::INTERNAL_SERVER_ERROR);
    };
    let tag = match parts.headers.get(header::ETAG).and_then(|v| v.to_str().ok()) {
        Some(t) => t.to_owned(),
        None if epoch == 0 => etag::tag(style, &bytes),
        None => etag::tag(style, &[&bytes[..], &epoch.to_le_bytes()].concat()),
    };
    let body = etag::with_property(&bytes, &tag).unwrap_or_else(|| bytes.to_vec());
    if header_absent {
        parts.headers.remove(header::ETAG);
    } else if let Ok(v) = HeaderValue::from_str(&tag) {
        parts.headers.insert(header::ETAG, v);
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// The current tag of the resource at `path`, as a read would show it: what `If-Match` is checked against.
pub async fn current_etag(ctx: Ctx<'_>, path: &str) -> Option<String> {
    let read = Ctx {
        method: &Method::GET,
        body: &[],
        ..ctx
    };
    // The tag a read shows, header or not.
    let resp = Box::pin(dispatch(read, path)).await;
    if resp.status() != StatusCode::OK {
        return None;
    }
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.ok()?;
    serde_json::from_slice::<Value>(&bytes)
        .ok()?
        .get("@odata.etag")?
        .as_str()
        .map(str::to_owned)
}

async fn route(ctx: Ctx<'_>, resolved: Resolved, get: bool) -> Response {
    match resolved {
        Resolved::Static(route) => route_static(ctx, route, get).await,
        Resolved::Cert(db, id) | Resolved::Sig(db, id) => {
            let sig = matches!(resolved, Resolved::Sig(..));
            secure_boot::entry(&ctx, db, id, sig)
        }
        Resolved::Task(id) if get => service::task(&ctx, id),
        Resolved::Monitor(id) => service::monitor(&ctx, id),
        Resolved::Session(id) => service::session(&ctx, id),
        Resolved::Account(id) => match ctx.method.clone() {
            Method::GET | Method::HEAD => accounts::account(&ctx, id),
            Method::PATCH => accounts::patch(&ctx, id),
            Method::DELETE => accounts::delete(&ctx, id),
            _ => reply::method_not_allowed(),
        },
        Resolved::Task(_) => reply::method_not_allowed(),
    }
}

async fn route_static(ctx: Ctx<'_>, route: Route, get: bool) -> Response {
    use Route as R;
    let m = ctx.method.clone();
    match (route, get) {
        (R::Root, true) => service::root(&ctx),
        (R::Odata, true) => service::odata(&ctx),
        (R::Metadata, true) => service::metadata(),
        (R::Systems, true) => service::systems(&ctx),
        (R::System, true) => system::get(&ctx),
        (R::System, false) if m == Method::PATCH => system::patch(&ctx),
        (R::SystemReset, false) if m == Method::POST => system::reset(&ctx),
        (R::ResetActionInfo, true) => system::reset_action_info(&ctx),
        (R::Bios, true) => bios::get(&ctx),
        (R::BiosSettings, true) => bios::get_settings(&ctx),
        (R::BiosSettings, false) if m == Method::PATCH || m == Method::PUT => bios::patch_settings(&ctx),
        (R::BiosResetBios, false) if m == Method::POST => bios::reset_bios(&ctx),
        (R::Registries, true) => bios::registries(&ctx),
        (R::RegistryFile, true) => bios::registry_file(&ctx),
        (R::RegistryDocument, true) => bios::registry_document(&ctx),
        (R::SecureBoot, true) => secure_boot::get(&ctx),
        (R::SecureBoot, false) if m == Method::PATCH => secure_boot::patch(&ctx),
        (R::SecureBootResetKeys, false) if m == Method::POST => secure_boot::reset_keys(&ctx, None),
        (R::SbDbs, true) => secure_boot::databases(&ctx),
        (R::SbDb(db), true) => secure_boot::database(&ctx, db),
        (R::SbDbResetKeys(db), false) if m == Method::POST => secure_boot::reset_keys(&ctx, Some(db)),
        (R::SbCerts(db), true) => secure_boot::certificates(&ctx, db),
        (R::SbCerts(db), false) if m == Method::POST => secure_boot::add_certificate(&ctx, db),
        (R::SbSigs(db), true) => secure_boot::signatures(&ctx, db),
        (R::Managers, true) => service::managers(&ctx),
        (R::Manager, true) => service::manager(&ctx),
        (R::MediaCollection(loc), true) => media::collection(&ctx, loc),
        (R::Media(i), true) => media::get(&ctx, i),
        (R::Media(i), false) if m == Method::PATCH => media::patch(&ctx, i).await,
        (R::MediaInsert(i) | R::MediaOemInsert(i), false) if m == Method::POST => {
            media::insert(&ctx, i).await
        }
        (R::MediaEject(i) | R::MediaOemEject(i), false) if m == Method::POST => media::eject(&ctx, i),
        (R::MediaInsertInfo(i), true) => media::insert_action_info(&ctx, i),
        (R::ChassisCollection, true) => service::chassis_collection(&ctx),
        (R::Chassis, true) => service::chassis(&ctx),
        (R::TaskService, true) => service::task_service(&ctx),
        (R::Tasks, true) => service::tasks(&ctx),
        (R::SessionService, true) => service::session_service(&ctx),
        (R::Sessions, true) => service::sessions(&ctx),
        (R::Sessions, false) if m == Method::POST => service::create_session(&ctx),
        (R::AccountService, true) => accounts::service(&ctx),
        (R::Accounts, true) => accounts::collection(&ctx),
        (R::Accounts, false) if m == Method::POST => accounts::create(&ctx),
        (R::Roles, true) => accounts::roles(&ctx),
        (R::Role(role), true) => accounts::role(&ctx, role),
        _ => reply::method_not_allowed(),
    }
}

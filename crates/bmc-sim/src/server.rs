//! The listener: one socket for the whole fleet, plain or TLS, HTTP/1.1 and HTTP/2.
//!
//! A hand-rolled accept loop (rather than `axum::serve`) because the simulator needs TLS and
//! must be able to drop a connection without answering (the `reset_connection` fault). Paths:
//! `/bmc/<name>/redfish/v1/...` (one BMC each), `/redfish/v1/...` (alias of the first BMC, for
//! tools that only take a host) and `/control/...`. Each server's Incus API has a listener of its own
//! (`incus_listener`).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use axum::response::Response;
use base64::Engine as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::accounts::{Principal, Role};
use crate::audit::{Audit, ConnRequests, FENCE_HEADER};
use crate::bmc::{Bmc, Shared};
use crate::cluster::Cluster;
use crate::faults::RequestFault;
use crate::routes::{self, Ctx};
use crate::{control, etag, reply};

/// Largest request body accepted.
const BODY_LIMIT: usize = 4 << 20;

/// Every BMC of the simulator, by index and by name.
pub struct Fleet {
    pub bmcs: Vec<Arc<Bmc>>,
    pub by_name: HashMap<String, usize>,
    pub shared: Arc<Shared>,
    /// Incus clusters by name. Taken before any machine's lock, never while holding one.
    pub clusters: Mutex<BTreeMap<String, Cluster>>,
}

impl Fleet {
    pub fn clusters(&self) -> MutexGuard<'_, BTreeMap<String, Cluster>> {
        self.clusters.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Bmc>> {
        self.by_name.get(name).map(|i| &self.bmcs[*i])
    }
}

/// Accept connections until `cancel` fires; dropping the loop drops every connection.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    fleet: Arc<Fleet>,
    cancel: CancellationToken,
) {
    let mut conns = JoinSet::new();
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "bmc-sim accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = cancel.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        while conns.try_join_next().is_some() {}
        let fleet = fleet.clone();
        let tls = tls.clone();
        let cancel = cancel.clone();
        conns.spawn(async move {
            let kill = Arc::new(Notify::new());
            let requests = Arc::new(ConnRequests::default());
            let svc = {
                let kill = kill.clone();
                let requests = requests.clone();
                hyper::service::service_fn(move |req| {
                    let fleet = fleet.clone();
                    let kill = kill.clone();
                    let requests = requests.clone();
                    async move { Ok::<_, Infallible>(handle(&fleet, &kill, &requests, req).await) }
                })
            };
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            // The connection's requests end before the connection (and its socket) is dropped: hyper closes the
            // socket before it drops the handlers, and a request the BMC has hung up on is no longer in flight.
            match tls {
                Some(acceptor) => {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let conn = builder.serve_connection(TokioIo::new(stream), svc);
                    tokio::pin!(conn);
                    tokio::select! {
                        _ = &mut conn => {}
                        () = kill.notified() => {}
                        () = cancel.cancelled() => {}
                    }
                    requests.end_all();
                }
                None => {
                    let conn = builder.serve_connection(TokioIo::new(stream), svc);
                    tokio::pin!(conn);
                    tokio::select! {
                        _ = &mut conn => {}
                        () = kill.notified() => {}
                        () = cancel.cancelled() => {}
                    }
                    requests.end_all();
                }
            }
        });
    }
}

async fn handle(
    fleet: &Arc<Fleet>,
    kill: &Notify,
    requests: &ConnRequests,
    req: Request<Incoming>,
) -> Response {
    let path = req.uri().path().to_owned();
    if let Some(rest) = path.strip_prefix("/bmc/") {
        let (name, rel) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let Some(bmc) = fleet.get(name) else {
            return reply::not_found();
        };
        let prefix = &path[..5 + name.len()];
        return redfish(bmc, prefix, rel, kill, requests, req).await;
    }
    if path.starts_with("/redfish") {
        let Some(bmc) = fleet.bmcs.first() else {
            return reply::not_found();
        };
        return redfish(bmc, "", &path, kill, requests, req).await;
    }
    let method = req.method().clone();
    let Ok(body) = axum::body::to_bytes(Body::new(req.into_body()), BODY_LIMIT).await else {
        return reply::bad_json();
    };
    if let Some(rest) = path.strip_prefix("/control/") {
        return control::handle(fleet, &method, rest, &body).await;
    }
    reply::not_found()
}

/// Who sent the request: Basic credentials of an account, or a session token. The configured administrator's
/// exact header is matched first, without decoding, as nearly every request carries it.
fn principal(bmc: &Bmc, req: &Request<Incoming>) -> Option<Principal> {
    let headers = req.headers();
    if let Some(auth) = headers.get("authorization") {
        if auth.as_bytes() == bmc.shared.basic_auth.as_bytes() {
            return bmc.accounts().principal(1);
        }
        let decoded = auth
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b.trim()).ok())
            .and_then(|b| String::from_utf8(b).ok())?;
        let (user, password) = decoded.split_once(':')?;
        return bmc.accounts().authenticate(user, password);
    }
    let token = headers.get("x-auth-token").and_then(|v| v.to_str().ok())?;
    let account = {
        let sessions = bmc.sessions();
        let id = sessions.by_token.get(token)?;
        *sessions.owner.get(id)?
    };
    bmc.accounts().principal(account)
}

/// 304 for a read whose `If-None-Match` names the tag it would carry: the client's copy is current.
fn not_modified(if_none_match: Option<&str>, resp: Response) -> Response {
    let current = resp.headers().get(header::ETAG).and_then(|v| v.to_str().ok());
    match (if_none_match, current) {
        (Some(list), Some(tag)) if resp.status() == StatusCode::OK && etag::matches(list, tag) => {
            let mut answer = reply::status(StatusCode::NOT_MODIFIED);
            for name in [header::ETAG, header::ALLOW, header::LINK] {
                if let Some(v) = resp.headers().get(&name) {
                    answer.headers_mut().insert(name, v.clone());
                }
            }
            answer
        }
        _ => resp,
    }
}

/// One Redfish request: concurrency audit, faults, auth, fence audit, then routing.
async fn redfish(
    bmc: &Arc<Bmc>,
    prefix: &str,
    rel: &str,
    kill: &Notify,
    requests: &ConnRequests,
    req: Request<Incoming>,
) -> Response {
    let _in_flight = Audit::enter_on(bmc, requests);
    let method = req.method().clone();
    let is_mutation = matches!(
        method,
        Method::POST | Method::PATCH | Method::PUT | Method::DELETE
    );
    let (slow, fault) = bmc.faults().take_request_fault(is_mutation);
    if let Some(delay) = slow {
        tokio::time::sleep(delay).await;
    }
    match fault {
        Some(RequestFault::Hang) => return std::future::pending().await,
        Some(RequestFault::Reset) => {
            kill.notify_one();
            return std::future::pending().await;
        }
        Some(RequestFault::Busy) => return reply::busy_rac0218(),
        Some(RequestFault::Status(code)) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return reply::error(status, "GeneralError", "Injected failure.", &[]);
        }
        None => {}
    }
    // A client asking for an OData version other than 4.0 is refused (Redfish specification, "OData-Version"
    // request header: 412 when unsupported).
    if req
        .headers()
        .get("odata-version")
        .is_some_and(|v| v.as_bytes() != b"4.0")
    {
        return reply::error(
            StatusCode::PRECONDITION_FAILED,
            "PreconditionFailed",
            "Only OData-Version 4.0 is supported.",
            &[],
        );
    }
    let trimmed = rel.trim_end_matches('/');
    if trimmed == "/redfish" {
        return reply::ok(&json!({"v1": format!("{prefix}/redfish/v1/")}));
    }
    let public = matches!(
        trimmed,
        "/redfish/v1" | "/redfish/v1/$metadata" | "/redfish/v1/odata"
    ) || (method == Method::POST
        && (trimmed == routes::SESSIONS || trimmed == routes::SESSIONS_MEMBERS));
    let principal = match principal(bmc, &req) {
        Some(p) => p,
        // What anyone may do: read the service root and log in.
        None if public => Principal {
            account: 0,
            role: Role::ReadOnly,
        },
        None => return reply::unauthorized(),
    };
    let if_match = req
        .headers()
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .filter(|_| {
            matches!(
                method,
                Method::PATCH | Method::PUT | Method::DELETE | Method::POST
            )
        })
        .map(str::to_owned);
    let if_none_match = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .filter(|_| matches!(method, Method::GET | Method::HEAD))
        .map(str::to_owned);
    if is_mutation && bmc.faults().reject_if_match && if_match.as_deref().is_some_and(|v| v != "*") {
        return reply::precondition_failed();
    }
    if is_mutation {
        let fence = req.headers().get(FENCE_HEADER).and_then(|v| v.to_str().ok());
        bmc.audit.mutation(method.as_str(), req.uri().path(), fence);
    }
    let Ok(body) = axum::body::to_bytes(Body::new(req.into_body()), BODY_LIMIT).await else {
        return reply::bad_json();
    };
    let ctx = Ctx {
        bmc,
        prefix,
        method: &method,
        body: &body,
        principal,
    };
    let Some(if_match) = if_match else {
        // Boxed: the routed future is large, and a test polls the simulator on its own thread's stack.
        let resp = Box::pin(routes::dispatch(ctx, rel)).await;
        return not_modified(if_none_match.as_deref(), resp);
    };
    // The check and the write it guards are one step: of writers holding the same tag, one applies.
    let _one_at_a_time = bmc.conditional.lock().await;
    let raced = {
        let mut faults = bmc.faults();
        let raced = faults.foreign_writes > 0;
        faults.foreign_writes = faults.foreign_writes.saturating_sub(1);
        raced
    };
    if raced {
        bmc.etag_epoch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let current = Box::pin(routes::current_etag(
        Ctx {
            bmc,
            prefix,
            method: &method,
            body: &body,
            principal,
        },
        rel,
    ))
    .await;
    match current {
        Some(tag) if etag::matches(&if_match, &tag) => {
            bmc.machine().counters.conditional_writes += 1;
            Box::pin(routes::dispatch(ctx, rel)).await
        }
        // A resource that cannot be read has no tag to match; its handler answers as it would.
        None => Box::pin(routes::dispatch(ctx, rel)).await,
        Some(_) => {
            bmc.machine().counters.precondition_failures += 1;
            reply::precondition_failed()
        }
    }
}

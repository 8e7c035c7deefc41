//! Per-BMC audits: the highest number of concurrent requests, fencing of mutations, and the
//! mutations themselves (method and path, in order), so a test can say what was never touched.
//!
//! racklift sends its lease token in `X-Racklift-Fence` on every BMC request. A mutation
//! carrying a token lower than one this BMC already accepted is a *stale mutation*: a worker
//! that lost its lease still acted. The simulator executes it (a real BMC would) and records it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::bmc::Bmc;

/// Header carrying the fencing token.
pub const FENCE_HEADER: &str = "x-racklift-fence";

/// A mutation older than one already accepted.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct StaleMutation {
    pub method: String,
    pub path: String,
    pub token: u64,
    pub highest_seen: u64,
}

/// One mutation as the BMC received it.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Mutation {
    pub method: String,
    pub path: String,
}

/// The mutations an audit keeps; older ones are dropped first (and counted in `mutations`).
pub const MUTATION_LOG_CAP: usize = 4096;

/// Snapshot returned by `GET /control/servers/<name>/audit` and [`crate::SimHandle::audit`].
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct AuditReport {
    /// Highest number of Redfish requests in flight at once.
    pub max_concurrent: u32,
    pub in_flight: u32,
    pub requests: u64,
    pub mutations: u64,
    pub fenced_mutations: u64,
    /// Mutations without (or with an unparsable) fence header.
    pub unfenced_mutations: u64,
    pub highest_fence: Option<u64>,
    pub stale_mutations: Vec<StaleMutation>,
    /// The last [`MUTATION_LOG_CAP`] mutations, oldest first.
    #[serde(default)]
    pub mutation_log: Vec<Mutation>,
}

#[derive(Default)]
struct Fences {
    highest: Option<u64>,
    fenced: u64,
    unfenced: u64,
    stale: Vec<StaleMutation>,
    log: std::collections::VecDeque<Mutation>,
}

/// The audit state of one BMC.
#[derive(Default)]
pub struct Audit {
    in_flight: AtomicU32,
    max_concurrent: AtomicU32,
    requests: AtomicU64,
    fences: Mutex<Fences>,
}

/// Decrements the in-flight count when the request ends (including a dropped, hung one), or when its connection
/// ends first (see [`ConnRequests`]), whichever comes first.
pub struct InFlight<'a> {
    audit: &'a Audit,
    ended: Option<Arc<AtomicBool>>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self
            .ended
            .as_ref()
            .is_none_or(|ended| !ended.swap(true, Ordering::AcqRel))
        {
            self.audit.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The requests of one connection still in flight, which end when the listener drops the connection. hyper drops
/// a connection's socket before its handlers, so without this a request the BMC has already hung up on (closed
/// its socket, which a client sees) would still count while that client's next request arrives: the audit would
/// report an overlap that neither side of a real connection could have. A request ends at its handler's end or
/// its connection's end, whichever is first; over HTTP/1 (every client here) the handlers are dropped right after.
#[derive(Default)]
pub struct ConnRequests {
    live: Mutex<Vec<(Arc<Bmc>, Arc<AtomicBool>)>>,
}

impl ConnRequests {
    /// Ends every request of this connection still counted in flight. Call before dropping the connection.
    pub fn end_all(&self) {
        let live = std::mem::take(&mut *self.live.lock().unwrap_or_else(|e| e.into_inner()));
        for (bmc, ended) in live {
            if !ended.swap(true, Ordering::AcqRel) {
                bmc.audit.in_flight.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl Audit {
    /// Count a request as started.
    pub fn enter(&self) -> InFlight<'_> {
        self.count();
        InFlight {
            audit: self,
            ended: None,
        }
    }

    /// Count a request to `bmc` received on connection `conn` as started; it ends with its handler or with `conn`.
    pub fn enter_on<'a>(bmc: &'a Arc<Bmc>, conn: &ConnRequests) -> InFlight<'a> {
        bmc.audit.count();
        let ended = Arc::new(AtomicBool::new(false));
        let mut live = conn.live.lock().unwrap_or_else(|e| e.into_inner());
        // A keep-alive connection serves many requests; keep only those not ended yet.
        live.retain(|(_, done)| !done.load(Ordering::Acquire));
        live.push((bmc.clone(), ended.clone()));
        InFlight {
            audit: &bmc.audit,
            ended: Some(ended),
        }
    }

    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_concurrent.fetch_max(now, Ordering::Relaxed);
    }

    /// Record a mutation and its fence header value.
    pub fn mutation(&self, method: &str, path: &str, fence: Option<&str>) {
        let token = fence.and_then(|f| f.trim().parse::<u64>().ok());
        let mut f = self.fences.lock().unwrap_or_else(|e| e.into_inner());
        if f.log.len() == MUTATION_LOG_CAP {
            f.log.pop_front();
        }
        f.log.push_back(Mutation {
            method: method.to_owned(),
            path: path.to_owned(),
        });
        match token {
            None => f.unfenced += 1,
            Some(token) => {
                f.fenced += 1;
                match f.highest {
                    Some(highest) if token < highest => f.stale.push(StaleMutation {
                        method: method.to_owned(),
                        path: path.to_owned(),
                        token,
                        highest_seen: highest,
                    }),
                    _ => f.highest = Some(token),
                }
            }
        }
    }

    pub fn report(&self) -> AuditReport {
        let f = self.fences.lock().unwrap_or_else(|e| e.into_inner());
        AuditReport {
            max_concurrent: self.max_concurrent.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            mutations: f.fenced + f.unfenced,
            fenced_mutations: f.fenced,
            unfenced_mutations: f.unfenced,
            highest_fence: f.highest,
            stale_mutations: f.stale.clone(),
            mutation_log: f.log.iter().cloned().collect(),
        }
    }

    /// Forget everything but the requests in flight.
    pub fn reset(&self) {
        self.max_concurrent
            .store(self.in_flight.load(Ordering::Relaxed), Ordering::Relaxed);
        self.requests.store(0, Ordering::Relaxed);
        *self.fences.lock().unwrap_or_else(|e| e.into_inner()) = Fences::default();
    }
}

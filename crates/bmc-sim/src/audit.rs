//! Per-BMC audits: the highest number of concurrent requests, fencing of mutations, and the
//! mutations themselves (method and path, in order), so a test can say what was never touched.
//!
//! racklift sends its lease token in `X-Racklift-Fence` on every BMC request. A mutation
//! carrying a token lower than one this BMC already accepted is a *stale mutation*: a worker
//! that lost its lease still acted. The simulator executes it (a real BMC would) and records it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use serde::Serialize;

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

/// Decrements the in-flight count when the request ends (including a dropped, hung one).
pub struct InFlight<'a>(&'a Audit);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Audit {
    /// Count a request as started.
    pub fn enter(&self) -> InFlight<'_> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_concurrent.fetch_max(now, Ordering::Relaxed);
        InFlight(self)
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

//! One simulated BMC: its profile, machine, faults, audit, task monitors and sessions. Each
//! piece has its own short-held `std::sync::Mutex`; nothing is locked across an await, and
//! there is no lock shared between BMCs, so 1,000 BMCs do not contend.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Instant;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::accounts::Accounts;
use crate::audit::Audit;
use crate::clock::Clock;
use crate::config::Timings;
use crate::faults::Faults;
use crate::machine::Machine;
use crate::profile::Profile;
use crate::routes::RouteTable;
use crate::server::Fleet;

/// State shared by every BMC of a simulator.
pub struct Shared {
    pub clock: Clock,
    pub timings: Timings,
    /// Client the machines read media with (registration has a TLS client of its own per server).
    pub http: reqwest::Client,
    /// The exact `Authorization` header value accepted.
    pub basic_auth: String,
    pub username: String,
    pub password: String,
    /// `http(s)://addr`, for absolute URLs.
    pub base_url: String,
    /// Stops every listener and machine task.
    pub cancel: CancellationToken,
    /// The fleet, set once it is built: the servers' Incus listeners answer for their cluster.
    pub fleet: OnceLock<Weak<Fleet>>,
}

impl Shared {
    pub fn fleet(&self) -> Option<Arc<Fleet>> {
        self.fleet.get().and_then(Weak::upgrade)
    }
}

/// When a task completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskDone {
    /// At this instant.
    At(Instant),
    /// When the machine marks it (BIOS apply at the next reset).
    Marked(bool),
}

/// A Redfish task and its monitor.
#[derive(Clone, Debug)]
pub struct TaskEntry {
    pub name: &'static str,
    pub done: TaskDone,
    pub start: DateTime<Utc>,
    pub end: Option<DateTime<Utc>>,
    /// The monitor answered its final response once; later GETs answer 404.
    pub consumed: bool,
}

impl TaskEntry {
    pub fn is_done(&self, now: Instant) -> bool {
        match self.done {
            TaskDone::At(t) => now >= t,
            TaskDone::Marked(done) => done,
        }
    }
}

/// Task monitors of one BMC; a simulated BMC reset forgets them.
#[derive(Default)]
pub struct Tasks {
    pub next: u64,
    pub entries: BTreeMap<u64, TaskEntry>,
}

impl Tasks {
    pub fn create(&mut self, name: &'static str, done: TaskDone, now: DateTime<Utc>) -> u64 {
        self.next += 1;
        self.entries.insert(
            self.next,
            TaskEntry {
                name,
                done,
                start: now,
                end: None,
                consumed: false,
            },
        );
        self.next
    }

    /// Mark a machine-completed task done.
    pub fn mark_done(&mut self, id: u64, now: DateTime<Utc>) {
        if let Some(t) = self.entries.get_mut(&id) {
            t.done = TaskDone::Marked(true);
            t.end = Some(now);
        }
    }
}

/// Redfish sessions of one BMC.
#[derive(Default)]
pub struct Sessions {
    pub next: u64,
    /// id → token
    pub by_id: BTreeMap<u64, String>,
    pub by_token: HashMap<String, u64>,
    /// id → the account that logged in.
    pub owner: HashMap<u64, u32>,
}

/// One simulated server's BMC.
pub struct Bmc {
    pub index: usize,
    pub name: String,
    pub serial: String,
    pub uuid: String,
    pub profile: Arc<Profile>,
    pub routes: Arc<RouteTable>,
    pub shared: Arc<Shared>,
    pub machine: Mutex<Machine>,
    pub faults: Mutex<Faults>,
    pub tasks: Mutex<Tasks>,
    pub sessions: Mutex<Sessions>,
    pub accounts: Mutex<Accounts>,
    /// Held from an `If-Match` check to the end of the write it guards, so of two writes carrying the same
    /// ETag exactly one applies (the other then sees a new tag and answers 412).
    pub conditional: tokio::sync::Mutex<()>,
    /// Mixed into every tag the representation decides; moved on by another client's (simulated) write.
    pub etag_epoch: std::sync::atomic::AtomicU64,
    pub audit: Audit,
    /// The Incus API's audit: requests in flight, fencing of its mutations.
    pub incus_audit: Audit,
    /// The server's Incus port, bound when its Incus first starts and kept for the machine's life.
    pub incus_port: Mutex<Option<u16>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock must not take the whole fleet down.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Bmc {
    pub fn new(
        index: usize,
        name: String,
        profile: Arc<Profile>,
        routes: Arc<RouteTable>,
        shared: Arc<Shared>,
    ) -> Bmc {
        let machine = Machine::new(&profile);
        let accounts = Accounts::new(&shared.username, &shared.password);
        Bmc {
            index,
            serial: format!("SIM{index:07}"),
            uuid: format!("5a1d0000-0000-4000-8000-{index:012x}"),
            name,
            profile,
            routes,
            shared,
            machine: Mutex::new(machine),
            faults: Mutex::new(Faults::default()),
            tasks: Mutex::new(Tasks::default()),
            sessions: Mutex::new(Sessions::default()),
            accounts: Mutex::new(accounts),
            conditional: tokio::sync::Mutex::new(()),
            etag_epoch: std::sync::atomic::AtomicU64::new(0),
            audit: Audit::default(),
            incus_audit: Audit::default(),
            incus_port: Mutex::new(None),
        }
    }

    pub fn machine(&self) -> MutexGuard<'_, Machine> {
        lock(&self.machine)
    }

    pub fn faults(&self) -> MutexGuard<'_, Faults> {
        lock(&self.faults)
    }

    pub fn tasks(&self) -> MutexGuard<'_, Tasks> {
        lock(&self.tasks)
    }

    pub fn sessions(&self) -> MutexGuard<'_, Sessions> {
        lock(&self.sessions)
    }

    pub fn accounts(&self) -> MutexGuard<'_, Accounts> {
        lock(&self.accounts)
    }

    pub fn incus_port(&self) -> MutexGuard<'_, Option<u16>> {
        lock(&self.incus_port)
    }

    /// `https://127.0.0.1:<port>` of the server's Incus API, once it has started.
    pub fn incus_url(&self) -> Option<String> {
        self.incus_port().map(|p| format!("https://127.0.0.1:{p}"))
    }

    /// A simulated BMC reset: task monitors and sessions are gone.
    pub fn reset_bmc(&self) {
        *self.tasks() = Tasks::default();
        *self.sessions() = Sessions::default();
    }
}

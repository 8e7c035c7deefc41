//! One call in flight per IncusOS server, across every client of the process.
//!
//! Workers build clients per job (a rolling update's step, a wait, a pre-flight read), so the limit cannot live
//! in one client: it lives in a registry keyed by the server's name, and every client built for that name shares
//! its slot. Two evacuations racing on one member, or a reboot landing in the middle of a status read, are what
//! this rules out. Entries are weak, so a server no client uses any more costs nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A registry of per-server slots.
#[derive(Clone, Debug, Default)]
pub struct ServerLimiter {
    servers: Arc<Mutex<HashMap<String, Weak<Slot>>>>,
}

/// One server's slot and the number of callers queued for it.
#[derive(Debug)]
pub(crate) struct Slot {
    permit: Arc<Semaphore>,
    waiting: AtomicUsize,
}

impl Slot {
    /// Waits for the server's one slot. Counted in [`ServerLimiter::waiting`] while queued.
    pub(crate) async fn acquire(&self) -> OwnedSemaphorePermit {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let permit = self.permit.clone().acquire_owned().await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        // The semaphore is never closed.
        permit.expect("per-server semaphore is never closed")
    }
}

impl ServerLimiter {
    /// An empty registry, one call in flight per server.
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide registry clients use unless told otherwise.
    pub fn global() -> &'static ServerLimiter {
        static GLOBAL: OnceLock<ServerLimiter> = OnceLock::new();
        GLOBAL.get_or_init(ServerLimiter::new)
    }

    /// The slot of one server, created on first use.
    pub(crate) fn slot(&self, server: &str) -> Arc<Slot> {
        let mut servers = self
            .servers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(slot) = servers.get(server).and_then(Weak::upgrade) {
            return slot;
        }
        // Drop dead entries now and then so the map tracks live servers, not every server ever seen.
        if servers.len() >= 64 && servers.len().is_power_of_two() {
            servers.retain(|_, w| w.strong_count() > 0);
        }
        let slot = Arc::new(Slot {
            permit: Arc::new(Semaphore::new(1)),
            waiting: AtomicUsize::new(0),
        });
        servers.insert(server.to_owned(), Arc::downgrade(&slot));
        slot
    }

    fn live(&self, server: &str) -> Option<Arc<Slot>> {
        let servers = self
            .servers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        servers.get(server).and_then(Weak::upgrade)
    }

    /// How many callers are queued behind the call in flight to `server` (a queue-depth gauge; tests wait on it).
    pub fn waiting(&self, server: &str) -> usize {
        self.live(server)
            .map_or(0, |slot| slot.waiting.load(Ordering::SeqCst))
    }

    /// Whether a call to `server` holds its slot now.
    pub fn busy(&self, server: &str) -> bool {
        self.live(server)
            .is_some_and(|slot| slot.permit.available_permits() == 0)
    }

    /// How many servers currently have a live slot.
    pub fn live_servers(&self) -> usize {
        let servers = self
            .servers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        servers.values().filter(|w| w.strong_count() > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn same_server_shares_one_slot_and_dead_entries_go() {
        let limiter = ServerLimiter::new();
        let a = limiter.slot("node-1");
        let b = limiter.slot("node-1");
        assert!(Arc::ptr_eq(&a, &b));
        let c = limiter.slot("node-2");
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(limiter.live_servers(), 2);
        let held = a.acquire().await;
        assert!(limiter.busy("node-1") && !limiter.busy("node-2"));
        drop(held);
        assert!(!limiter.busy("node-1"));
        drop((a, b));
        assert_eq!(limiter.live_servers(), 1);
        assert_eq!(limiter.waiting("node-1"), 0);
    }
}

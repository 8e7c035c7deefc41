//! One call in flight per BMC, across every client of the process.
//!
//! BMCs are small embedded web servers: bmcweb limits connections, iDRAC runs out of
//! sessions, and two concurrent power actions on one BMC are a race nobody wants. Workers may
//! build several clients for the same BMC (a job, a wait, a pre-flight read), so the limit
//! cannot live in one client: it lives in a registry keyed by the BMC's base URL, and every
//! client built for that URL shares its semaphore. Entries are weak, so a BMC no client uses
//! any more costs nothing.
//!
//! A permit is a BMC's slot for one call *and its connection*: the call hands it to its
//! exchange, which gives it back only once that call's connection is closed (`transport`). A
//! call dropped at its deadline thus keeps the slot until the BMC has closed the abandoned
//! request's connection, and the next call cannot reach the BMC while the BMC still serves it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::Semaphore;

/// A registry of per-BMC semaphores.
#[derive(Clone, Debug)]
pub struct HostLimiter {
    per_host: usize,
    hosts: Arc<Mutex<HashMap<String, Weak<Semaphore>>>>,
}

impl HostLimiter {
    /// A registry allowing `per_host` calls in flight per BMC (at least one).
    pub fn new(per_host: usize) -> Self {
        Self {
            per_host: per_host.max(1),
            hosts: Arc::default(),
        }
    }

    /// The process-wide registry (one call per BMC) that clients use unless told otherwise.
    pub fn global() -> &'static HostLimiter {
        static GLOBAL: OnceLock<HostLimiter> = OnceLock::new();
        GLOBAL.get_or_init(|| HostLimiter::new(1))
    }

    /// The semaphore for one BMC, created on first use.
    pub(crate) fn for_host(&self, key: &str) -> Arc<Semaphore> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(sem) = hosts.get(key).and_then(Weak::upgrade) {
            return sem;
        }
        // Drop dead entries now and then so the map tracks live BMCs, not every BMC ever seen.
        if hosts.len() >= 64 && hosts.len().is_power_of_two() {
            hosts.retain(|_, w| w.strong_count() > 0);
        }
        let sem = Arc::new(Semaphore::new(self.per_host));
        hosts.insert(key.to_owned(), Arc::downgrade(&sem));
        sem
    }

    /// How many BMCs currently have a live semaphore.
    pub fn live_hosts(&self) -> usize {
        let hosts = self.hosts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        hosts.values().filter(|w| w.strong_count() > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_host_shares_one_semaphore_and_dead_entries_go() {
        let limiter = HostLimiter::new(1);
        let a = limiter.for_host("https://10.0.0.1:443");
        let b = limiter.for_host("https://10.0.0.1:443");
        assert!(Arc::ptr_eq(&a, &b));
        let c = limiter.for_host("https://10.0.0.2:443");
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(limiter.live_hosts(), 2);
        drop((a, b));
        assert_eq!(limiter.live_hosts(), 1);
        assert_eq!(HostLimiter::new(0).for_host("x").available_permits(), 1);
    }
}

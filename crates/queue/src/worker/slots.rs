//! What bounds a pool's work: `concurrency` handlers running at once, and twice that many leased jobs in all,
//! running or with their handler returned and their outcome still on its way to the database.
//!
//! A job's handler slot is given back the moment its handler returns, so the next lease does not wait for the
//! previous batch's completion statement: leasing and completing overlap, which keeps PostgreSQL busy on both
//! sides instead of alternating. The second bound keeps a stalled completion path (a slow or unreachable
//! database) from letting leased-but-unwritten jobs pile up without limit.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub(crate) struct Slots {
    handlers: Arc<Semaphore>,
    leased: Arc<Semaphore>,
}

/// One leased job's hold on the pool.
pub(crate) struct Slot {
    handler: Option<OwnedSemaphorePermit>,
    _leased: OwnedSemaphorePermit,
}

impl Slot {
    /// The handler returned: another job may run while this one's outcome is written.
    pub(crate) fn handler_returned(&mut self) {
        self.handler = None;
    }
}

impl Slots {
    pub(crate) fn new(concurrency: usize) -> Slots {
        let concurrency = concurrency.max(1);
        Slots {
            handlers: Arc::new(Semaphore::new(concurrency)),
            leased: Arc::new(Semaphore::new(concurrency * 2)),
        }
    }

    /// Waits for a slot. Cancel-safe: a half-acquired slot is given back when the future is dropped.
    pub(crate) async fn acquire(&self) -> Slot {
        // Always in this order (and only the fetch loop acquires), so two acquirers cannot deadlock.
        let leased = self.leased.clone().acquire_owned().await;
        let handler = self.handlers.clone().acquire_owned().await;
        Slot {
            handler: Some(handler.expect("the handler semaphore is never closed")),
            _leased: leased.expect("the leased semaphore is never closed"),
        }
    }

    /// A free slot, if there is one now.
    pub(crate) fn try_acquire(&self) -> Option<Slot> {
        let leased = self.leased.clone().try_acquire_owned().ok()?;
        let handler = self.handlers.clone().try_acquire_owned().ok()?;
        Some(Slot {
            handler: Some(handler),
            _leased: leased,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_handler_frees_its_handler_slot_but_not_its_leased_one() {
        let slots = Slots::new(2);
        let mut held: Vec<Slot> = (0..2).map(|_| slots.try_acquire().unwrap()).collect();
        assert!(slots.try_acquire().is_none(), "both handler slots are taken");
        for slot in &mut held {
            slot.handler_returned();
        }
        let more: Vec<Slot> = (0..2).map(|_| slots.try_acquire().unwrap()).collect();
        assert!(
            slots.try_acquire().is_none(),
            "four jobs leased, two outcomes unwritten: the leased bound is reached"
        );
        drop(held);
        assert!(slots.try_acquire().is_none(), "both handler slots are still busy");
        drop(more);
        let free: Vec<Slot> = (0..4).filter_map(|_| slots.try_acquire()).collect();
        assert_eq!(free.len(), 2, "with nothing leased, as many as the concurrency");
    }
}

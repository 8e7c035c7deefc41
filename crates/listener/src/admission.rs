//! Which accepted connections a listener keeps, so that no one client can hold every slot.
//!
//! Three rules, shared by [`crate::serve_with`] and [`crate::files::serve_files`]:
//!
//! - **a share per peer**: one source address keeps at most [`Limits::max_connections_per_peer`] connections
//!   open; a connection past its peer's share is closed as soon as it is accepted, so a flood from one address
//!   never waits in the accept queue in front of other clients;
//! - **early close under pressure**: while more than three quarters of [`Limits::max_connections`] are open, each
//!   connection admitted closes the oldest connection that has not yet completed a request (nor, over TLS, its
//!   handshake) and has had [`eviction_grace`] to do so; a client that sends its request at once is never such a
//!   connection for long, a silent socket is;
//! - **the cap**: at [`Limits::max_connections`] the oldest such connection is closed whatever its age, and if
//!   every open connection has completed a request the new one waits for a slot (others wait in the kernel's
//!   accept queue).
//!
//! A connection is "proven" once its first request head is complete; from then on only the header read timeout
//! and the request's own deadlines end it. The claim on an unproven connection is taken under one lock by
//! whichever comes first, its first request or its eviction, so a request that was handed to the router is
//! never cut off by an eviction decided after it.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::Limits;

/// How long a connection that has sent no whole request is spared by the early close under pressure (not at the
/// cap): a tenth of the header read timeout, time enough for any client that means to send a request.
pub fn eviction_grace(limits: &Limits) -> Duration {
    limits.header_read_timeout / 10
}

/// Whether a listener with `open` connections out of `max` is under pressure: above three quarters of its cap.
pub fn under_pressure(open: usize, max: usize) -> bool {
    open.saturating_mul(4) > max.saturating_mul(3)
}

/// Whether a peer that has `peer_open` connections open may open one more.
pub fn within_share(peer_open: usize, limits: &Limits) -> bool {
    peer_open < limits.max_connections_per_peer.max(1)
}

/// The connection to close early among `unproven` (admission order, oldest first, with when each was admitted):
/// the oldest admitted at or before `cutoff`, never `spare`.
fn oldest_before(unproven: &BTreeMap<u64, Unproven>, cutoff: Instant, spare: Option<u64>) -> Option<u64> {
    unproven
        .iter()
        .filter(|(seq, _)| Some(**seq) != spare)
        .find(|(_, u)| u.since <= cutoff)
        .map(|(seq, _)| *seq)
}

/// A connection that has not completed a request yet.
struct Unproven {
    since: Instant,
    evict: CancellationToken,
}

#[derive(Default)]
struct State {
    per_peer: HashMap<IpAddr, usize>,
    /// Keyed by admission order, so the first entry is the oldest.
    unproven: BTreeMap<u64, Unproven>,
    open: usize,
    next: u64,
}

/// One listener's admission state.
pub(crate) struct Admission {
    limits: Limits,
    slots: Arc<Semaphore>,
    state: Mutex<State>,
}

impl Admission {
    pub(crate) fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            slots: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is consistent after every statement; a panic elsewhere cannot leave it half-changed.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Admits a connection just accepted from `peer`, waiting for a slot at the cap; `None` when the peer already
    /// has its share open (the caller closes the connection).
    pub(crate) async fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Admitted> {
        self.admit_at(peer, Instant::now()).await
    }

    /// As [`Admission::admit`] at `now` (an argument so the rules can be tested without waiting).
    async fn admit_at(self: &Arc<Self>, peer: IpAddr, now: Instant) -> Option<Admitted> {
        let peer_open = self.state().per_peer.get(&peer).copied().unwrap_or(0);
        if !within_share(peer_open, &self.limits) {
            tracing::debug!(%peer, peer_open, "connection refused: the peer has its share of the listener open");
            return None;
        }
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                // At the cap: the oldest connection that never completed a request makes room.
                self.evict(now, None);
                self.slots
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed")
            }
        };
        let evict = CancellationToken::new();
        let mut state = self.state();
        *state.per_peer.entry(peer).or_default() += 1;
        state.open += 1;
        let seq = state.next;
        state.next += 1;
        state.unproven.insert(
            seq,
            Unproven {
                since: now,
                evict: evict.clone(),
            },
        );
        if under_pressure(state.open, self.limits.max_connections) {
            let cutoff = now.checked_sub(eviction_grace(&self.limits)).unwrap_or(now);
            evict_locked(&mut state, cutoff, Some(seq));
        }
        drop(state);
        Some(Admitted(Arc::new(Ticket {
            admission: self.clone(),
            peer,
            seq,
            evict,
            proven: AtomicBool::new(false),
            _slot: slot,
        })))
    }

    fn evict(&self, cutoff: Instant, spare: Option<u64>) {
        evict_locked(&mut self.state(), cutoff, spare);
    }
}

fn evict_locked(state: &mut State, cutoff: Instant, spare: Option<u64>) {
    if let Some(seq) = oldest_before(&state.unproven, cutoff, spare)
        && let Some(unproven) = state.unproven.remove(&seq)
    {
        tracing::debug!(
            age_ms = cutoff.saturating_duration_since(unproven.since).as_millis() as u64,
            open = state.open,
            "closing a connection that has sent no request, to make room"
        );
        unproven.evict.cancel();
    }
}

/// An admitted connection: holds its slot and its peer's share until dropped (with every clone).
#[derive(Clone)]
pub(crate) struct Admitted(Arc<Ticket>);

struct Ticket {
    admission: Arc<Admission>,
    peer: IpAddr,
    seq: u64,
    evict: CancellationToken,
    /// Set once `prove` has taken the connection off the unproven list.
    proven: AtomicBool,
    _slot: OwnedSemaphorePermit,
}

impl Admitted {
    /// The connection completed a request head: it is no longer closed early. `false` when it was chosen for an
    /// early close first (the caller then closes it without answering).
    pub(crate) fn prove(&self) -> bool {
        if self.0.evict.is_cancelled() {
            return false;
        }
        if self.0.proven.load(Ordering::Relaxed) {
            return true;
        }
        let mut state = self.0.admission.state();
        // Absent: evicted, and then the token was cancelled under this lock.
        state.unproven.remove(&self.0.seq);
        let proven = !self.0.evict.is_cancelled();
        self.0.proven.store(proven, Ordering::Relaxed);
        proven
    }

    /// Completes when the connection was chosen for an early close.
    pub(crate) fn evicted(&self) -> WaitForCancellationFuture<'_> {
        self.0.evict.cancelled()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.admission.state();
        state.unproven.remove(&self.seq);
        state.open -= 1;
        if let Some(count) = state.per_peer.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                state.per_peer.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_peer: usize) -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            max_connections: max,
            max_connections_per_peer: per_peer,
        }
    }

    #[test]
    fn pressure_starts_above_three_quarters_of_the_cap() {
        let cases = [
            (768, 1024, false),
            (769, 1024, true),
            (3, 4, false),
            (4, 4, true),
            (0, 1, false),
        ];
        for (open, max, want) in cases {
            assert_eq!(under_pressure(open, max), want, "{open} of {max}");
        }
    }

    #[test]
    fn a_peer_may_open_connections_up_to_its_share() {
        assert!(within_share(0, &limits(8, 2)));
        assert!(within_share(1, &limits(8, 2)));
        assert!(!within_share(2, &limits(8, 2)));
        // A share of 0 would lock every client out: it counts as 1.
        assert!(within_share(0, &limits(8, 0)));
        assert!(!within_share(1, &limits(8, 0)));
    }

    #[test]
    fn the_oldest_unproven_connection_past_the_cutoff_is_chosen_never_the_spared_one() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let unproven: BTreeMap<u64, Unproven> = [(3, at(0)), (5, at(10)), (9, at(20))]
            .into_iter()
            .map(|(seq, since)| {
                (
                    seq,
                    Unproven {
                        since,
                        evict: CancellationToken::new(),
                    },
                )
            })
            .collect();
        assert_eq!(oldest_before(&unproven, at(100), None), Some(3));
        assert_eq!(oldest_before(&unproven, at(100), Some(3)), Some(5));
        assert_eq!(oldest_before(&unproven, at(15), Some(3)), Some(5));
        assert_eq!(oldest_before(&unproven, at(5), Some(3)), None, "none old enough");
        assert_eq!(oldest_before(&BTreeMap::new(), at(100), None), None);
    }

    #[tokio::test]
    async fn past_its_share_a_peer_is_refused_and_its_share_returns_when_a_connection_closes() {
        let admission = Admission::new(limits(8, 2));
        let peer: IpAddr = [127, 0, 0, 9].into();
        let other: IpAddr = [127, 0, 0, 10].into();
        let first = admission.admit(peer).await.expect("within the share");
        let _second = admission.admit(peer).await.expect("within the share");
        assert!(admission.admit(peer).await.is_none(), "past the share");
        let _third = admission
            .admit(other)
            .await
            .expect("another peer has its own share");
        drop(first);
        assert!(admission.admit(peer).await.is_some(), "the share came back");
    }

    #[tokio::test]
    async fn under_pressure_the_oldest_silent_connection_is_evicted_and_a_proven_one_never() {
        let admission = Admission::new(limits(4, 4));
        let ip = |n: u8| IpAddr::from([127, 0, 0, n]);
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(2);
        let proven = admission.admit_at(ip(1), t0).await.unwrap();
        assert!(proven.prove());
        let silent = admission.admit_at(ip(2), t0).await.unwrap();
        let young = admission.admit_at(ip(3), later).await.unwrap();
        assert!(!silent.0.evict.is_cancelled(), "three of four is no pressure");
        let _fourth = admission.admit_at(ip(4), later).await.unwrap();
        assert!(
            silent.0.evict.is_cancelled(),
            "the oldest silent one past its grace"
        );
        assert!(!young.0.evict.is_cancelled(), "within its grace");
        assert!(!proven.0.evict.is_cancelled());
        assert!(
            !silent.prove(),
            "an evicted connection cannot be proven afterwards"
        );
        assert!(young.prove());
    }

    #[tokio::test]
    async fn at_the_cap_the_oldest_unproven_connection_makes_room_whatever_its_age() {
        let admission = Admission::new(limits(2, 2));
        let ip = |n: u8| IpAddr::from([127, 0, 0, n]);
        let a = admission.admit(ip(1)).await.unwrap();
        let b = admission.admit(ip(2)).await.unwrap();
        let waiting = tokio::spawn({
            let admission = admission.clone();
            async move { admission.admit(ip(3)).await.is_some() }
        });
        // `a` is chosen at once; its slot frees when its connection closes.
        a.evicted().await;
        assert!(!b.0.evict.is_cancelled());
        drop(a);
        assert!(waiting.await.unwrap());
    }
}

//! What a media URL resolves to in the database, kept for a moment. A BMC reads its image as thousands of Range
//! requests (1 MiB each is common), and each would otherwise cost a database query and a digest of the seed. A
//! resolution is reused for [`TARGET_TTL`], so a finished deployment's URL stops serving within that time rather
//! than at the next request. The image file itself is still checked at every request (confined, regular).
//!
//! When the database cannot answer (a restart, a failover), the last resolution made within [`KEPT_FOR`] still
//! serves ([`MediaTargets::last_known`]), after the database had [`ASK_FOR`] to answer. An installer reading its image is minutes into an install and fails on
//! the first read the BMC cannot pass through; the database being away changes nothing about the deployment,
//! since ending it (a cancel, a failure, completion) is itself a write the database would have to take. Only an
//! answer from the database that the deployment is over revokes a resolution ([`MediaTargets::forget`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use racklift_media::Overlay;

/// How long a resolution is reused.
pub const TARGET_TTL: Duration = Duration::from_secs(1);

/// How long a resolution can stand in for the database while it does not answer: longer than a failover
/// (Patroni's default `ttl` is 30 s, and a restart of a large database can take minutes), short enough that a
/// URL revoked through another API process stops serving soon after.
pub const KEPT_FOR: Duration = Duration::from_secs(600);

/// How long a request waits for the database before a resolution it already has stands in: a healthy database
/// answers in milliseconds, and a BMC passing a host's read through gives up within seconds.
pub const ASK_FOR: Duration = Duration::from_millis(500);

/// More entries than this and the expired ones are dropped on the next insert.
const PRUNE_ABOVE: usize = 1024;

/// A live deployment's media as the database has it: the image file's stored path, the seed laid over it and
/// the deployment's ETag.
#[derive(Debug)]
pub struct Resolved {
    pub deployment_id: i64,
    pub image_id: i64,
    pub stored_path: String,
    /// The image's SHA-256 and the stamp its file had when hashed (`crate::image_files`).
    pub image_sha256: String,
    pub file_stamp: Option<String>,
    pub overlay: Arc<Overlay>,
    pub etag: String,
}

/// A resolution, when it was made, and when the database was last asked about it (the same, unless it did not
/// answer since).
struct Entry {
    resolved_at: Instant,
    asked_at: Instant,
    resolved: Arc<Resolved>,
}

/// Resolutions by media secret, shared by the API's requests.
#[derive(Clone, Default)]
pub struct MediaTargets {
    inner: Arc<Mutex<HashMap<String, Entry>>>,
}

impl MediaTargets {
    /// The resolution of `secret` when the database was asked about it less than [`TARGET_TTL`] before `now`:
    /// it answered then, or it did not and the last resolution stood in ([`MediaTargets::stood_in`]).
    pub fn get(&self, secret: &str, now: Instant) -> Option<Arc<Resolved>> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(secret)
            .filter(|e| now.duration_since(e.asked_at) < TARGET_TTL)
            .map(|e| e.resolved.clone())
    }

    /// The last resolution of `secret` made less than [`KEPT_FOR`] before `now`: what to serve while the
    /// database cannot say.
    pub fn last_known(&self, secret: &str, now: Instant) -> Option<Arc<Resolved>> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(secret)
            .filter(|e| now.duration_since(e.resolved_at) < KEPT_FOR)
            .map(|e| e.resolved.clone())
    }

    /// The database did not answer about `secret` at `now` and its last resolution was served: the next
    /// [`TARGET_TTL`] of requests use it without asking again, so an outage costs one wait per second, not one
    /// per read.
    pub fn stood_in(&self, secret: &str, now: Instant) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get_mut(secret) {
            entry.asked_at = now;
        }
    }

    pub fn put(&self, secret: &str, resolved: Arc<Resolved>, now: Instant) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= PRUNE_ABOVE {
            map.retain(|_, e| now.duration_since(e.resolved_at) < KEPT_FOR);
        }
        map.insert(
            secret.to_owned(),
            Entry {
                resolved_at: now,
                asked_at: now,
                resolved,
            },
        );
    }

    /// The database says `secret` leads nowhere (unknown, or its deployment ended): nothing of it is kept.
    pub fn forget(&self, secret: &str) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(secret);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(id: i64) -> Arc<Resolved> {
        Arc::new(Resolved {
            deployment_id: id,
            image_id: 1,
            stored_path: "/images/a.img".to_owned(),
            image_sha256: "0".repeat(64),
            file_stamp: None,
            overlay: Arc::new(Overlay {
                offset: 0,
                bytes: Arc::from(&b""[..]),
            }),
            etag: "\"e\"".to_owned(),
        })
    }

    #[test]
    fn a_resolution_is_reused_within_its_time_only_and_expired_ones_are_pruned() {
        let targets = MediaTargets::default();
        let t0 = Instant::now();
        targets.put("s", resolved(1), t0);
        assert_eq!(
            targets.get("s", t0 + TARGET_TTL / 2).map(|r| r.deployment_id),
            Some(1)
        );
        assert!(targets.get("s", t0 + TARGET_TTL).is_none());
        assert!(targets.get("other", t0).is_none());
        for i in 0..PRUNE_ABOVE {
            targets.put(&format!("old{i}"), resolved(2), t0);
        }
        let later = t0 + KEPT_FOR;
        targets.put("new", resolved(3), later);
        let len = targets.inner.lock().unwrap().len();
        assert_eq!(len, 1, "the expired entries went");
    }

    #[test]
    fn the_last_resolution_stands_in_for_the_database_until_kept_for_or_forgotten() {
        let targets = MediaTargets::default();
        let t0 = Instant::now();
        targets.put("s", resolved(1), t0);
        let cases = [
            ("past its reuse time", TARGET_TTL * 3, Some(1)),
            ("just within", KEPT_FOR - Duration::from_millis(1), Some(1)),
            ("too old", KEPT_FOR, None),
        ];
        for (what, after, want) in cases {
            assert_eq!(
                targets.last_known("s", t0 + after).map(|r| r.deployment_id),
                want,
                "{what}"
            );
        }
        // Standing in, it serves without asking for TARGET_TTL from then.
        let outage = t0 + TARGET_TTL * 5;
        assert!(targets.get("s", outage).is_none());
        targets.stood_in("s", outage);
        assert!(targets.get("s", outage + TARGET_TTL / 2).is_some());
        assert!(targets.get("s", outage + TARGET_TTL).is_none());
        targets.forget("s");
        assert!(targets.last_known("s", t0).is_none(), "forgotten");
        assert!(targets.last_known("never", t0).is_none());
    }
}

//! What a media URL resolves to in the database, kept for a moment. A BMC reads its image as thousands of Range
//! requests (1 MiB each is common), and each would otherwise cost a database query and a digest of the seed. A
//! resolution is reused for [`TARGET_TTL`], so a finished deployment's URL stops serving within that time rather
//! than at the next request. The image file itself is still checked at every request (confined, regular).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use racklift_media::Overlay;

/// How long a resolution is reused.
pub const TARGET_TTL: Duration = Duration::from_secs(1);

/// More entries than this and the expired ones are dropped on the next insert.
const PRUNE_ABOVE: usize = 1024;

/// A live deployment's media as the database has it: the image file's stored path, the seed laid over it and
/// the deployment's ETag.
#[derive(Debug)]
pub struct Resolved {
    pub deployment_id: i64,
    pub stored_path: String,
    pub overlay: Arc<Overlay>,
    pub etag: String,
}

/// A resolution and when it was made.
type Entry = (Instant, Arc<Resolved>);

/// Resolutions by media secret, shared by the API's requests.
#[derive(Clone, Default)]
pub struct MediaTargets {
    inner: Arc<Mutex<HashMap<String, Entry>>>,
}

impl MediaTargets {
    /// The resolution of `secret` made less than [`TARGET_TTL`] before `now`.
    pub fn get(&self, secret: &str, now: Instant) -> Option<Arc<Resolved>> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(secret)
            .filter(|(at, _)| now.duration_since(*at) < TARGET_TTL)
            .map(|(_, r)| r.clone())
    }

    pub fn put(&self, secret: &str, resolved: Arc<Resolved>, now: Instant) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= PRUNE_ABOVE {
            map.retain(|_, (at, _)| now.duration_since(*at) < TARGET_TTL);
        }
        map.insert(secret.to_owned(), (now, resolved));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(id: i64) -> Arc<Resolved> {
        Arc::new(Resolved {
            deployment_id: id,
            stored_path: "/images/a.img".to_owned(),
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
        let later = t0 + TARGET_TTL * 2;
        targets.put("new", resolved(3), later);
        let len = targets.inner.lock().unwrap().len();
        assert_eq!(len, 1, "the expired entries went");
    }
}

//! Bounded label values. Every distinct label value is a time series kept by this process and by Prometheus, so
//! values taken from data (a job kind from the table, an operator's vendor hint, a handler's error class) are
//! admitted up to a fixed number per label; later newcomers are counted under [`OTHER`].
//!
//! Admitted values are leaked once each into `&'static str`: hot paths then hold a label without allocating, and
//! the cap bounds the leak.

use std::collections::BTreeSet;
use std::sync::RwLock;

/// The label value of everything past a label's cap.
pub const OTHER: &str = "other";
/// The label value when the data has none (a server without a vendor hint).
pub const UNKNOWN: &str = "unknown";

/// Longest label value kept; longer ones are cut (at a character boundary).
const MAX_LEN: usize = 64;

struct Admitted {
    cap: usize,
    values: RwLock<BTreeSet<&'static str>>,
}

impl Admitted {
    const fn new(cap: usize) -> Admitted {
        Admitted {
            cap,
            values: RwLock::new(BTreeSet::new()),
        }
    }

    fn admit(&self, value: &str) -> &'static str {
        let value = truncate(value);
        let known = self
            .values
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(value)
            .copied();
        if let Some(known) = known {
            return known;
        }
        let mut values = self.values.write().unwrap_or_else(|p| p.into_inner());
        if let Some(known) = values.get(value).copied() {
            return known;
        }
        if values.len() >= self.cap {
            return OTHER;
        }
        let leaked: &'static str = Box::leak(value.to_owned().into_boxed_str());
        values.insert(leaked);
        leaked
    }
}

fn truncate(value: &str) -> &str {
    if value.len() <= MAX_LEN {
        return value;
    }
    let mut end = MAX_LEN;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

static KINDS: Admitted = Admitted::new(32);
static VENDORS: Admitted = Admitted::new(16);
static ERROR_CLASSES: Admitted = Admitted::new(64);

/// A job kind as a label value. Kinds are defined in code, so the cap is only a guard against a table full of
/// strange rows.
pub fn job_kind(kind: &str) -> &'static str {
    KINDS.admit(kind)
}

/// A server's vendor hint as a label value: trimmed and lower-cased (operators write `Dell` and `dell`),
/// [`UNKNOWN`] when absent or empty. The hint is free text, hence the small cap.
pub fn vendor(hint: Option<&str>) -> &'static str {
    match hint.map(str::trim).filter(|h| !h.is_empty()) {
        None => UNKNOWN,
        Some(h) if h.chars().any(char::is_uppercase) => VENDORS.admit(&h.to_lowercase()),
        Some(h) => VENDORS.admit(h),
    }
}

/// A dead letter's error class (a handler's word such as `bmc_timeout`, or `fatal` / `retryable`) as a label.
pub fn error_class(class: &str) -> &'static str {
    ERROR_CLASSES.admit(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_admitted_up_to_the_cap_then_folded_into_other() {
        let labels = Admitted::new(2);
        assert_eq!(labels.admit("a"), "a");
        assert_eq!(labels.admit("b"), "b");
        assert_eq!(labels.admit("c"), OTHER);
        assert!(std::ptr::eq(labels.admit("a"), labels.admit("a")));
    }

    #[test]
    fn vendors_are_normalised() {
        assert_eq!(vendor(None), UNKNOWN);
        assert_eq!(vendor(Some("  ")), UNKNOWN);
        assert_eq!(vendor(Some(" Dell ")), "dell");
        assert_eq!(truncate(&"é".repeat(40)).len(), 64);
    }
}

//! Media read progress as a set of served byte ranges.
//!
//! What tells an installation apart from a boot is the amount of the image actually read, and
//! a BMC re-requests ranges it fetched before, so the progress is the size of the *union* of the
//! ranges served, not the sum. The set is bounded; at the bound the two neighbours with the
//! smallest gap are merged, which over-counts by that gap. Over-counting is the safe side:
//! under-counting would keep a deployment waiting for a read that already happened.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Disjoint, non-adjacent, sorted half-open ranges `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeSet {
    ranges: Vec<(u64, u64)>,
    max_ranges: usize,
}

impl RangeSet {
    /// `max_ranges` below 1 is raised to 1: a set that can hold nothing cannot over-count.
    pub fn new(max_ranges: usize) -> Self {
        Self {
            ranges: Vec::new(),
            max_ranges: max_ranges.max(1),
        }
    }

    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    /// Distinct bytes covered (plus whatever gaps a coalescing swallowed).
    pub fn total(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Records `[start, end)` as served; empty ranges are ignored.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        // First range that could touch the new one (its end reaches `start`).
        let lo = self.ranges.partition_point(|&(_, e)| e < start);
        // First range that starts beyond the new one's end and does not touch it.
        let hi = self.ranges.partition_point(|&(s, _)| s <= end);
        let (mut s, mut e) = (start, end);
        if lo < hi {
            s = s.min(self.ranges[lo].0);
            e = e.max(self.ranges[hi - 1].1);
        }
        self.ranges.splice(lo..hi, [(s, e)]);
        while self.ranges.len() > self.max_ranges {
            self.coalesce_smallest_gap();
        }
    }

    fn coalesce_smallest_gap(&mut self) {
        let Some(i) = (0..self.ranges.len() - 1).min_by_key(|&i| self.ranges[i + 1].0 - self.ranges[i].1)
        else {
            return;
        };
        self.ranges[i].1 = self.ranges[i + 1].1;
        self.ranges.remove(i + 1);
    }
}

/// The read progress a deployment reports for its BMC, from the progress recorded per reader
/// of its image.
///
/// A BMC does not necessarily read from the address its Redfish API is reached at, so a
/// deployment that finds nothing for its own address falls back to the only reader of its image.
/// Several readers are several servers that cannot be told apart: `Some(-1)`, "cannot tell".
/// `None` means nothing has been recorded at all.
pub fn bytes_read_for(own_source: &str, readers: &BTreeMap<String, RangeSet>) -> Option<i64> {
    let to_i64 = |r: &RangeSet| i64::try_from(r.total()).unwrap_or(i64::MAX);
    if let Some(own) = readers.get(own_source) {
        return Some(to_i64(own));
    }
    let mut it = readers.values();
    match (it.next(), it.next()) {
        (None, _) => None,
        (Some(only), None) => Some(to_i64(only)),
        (Some(_), Some(_)) => Some(-1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_of(max: usize, ranges: &[(u64, u64)]) -> RangeSet {
        let mut s = RangeSet::new(max);
        for &(a, b) in ranges {
            s.insert(a, b);
        }
        s
    }

    #[test]
    fn insert_cases() {
        type Case<'a> = (&'a str, &'a [(u64, u64)], &'a [(u64, u64)], u64);
        let cases: &[Case] = &[
            ("single", &[(0, 10)], &[(0, 10)], 10),
            ("re-read counts once", &[(0, 10), (0, 10), (2, 5)], &[(0, 10)], 10),
            ("overlap merges", &[(0, 10), (5, 15)], &[(0, 15)], 15),
            ("adjacent merges", &[(0, 10), (10, 20)], &[(0, 20)], 20),
            (
                "disjoint stays apart",
                &[(20, 30), (0, 10)],
                &[(0, 10), (20, 30)],
                20,
            ),
            (
                "bridge swallows several",
                &[(0, 2), (4, 6), (8, 10), (1, 9)],
                &[(0, 10)],
                10,
            ),
            ("empty ignored", &[(5, 5), (7, 3)], &[], 0),
        ];
        for (name, input, want, total) in cases {
            let s = set_of(16, input);
            assert_eq!(s.ranges(), *want, "{name}");
            assert_eq!(s.total(), *total, "{name}");
        }
    }

    #[test]
    fn overflow_coalesces_smallest_gap() {
        // Gaps: 10..20 (10), 25..27 (2), 30..100 (70). The 2-byte gap goes.
        let s = set_of(3, &[(0, 10), (20, 25), (27, 30), (100, 110)]);
        assert_eq!(s.ranges(), &[(0, 10), (20, 30), (100, 110)]);
        assert_eq!(s.total(), 30, "over-counts by the swallowed gap");
    }

    #[test]
    fn readers() {
        let mut readers = BTreeMap::new();
        assert_eq!(bytes_read_for("10.0.0.1", &readers), None);
        readers.insert("10.0.0.9".to_owned(), set_of(4, &[(0, 100)]));
        assert_eq!(bytes_read_for("10.0.0.1", &readers), Some(100), "the only reader");
        readers.insert("10.0.0.8".to_owned(), set_of(4, &[(0, 50)]));
        assert_eq!(bytes_read_for("10.0.0.1", &readers), Some(-1), "cannot tell");
        readers.insert("10.0.0.1".to_owned(), set_of(4, &[(0, 7)]));
        assert_eq!(bytes_read_for("10.0.0.1", &readers), Some(7), "own address wins");
    }
}

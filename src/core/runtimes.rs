//! What jobs of one kind took recently: the basis of an *expected* start
//! beside the bound that time limits give (see [`crate::core::estimate`]).
//!
//! A job's kind is a number the daemon derives from its owner, name and
//! resources (0: none): jobs of one kind are expected to run alike. Only
//! completed runs are recorded; the expected runtime of a kind is the median
//! of its last [`KEEP`] runs, so one run cut short or one outlier does not
//! move it. At most [`MAX_KINDS`] kinds are kept (a user submitting jobs of a
//! million names cannot grow it without bound): when full, a recorded kind
//! makes room by dropping the one recorded longest ago.

use std::collections::{BTreeMap, HashMap};

/// Runs kept per kind.
pub const KEEP: usize = 5;
/// Kinds kept.
pub const MAX_KINDS: usize = 10_000;

#[derive(Debug, Clone, Default)]
pub struct Runtimes {
    kinds: HashMap<u64, Recent>,
    /// Kinds by the sequence number of their latest record, oldest first.
    by_age: BTreeMap<u64, u64>,
    seq: u64,
}

#[derive(Debug, Clone, Default)]
struct Recent {
    secs: [u64; KEEP],
    len: usize,
    next: usize,
    seq: u64,
}

impl Runtimes {
    /// Records a completed run of `kind` that took `secs`.
    pub fn record(&mut self, kind: u64, secs: u64) {
        if kind == 0 {
            return;
        }
        self.seq += 1;
        if !self.kinds.contains_key(&kind) && self.kinds.len() >= MAX_KINDS {
            if let Some((_, oldest)) = self.by_age.pop_first() {
                self.kinds.remove(&oldest);
            }
        }
        let r = self.kinds.entry(kind).or_default();
        self.by_age.remove(&r.seq);
        r.secs[r.next] = secs;
        r.next = (r.next + 1) % KEEP;
        r.len = (r.len + 1).min(KEEP);
        r.seq = self.seq;
        self.by_age.insert(self.seq, kind);
    }

    /// The median of `kind`'s recent runs (the upper one of an even count),
    /// or `None` when none was recorded.
    pub fn expected(&self, kind: u64) -> Option<u64> {
        let r = self.kinds.get(&kind)?;
        let mut v: Vec<u64> = r.secs[..r.len].to_vec();
        v.sort_unstable();
        v.get(v.len() / 2).copied()
    }

    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_the_last_runs_is_expected() {
        let mut r = Runtimes::default();
        assert_eq!(r.expected(7), None);
        r.record(7, 100);
        assert_eq!(r.expected(7), Some(100));
        r.record(7, 10);
        assert_eq!(r.expected(7), Some(100), "upper median of two");
        r.record(7, 30);
        assert_eq!(r.expected(7), Some(30));
        // One outlier does not move it; the oldest runs fall out.
        r.record(7, 5000);
        r.record(7, 40);
        assert_eq!(r.expected(7), Some(40));
        for _ in 0..KEEP {
            r.record(7, 60);
        }
        assert_eq!(r.expected(7), Some(60));
        // Kind 0 is no kind.
        r.record(0, 1);
        assert_eq!(r.expected(0), None);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn at_most_max_kinds_are_kept_dropping_the_least_recently_recorded() {
        let mut r = Runtimes::default();
        for k in 1..=MAX_KINDS as u64 {
            r.record(k, k);
        }
        r.record(1, 1); // kind 1 is recent again
        r.record(MAX_KINDS as u64 + 1, 9);
        assert_eq!(r.len(), MAX_KINDS);
        assert_eq!(r.expected(2), None, "the least recently recorded went");
        assert_eq!(r.expected(1), Some(1));
        assert_eq!(r.expected(MAX_KINDS as u64 + 1), Some(9));
    }
}

//! Sets of small integer IDs (CPUs, NUMA nodes) as bitsets.
//!
//! One type serves CPUs and memory nodes because systemd takes both in the same
//! form (`AllowedCPUs`/`AllowedMemoryNodes`, D-Bus type `ay`) and sysfs prints both
//! in the same list syntax (`0-3,8,10-11`).

use std::fmt;

/// A set of IDs below 2^20, stored as a bitset.
#[derive(Clone, Default)]
pub struct IdSet {
    words: Vec<u64>,
}

impl IdSet {
    /// The words up to the last non-zero one: equal sets have equal cores
    /// however they were built (`subtract` and `remove` leave zero words).
    fn core(&self) -> &[u64] {
        let len = self
            .words
            .iter()
            .rposition(|w| *w != 0)
            .map_or(0, |i| i + 1);
        &self.words[..len]
    }
}

impl PartialEq for IdSet {
    fn eq(&self, other: &IdSet) -> bool {
        self.core() == other.core()
    }
}

impl Eq for IdSet {}

impl std::hash::Hash for IdSet {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.core().hash(state);
    }
}

/// A set of CPU numbers.
pub type CpuSet = IdSet;
/// A set of NUMA node numbers.
pub type NodeSet = IdSet;

/// The largest ID a set accepts; sysfs and systemd both stay far below it.
pub const MAX_ID: u32 = 1 << 20;

/// Why a list such as `0-3,8` could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid ID list {input:?}: {why}")]
pub struct ParseListError {
    pub input: String,
    pub why: &'static str,
}

impl IdSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// The set `{0, 1, ..., n-1}`.
    pub fn range(lo: u32, hi_exclusive: u32) -> Self {
        let mut s = Self::new();
        for i in lo..hi_exclusive {
            s.insert(i);
        }
        s
    }

    pub fn insert(&mut self, id: u32) {
        let (w, b) = ((id / 64) as usize, id % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << b;
    }

    pub fn remove(&mut self, id: u32) {
        let (w, b) = ((id / 64) as usize, id % 64);
        if let Some(word) = self.words.get_mut(w) {
            *word &= !(1 << b);
        }
    }

    pub fn contains(&self, id: u32) -> bool {
        let (w, b) = ((id / 64) as usize, id % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    pub fn len(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let mut w = word;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some(i as u32 * 64 + b)
            })
        })
    }

    /// The lowest `n` members, or `None` when the set has fewer.
    pub fn take_lowest(&self, n: u32) -> Option<IdSet> {
        let mut out = IdSet::new();
        let mut left = n;
        for id in self.iter() {
            if left == 0 {
                break;
            }
            out.insert(id);
            left -= 1;
        }
        (left == 0).then_some(out)
    }

    pub fn union_with(&mut self, other: &IdSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    pub fn subtract(&mut self, other: &IdSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= !b;
        }
    }

    pub fn intersection(&self, other: &IdSet) -> IdSet {
        IdSet {
            words: self
                .words
                .iter()
                .zip(&other.words)
                .map(|(a, b)| a & b)
                .collect(),
        }
    }

    pub fn intersection_len(&self, other: &IdSet) -> u32 {
        self.words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| (a & b).count_ones())
            .sum()
    }

    pub fn is_disjoint(&self, other: &IdSet) -> bool {
        self.intersection_len(other) == 0
    }

    pub fn is_subset(&self, other: &IdSet) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, a)| a & !other.words.get(i).copied().unwrap_or(0) == 0)
    }

    /// The systemd `ay` bitmask: bit `i % 8` of byte `i / 8`, least significant first.
    pub fn to_mask_bytes(&self) -> Vec<u8> {
        let mut bytes: Vec<u8> = self.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        while bytes.last() == Some(&0) {
            bytes.pop();
        }
        bytes
    }

    pub fn from_mask_bytes(bytes: &[u8]) -> IdSet {
        let mut s = IdSet::new();
        for (i, byte) in bytes.iter().enumerate() {
            for b in 0..8 {
                if byte & (1 << b) != 0 {
                    s.insert(i as u32 * 8 + b);
                }
            }
        }
        s
    }

    /// Parses the kernel's list syntax: `0-3,8,10-11`; empty (or blank) is the empty set.
    pub fn parse_list(input: &str) -> Result<IdSet, ParseListError> {
        let err = |why| ParseListError {
            input: input.to_string(),
            why,
        };
        let mut s = IdSet::new();
        let text = input.trim();
        if text.is_empty() {
            return Ok(s);
        }
        for part in text.split(',') {
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (a, b),
                None => (part, part),
            };
            let lo: u32 = lo.trim().parse().map_err(|_| err("not a number"))?;
            let hi: u32 = hi.trim().parse().map_err(|_| err("not a number"))?;
            if lo > hi {
                return Err(err("range runs backwards"));
            }
            if hi >= MAX_ID {
                return Err(err("ID too large"));
            }
            for id in lo..=hi {
                s.insert(id);
            }
        }
        Ok(s)
    }

    /// Formats in the kernel's list syntax, the inverse of [`IdSet::parse_list`].
    pub fn to_list(&self) -> String {
        let mut out = String::new();
        let mut iter = self.iter().peekable();
        while let Some(lo) = iter.next() {
            let mut hi = lo;
            while iter.peek() == Some(&(hi + 1)) {
                hi += 1;
                iter.next();
            }
            if !out.is_empty() {
                out.push(',');
            }
            if lo == hi {
                out.push_str(&lo.to_string());
            } else {
                out.push_str(&format!("{lo}-{hi}"));
            }
        }
        out
    }
}

impl fmt::Debug for IdSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}}}", self.to_list())
    }
}

impl fmt::Display for IdSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_list())
    }
}

impl FromIterator<u32> for IdSet {
    fn from_iter<T: IntoIterator<Item = u32>>(iter: T) -> Self {
        let mut s = IdSet::new();
        for id in iter {
            s.insert(id);
        }
        s
    }
}

impl serde::Serialize for IdSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_list())
    }
}

impl<'de> serde::Deserialize<'de> for IdSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        IdSet::parse_list(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format_round_trip() {
        let s = IdSet::parse_list("0-3,8,10-11").unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(s.to_list(), "0-3,8,10-11");
        assert_eq!(s.len(), 7);
        assert_eq!(IdSet::parse_list("\n").unwrap(), IdSet::new());
        assert_eq!(IdSet::parse_list("5\n").unwrap().to_list(), "5");
    }

    #[test]
    fn parse_rejects_bad_lists() {
        for bad in ["a", "3-1", "1,,2", "-1", "1-", "99999999"] {
            assert!(IdSet::parse_list(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn systemd_mask_layout() {
        let s: IdSet = [0, 9, 70].into_iter().collect();
        let bytes = s.to_mask_bytes();
        assert_eq!(bytes.len(), 9);
        assert_eq!(bytes[0], 0b1);
        assert_eq!(bytes[1], 0b10);
        assert_eq!(bytes[8], 0b100_0000);
        assert_eq!(IdSet::from_mask_bytes(&bytes), s);
        assert!(IdSet::new().to_mask_bytes().is_empty());
    }

    #[test]
    fn set_operations() {
        let a = IdSet::parse_list("0-7").unwrap();
        let b = IdSet::parse_list("4-11").unwrap();
        assert_eq!(a.intersection(&b).to_list(), "4-7");
        assert_eq!(a.intersection_len(&b), 4);
        let mut c = a.clone();
        c.subtract(&b);
        assert_eq!(c.to_list(), "0-3");
        assert!(c.is_subset(&a));
        assert!(!a.is_subset(&c));
        assert!(c.is_disjoint(&b));
        c.union_with(&b);
        assert_eq!(c.to_list(), "0-11");
        assert_eq!(a.take_lowest(3).unwrap().to_list(), "0-2");
        assert!(a.take_lowest(9).is_none());
        let mut d = IdSet::range(0, 130);
        d.remove(64);
        assert!(!d.contains(64) && d.contains(129) && !d.contains(130));
        // Equality is by members, whatever zero words removals left behind.
        let mut e = IdSet::range(0, 130);
        e.subtract(&IdSet::range(1, 130));
        assert_eq!(e, IdSet::range(0, 1));
        e.remove(0);
        assert_eq!(e, IdSet::new());
        use std::hash::{BuildHasher, RandomState};
        let r = RandomState::new();
        assert_eq!(r.hash_one(&e), r.hash_one(IdSet::new()));
    }
}

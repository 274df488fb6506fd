//! [`Indices`]: the compact set of task indices, and the parsing of its
//! comma-separated parts.

use super::{digits, ArrayError, MAX_ARRAY_INDEX};
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

/// How many index values merging overlapping stepped ranges may visit
/// (`0-99:3,1-99:2` must be merged index by index); beyond it the spec is
/// refused rather than making the daemon work for seconds.
const MERGE_BUDGET: u64 = 4 * (MAX_ARRAY_INDEX as u64 + 1);

/// An arithmetic progression of task indices `first, first+step, ..., last`,
/// written `5` (one index), `5-99` (step 1) or `1-7:2`.
///
/// Ranges made by this module are normalised: `step >= 1`, `last` is the
/// last index actually in the range (`1-8:2` is stored as `1-7:2`), and a
/// range of one index has step 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Range {
    /// The lowest index.
    pub first: u32,
    /// The highest index, itself in the range.
    pub last: u32,
    /// The distance between consecutive indices, at least 1.
    pub step: u32,
}

impl Range {
    /// The normalised range `first-last:step`, or `None` when `step` is 0 or
    /// `last < first`.
    pub fn new(first: u32, last: u32, step: u32) -> Option<Range> {
        (step >= 1 && last >= first).then(|| Range::norm(first, last, step))
    }

    /// The range holding `index` alone.
    pub fn single(index: u32) -> Range {
        Range {
            first: index,
            last: index,
            step: 1,
        }
    }

    /// `new` without its checks: `step >= 1` and `last >= first`.
    fn norm(first: u32, last: u32, step: u32) -> Range {
        let last = first + (last - first) / step * step;
        let step = if first == last { 1 } else { step };
        Range { first, last, step }
    }

    /// How many indices the range holds (a step of 0, possible only in a
    /// range built by hand, is taken as 1 here and below).
    pub fn len(&self) -> u64 {
        match self.last.checked_sub(self.first) {
            Some(span) => u64::from(span / self.step.max(1)) + 1,
            None => 0,
        }
    }

    /// Whether the range holds no index (only one built by hand can).
    pub fn is_empty(&self) -> bool {
        self.last < self.first
    }

    /// Whether `index` is one of the range's indices.
    pub fn contains(&self, index: u32) -> bool {
        (self.first..=self.last).contains(&index)
            && (index - self.first).is_multiple_of(self.step.max(1))
    }

    /// The indices, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> {
        (self.first..=self.last).step_by(self.step.max(1) as usize)
    }

    /// The members below `x` and the members above it (`x` within the span).
    fn split_around(&self, x: u32) -> (Option<Range>, Option<Range>) {
        let below = (x > self.first).then(|| {
            let last = self.first + (x - 1 - self.first) / self.step * self.step;
            Range::norm(self.first, last, self.step)
        });
        let above = (x < self.last).then(|| {
            let first = self.first + ((x - self.first) / self.step + 1) * self.step;
            Range::norm(first, self.last, self.step)
        });
        (below, above)
    }

    /// `a` and `b` (`a` wholly below `b`) as one range, when their union is
    /// an arithmetic progression.
    fn join(a: Range, b: Range) -> Option<Range> {
        let gap = b.first - a.last;
        let fits = |r: Range| r.first == r.last || r.step == gap;
        (fits(a) && fits(b)).then_some(Range {
            first: a.first,
            last: b.last,
            step: gap,
        })
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.first == self.last, self.step) {
            (true, _) => write!(f, "{}", self.first),
            (false, 1) => write!(f, "{}-{}", self.first, self.last),
            (false, s) => write!(f, "{}-{}:{s}", self.first, self.last),
        }
    }
}

/// An ordered set of task indices, stored as ascending ranges whose spans do
/// not overlap.
///
/// Memory is the point: `0-99999` is one [`Range`], so a pending array of
/// 100,000 tasks costs about 50 bytes ([`Indices::memory_bytes`]).
/// [`Indices::pop_first`], done each time a task starts, is O(1).
///
/// Several layouts can hold the same indices (`1-3:2,4` or `1,3-4`);
/// equality, hashing and `Display` go by the indices, through one canonical
/// layout ([`Indices::ranges`]): runs of consecutive indices first (`5-9`),
/// then progressions of at least three indices (`1-7:2`), the rest alone
/// (`1,3,5-7`). `Display` and `FromStr` use Slurm's syntax and round-trip,
/// and serde stores the set as that string.
#[derive(Clone, Default)]
pub struct Indices {
    /// A deque so that popping an exhausted first range is O(1).
    ranges: VecDeque<Range>,
}

/// A cursor on one index of a valid range list: the range and the index.
#[derive(Clone, Copy)]
struct Cur {
    ri: usize,
    v: u32,
}

impl Indices {
    /// The empty set.
    pub fn new() -> Indices {
        Indices::default()
    }

    /// The indices of `range` (a step of 0 is taken as 1, and a range that
    /// ends before it starts is empty).
    pub fn from_range(range: Range) -> Indices {
        let Range { first, last, step } = range;
        Indices {
            ranges: Range::new(first, last, step.max(1)).into_iter().collect(),
        }
    }

    /// How many indices the set holds.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(Range::len).sum()
    }

    /// Whether the set holds no index.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The lowest index.
    pub fn first(&self) -> Option<u32> {
        self.ranges.front().map(|r| r.first)
    }

    /// The highest index.
    pub fn last(&self) -> Option<u32> {
        self.ranges.back().map(|r| r.last)
    }

    /// Takes out the lowest index (the next task to start); O(1).
    pub fn pop_first(&mut self) -> Option<u32> {
        let r = self.ranges.front_mut()?;
        let index = r.first;
        if r.first == r.last {
            self.ranges.pop_front();
        } else {
            *r = Range::norm(r.first + r.step, r.last, r.step);
        }
        Some(index)
    }

    /// The position of the first range that does not end below `index`.
    fn find(&self, index: u32) -> usize {
        self.ranges.partition_point(|r| r.last < index)
    }

    /// Whether `index` is in the set; O(log ranges).
    pub fn contains(&self, index: u32) -> bool {
        self.ranges
            .get(self.find(index))
            .is_some_and(|r| r.contains(index))
    }

    /// Takes `index` out, splitting its range if need be; false if absent.
    pub fn remove(&mut self, index: u32) -> bool {
        let i = self.find(index);
        let Some(r) = self.ranges.get(i).copied().filter(|r| r.contains(index)) else {
            return false;
        };
        self.ranges.remove(i);
        let (below, above) = r.split_around(index);
        for part in [above, below].into_iter().flatten() {
            self.ranges.insert(i, part);
        }
        true
    }

    /// Adds `index`, joining it to a neighbouring range where it continues
    /// one; false if it was there already.
    pub fn insert(&mut self, index: u32) -> bool {
        let mut i = self.find(index);
        if let Some(r) = self.ranges.get(i).copied().filter(|r| r.first <= index) {
            if r.contains(index) {
                return false;
            }
            // Inside the span of a stepped range but not on it: split it.
            self.ranges.remove(i);
            let (below, above) = r.split_around(index);
            if let Some(a) = above {
                self.ranges.insert(i, a);
            }
            if let Some(b) = below {
                self.ranges.insert(i, b);
                i += 1;
            }
        }
        self.ranges.insert(i, Range::single(index));
        if i > 0 {
            if let Some(j) = Range::join(self.ranges[i - 1], self.ranges[i]) {
                self.ranges[i - 1] = j;
                self.ranges.remove(i);
                i -= 1;
            }
        }
        if let Some(&next) = self.ranges.get(i + 1) {
            if let Some(j) = Range::join(self.ranges[i], next) {
                self.ranges[i] = j;
                self.ranges.remove(i + 1);
            }
        }
        true
    }

    /// The indices, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.ranges.iter().flat_map(Range::iter)
    }

    /// How many ranges are stored (1 for `0-99999`).
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// The memory the set takes, its heap part included.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Indices>() + self.ranges.capacity() * std::mem::size_of::<Range>()
    }

    /// The index after the one at `c`.
    fn next(&self, c: Cur) -> Option<Cur> {
        let r = self.ranges[c.ri];
        if c.v < r.last {
            return Some(Cur {
                ri: c.ri,
                v: c.v + r.step,
            });
        }
        let ri = c.ri + 1;
        self.ranges.get(ri).map(|n| Cur { ri, v: n.first })
    }

    /// The canonical layout of the indices (see the type's documentation),
    /// computed range by range in O(ranges), however many indices they hold.
    pub fn ranges(&self) -> Vec<Range> {
        let mut out = Vec::new();
        let mut pos = self.ranges.front().map(|r| Cur { ri: 0, v: r.first });
        while let Some(p) = pos {
            let Some(q) = self.next(p) else {
                out.push(Range::single(p.v));
                break;
            };
            if q.v - p.v == 1 {
                let end = self.run_end(q);
                out.push(Range::norm(p.v, end.v, 1));
                pos = self.next(end);
                continue;
            }
            let (last, count) = self.progression_end(p, q);
            if count >= 3 {
                out.push(Range::norm(p.v, last.v, q.v - p.v));
                pos = self.next(last);
            } else {
                out.push(Range::single(p.v));
                pos = Some(q);
            }
        }
        out
    }

    /// The last index of the run of consecutive indices through `c`.
    fn run_end(&self, mut c: Cur) -> Cur {
        loop {
            let r = self.ranges[c.ri];
            if r.step == 1 {
                c.v = r.last;
            }
            match self.next(c) {
                Some(n) if n.v - c.v == 1 => c = n,
                _ => return c,
            }
        }
    }

    /// The end of the progression `p`, `q`, ... with step `q - p` (at least
    /// 2) that stops before any index starting a run of consecutive ones,
    /// and its length.
    fn progression_end(&self, p: Cur, q: Cur) -> (Cur, u64) {
        let step = q.v - p.v;
        let (mut last, mut count, mut cand) = (p, 1u64, q);
        loop {
            let r = self.ranges[cand.ri];
            if r.step == step && cand.v < r.last {
                // Every index of the range before its last is followed by one
                // `step` above: take them all at once.
                let upto = r.last - step;
                count += u64::from((upto - cand.v) / step) + 1;
                last = Cur {
                    ri: cand.ri,
                    v: upto,
                };
                cand.v = r.last;
            }
            let after = self.next(cand);
            if after.is_some_and(|n| n.v - cand.v == 1) {
                return (last, count);
            }
            last = cand;
            count += 1;
            match after {
                Some(n) if n.v - cand.v == step => cand = n,
                _ => return (last, count),
            }
        }
    }

    /// The set of the indices of `pieces` (valid ranges, in any order,
    /// overlapping or not), stored in the canonical layout.
    pub(super) fn from_pieces(mut pieces: Vec<Range>, spec: &str) -> Result<Indices, ArrayError> {
        pieces.sort_unstable_by_key(|r| (r.first, std::cmp::Reverse(r.last)));
        let mut valid: Vec<Range> = Vec::new();
        let mut cluster: Vec<Range> = Vec::new();
        let mut reach = 0;
        for piece in pieces {
            if !cluster.is_empty() && piece.first > reach {
                merge_cluster(&mut cluster, &mut valid, spec)?;
            }
            reach = if cluster.is_empty() {
                piece.last
            } else {
                reach.max(piece.last)
            };
            cluster.push(piece);
        }
        merge_cluster(&mut cluster, &mut valid, spec)?;
        let raw = Indices {
            ranges: VecDeque::from(valid),
        };
        let mut ranges = VecDeque::from(raw.ranges());
        ranges.shrink_to_fit();
        Ok(Indices { ranges })
    }
}

/// Appends the union of `cluster` (ranges sorted by first index whose spans
/// overlap) to `out` as valid ranges, and empties it.
fn merge_cluster(
    cluster: &mut Vec<Range>,
    out: &mut Vec<Range>,
    spec: &str,
) -> Result<(), ArrayError> {
    // Drop the pieces that lie within the widest one before them.
    let mut kept: Vec<Range> = Vec::new();
    let mut cover: Option<Range> = None;
    for r in cluster.drain(..) {
        let inside = cover.is_some_and(|c| {
            r.last <= c.last && c.contains(r.first) && (r.first == r.last || r.step % c.step == 0)
        });
        if !inside {
            if cover.is_none_or(|c| r.last > c.last) {
                cover = Some(r);
            }
            kept.push(r);
        }
    }
    let (Some(lo), Some(hi)) = (
        kept.first().map(|r| r.first),
        kept.iter().map(|r| r.last).max(),
    ) else {
        return Ok(());
    };
    if let [one] = kept[..] {
        out.push(one);
        return Ok(());
    }
    if kept.iter().all(|r| r.step == 1) {
        // Overlapping runs of consecutive indices: one run.
        out.push(Range::norm(lo, hi, 1));
        return Ok(());
    }
    if kept.iter().map(Range::len).sum::<u64>() > MERGE_BUDGET {
        return Err(ArrayError::TooComplex { spec: spec.into() });
    }
    let mut words = vec![0u64; ((hi - lo) / 64 + 1) as usize];
    for v in kept.iter().flat_map(Range::iter) {
        let bit = v - lo;
        words[(bit / 64) as usize] |= 1 << (bit % 64);
    }
    let start = out.len();
    for (w, &word) in words.iter().enumerate() {
        let mut rest = word;
        while rest != 0 {
            let v = lo + w as u32 * 64 + rest.trailing_zeros();
            rest &= rest - 1;
            let single = Range::single(v);
            if let Some(l) = out[start..].last_mut() {
                if let Some(j) = Range::join(*l, single) {
                    *l = j;
                    continue;
                }
            }
            out.push(single);
        }
    }
    Ok(())
}

impl PartialEq for Indices {
    fn eq(&self, other: &Indices) -> bool {
        self.ranges() == other.ranges()
    }
}

impl Eq for Indices {}

impl std::hash::Hash for Indices {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.ranges().hash(state);
    }
}

impl fmt::Display for Indices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Indices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Indices[{self}]")
    }
}

impl FromIterator<u32> for Indices {
    fn from_iter<T: IntoIterator<Item = u32>>(iter: T) -> Self {
        let mut s = Indices::new();
        for i in iter {
            s.insert(i);
        }
        s
    }
}

/// Parses an index list (`1,3,5-7`, `0-15:4`); the empty string is the
/// empty set. The same as an array spec without its `%N`.
impl FromStr for Indices {
    type Err = ArrayError;

    fn from_str(s: &str) -> Result<Indices, ArrayError> {
        if s.is_empty() {
            return Ok(Indices::new());
        }
        if s.chars().any(char::is_whitespace) {
            return Err(ArrayError::Whitespace { spec: s.into() });
        }
        let pieces = s
            .split(',')
            .map(|part| parse_part(part, s))
            .collect::<Result<Vec<_>, _>>()?;
        Indices::from_pieces(pieces, s)
    }
}

/// One index of `part`, written `text`.
pub(super) fn parse_index(part: &str, text: &str) -> Result<u32, ArrayError> {
    let n = digits(text).ok_or_else(|| ArrayError::NotANumber {
        part: part.into(),
        text: text.into(),
    })?;
    if n > u64::from(MAX_ARRAY_INDEX) {
        return Err(ArrayError::TooHigh {
            part: part.into(),
            index: n,
        });
    }
    Ok(n as u32)
}

/// One comma-separated part of `spec`: `7`, `0-99` or `0-99:2`.
pub(super) fn parse_part(part: &str, spec: &str) -> Result<Range, ArrayError> {
    if part.is_empty() {
        return Err(ArrayError::EmptyPart { spec: spec.into() });
    }
    let (span, step) = match part.split_once(':') {
        Some((span, step)) => (span, Some(step)),
        None => (part, None),
    };
    let Some((first, last)) = span.split_once('-') else {
        if step.is_some() {
            return Err(ArrayError::StepWithoutRange { part: part.into() });
        }
        return parse_index(part, span).map(Range::single);
    };
    let (first, last) = (parse_index(part, first)?, parse_index(part, last)?);
    if last < first {
        return Err(ArrayError::Reversed {
            part: part.into(),
            first,
            last,
        });
    }
    let step = match step {
        None => 1,
        Some(text) => match digits(text) {
            None => {
                return Err(ArrayError::NotANumber {
                    part: part.into(),
                    text: text.into(),
                })
            }
            Some(0) => return Err(ArrayError::ZeroStep { part: part.into() }),
            Some(n) => u32::try_from(n).unwrap_or(u32::MAX),
        },
    };
    Ok(Range::norm(first, last, step))
}

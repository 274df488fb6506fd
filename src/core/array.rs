//! Job arrays as Slurm writes them: the sets of task indices of `--array`,
//! their labels (`123_4`, `123_[5-99%8]`) and the job references that
//! xcancel and xqueue take (`123`, `123_4`, `123_[1-3,7]`).
//!
//! An array is one submission that stands for many tasks, each of which runs
//! the same script with its own index (`SLURM_ARRAY_TASK_ID`). The indices are
//! kept as [`Indices`], a compact set of arithmetic progressions: a pending
//! array of 100,000 tasks `0-99999` is one [`Range`] of 12 bytes, and
//! starting a task pops its index from the front in constant time.

use super::JobId;
use std::fmt;
use std::str::FromStr;

mod indices;

use indices::{parse_index, parse_part};
pub use indices::{Indices, Range};

/// The highest task index accepted. Slurm's limit is `MaxArraySize - 1` and
/// its default MaxArraySize is 1001 (indices 0 to 1000); xlurm accepts up to
/// one million so that large sweeps need no configuration, since a pending
/// array costs the same however many indices it spans.
pub const MAX_ARRAY_INDEX: u32 = 1_000_000;

/// The most separate ranges an array's indices may make once merged
/// (`0-999999:3,1-999999:3` is 333,334 of them: 4 MB in memory, in every
/// record of the job log and in every listing line, from 21 bytes). Its
/// text is then at most about 24 KiB.
pub const MAX_RANGES: usize = 1024;

/// Implements `Serialize`/`Deserialize` through `Display`/`FromStr`: the value
/// is stored as its canonical text (`1-7:2`, `afterok:12`).
macro_rules! serde_as_text {
    ($($t:ty),* $(,)?) => {$(
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    )*};
}
pub(crate) use serde_as_text;

/// The value of a string of ASCII digits (saturating at `u64::MAX`), or
/// `None` for anything else, signs and spaces included.
pub(crate) fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.bytes().fold(0u64, |n, b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// Why an array spec or index list could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArrayError {
    #[error("the array is empty: give indices such as 0-99, 1,3,5-7 or 0-15:4, optionally followed by %N")]
    Empty,
    #[error(
        "array {spec:?} has an empty part: parts are separated by single commas, e.g. 1,3,5-7"
    )]
    EmptyPart { spec: String },
    #[error("array {spec:?} contains white space: write it without spaces, e.g. 1,3,5-7")]
    Whitespace { spec: String },
    #[error("{text:?} in array part {part:?} is not an index: indices are whole numbers from 0 to {MAX_ARRAY_INDEX}")]
    NotANumber { part: String, text: String },
    #[error("array range {part:?} runs backwards ({first} > {last}): write it low-high, e.g. {last}-{first}")]
    Reversed { part: String, first: u32, last: u32 },
    #[error("array range {part:?} has step 0: the step after ':' must be at least 1")]
    ZeroStep { part: String },
    #[error("array part {part:?} has a step but no range: a step follows a range, e.g. 5-25:2")]
    StepWithoutRange { part: String },
    #[error(
        "index {index} in array part {part:?} is above the highest array index {MAX_ARRAY_INDEX}"
    )]
    TooHigh { part: String, index: u64 },
    #[error("{text:?} after '%' in array {spec:?} is not a number: %N runs at most N tasks at once (N at least 1)")]
    BadLimit { spec: String, text: String },
    #[error("%0 in array {spec:?} would let no task run: %N needs N at least 1")]
    ZeroLimit { spec: String },
    #[error("the overlapping ranges of array {spec:?} are too many to merge: write them without overlaps")]
    TooComplex { spec: String },
    #[error("array {spec:?} makes {ranges} separate ranges of indices, more than the {MAX_RANGES} an array may have: write it as fewer, longer ranges (one step per range), or submit several arrays")]
    TooManyRanges { spec: String, ranges: usize },
}

/// What sbatch's `--array` asks for: the task indices, and at most how many
/// of them may run at once (`%N`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArraySpec {
    /// The task indices, never empty once parsed.
    pub indices: Indices,
    /// `%N`: at most N tasks running at once; `None` for no limit.
    pub max_running: Option<u32>,
}

impl ArraySpec {
    /// Parses `--array`: comma-separated parts `7`, `0-99` or `0-99:2`
    /// (indices 0 to [`MAX_ARRAY_INDEX`]), optionally followed by `%N` with
    /// N at least 1. Overlapping parts are merged. Slurm refuses a step
    /// without a range (`5:2`), and so does this.
    pub fn parse(s: &str) -> Result<ArraySpec, ArrayError> {
        if s.is_empty() {
            return Err(ArrayError::Empty);
        }
        if s.chars().any(char::is_whitespace) {
            return Err(ArrayError::Whitespace { spec: s.into() });
        }
        let (list, limit) = match s.split_once('%') {
            Some((list, limit)) => (list, Some(limit)),
            None => (s, None),
        };
        let max_running = match limit.map(|text| (text, digits(text))) {
            None => None,
            Some((_, Some(0))) => return Err(ArrayError::ZeroLimit { spec: s.into() }),
            Some((_, Some(n))) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            Some((text, None)) => {
                return Err(ArrayError::BadLimit {
                    spec: s.into(),
                    text: text.into(),
                })
            }
        };
        if list.is_empty() {
            return Err(ArrayError::Empty);
        }
        let pieces = list
            .split(',')
            .map(|part| parse_part(part, s))
            .collect::<Result<Vec<_>, _>>()?;
        let indices = Indices::from_pieces(pieces, s)?;
        // A submission's bound; a record read back keeps whatever it holds.
        if indices.range_count() > MAX_RANGES {
            return Err(ArrayError::TooManyRanges {
                spec: s.into(),
                ranges: indices.range_count(),
            });
        }
        Ok(ArraySpec {
            indices,
            max_running,
        })
    }

    /// `SLURM_ARRAY_TASK_COUNT`: how many tasks.
    pub fn task_count(&self) -> u64 {
        self.indices.len()
    }

    /// `SLURM_ARRAY_TASK_MIN`: the lowest index (0 for an empty set).
    pub fn min(&self) -> u32 {
        self.indices.first().unwrap_or(0)
    }

    /// `SLURM_ARRAY_TASK_MAX`: the highest index (0 for an empty set).
    pub fn max(&self) -> u32 {
        self.indices.last().unwrap_or(0)
    }

    /// `SLURM_ARRAY_TASK_STEP`: Slurm gives the step written after `:`, or
    /// else 1. The set is kept in its canonical layout, not as written, so
    /// this is the step of the first range that layout writes with `:`
    /// (`0-15:4` gives 4, `1,3,5-7` gives 1), or, for exactly two indices, the
    /// distance between them (`0-2:2`, written back as `0,2`, gives 2).
    pub fn step(&self) -> u32 {
        let ranges = self.indices.ranges();
        if let [a, b] = ranges[..] {
            if a.first == a.last && b.first == b.last {
                return b.first - a.first;
            }
        }
        ranges.iter().map(|r| r.step).find(|s| *s > 1).unwrap_or(1)
    }
}

impl fmt::Display for ArraySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.indices)?;
        match self.max_running {
            Some(n) => write!(f, "%{n}"),
            None => Ok(()),
        }
    }
}

impl FromStr for ArraySpec {
    type Err = ArrayError;

    fn from_str(s: &str) -> Result<ArraySpec, ArrayError> {
        ArraySpec::parse(s)
    }
}

/// How Slurm shows the still-pending part of array `array_id`:
/// `123_[5-99%8]`, `123_[5-99]` without a limit, `123_7` when one index is
/// left (no brackets, no limit), and plain `123` when none is.
pub fn pending_label(array_id: u64, remaining: &Indices, max_running: Option<u32>) -> String {
    match (remaining.len(), remaining.first()) {
        (1, Some(index)) => task_label(array_id, index),
        (0, _) | (_, None) => array_id.to_string(),
        _ => match max_running {
            Some(n) => format!("{array_id}_[{remaining}%{n}]"),
            None => format!("{array_id}_[{remaining}]"),
        },
    }
}

/// The most bytes of indices a listing line shows of an array's pending
/// part; `GetJob` gives them all.
pub const LISTED_INDICES_BYTES: usize = 48;

/// [`pending_label`] as a listing line shows it: at most `max` bytes of
/// indices (whole ranges, the first always), then `,…` for the rest
/// (`123_[0-1,3-4,6-7,…%8]`).
pub fn pending_label_within(
    array_id: u64,
    remaining: &Indices,
    max_running: Option<u32>,
    max: usize,
) -> String {
    if remaining.len() <= 1 {
        return pending_label(array_id, remaining, max_running);
    }
    let mut text = String::new();
    for (i, r) in remaining.ranges().iter().enumerate() {
        let part = if i == 0 {
            r.to_string()
        } else {
            format!(",{r}")
        };
        if i > 0 && text.len() + part.len() > max {
            text.push_str(",…");
            break;
        }
        text.push_str(&part);
    }
    match max_running {
        Some(n) => format!("{array_id}_[{text}%{n}]"),
        None => format!("{array_id}_[{text}]"),
    }
}

/// How Slurm names one task of array `array_id`: `123_4`.
pub fn task_label(array_id: u64, index: u32) -> String {
    format!("{array_id}_{index}")
}

/// A job named on the command line (xcancel, xqueue): a job or a whole array
/// `123`, one array task `123_4`, or several `123_[1-3,7]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum JobRef {
    /// `123`: a job, or every task of an array.
    Job(JobId),
    /// `123_4`: one task of an array.
    Task(JobId, u32),
    /// `123_[1-3,7]`: some tasks of an array.
    Tasks(JobId, Indices),
}

impl JobRef {
    /// The job or array ID named.
    pub fn job(&self) -> JobId {
        match self {
            JobRef::Job(id) | JobRef::Task(id, _) | JobRef::Tasks(id, _) => *id,
        }
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobRef::Job(id) => write!(f, "{id}"),
            JobRef::Task(id, index) => write!(f, "{id}_{index}"),
            JobRef::Tasks(id, indices) => write!(f, "{id}_[{indices}]"),
        }
    }
}

/// Why a job reference such as `123_4` could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobRefError {
    #[error(
        "no job given: expected a job ID such as 123, an array task 123_4 or tasks 123_[1-3,7]"
    )]
    Empty,
    #[error("{input:?} is not a job: expected a job ID such as 123, an array task 123_4 or tasks 123_[1-3,7]")]
    NotAJobId { input: String },
    #[error("job ID 0 in {input:?} is not valid: job IDs start at 1")]
    ZeroJobId { input: String },
    #[error("{input:?} names several tasks without brackets: write them as 123_[1-3,7]")]
    NeedBrackets { input: String },
    #[error("{input:?} opens '[' without closing it: write tasks as 123_[1-3,7]")]
    Unclosed { input: String },
    #[error("bad array tasks in {input:?}: {cause}")]
    BadTasks {
        input: String,
        #[source]
        cause: ArrayError,
    },
}

/// Parses `123`, `123_4` or `123_[1-3,7]` (what xcancel and xqueue take).
pub fn parse_job_ref(s: &str) -> Result<JobRef, JobRefError> {
    if s.is_empty() {
        return Err(JobRefError::Empty);
    }
    let (job, tasks) = match s.split_once('_') {
        Some((job, tasks)) => (job, Some(tasks)),
        None => (s, None),
    };
    let id = match digits(job) {
        None => return Err(JobRefError::NotAJobId { input: s.into() }),
        Some(0) => return Err(JobRefError::ZeroJobId { input: s.into() }),
        Some(id) => id,
    };
    let bad = |cause| JobRefError::BadTasks {
        input: s.into(),
        cause,
    };
    let Some(tasks) = tasks else {
        return Ok(JobRef::Job(id));
    };
    if let Some(list) = tasks.strip_prefix('[') {
        let list = list
            .strip_suffix(']')
            .ok_or_else(|| JobRefError::Unclosed { input: s.into() })?;
        if list.is_empty() {
            return Err(bad(ArrayError::Empty));
        }
        return list.parse().map(|set| JobRef::Tasks(id, set)).map_err(bad);
    }
    if tasks.contains([',', '-', ':']) {
        return Err(JobRefError::NeedBrackets { input: s.into() });
    }
    if tasks.is_empty() {
        return Err(bad(ArrayError::Empty));
    }
    parse_index(tasks, tasks)
        .map(|index| JobRef::Task(id, index))
        .map_err(bad)
}

impl FromStr for JobRef {
    type Err = JobRefError;

    fn from_str(s: &str) -> Result<JobRef, JobRefError> {
        parse_job_ref(s)
    }
}

serde_as_text!(Indices, ArraySpec, JobRef);

//! Job dependencies as Slurm writes them (`--dependency=afterok:12:13`), and
//! whether they hold.
//!
//! A dependency holds a job back until other jobs (its dependees) have
//! reached some point: started (`after`), ended in any state (`afterany`),
//! ended COMPLETED (`afterok`) or ended otherwise (`afternotok`: failed,
//! cancelled, timed out). `singleton` waits until no other job of the same
//! user and name runs. Conditions joined by `,` must all hold, by `?` any
//! one; the two are not mixed.
//!
//! A dependee is a job, a whole array (all its tasks: `afterok:123` waits
//! for every task to complete) or one array task (`afterok:123_4`). The
//! caller reports what became of each as a [`Progress`], and
//! [`Dependency::verdict`] says whether the dependent may start now
//! ([`Verdict::Met`]), must wait ([`Verdict::Wait`]) or can never start
//! ([`Verdict::Never`]: a failed dependency never recovers, even if the
//! dependee is requeued).

use super::array::{parse_job_ref, serde_as_text, JobRef, JobRefError};
use super::JobId;
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// The most dependees one dependency may name.
pub const MAX_DEPENDENCY_TARGETS: usize = 256;

/// The dependency types xlurm supports, for error messages.
const SUPPORTED: &str =
    "after, afterany, afterok, afternotok, singleton, or a bare list of job IDs (afterany)";

/// A dependee: a job or a whole array (`123`), or one array task (`123_4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// `123`: a job, or every task of an array.
    Job(JobId),
    /// `123_4`: one task of an array.
    Task(JobId, u32),
}

impl Target {
    /// The job or array ID named.
    pub fn job(&self) -> JobId {
        match self {
            Target::Job(id) | Target::Task(id, _) => *id,
        }
    }
}

/// What a dependent waits for its dependee to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `after`: the dependee started (every task, for an array), or ended
    /// without starting (cancelled while pending).
    After,
    /// `afterany`: the dependee ended, in any state.
    AfterAny,
    /// `afterok`: the dependee ended COMPLETED (every task, for an array).
    AfterOk,
    /// `afternotok`: the dependee ended in any other final state (failed,
    /// cancelled, timed out, out of memory); for an array, every task ended
    /// and at least one so.
    AfterNotOk,
}

impl Kind {
    /// Every kind, in the order of the declaration.
    pub const ALL: [Kind; 4] = [Kind::After, Kind::AfterAny, Kind::AfterOk, Kind::AfterNotOk];

    /// The name in Slurm's syntax: `afterok`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::After => "after",
            Kind::AfterAny => "afterany",
            Kind::AfterOk => "afterok",
            Kind::AfterNotOk => "afternotok",
        }
    }

    /// Whether a condition of this kind holds on a dependee that has come to
    /// `progress`, or, for `None`, whose record is gone (purged after its
    /// retention time): it ended long ago, so `after` and `afterany` are met,
    /// but how it ended is no longer known, so `afterok` and `afternotok`
    /// can never be (Slurm likewise refuses them on purged jobs).
    ///
    /// An array with no tasks at all counts as ended with none failed.
    pub fn verdict(self, progress: Option<Progress>) -> Verdict {
        let Some(p) = progress else {
            return match self {
                Kind::After | Kind::AfterAny => Verdict::Met,
                Kind::AfterOk | Kind::AfterNotOk => Verdict::Never,
            };
        };
        let met_when = |ok: bool| if ok { Verdict::Met } else { Verdict::Wait };
        match self {
            Kind::After => met_when(p.pending == 0),
            Kind::AfterAny => met_when(p.ended()),
            Kind::AfterOk if p.not_ok > 0 => Verdict::Never,
            Kind::AfterOk => met_when(p.ended()),
            Kind::AfterNotOk if !p.ended() => Verdict::Wait,
            Kind::AfterNotOk if p.not_ok > 0 => Verdict::Met,
            Kind::AfterNotOk => Verdict::Never,
        }
    }
}

/// One condition of a dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cond {
    /// `kind:target`.
    On {
        /// What the dependee must do.
        kind: Kind,
        /// The dependee.
        target: Target,
    },
    /// `singleton`: no other job of the same user and name runs.
    Singleton,
}

impl Cond {
    /// Whether the condition holds (see [`Kind::verdict`]); `singleton`
    /// holds exactly when `singleton_clear`.
    pub fn verdict(
        &self,
        look: &mut impl FnMut(&Target) -> Option<Progress>,
        singleton_clear: bool,
    ) -> Verdict {
        match self {
            Cond::On { kind, target } => kind.verdict(look(target)),
            Cond::Singleton if singleton_clear => Verdict::Met,
            Cond::Singleton => Verdict::Wait,
        }
    }
}

/// A job's dependency: conditions that must all hold (`any` false, written
/// with `,`) or of which one must (`any` true, written with `?`).
///
/// Written in Slurm's syntax (`afterok:12:13,afterany:14`,
/// `afterok:12?afternotok:13`, `singleton`) by `Display`, read by
/// [`parse`]; serde stores that string. `,`-joined conditions of one kind
/// in a row are written together (`afterok:12:13`); `?`-joined ones each on
/// their own, since `afterok:12:13` alone means both. With fewer than two
/// conditions `any` makes no difference, and [`parse`] sets it false.
/// No conditions at all is met.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Dependency {
    /// One condition is enough (`?`), rather than all (`,`).
    pub any: bool,
    /// The conditions, in the order written.
    pub conds: Vec<Cond>,
}

/// What became of a dependee, counted in tasks. For one job exactly one
/// field is 1: `pending` (not started yet), `running`, `ok` (ended
/// COMPLETED) or `not_ok` (any other final state; a job cancelled while
/// pending is `not_ok`). For an array, each task counts once, the indices
/// not started yet as pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Progress {
    /// Not started yet.
    pub pending: u32,
    /// Running now.
    pub running: u32,
    /// Ended COMPLETED.
    pub ok: u32,
    /// Ended in any other final state.
    pub not_ok: u32,
}

impl Progress {
    /// A job not started yet.
    pub const PENDING: Progress = Progress::new(1, 0, 0, 0);
    /// A running job.
    pub const RUNNING: Progress = Progress::new(0, 1, 0, 0);
    /// A job that ended COMPLETED.
    pub const OK: Progress = Progress::new(0, 0, 1, 0);
    /// A job that ended in any other final state.
    pub const NOT_OK: Progress = Progress::new(0, 0, 0, 1);

    /// Counts of tasks in each state, in the order of the fields.
    pub const fn new(pending: u32, running: u32, ok: u32, not_ok: u32) -> Progress {
        Progress {
            pending,
            running,
            ok,
            not_ok,
        }
    }

    /// Whether every task has ended (nothing pending or running).
    pub fn ended(&self) -> bool {
        self.pending == 0 && self.running == 0
    }
}

impl std::ops::AddAssign for Progress {
    fn add_assign(&mut self, o: Progress) {
        self.pending = self.pending.saturating_add(o.pending);
        self.running = self.running.saturating_add(o.running);
        self.ok = self.ok.saturating_add(o.ok);
        self.not_ok = self.not_ok.saturating_add(o.not_ok);
    }
}

impl std::iter::Sum for Progress {
    fn sum<I: Iterator<Item = Progress>>(iter: I) -> Progress {
        iter.fold(Progress::default(), |mut a, b| {
            a += b;
            a
        })
    }
}

/// Whether a dependency lets its job start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// It holds: the job may start.
    Met,
    /// Not yet: it may still hold later.
    Wait,
    /// It can never hold (Slurm's `DependencyNeverSatisfied`).
    Never,
}

impl Dependency {
    /// Whether the job may start. `look` tells what became of a dependee,
    /// `None` when its record is gone (see [`Kind::verdict`]);
    /// `singleton_clear` is whether no other job of the same user and name
    /// runs (the caller knows the jobs). With `,`: Never if any condition is
    /// Never, Met if all are Met, else Wait. With `?`: Met if any is Met,
    /// Never if all are Never, else Wait.
    pub fn verdict(
        &self,
        mut look: impl FnMut(&Target) -> Option<Progress>,
        singleton_clear: bool,
    ) -> Verdict {
        let verdicts = self
            .conds
            .iter()
            .map(|c| c.verdict(&mut look, singleton_clear));
        self.combine(verdicts)
    }

    /// The verdict of the dependency from those of its conditions.
    fn combine(&self, verdicts: impl Iterator<Item = Verdict>) -> Verdict {
        let (mut all, mut met, mut never) = (0, 0, 0);
        for v in verdicts {
            all += 1;
            match v {
                Verdict::Met => met += 1,
                Verdict::Never => never += 1,
                Verdict::Wait => {}
            }
        }
        match self.any {
            _ if all == 0 => Verdict::Met,
            false if never > 0 => Verdict::Never,
            false if met == all => Verdict::Met,
            true if met > 0 => Verdict::Met,
            true if never == all => Verdict::Never,
            _ => Verdict::Wait,
        }
    }

    /// The job and array IDs named, ascending, each once (for an index from
    /// dependee to dependents).
    pub fn targets(&self) -> impl Iterator<Item = JobId> {
        let ids: BTreeSet<JobId> = self
            .conds
            .iter()
            .filter_map(|c| match c {
                Cond::On { target, .. } => Some(target.job()),
                Cond::Singleton => None,
            })
            .collect();
        ids.into_iter()
    }

    /// Whether one condition is `singleton`.
    pub fn has_singleton(&self) -> bool {
        self.conds.contains(&Cond::Singleton)
    }

    /// The conditions not met yet, as Slurm shows a pending job's dependency:
    /// `afterok:123(unfulfilled)`, `afterok:124(failed)` for one that can
    /// never hold, joined like the dependency; empty when the dependency as a
    /// whole is met (one met condition is enough with `?`).
    pub fn unmet_display(
        &self,
        mut look: impl FnMut(&Target) -> Option<Progress>,
        singleton_clear: bool,
    ) -> String {
        let verdicts: Vec<Verdict> = self
            .conds
            .iter()
            .map(|c| c.verdict(&mut look, singleton_clear))
            .collect();
        if self.combine(verdicts.iter().copied()) == Verdict::Met {
            return String::new();
        }
        let mut out = String::new();
        for (cond, verdict) in self.conds.iter().zip(verdicts) {
            let state = match verdict {
                Verdict::Met => continue,
                Verdict::Wait => "unfulfilled",
                Verdict::Never => "failed",
            };
            if !out.is_empty() {
                out.push(self.separator());
            }
            out.push_str(&format!("{cond}({state})"));
        }
        out
    }

    fn separator(&self) -> char {
        if self.any {
            '?'
        } else {
            ','
        }
    }
}

/// Why a dependency could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DependencyError {
    #[error("the dependency is empty: give e.g. afterok:12, afterany:12:13 or singleton")]
    Empty,
    #[error(
        "dependency {spec:?} has an empty part: conditions are separated by single ',' or '?'"
    )]
    EmptyPart { spec: String },
    #[error("dependency {spec:?} contains white space: write it without spaces, e.g. afterok:12,afterany:13")]
    Whitespace { spec: String },
    #[error("dependency {spec:?} mixes ',' (all must hold) and '?' (any one must hold): use one or the other")]
    Mixed { spec: String },
    #[error("unknown dependency type {kind:?}: supported are {SUPPORTED}")]
    UnknownKind { kind: String },
    #[error("dependency type {kind:?} is not supported by xlurm: supported are {SUPPORTED}")]
    Unsupported { kind: String },
    #[error("{part:?} gives a delay ('+minutes'), which xlurm does not support: the dependent starts as soon as the condition holds")]
    Delay { part: String },
    #[error("{part:?} names no job: write e.g. {kind}:12 or {kind}:12:13")]
    MissingTargets { part: String, kind: String },
    #[error("'singleton' takes no job IDs ({part:?}): it waits for the other jobs of the same user and name")]
    SingletonTarget { part: String },
    #[error("bad dependee {target:?}: {cause}")]
    BadTarget {
        target: String,
        #[source]
        cause: JobRefError,
    },
    #[error("{target:?} names several array tasks: a dependency names one job (12) or one task (12_4), e.g. afterok:12_1:12_2")]
    TaskList { target: String },
    #[error("the dependency names {count} jobs: at most {MAX_DEPENDENCY_TARGETS} are allowed")]
    TooManyTargets { count: usize },
    #[error("{spec:?} is not one dependency condition such as afterok:12 or singleton")]
    NotOneCondition { spec: String },
}

/// Parses `--dependency`: conditions `kind:id[:id...]` (kinds after,
/// afterany, afterok, afternotok; an ID is a job or array `12` or one task
/// `12_4`), `singleton`, or a bare list of IDs `12:13` (afterany, as in
/// Slurm), joined by `,` (all must hold) or `?` (any one). Kinds are read
/// without regard to case. Refused: delays (`after:12+5`), Slurm's
/// `aftercorr`, `afterburstbuffer` and `expand`, job ID 0, and more than
/// [`MAX_DEPENDENCY_TARGETS`] IDs. Repeated IDs are kept.
pub fn parse(s: &str) -> Result<Dependency, DependencyError> {
    if s.is_empty() {
        return Err(DependencyError::Empty);
    }
    if s.chars().any(char::is_whitespace) {
        return Err(DependencyError::Whitespace { spec: s.into() });
    }
    if s.contains(',') && s.contains('?') {
        return Err(DependencyError::Mixed { spec: s.into() });
    }
    let any = s.contains('?');
    let mut conds = Vec::new();
    for part in s.split([',', '?']) {
        if part.is_empty() {
            return Err(DependencyError::EmptyPart { spec: s.into() });
        }
        parse_part(part, &mut conds)?;
    }
    let count = conds.iter().filter(|c| **c != Cond::Singleton).count();
    if count > MAX_DEPENDENCY_TARGETS {
        return Err(DependencyError::TooManyTargets { count });
    }
    Ok(Dependency {
        any: any && conds.len() > 1,
        conds,
    })
}

/// One `,`/`?`-separated part: appends its conditions to `conds`.
fn parse_part(part: &str, conds: &mut Vec<Cond>) -> Result<(), DependencyError> {
    let (head, ids) = match part.split_once(':') {
        Some((head, ids)) => (head, Some(ids)),
        None => (part, None),
    };
    let lower = head.to_ascii_lowercase();
    let (kind, ids) = match lower.as_str() {
        _ if head.starts_with(|c: char| c.is_ascii_digit()) => (Kind::AfterAny, Some(part)),
        "singleton" if ids.is_none() => {
            conds.push(Cond::Singleton);
            return Ok(());
        }
        "singleton" => return Err(DependencyError::SingletonTarget { part: part.into() }),
        "after" => (Kind::After, ids),
        "afterany" => (Kind::AfterAny, ids),
        "afterok" => (Kind::AfterOk, ids),
        "afternotok" => (Kind::AfterNotOk, ids),
        "aftercorr" | "afterburstbuffer" | "expand" => {
            return Err(DependencyError::Unsupported { kind: head.into() })
        }
        _ => return Err(DependencyError::UnknownKind { kind: head.into() }),
    };
    let missing = || DependencyError::MissingTargets {
        part: part.into(),
        kind: kind.as_str().into(),
    };
    let ids = ids.filter(|i| !i.is_empty()).ok_or_else(missing)?;
    if ids.contains('+') {
        return Err(DependencyError::Delay { part: part.into() });
    }
    for id in ids.split(':') {
        if id.is_empty() {
            return Err(missing());
        }
        let target = id.parse()?;
        conds.push(Cond::On { kind, target });
    }
    Ok(())
}

impl FromStr for Target {
    type Err = DependencyError;

    fn from_str(s: &str) -> Result<Target, DependencyError> {
        match parse_job_ref(s) {
            Ok(JobRef::Job(id)) => Ok(Target::Job(id)),
            Ok(JobRef::Task(id, index)) => Ok(Target::Task(id, index)),
            Ok(JobRef::Tasks(..)) => Err(DependencyError::TaskList { target: s.into() }),
            Err(cause) => Err(DependencyError::BadTarget {
                target: s.into(),
                cause,
            }),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Job(id) => write!(f, "{id}"),
            Target::Task(id, index) => write!(f, "{id}_{index}"),
        }
    }
}

impl FromStr for Kind {
    type Err = DependencyError;

    fn from_str(s: &str) -> Result<Kind, DependencyError> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| DependencyError::UnknownKind { kind: s.into() })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Cond {
    type Err = DependencyError;

    fn from_str(s: &str) -> Result<Cond, DependencyError> {
        match parse(s)?.conds[..] {
            [one] => Ok(one),
            _ => Err(DependencyError::NotOneCondition { spec: s.into() }),
        }
    }
}

impl fmt::Display for Cond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cond::On { kind, target } => write!(f, "{kind}:{target}"),
            Cond::Singleton => f.write_str("singleton"),
        }
    }
}

impl FromStr for Dependency {
    type Err = DependencyError;

    fn from_str(s: &str) -> Result<Dependency, DependencyError> {
        parse(s)
    }
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut prev: Option<Kind> = None;
        for (i, cond) in self.conds.iter().enumerate() {
            match (cond, prev) {
                (Cond::On { kind, target }, Some(p)) if !self.any && *kind == p => {
                    write!(f, ":{target}")?;
                    continue;
                }
                _ if i > 0 => write!(f, "{}", self.separator())?,
                _ => {}
            }
            write!(f, "{cond}")?;
            prev = match cond {
                Cond::On { kind, .. } => Some(*kind),
                Cond::Singleton => None,
            };
        }
        Ok(())
    }
}

serde_as_text!(Target, Kind, Cond, Dependency);

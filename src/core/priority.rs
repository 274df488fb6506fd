//! Job priority: which pending job a pass considers first.
//!
//! Two modes ([`PriorityMode`]):
//! - `fifo`: submission order (job ID), exactly as before priorities existed;
//! - `fair` (Slurm's multifactor priority): a sum of weighted factors,
//!
//! ```text
//! priority = w_fairshare * F  +  w_age * min(wait / max_age, 1)  -  nice
//! ```
//!
//! where `F` is the owner's fair-share factor (0..1, see
//! [`super::fairshare`]), `wait` the seconds since submission, and `nice` the
//! job's signed nice value (unweighted, as in Slurm; users may only give a
//! positive one, lowering their priority; admins any, see [`check_nice`]).
//! Higher priority goes first; equal priorities go in submission (ID) order.
//!
//! Default weights: `w_fairshare = 10,000`, `w_age = 20,000`, `max_age = 7
//! days`. Fair share thus orders jobs of similar age, and age bounds how long
//! anyone waits behind later jobs: a job submitted `d` seconds after job `X`
//! can go first only while `w_age * d / max_age < w_fairshare * (F_later -
//! F_X) + nice_X - nice_later`, so with equal nice never once `d >= max_age *
//! w_fairshare / w_age` (3.5 days), whatever the usages. Example: alice used
//! everything lately (`F = 0.25` with bob also active), bob nothing (`F = 1`);
//! bob's job goes before alice's jobs submitted up to `0.75 * 10,000 / 20,000 *
//! 7 days = 2.6 days` before it.
//!
//! The queue is kept sorted by a key that orders exactly like the priority
//! without depending on the clock ([`sort_key`]), so submitting is O(log n)
//! and only a change of fair-share factors (or a job reaching `max_age`)
//! needs keys recomputed ([`crate::core::Scheduler::reprioritize`]).

use super::fairshare::UsageWeights;
use super::limits::{Gid, Uid};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How the queue is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PriorityMode {
    /// Submission order (`--priority fifo`).
    #[default]
    Fifo,
    /// Fair share, age and nice (`--priority fair`).
    Fair,
}

impl PriorityMode {
    pub const ALL: [PriorityMode; 2] = [PriorityMode::Fifo, PriorityMode::Fair];

    pub fn name(self) -> &'static str {
        match self {
            PriorityMode::Fifo => "fifo",
            PriorityMode::Fair => "fair",
        }
    }
}

impl fmt::Display for PriorityMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown priority mode {0:?}: use fifo or fair")]
pub struct UnknownPriorityMode(pub String);

impl FromStr for PriorityMode {
    type Err = UnknownPriorityMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PriorityMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownPriorityMode(s.to_string()))
    }
}

/// The admin's priority settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PriorityConfig {
    pub mode: PriorityMode,
    pub weight_fairshare: u32,
    pub weight_age: u32,
    /// The wait at which the age factor reaches 1 (Slurm's `PriorityMaxAge`).
    pub max_age_secs: u64,
    /// Usage half-life (Slurm's `PriorityDecayHalfLife`); 0: no decay.
    pub half_life_secs: u64,
    /// What each resource costs; `None`: each counts as its share of the
    /// machine ([`UsageWeights::for_machine`]).
    pub usage_weights: Option<UsageWeights>,
    /// The shares of a user the admin gave none.
    pub default_share: u32,
}

/// Largest weight accepted; keeps every key within `i64`.
pub const MAX_WEIGHT: u32 = 1_000_000;
/// Largest `max_age_secs` accepted (about 3 years).
pub const MAX_AGE_LIMIT: u64 = 100_000_000;
/// Largest nice value, either way.
pub const MAX_NICE: i32 = 1_000_000;

const DAY: u64 = 24 * 3600;

impl Default for PriorityConfig {
    fn default() -> Self {
        PriorityConfig {
            mode: PriorityMode::Fifo,
            weight_fairshare: 10_000,
            weight_age: 20_000,
            max_age_secs: 7 * DAY,
            half_life_secs: 7 * DAY,
            usage_weights: None,
            default_share: 1,
        }
    }
}

impl PriorityConfig {
    /// The default settings in `fair` mode.
    pub fn fair() -> PriorityConfig {
        PriorityConfig {
            mode: PriorityMode::Fair,
            ..PriorityConfig::default()
        }
    }

    /// The settings with every number brought into its accepted range.
    pub fn clamped(&self) -> PriorityConfig {
        PriorityConfig {
            weight_fairshare: self.weight_fairshare.min(MAX_WEIGHT),
            weight_age: self.weight_age.min(MAX_WEIGHT),
            max_age_secs: self.max_age_secs.clamp(1, MAX_AGE_LIMIT),
            ..self.clone()
        }
    }

    /// The fair-share term, in priority points, of factor `f`.
    pub fn fair_points(&self, f: f64) -> i64 {
        (self.weight_fairshare as f64 * f.clamp(0.0, 1.0)).round() as i64
    }
}

/// Who owns a job: its user and the primary group it was submitted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Owner {
    pub uid: Uid,
    pub gid: Gid,
}

impl Owner {
    /// The owner of jobs queued without one ([`crate::core::Scheduler::enqueue`]).
    pub const UNKNOWN: Owner = Owner {
        uid: u32::MAX,
        gid: u32::MAX,
    };
}

/// What the scheduler keeps of a submission besides its demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    pub owner: Owner,
    /// Positive lowers the priority; see [`check_nice`].
    pub nice: i32,
    /// Seconds since the epoch.
    pub submitted_at: u64,
    /// Jobs of one kind (owner, name, resources) are expected to run alike
    /// (`core::runtimes`); 0: no kind.
    #[serde(default)]
    pub kind: u64,
}

/// A nice value the caller may not give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NiceError {
    #[error("a negative nice ({0}) raises priority; only an admin may give one (root, or the polkit authorization org.xlurm.scheduler.manage)")]
    NotAdmin(i32),
    #[error("nice {0} is out of range: use -{MAX_NICE} to {MAX_NICE}")]
    OutOfRange(i32),
}

/// Users may only lower their own priority (nice >= 0); admins may also
/// raise it.
pub fn check_nice(nice: i32, admin: bool) -> Result<(), NiceError> {
    if nice.unsigned_abs() > MAX_NICE as u32 {
        return Err(NiceError::OutOfRange(nice));
    }
    if nice < 0 && !admin {
        return Err(NiceError::NotAdmin(nice));
    }
    Ok(())
}

/// A pending job's priority and its parts, as `xqueue` shows them (Slurm's
/// `sprio`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Priority {
    /// The sum, rounded down.
    pub priority: i64,
    /// The owner's fair-share factor, 0..1.
    pub fairshare: f64,
    /// `min(wait / max_age, 1)`.
    pub age: f64,
    pub nice: i32,
}

/// The age factor of a job submitted at `t`, at `now`.
pub fn age_factor(cfg: &PriorityConfig, t: u64, now: u64) -> f64 {
    let m = cfg.max_age_secs.max(1);
    now.saturating_sub(t).min(m) as f64 / m as f64
}

/// The priority at `now` of a job with submission `sub` whose owner has
/// fair-share factor `f` (the fair-share term rounded to whole points, as in
/// the queue's order).
pub fn priority_at(cfg: &PriorityConfig, f: f64, sub: &Submission, now: u64) -> Priority {
    let m = cfg.max_age_secs.max(1) as i128;
    let wait = now.saturating_sub(sub.submitted_at).min(m as u64) as i128;
    let total = cfg.fair_points(f) as i128 + cfg.weight_age as i128 * wait / m - sub.nice as i128;
    Priority {
        priority: total.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
        fairshare: f,
        age: age_factor(cfg, sub.submitted_at, now),
        nice: sub.nice,
    }
}

/// The queue key of a job (higher first): `max_age * priority(now) - w_age *
/// now`, which is
///
/// ```text
/// max_age * (fair_points - nice) - w_age * max(submitted_at, now - max_age)
/// ```
///
/// For a job younger than `max_age` it does not depend on `now`, so keys
/// computed at different times compare like the priorities at any one time;
/// a job past `max_age` needs its key recomputed as time passes (its age no
/// longer grows while younger jobs' do), which the periodic re-keying does.
pub fn sort_key(cfg: &PriorityConfig, fair_points: i64, sub: &Submission, now: u64) -> i64 {
    let m = cfg.max_age_secs.max(1);
    let eff = sub.submitted_at.max(now.saturating_sub(m)) as i128;
    let key = m as i128 * (fair_points as i128 - sub.nice as i128) - cfg.weight_age as i128 * eff;
    key.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

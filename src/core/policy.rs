//! Scheduling policies: in which order jobs are considered and whether a later
//! job may use what a blocked earlier one cannot.
//!
//! The running example, GPU demands `[1, 4, 2, 1, 2]` (jobs 1..5) on a 4-GPU
//! machine, is a test for each policy in `scheduler.rs`:
//! - `fifo-strict`: jobs 1 runs; job 2 blocks 3..5 behind it.
//! - `easy-backfill`: 1, 3, 4 run (1+2+1); GPUs freed later are held for job 2.
//! - `strict-backfill`: like easy, but with time limits: a later job may start
//!   only if it ends before the head's reserved start or keeps off the
//!   resources reserved for the head.
//! - `largest-first`: 2 runs first (4 GPUs), then 3 and 5, then 1 and 4.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    FifoStrict,
    /// The default: fills idle resources without runtime estimates and still
    /// never lets anything overtake the head job once the machine fills up.
    #[default]
    EasyBackfill,
    StrictBackfill,
    LargestFirst,
}

impl Policy {
    pub const ALL: [Policy; 4] = [
        Policy::FifoStrict,
        Policy::EasyBackfill,
        Policy::StrictBackfill,
        Policy::LargestFirst,
    ];

    /// Whether later jobs may pass a blocked head within what the policy
    /// keeps for it (easy- and strict-backfill).
    pub fn backfills(self) -> bool {
        matches!(self, Policy::EasyBackfill | Policy::StrictBackfill)
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::FifoStrict => "fifo-strict",
            Policy::EasyBackfill => "easy-backfill",
            Policy::StrictBackfill => "strict-backfill",
            Policy::LargestFirst => "largest-first",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown policy {0:?}: use one of fifo-strict, easy-backfill, strict-backfill, largest-first"
)]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

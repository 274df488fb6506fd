//! What one user's pending jobs may hold: the admin's budgets and the check
//! against them.
//!
//! A pending job holds memory in xlurmd (its command, environment and
//! script), room in the job log, and, with `--output`, an open descriptor.
//! Each has a budget per user besides the count of jobs, so that no user can
//! exhaust the daemon's memory, disk or descriptors for everyone else.

use std::fmt;

/// What a user's pending jobs hold (or what a submission adds).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub jobs: usize,
    /// Bytes of their records (see `Job::held_bytes`).
    pub bytes: u64,
    /// Output descriptors held for them.
    pub outputs: usize,
}

impl Usage {
    pub fn add(&mut self, u: Usage) {
        self.jobs += u.jobs;
        self.bytes += u.bytes;
        self.outputs += u.outputs;
    }

    pub fn sub(&mut self, u: Usage) {
        self.jobs = self.jobs.saturating_sub(u.jobs);
        self.bytes = self.bytes.saturating_sub(u.bytes);
        self.outputs = self.outputs.saturating_sub(u.outputs);
    }

    pub fn is_empty(&self) -> bool {
        *self == Usage::default()
    }
}

/// The admin's limits per user (`xlurmd --max-pending-per-user`,
/// `--max-pending-bytes-per-user`, `--max-output-files-per-user`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub jobs: usize,
    pub bytes: u64,
    pub outputs: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            jobs: 10_000,
            bytes: 256 << 20,
            outputs: 256,
        }
    }
}

/// A submission that would take a user past a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    /// What ran out: "pending jobs", "bytes of pending jobs", ...
    pub what: &'static str,
    pub have: u64,
    pub adding: u64,
    pub limit: u64,
    /// The admin option that sets it.
    pub option: &'static str,
}

impl fmt::Display for OverBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |n: u64| match self.what {
            BYTES => crate::core::request::format_bytes(n),
            _ => n.to_string(),
        };
        write!(
            f,
            "{} {} already, {} more asked; the limit is {} (admin option {})",
            show(self.have),
            self.what,
            show(self.adding),
            show(self.limit),
            self.option
        )
    }
}

const BYTES: &str = "of commands, environments and scripts in pending jobs";

impl Budget {
    /// Whether a user holding `have` may add `adding`; the first budget
    /// exceeded otherwise.
    pub fn admit(&self, have: Usage, adding: Usage) -> Result<(), OverBudget> {
        let checks = [
            (
                "pending jobs",
                have.jobs as u64,
                adding.jobs as u64,
                self.jobs as u64,
                "--max-pending-per-user",
            ),
            (
                BYTES,
                have.bytes,
                adding.bytes,
                self.bytes,
                "--max-pending-bytes-per-user",
            ),
            (
                "pending jobs holding a descriptor (--output file or --pty terminal)",
                have.outputs as u64,
                adding.outputs as u64,
                self.outputs as u64,
                "--max-output-files-per-user",
            ),
        ];
        for (what, have, adding, limit, option) in checks {
            if adding > 0 && have.saturating_add(adding) > limit {
                return Err(OverBudget {
                    what,
                    have,
                    adding,
                    limit,
                    option,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(jobs: usize, bytes: u64, outputs: usize) -> Usage {
        Usage {
            jobs,
            bytes,
            outputs,
        }
    }

    #[test]
    fn each_budget_is_checked_up_to_and_including_its_limit() {
        let b = Budget {
            jobs: 3,
            bytes: 1000,
            outputs: 1,
        };
        assert_eq!(b.admit(u(2, 900, 0), u(1, 100, 1)), Ok(()));
        let e = b.admit(u(3, 0, 0), u(1, 1, 0)).unwrap_err();
        assert_eq!(
            (e.what, e.option),
            ("pending jobs", "--max-pending-per-user")
        );
        let e = b.admit(u(0, 999, 0), u(1, 2, 0)).unwrap_err();
        assert_eq!(e.option, "--max-pending-bytes-per-user");
        assert!(e.to_string().contains("the limit is 1000B"), "{e}");
        let e = b.admit(u(0, 0, 1), u(1, 1, 1)).unwrap_err();
        assert_eq!(e.option, "--max-output-files-per-user");
        // What a submission does not add is not checked (an admin lowered a limit).
        assert_eq!(b.admit(u(0, 5000, 9), u(1, 0, 0)), Ok(()));
    }

    #[test]
    fn usage_adds_and_subtracts_without_wrapping() {
        let mut have = u(1, 10, 1);
        have.add(u(2, 5, 0));
        assert_eq!(have, u(3, 15, 1));
        have.sub(u(5, 100, 5));
        assert!(have.is_empty());
    }

    proptest::proptest! {
        /// Whatever is held and asked: a submission admitted leaves every
        /// budget it adds to within its limit, and one refused would not have.
        #[test]
        fn admitted_submissions_stay_within_every_budget(
            have in (0usize..50, 0u64..5000, 0usize..5),
            adding in (0usize..50, 0u64..5000, 0usize..5),
            limit in (1usize..60, 1u64..6000, 1usize..6),
        ) {
            let b = Budget { jobs: limit.0, bytes: limit.1, outputs: limit.2 };
            let have = u(have.0, have.1, have.2);
            let adding = u(adding.0, adding.1, adding.2);
            let within = |h: u64, a: u64, l: u64| a == 0 || h + a <= l;
            let fits = within(have.jobs as u64, adding.jobs as u64, b.jobs as u64)
                && within(have.bytes, adding.bytes, b.bytes)
                && within(have.outputs as u64, adding.outputs as u64, b.outputs as u64);
            match b.admit(have, adding) {
                Ok(()) => proptest::prop_assert!(fits),
                Err(e) => {
                    proptest::prop_assert!(!fits);
                    proptest::prop_assert!(e.have + e.adding > e.limit && e.adding > 0);
                    proptest::prop_assert!(e.to_string().contains(e.option));
                }
            }
        }
    }
}

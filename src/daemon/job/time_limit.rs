//! A running job's time limit: changed while it runs (by its owner, lower;
//! by an admin, either way), the limit its unit has, and the deadline
//! xlurmd keeps itself where the job's is below the unit's
//! (`service::deadline`).

use super::stage::Stage;
use super::Job;

impl Job {
    /// A running job with time limit `secs`, set by its owner or an admin
    /// while it runs: one such change more. Its unit's limit stays where it
    /// is unless `secs` is above it (then systemd is given `secs`).
    pub fn with_time_limit(&self, secs: u64) -> Job {
        let mut j = self.clone();
        let unit = self.unit_limit_secs();
        j.demand.time_limit_secs = secs;
        if let Stage::Running(r) = &mut j.stage {
            r.limit_changes = r.limit_changes.saturating_add(1);
            r.unit_limit_secs = if secs >= unit { 0 } else { unit };
        }
        j
    }

    /// A running job whose new time limit systemd did not take: its limit
    /// `before` again (`before_unit` its unit's), and the change not counted.
    pub fn time_limit_back(&self, before: u64, before_unit: u64) -> Job {
        let mut j = self.clone();
        j.demand.time_limit_secs = before;
        if let Stage::Running(r) = &mut j.stage {
            r.limit_changes = r.limit_changes.saturating_sub(1);
            r.unit_limit_secs = if before_unit > before { before_unit } else { 0 };
        }
        j
    }

    /// The time limit its unit has (seconds): the job's own, or above it
    /// where the job's was lowered while it ran.
    pub fn unit_limit_secs(&self) -> u64 {
        let own = self.demand.time_limit_secs;
        self.run().map_or(own, |r| r.unit_limit_secs.max(own))
    }

    /// When xlurmd itself must stop this running job (µs since the epoch):
    /// at its time limit, where that was lowered below its unit's and it was
    /// neither stopped nor cancelled yet. `None`: systemd's limit is the job's.
    pub fn own_deadline(&self) -> Option<u64> {
        let r = self.run()?;
        let own = self.demand.time_limit_secs;
        (r.unit_limit_secs > own && !r.stopped_at_limit && r.cancel_requested_by.is_none())
            .then(|| r.start_usec.saturating_add(own.saturating_mul(1_000_000)))
    }

    /// A running job xlurmd stops at its (lowered) time limit: it ends TIMEOUT.
    pub fn stopped_at_limit(&self) -> Job {
        let mut j = self.clone();
        if let Stage::Running(r) = &mut j.stage {
            r.stopped_at_limit = true;
        }
        j
    }
}

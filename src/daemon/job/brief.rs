//! Jobs in brief: what a queue line shows of a job that ended, the strings
//! they share, and the sorted table that keeps them.

use super::{Job, JobState};
use crate::core::JobId;
use std::sync::Arc;

/// A job in brief: what a queue line shows of it. Jobs that ended are kept in
/// memory only so (about 130 bytes each, their strings shared through
/// [`Strings`]); their whole record stays in the job log and is read back for
/// `GetJob` and `ReadLog` (see `store`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brief {
    pub submit_usec: u64,
    pub start_usec: u64,
    pub end_usec: u64,
    pub mem_bytes: u64,
    pub time_limit_secs: u64,
    pub uid: u32,
    pub cpus: u32,
    /// The exit code the CLI reports, -1 while the job has none.
    pub exit_code: i32,
    pub state: JobState,
    pub spread: bool,
    /// Its array and index, if it was an array's task.
    pub task: Option<(JobId, u32)>,
    pub name: Arc<str>,
    pub user: Arc<str>,
    /// Devices given, or requested while pending (`cpu`, `nv:[0,1]`, `auto:1`).
    pub devices: Arc<str>,
    /// How it ended, in a line; empty while active.
    pub detail: Arc<str>,
}

impl Brief {
    /// `job` in brief, its strings made by `intern`.
    pub fn of(job: &Job, mut intern: impl FnMut(&str) -> Arc<str>) -> Brief {
        let devices = job
            .devices_allocated()
            .unwrap_or_else(|| job.devices_requested());
        Brief {
            submit_usec: job.submit_usec,
            start_usec: job.start_usec(),
            end_usec: job.end_usec(),
            mem_bytes: job.demand.mem_bytes,
            time_limit_secs: job.demand.time_limit_secs,
            uid: job.uid,
            cpus: job.demand.cpus,
            exit_code: job.exit_code().unwrap_or(-1),
            state: job.state(),
            spread: job.alloc().is_some_and(|a| a.spread),
            task: job.array.as_ref().map(|t| (t.array, t.index)),
            name: intern(&job.name),
            user: intern(&job.user),
            devices: intern(&devices),
            detail: intern(job.outcome().map_or("", |o| o.detail.as_str())),
        }
    }
}

/// Strings shared between brief records: users, and the names, device
/// summaries and details that repeat across a user's jobs.
#[derive(Default)]
pub struct Strings(std::collections::HashSet<Arc<str>>);

impl Strings {
    pub fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(x) = self.0.get(s) {
            return x.clone();
        }
        let x: Arc<str> = s.into();
        self.0.insert(x.clone());
        x
    }

    /// Lets go of strings no brief record uses any more.
    pub fn prune(&mut self) {
        self.0.retain(|s| Arc::strong_count(s) > 1);
    }
}

/// Jobs that ended, in brief, by ID: a sorted vector, about half the memory
/// of a B-tree. Jobs end roughly in ID order, so inserts land at or near the
/// end, and retention removes them in one pass.
#[derive(Debug, Default)]
pub struct Ended(Vec<(JobId, Brief)>);

impl Ended {
    pub fn insert(&mut self, id: JobId, brief: Brief) {
        match self.0.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => self.0[i].1 = brief,
            Err(i) => self.0.insert(i, (id, brief)),
        }
    }

    pub fn get(&self, id: JobId) -> Option<&Brief> {
        let i = self.0.binary_search_by_key(&id, |e| e.0).ok()?;
        Some(&self.0[i].1)
    }

    pub fn contains(&self, id: JobId) -> bool {
        self.get(id).is_some()
    }

    pub fn retain(&mut self, mut keep: impl FnMut(JobId, &Brief) -> bool) {
        self.0.retain(|(id, b)| keep(*id, b));
    }

    /// Highest ID first.
    pub fn iter_rev(&self) -> impl Iterator<Item = (JobId, &Brief)> {
        self.0.iter().rev().map(|(id, b)| (*id, b))
    }

    /// Lowest ID first, from `from` on.
    pub fn iter_from(&self, from: JobId) -> impl Iterator<Item = (JobId, &Brief)> {
        let start = self.0.partition_point(|e| e.0 < from);
        self.0[start..].iter().map(|(id, b)| (*id, b))
    }

    pub fn ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.0.iter().map(|e| e.0)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Gives back spare room once it is more than a quarter.
    pub fn shrink(&mut self) {
        if self.0.capacity() > self.0.len() + self.0.len() / 4 {
            self.0.shrink_to_fit();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

//! Jobs in brief: what a queue line shows of a job that ended, the strings
//! they share, and the sorted table that keeps them.

use super::{Job, JobState};
use crate::core::JobId;
use std::sync::Arc;

/// A job in brief: what a queue line shows of it. Jobs that ended are kept in
/// memory only so (about 100 bytes each, their strings shared through
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
    /// Its array and index, if it was an array's task: see [`Brief::task`]
    /// (an array's ID, 0 for none, and the index: 12 bytes, where an
    /// `Option<(JobId, u32)>` takes 24).
    pub task_array: JobId,
    pub task_index: u32,
    pub name: Shared,
    pub user: Shared,
    /// Devices given, or requested while pending (`cpu`, `nv:[0,1]`, `auto:1`).
    pub devices: Shared,
    /// How it ended, in a line; empty while active.
    pub detail: Shared,
}

// 100,000 jobs kept in brief cost 11 MB of table, not the 14 MB of 144-byte
// entries with `Arc<str>` (a whole restart's RSS, `cargo bench --bench daemon`).
const _: () = assert!(std::mem::size_of::<(JobId, Brief)>() <= 112);

/// A string shared between brief records, behind one thin pointer (8 bytes,
/// not the 16 of an `Arc<str>`: four in each of 100,000 records).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Shared(Arc<Box<str>>);

impl std::ops::Deref for Shared {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Shared {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self.0, f)
    }
}

impl From<&str> for Shared {
    fn from(s: &str) -> Shared {
        Shared(Arc::new(s.into()))
    }
}

impl From<String> for Shared {
    fn from(s: String) -> Shared {
        Shared(Arc::new(s.into_boxed_str()))
    }
}

impl Brief {
    /// `job` in brief, its strings made by `intern`.
    pub fn of(job: &Job, mut intern: impl FnMut(&str) -> Shared) -> Brief {
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
            task_array: job.array.as_ref().map_or(0, |t| t.array),
            task_index: job.array.as_ref().map_or(0, |t| t.index),
            name: intern(&job.name),
            user: intern(&job.user),
            devices: intern(&devices),
            detail: intern(job.outcome().map_or("", |o| o.detail.as_str())),
        }
    }
}

impl Brief {
    /// Its array and index, if it was an array's task (array IDs are jobs'
    /// IDs: never 0).
    pub fn task(&self) -> Option<(JobId, u32)> {
        (self.task_array != 0).then_some((self.task_array, self.task_index))
    }
}

/// Strings shared between brief records: users, and the names, device
/// summaries and details that repeat across a user's jobs.
#[derive(Default)]
pub struct Strings(std::collections::HashSet<Shared>);

impl Strings {
    pub fn get(&mut self, s: &str) -> Shared {
        if let Some(x) = self.0.get(s) {
            return x.clone();
        }
        let x = Shared::from(s);
        self.0.insert(x.clone());
        x
    }

    /// Lets go of strings no brief record uses any more.
    pub fn prune(&mut self) {
        self.0.retain(|s| Arc::strong_count(&s.0) > 1);
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

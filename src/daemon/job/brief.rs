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

/// Jobs that ended, in brief, by ID: a sorted vector (about half the
/// memory of a B-tree), and a small B-tree of those that ended out of ID
/// order since it was last merged. A job that ends after every job kept is
/// pushed at the end; one that ends before some of them (a long job, or
/// several users cancelling their runs at once) goes into `late`, merged in
/// one pass when it reaches [`LATE_MERGE`] jobs and at each trim. Inserting
/// each such job into the vector moved the whole tail of it, under the state
/// lock: 15 s for 104,000 jobs cancelled in 8 interleaved runs.
#[derive(Debug, Default)]
pub struct Briefs {
    sorted: Vec<(JobId, Brief)>,
    late: std::collections::BTreeMap<JobId, Brief>,
}

/// How many out-of-order jobs [`Ended`] keeps aside before merging them.
pub const LATE_MERGE: usize = 4096;

/// Two iterators, each in order, merged into one; `first(a, b)`: whether
/// `a` comes before `b`. (Ended jobs' two parts here; jobs in full and in
/// brief in `service::state`.)
pub fn merge_sorted<T>(
    a: impl Iterator<Item = T>,
    b: impl Iterator<Item = T>,
    first: impl Fn(&T, &T) -> bool,
) -> impl Iterator<Item = T> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => first(x, y),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if take_a {
            a.next()
        } else {
            b.next()
        }
    })
}

impl Briefs {
    pub fn insert(&mut self, id: JobId, brief: Brief) {
        if let Some(b) = self.late.get_mut(&id) {
            *b = brief;
            return;
        }
        if self.sorted.last().is_none_or(|e| e.0 < id) {
            self.sorted.push((id, brief));
            return;
        }
        match self.sorted.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => self.sorted[i].1 = brief,
            Err(_) => {
                self.late.insert(id, brief);
                if self.late.len() >= LATE_MERGE {
                    self.merge_late();
                }
            }
        }
    }

    /// Moves the jobs kept aside into the vector, in one pass (a stable sort
    /// of two sorted runs is a merge).
    fn merge_late(&mut self) {
        if self.late.is_empty() {
            return;
        }
        self.sorted.extend(std::mem::take(&mut self.late));
        self.sorted.sort_by_key(|e| e.0);
    }

    pub fn get(&self, id: JobId) -> Option<&Brief> {
        match self.sorted.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => Some(&self.sorted[i].1),
            Err(_) => self.late.get(&id),
        }
    }

    pub fn contains(&self, id: JobId) -> bool {
        self.get(id).is_some()
    }

    pub fn retain(&mut self, mut keep: impl FnMut(JobId, &Brief) -> bool) {
        self.sorted.retain(|(id, b)| keep(*id, b));
        self.late.retain(|id, b| keep(*id, b));
    }

    /// Highest ID first.
    pub fn iter_rev(&self) -> impl Iterator<Item = (JobId, &Brief)> {
        merge_sorted(
            self.sorted.iter().rev().map(|(id, b)| (*id, b)),
            self.late.iter().rev().map(|(id, b)| (*id, b)),
            |a, b| a.0 > b.0,
        )
    }

    /// Lowest ID first, from `from` on.
    pub fn iter_from(&self, from: JobId) -> impl Iterator<Item = (JobId, &Brief)> {
        let start = self.sorted.partition_point(|e| e.0 < from);
        merge_sorted(
            self.sorted[start..].iter().map(|(id, b)| (*id, b)),
            self.late.range(from..).map(|(id, b)| (*id, b)),
            |a, b| a.0 < b.0,
        )
    }

    pub fn ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.iter_from(0).map(|(id, _)| id)
    }

    pub fn len(&self) -> usize {
        self.sorted.len() + self.late.len()
    }

    /// Merges the jobs kept aside, and gives back spare room once it is more
    /// than a quarter.
    pub fn shrink(&mut self) {
        self.merge_late();
        if self.sorted.capacity() > self.sorted.len() + self.sorted.len() / 4 {
            self.sorted.shrink_to_fit();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty() && self.late.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brief(id: JobId) -> Brief {
        Brief {
            submit_usec: id,
            start_usec: 0,
            end_usec: id,
            mem_bytes: 0,
            time_limit_secs: 0,
            uid: 0,
            cpus: 1,
            exit_code: 0,
            state: JobState::Completed,
            spread: false,
            task_array: 0,
            task_index: 0,
            name: "n".into(),
            user: "u".into(),
            devices: "cpu".into(),
            detail: "".into(),
        }
    }

    /// IDs 1..=n ended in `runs` interleaved runs (run r holds the r-th
    /// n/runs IDs), as when several users cancel their jobs at once.
    fn interleaved(n: JobId, runs: JobId) -> Vec<JobId> {
        let per = n / runs;
        (0..per)
            .flat_map(|k| (0..runs).map(move |r| r * per + k + 1))
            .collect()
    }

    fn check_order(e: &Briefs, n: JobId) {
        let up: Vec<JobId> = e.ids().collect();
        assert_eq!(up, (1..=n).collect::<Vec<_>>());
        let down: Vec<JobId> = e.iter_rev().map(|(id, _)| id).collect();
        assert_eq!(down, (1..=n).rev().collect::<Vec<_>>());
        assert_eq!(e.len(), n as usize);
        for id in 1..=n {
            assert_eq!(e.get(id).map(|b| b.end_usec), Some(id));
        }
        assert!(!e.contains(0) && !e.contains(n + 1));
        let from: Vec<JobId> = e.iter_from(n / 2).map(|(id, _)| id).collect();
        assert_eq!(from, (n / 2..=n).collect::<Vec<_>>());
    }

    #[test]
    fn jobs_ending_out_of_id_order_leave_the_vector_unmoved_until_merged() {
        let mut e = Briefs::default();
        for id in [10, 20, 30] {
            e.insert(id, brief(id));
        }
        let (at, len) = (e.sorted.as_ptr(), e.sorted.len());
        e.insert(15, brief(15));
        e.insert(5, brief(5));
        assert_eq!((e.sorted.as_ptr(), e.sorted.len()), (at, len));
        assert_eq!(e.late.len(), 2);
        let ids: Vec<JobId> = e.ids().collect();
        assert_eq!(ids, [5, 10, 15, 20, 30]);
        e.shrink();
        assert!(e.late.is_empty());
        let ids: Vec<JobId> = e.sorted.iter().map(|x| x.0).collect();
        assert_eq!(ids, [5, 10, 15, 20, 30]);
    }

    #[test]
    fn interleaved_ends_read_back_in_order_before_and_after_merges() {
        let n = 3 * LATE_MERGE as JobId;
        let mut e = Briefs::default();
        for id in interleaved(n, 8) {
            e.insert(id, brief(id));
            assert!(e.late.len() < LATE_MERGE);
        }
        check_order(&e, n);
        e.shrink();
        assert!(e.late.is_empty());
        check_order(&e, n);
    }

    #[test]
    fn a_job_ended_again_is_replaced_where_it_is_and_retain_reaches_both_parts() {
        let mut e = Briefs::default();
        for id in [1, 2, 4] {
            e.insert(id, brief(id));
        }
        e.insert(3, brief(3));
        let mut again = brief(3);
        again.exit_code = 7;
        e.insert(3, again);
        let mut again = brief(2);
        again.exit_code = 9;
        e.insert(2, again);
        assert_eq!(e.len(), 4);
        assert_eq!(e.get(3).map(|b| b.exit_code), Some(7));
        assert_eq!(e.get(2).map(|b| b.exit_code), Some(9));
        e.retain(|id, _| id % 2 == 0);
        let ids: Vec<JobId> = e.ids().collect();
        assert_eq!(ids, [2, 4]);
        e.retain(|_, _| false);
        assert!(e.is_empty());
    }
}

//! Job arrays in the daemon's tables: which tasks of each array started,
//! how many run (for `%N`), and what became of them (for dependencies on
//! the whole array). The array's tasks not started yet are its pending
//! record's (`job::Task::rest`).

use super::*;
use crate::core::Progress;

/// What the daemon keeps per array, counted as its tasks start and end.
/// Every look-up is by index or by a job's own index (a job knows its
/// task's), so each event of an array costs the same however many tasks it
/// has (an array of 100,000 tasks was 100,000 steps per event).
#[derive(Debug, Clone, Default)]
pub struct ArrayBook {
    /// The tasks that started or were cancelled before they started, by
    /// index: their job IDs (the array's own for its last task).
    tasks: HashMap<u32, JobId>,
    pub running: u32,
    /// Started tasks pending again (`--requeue`).
    pub waiting: u32,
    pub ok: u32,
    pub not_ok: u32,
}

impl ArrayBook {
    /// Whether `job`, a task of this array, is in the book.
    fn has(&self, job: &Job) -> bool {
        job.array
            .as_ref()
            .is_some_and(|t| self.tasks.get(&t.index) == Some(&job.id))
    }
}

impl State {
    /// Builds the books of every array from the jobs loaded, in full and in brief.
    pub(super) fn index_arrays(&mut self) {
        let mut books: HashMap<JobId, ArrayBook> = HashMap::new();
        for (id, found) in self.oldest_first(0) {
            let (array, index, state, whole) = match found {
                Found::Full(j) => match &j.array {
                    Some(t) => (
                        t.array,
                        t.index,
                        j.state(),
                        t.array == id && !t.rest.is_empty(),
                    ),
                    None => continue,
                },
                Found::Brief(b) => match b.task() {
                    Some((array, index)) => (array, index, b.state, false),
                    None => continue,
                },
            };
            // The array's own record while it stands for tasks not started.
            if whole && state == JobState::Pending {
                continue;
            }
            let book = books.entry(array).or_default();
            book.tasks.insert(index, id);
            count(book, state, 1);
        }
        self.arrays = books;
    }

    /// Task `job` started (or an array's last task, as the array's record).
    pub(super) fn task_started(&mut self, job: &Job) {
        let Some(t) = &job.array else {
            return;
        };
        let book = self.arrays.entry(t.array).or_default();
        if book.tasks.insert(t.index, job.id) == Some(job.id) {
            // Queued again, now started again.
            book.waiting = book.waiting.saturating_sub(1);
        }
        book.running += 1;
    }

    /// Task `job` moved on from `was` (it ended, or was queued again): the
    /// counts follow, and the array's pending rest may start more (`%N`).
    pub(super) fn task_moved(&mut self, job: &Job, was: JobState) {
        let Some(t) = &job.array else {
            return;
        };
        let array = t.array;
        let Some(book) = self.arrays.get_mut(&array) else {
            return;
        };
        if !book.has(job) {
            return;
        }
        count(book, was, -1);
        count(book, job.state(), 1);
        if array != job.id {
            self.readmit(array);
        }
    }

    /// Task `job` was cancelled before it started (taken off its array's
    /// pending rest).
    pub(super) fn task_cancelled(&mut self, job: &Job) {
        let Some(t) = &job.array else {
            return;
        };
        let book = self.arrays.entry(t.array).or_default();
        book.tasks.insert(t.index, job.id);
        count(book, job.state(), 1);
    }

    /// What became of array `array`'s tasks, if it is an array: counted,
    /// with the indices not started yet as pending.
    pub(super) fn array_progress(&self, array: JobId) -> Option<Progress> {
        let job = self.jobs.get(&array);
        let book = self.arrays.get(&array);
        if book.is_none() && job.is_none_or(|j| j.array.is_none()) {
            return None;
        }
        let mut p = Progress::default();
        if let Some(b) = book {
            p.pending = b.waiting;
            p.running = b.running;
            p.ok = b.ok;
            p.not_ok = b.not_ok;
        }
        let counted = book.is_some_and(|b| job.is_some_and(|j| b.has(j)));
        match job {
            Some(j) if !counted && j.state() == JobState::Pending => {
                let rest = j.array.as_ref().map_or(1, |t| t.rest.len().max(1));
                p.pending = p.pending.saturating_add(rest.min(u32::MAX as u64) as u32);
            }
            // Cancelled before its last tasks started.
            Some(j) if !counted && j.is_final() => p.not_ok += 1,
            _ => {}
        }
        Some(p)
    }

    /// The job of task `index` of array `array`, if it started.
    pub(super) fn started_task(&self, array: JobId, index: u32) -> Option<JobId> {
        let id = self.arrays.get(&array)?.tasks.get(&index).copied()?;
        // (Its record may be gone: forgotten after the retention.)
        self.find(id).is_some().then_some(id)
    }

    /// What became of task `index` of array `array`: `None` when it is not
    /// one (or its record is gone).
    pub(super) fn task_progress(&self, array: JobId, index: u32) -> Option<Progress> {
        if let Some(state) = self
            .started_task(array, index)
            .and_then(|id| self.find(id))
            .map(|f| f.state())
        {
            return Some(super::admission::progress_of(state));
        }
        let waits = self.jobs.get(&array).is_some_and(|j| {
            j.state() == JobState::Pending
                && j.array.as_ref().is_some_and(|t| t.rest.contains(index))
        });
        waits.then(|| super::admission::progress_of(JobState::Pending))
    }

    /// The active tasks of array `array` that started, but `array` itself.
    /// In ID order (the order they started in).
    pub(super) fn active_tasks(&self, array: JobId) -> Vec<JobId> {
        let mut ids: Vec<JobId> = self.arrays.get(&array).map_or_else(Vec::new, |b| {
            b.tasks
                .values()
                .copied()
                .filter(|id| *id != array)
                .filter(|id| self.jobs.get(id).is_some_and(|j| !j.is_final()))
                .collect()
        });
        ids.sort_unstable();
        ids
    }

    /// How many tasks of `array` run now.
    pub(super) fn tasks_running(&self, array: JobId) -> u32 {
        self.arrays.get(&array).map_or(0, |b| b.running)
    }
}

fn count(book: &mut ArrayBook, state: JobState, by: i32) {
    let field = match state {
        JobState::Pending => &mut book.waiting,
        JobState::Running => &mut book.running,
        JobState::Completed => &mut book.ok,
        _ => &mut book.not_ok,
    };
    *field = field.saturating_add_signed(by);
}

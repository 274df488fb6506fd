//! The one commit point of the job table: every change of a job's record
//! goes through [`State::apply`], which persists it, swaps it into memory,
//! keeps every index beside the table (each user's pending usage, the
//! dependency waiters and singletons, the arrays' books, the scheduler's
//! queue and books) and returns what the daemon does once the state lock is
//! let go ([`Effects`]). No other code writes the table.
//!
//! Each kind of change ([`Commit`]) has one fixed order:
//! - a change a user asked for is recorded first and changes nothing when
//!   that fails (`Submitted`, `Revised`, `Withdrawn`, `TaskWithdrawn`,
//!   `Requeued`);
//! - `Started` records RUNNING before systemd hears of any start: a crash
//!   can never start a job twice; when it cannot be recorded the jobs go
//!   back into the queue;
//! - `Ended` changes memory first: the job did end, and its unit, kept
//!   uncollected, holds the end for the next start when it cannot be
//!   recorded.
//!
//! A job that ends makes the jobs waiting on it look again
//! ([`State::cascade`]); one whose dependency can never be met and that asked
//! for it (`--kill-on-invalid-dep=yes`) ends then, as a `Withdrawn` does, and
//! those waiting on it look in turn.

use super::*;
use crate::daemon::systemd::outcome::Collect;
use std::os::fd::OwnedFd;

/// One change of the job table, by kind. (Made and taken at once: its size
/// does not matter.)
#[allow(clippy::large_enum_variant)]
pub enum Commit {
    /// New pending jobs whose IDs continue the table's (`next_id` on), all
    /// recorded or none. `held`: the first job's `--output` descriptor or
    /// terminal, kept in systemd's descriptor store too.
    Submitted {
        jobs: Vec<Job>,
        held: Option<OwnedFd>,
    },
    /// A job's record changed and its stage did not: a pending job held,
    /// released or updated (it is gated anew), a running job's cancel
    /// asked, relaunch counted, time limit changed or output copy lost.
    Revised(Job),
    /// What a scheduling pass placed.
    Started(Starts),
    /// A pending job ended before it started: cancelled by its owner or an
    /// admin.
    Withdrawn(Job),
    /// Task `task` of an array, cancelled before it started, taken off the
    /// array's pending rest (`rest`); the task's ID continues the table's.
    TaskWithdrawn { task: Job, rest: Job },
    /// A running job ended (or one whose unit was never made). `unit`: how to
    /// collect its unit, which holds the end until the record is synced
    /// (appended now, synced with the next start or before the unit goes);
    /// `None`: no unit holds it, so it is synced now.
    Ended { job: Job, unit: Option<Collect> },
    /// A LOST `--requeue` job queued again with its ID.
    Requeued(Job),
    /// Ended jobs kept in brief only from now on.
    Retired(Vec<JobId>),
    /// Ended jobs that ended before `cutoff` (µs) are forgotten.
    Forgotten { cutoff: u64 },
}

/// What a scheduling pass placed: each job RUNNING (its start in flight),
/// and for each array whose next task it starts, the array's pending rest
/// (`rests`) and which task split off which array (`split`: array, task).
#[derive(Default)]
pub struct Starts {
    pub jobs: Vec<Job>,
    pub rests: Vec<Job>,
    pub split: Vec<(JobId, JobId)>,
    /// When (µs).
    pub now: u64,
}

/// What the daemon does after a change, without the state lock.
#[derive(Default)]
pub struct Effects {
    /// Job changes to announce, in order.
    pub changes: Vec<(JobId, JobState)>,
    /// Wake the scheduling loop.
    pub kick: bool,
    /// Jobs whose `--output` descriptor goes out of systemd's descriptor store.
    pub unstore: Vec<JobId>,
    /// Starts to launch (`Started`), each with its `--output` descriptor.
    pub launches: Vec<(Job, Option<OwnedFd>)>,
    /// Jobs whose script snapshot goes.
    pub scripts: Vec<JobId>,
    /// Units whose time limit changed while they ran (`xlurm update`).
    pub forget_limits: Vec<String>,
    /// Units of recorded ends to collect (see `Daemon::collect_ended`).
    pub collect: Vec<(String, Collect)>,
    /// Records forgotten (`Forgotten`).
    pub forgotten: usize,
}

/// Why a change was not made: memory and disk are as they were.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The store could not record it.
    #[error("{0:#}")]
    Store(#[from] anyhow::Error),
    /// The job is not in the table (in full).
    #[error("no job {0}")]
    Missing(JobId),
    /// The job is no longer where the change would move it from.
    #[error("job {id} is {is}, not {want}", is = .is.name(), want = .want.name())]
    Moved {
        id: JobId,
        is: JobState,
        want: JobState,
    },
}

impl From<CommitError> for ApiError {
    fn from(e: CommitError) -> ApiError {
        match e {
            CommitError::Store(e) => ApiError::from(e),
            CommitError::Missing(id) => no_such_job(id),
            e @ CommitError::Moved { .. } => ApiError::WrongState(e.to_string()),
        }
    }
}

impl State {
    /// Makes `change`: recorded, in memory, every index kept; what to do
    /// after the lock. An error changed nothing.
    pub fn apply(&mut self, change: Commit) -> Result<Effects, CommitError> {
        let mut fx = Effects::default();
        match change {
            Commit::Submitted { jobs, held } => self.submitted(jobs, held, &mut fx)?,
            Commit::Revised(job) => self.revised(job, &mut fx)?,
            Commit::Started(starts) => self.started(starts, &mut fx)?,
            Commit::Withdrawn(job) => {
                self.expect(job.id, JobState::Pending)?;
                let work = self.withdraw(job, &mut fx)?;
                self.cascade(work, &mut fx);
                fx.kick = true;
            }
            Commit::TaskWithdrawn { task, rest } => self.task_withdrawn(task, rest, &mut fx)?,
            Commit::Ended { job, unit } => self.ended(job, unit, &mut fx)?,
            Commit::Requeued(job) => self.requeued(job, &mut fx)?,
            Commit::Retired(ids) => {
                for id in ids {
                    self.retire(id);
                }
            }
            Commit::Forgotten { cutoff } => fx.forgotten = self.forget(cutoff),
        }
        Ok(fx)
    }

    /// Job `id` as it is in full, which must be in `want`.
    fn expect(&self, id: JobId, want: JobState) -> Result<&Job, CommitError> {
        let job = self.jobs.get(&id).ok_or(CommitError::Missing(id))?;
        match job.state() {
            is if is == want => Ok(job),
            is => Err(CommitError::Moved { id, is, want }),
        }
    }

    fn submitted(
        &mut self,
        jobs: Vec<Job>,
        mut held: Option<OwnedFd>,
        fx: &mut Effects,
    ) -> Result<(), CommitError> {
        debug_assert!(jobs
            .iter()
            .enumerate()
            .all(|(i, j)| j.id == self.next_id + i as u64 && j.state() == JobState::Pending));
        self.store.save(jobs.iter())?;
        let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
        self.next_id = self.next_id.max(ids.last().map_or(0, |l| l + 1));
        for mut job in jobs {
            // Kept in systemd's descriptor store too, across a crash.
            if let Some(fd) = held.take() {
                crate::daemon::output::store(job.id, &fd);
                job.hold_output_fd(fd);
            }
            self.enqueue(job);
        }
        fx.changes
            .extend(ids.iter().map(|id| (*id, JobState::Pending)));
        fx.kick = true;
        // One whose dependency can never be met and that asked to be
        // cancelled then ends at once (`afterok` on a job that failed).
        let work = self.settle(&ids, fx);
        self.cascade(work, fx);
        Ok(())
    }

    fn revised(&mut self, job: Job, fx: &mut Effects) -> Result<(), CommitError> {
        let id = job.id;
        let state = job.state();
        self.expect(id, state)?;
        self.store.save([&job])?;
        if state != JobState::Pending {
            self.jobs.insert(id, job);
            return Ok(());
        }
        // Out of every index as it was, in as it is now (its demand, its
        // dependency, its hold may have changed).
        self.pending_done(id);
        self.stop_waiting(id);
        self.sched.dequeue(id);
        self.enqueue(job);
        fx.kick = true;
        let work = self.settle(&[id], fx);
        self.cascade(work, fx);
        Ok(())
    }

    fn started(&mut self, s: Starts, fx: &mut Effects) -> Result<(), CommitError> {
        let Starts {
            jobs,
            rests,
            split,
            now,
        } = s;
        let secs = now / 1_000_000;
        if let Err(e) = self.store.save(jobs.iter().chain(&rests)) {
            // Back in the queue: the scheduler knows a split task by its
            // array's ID still.
            let tasks: HashMap<JobId, JobId> = split.iter().map(|(a, t)| (*t, *a)).collect();
            for j in &jobs {
                let id = tasks.get(&j.id).copied().unwrap_or(j.id);
                self.sched.put_back(id, j.demand.clone());
            }
            return Err(e.into());
        }
        if let Some(last) = split.iter().map(|(_, t)| *t).max() {
            self.next_id = self.next_id.max(last + 1);
        }
        // The scheduler placed the array: the task holds that place now, and
        // the rest waits again (see `admission`: its %N).
        for (array, task) in &split {
            if let Some(alloc) = self.sched.finish(*array) {
                if let Some(j) = jobs.iter().find(|j| j.id == *task) {
                    let deadline = secs + j.demand.time_limit_secs;
                    self.sched
                        .adopt_for(*task, alloc, deadline, j.submission(), Some(secs));
                }
            }
        }
        for j in &jobs {
            self.task_started(j);
        }
        for mut rest in rests {
            let id = rest.id;
            rest.detach();
            self.jobs.insert(id, rest);
            self.readmit(id);
        }
        // More of its tasks may start now.
        fx.kick |= !split.is_empty();
        // In flight from here (`Launch::InFlight`) until systemd answers.
        fx.launches.reserve(jobs.len());
        for j in jobs {
            self.pending_done(j.id);
            // The pending job's --output descriptor goes to the launch.
            let output_fd = self
                .jobs
                .insert(j.id, j.clone())
                .and_then(|mut pending| pending.take_output_fd());
            fx.launches.push((j, output_fd));
        }
        // `after:` waits for a start, `singleton` for the next in line.
        for i in 0..fx.launches.len() {
            let work = woken_by(&fx.launches[i].0);
            self.cascade(work, fx);
        }
        Ok(())
    }

    fn task_withdrawn(
        &mut self,
        task: Job,
        mut rest: Job,
        fx: &mut Effects,
    ) -> Result<(), CommitError> {
        let array = rest.id;
        self.expect(array, JobState::Pending)?;
        debug_assert!(task.id >= self.next_id && task.is_final());
        self.store.save([&task, &rest])?;
        self.to_ledger(&task);
        self.next_id = self.next_id.max(task.id + 1);
        rest.detach();
        self.jobs.insert(array, rest);
        self.task_cancelled(&task);
        fx.changes.push((task.id, task.state()));
        let work = woken_by(&task);
        self.jobs.insert(task.id, task);
        self.cascade(work, fx);
        Ok(())
    }

    fn ended(
        &mut self,
        job: Job,
        unit: Option<Collect>,
        fx: &mut Effects,
    ) -> Result<(), CommitError> {
        let id = job.id;
        let was = match self.jobs.get(&id) {
            None => return Err(CommitError::Missing(id)),
            Some(j) if j.is_final() => {
                return Err(CommitError::Moved {
                    id,
                    is: j.state(),
                    want: JobState::Running,
                })
            }
            Some(j) => j.state(),
        };
        // In memory even if it cannot be recorded: the job did end, and its
        // unit, kept uncollected, holds the end for the next start.
        self.jobs.insert(id, job.clone());
        self.to_ledger(&job);
        self.task_moved(&job, was);
        // Charged to its owner's fair-share usage up to its end.
        self.release(id, job.end_usec());
        // Jobs like it are expected to take as long (expected starts).
        if job.state() == JobState::Completed {
            let (from, to) = (job.start_usec(), job.end_usec());
            self.sched
                .record_runtime(job.kind(), from / 1_000_000, to / 1_000_000);
        }
        fx.changes.push((id, job.state()));
        // Those waiting on it (or on its array) see how it ended.
        self.cascade(woken_by(&job), fx);
        // A unit left to collect keeps the job's result until the record is
        // durable: it is synced with the next start's record (one fsync on
        // the way from a job's end to the next job's start) or before the
        // unit is collected (`collect_ended`). Without one, sync now.
        let recorded = match unit {
            Some(_) => self.store.append([&job]),
            None => self.store.save([&job]),
        };
        match recorded {
            // Collected once nothing waits, or by the 5 s check; never while
            // its unit is all that holds its end.
            Ok(()) => fx
                .collect
                .push((job.unit(), unit.unwrap_or(Collect::for_state(None)))),
            Err(e) => tracing::error!(
                job = id,
                "recording the final state failed: {e:#}; its unit is kept, so the next start of xlurmd records it"
            ),
        }
        if job.command.script.is_some() {
            fx.scripts.push(id);
        }
        // A time limit changed while it ran goes with it.
        fx.forget_limits.push(job.unit());
        fx.kick = true;
        Ok(())
    }

    fn requeued(&mut self, job: Job, fx: &mut Effects) -> Result<(), CommitError> {
        let id = job.id;
        self.expect(id, JobState::Running)?;
        // If it cannot be recorded it stays running in memory, and the
        // next look at its unit tries again.
        self.store.save([&job])?;
        self.release(id, now_usec());
        self.task_moved(&job, JobState::Running);
        let work = woken_by(&job);
        fx.forget_limits.push(job.unit());
        self.enqueue(job);
        fx.changes.push((id, JobState::Pending));
        // Those waiting on it (or on its array) see it pending again.
        self.cascade(work, fx);
        fx.kick = true;
        Ok(())
    }

    /// Running job `id` no longer holds its place, charged to its owner's
    /// fair-share usage up to `at` (µs): once, whichever comes first of its
    /// unit's end as signalled (`Daemon::free_resources`) and its end
    /// recorded. Whether it held one.
    pub(super) fn release(&mut self, id: JobId, at: u64) -> bool {
        self.sched.finish_at(id, at / 1_000_000).is_some()
    }

    /// Pending `job`, new or changed, into the table and every index: its
    /// owner's usage, the waiters of what it depends on, the queue unless
    /// something keeps it out. Memory keeps what waiting needs: its record
    /// has the rest.
    fn enqueue(&mut self, mut job: Job) {
        self.pending_added(&job);
        job.detach();
        let id = job.id;
        self.jobs.insert(id, job);
        self.wait_for_targets(id);
        self.readmit(id);
    }

    /// Pending `job` ends before it started: recorded, out of the queue and
    /// its owner's usage, counted in its array; the jobs to look at again.
    fn withdraw(&mut self, job: Job, fx: &mut Effects) -> Result<Vec<JobId>, CommitError> {
        let id = job.id;
        self.store.save([&job])?;
        self.to_ledger(&job);
        self.sched.dequeue(id);
        self.pending_done(id);
        // A task queued again (--requeue) is counted in its array.
        self.task_moved(&job, JobState::Pending);
        fx.changes.push((id, job.state()));
        let work = woken_by(&job);
        // Its --output file is let go of with it.
        if self.jobs.insert(id, job).is_some_and(|j| j.has_output_fd()) {
            fx.unstore.push(id);
        }
        Ok(work)
    }

    /// Of pending jobs `ids`, those whose dependency can never be met and
    /// that asked to be cancelled then end; the jobs to look at again.
    fn settle(&mut self, ids: &[JobId], fx: &mut Effects) -> Vec<JobId> {
        let mut work = Vec::new();
        for id in ids {
            work.extend(self.settle_one(*id, fx));
        }
        work
    }

    /// Cancels pending job `id` if its dependency can never be met and it
    /// asked for that (`--kill-on-invalid-dep=yes`): the jobs to look at
    /// again if it was. A record that cannot be read or written leaves it
    /// waiting (logged).
    fn settle_one(&mut self, id: JobId, fx: &mut Effects) -> Vec<JobId> {
        let doomed = self.jobs.get(&id).is_some_and(|j| {
            j.admission() == crate::daemon::job::Admission::Never
                && j.after().is_some_and(|a| a.kill_on_invalid)
        });
        if !doomed {
            return Vec::new();
        }
        let job = match self.full(id) {
            Ok(Some(j)) => j.cancelled_dependency(now_usec()),
            Ok(None) => return Vec::new(),
            Err(e) => {
                tracing::error!("job {id}: reading its record to cancel it: {e:#}; it waits");
                return Vec::new();
            }
        };
        match self.withdraw(job, fx) {
            Ok(work) => {
                tracing::info!(
                    job = id,
                    "job {id} CANCELLED: its dependency can never be met"
                );
                work
            }
            Err(e) => {
                tracing::error!("job {id}: recording its cancel failed: {e:#}; it waits");
                Vec::new()
            }
        }
    }

    /// The jobs in `work` started or ended: those that wait on them are
    /// looked at again (and the next singleton of their owner and name).
    /// One whose dependency can never be met and that asked to be
    /// cancelled then ends, and those waiting on it are looked at in turn.
    pub(super) fn cascade(&mut self, mut work: Vec<JobId>, fx: &mut Effects) {
        while let Some(id) = work.pop() {
            for w in self.waiting_on(id) {
                fx.kick |= self.readmit(w);
                work.extend(self.settle_one(w, fx));
            }
        }
    }

    /// Pending jobs at load: those that can never start and asked to be
    /// cancelled then end (their changes are not announced: no one listens yet).
    pub(super) fn settle_loaded(&mut self, pending: &[JobId]) {
        let mut fx = Effects::default();
        let work = self.settle(pending, &mut fx);
        self.cascade(work, &mut fx);
        for id in fx.unstore {
            crate::daemon::output::unstore(id);
        }
    }

    /// Keeps ended job `id` in brief only, from now on.
    fn retire(&mut self, id: JobId) {
        if !self.jobs.get(&id).is_some_and(|j| j.state().is_final()) {
            return;
        }
        if let Some(job) = self.jobs.remove(&id) {
            let brief = Brief::of(&job, |s| self.strings.get(s));
            self.ended.insert(id, brief);
            self.retired += 1;
        }
    }

    /// Forgets the jobs that ended before `cutoff` (µs), in full and in
    /// brief: how many.
    fn forget(&mut self, cutoff: u64) -> usize {
        let State {
            store, jobs, ended, ..
        } = self;
        let mut removed = 0;
        jobs.retain(|id, j| {
            let keep = !(j.state().is_final() && j.end_usec() < cutoff);
            if !keep {
                store.forget(*id);
                removed += 1;
            }
            keep
        });
        ended.retain(|id, b| {
            let keep = b.end_usec >= cutoff;
            if !keep {
                store.forget(id);
                removed += 1;
            }
            keep
        });
        self.retired += removed;
        removed
    }
}

/// The jobs whose waiters look again when `job` moves: itself and, if it
/// is an array's task, its array (a dependency on the array is judged over
/// all its tasks). Its own first (the work list is taken from its end).
fn woken_by(job: &Job) -> Vec<JobId> {
    match job.array.as_ref().map(|t| t.array).filter(|a| *a != job.id) {
        Some(array) => vec![array, job.id],
        None => vec![job.id],
    }
}

impl<U: Units> Daemon<U> {
    /// Carries out what a change left to do after the state lock.
    pub(super) fn carry_out(&self, fx: Effects) {
        for id in fx.unstore {
            crate::daemon::output::unstore(id);
        }
        for (id, state) in fx.changes {
            self.changed(id, state);
        }
        for id in fx.scripts {
            let _ = std::fs::remove_file(unit::script_path(&self.settings.unit, id));
        }
        for unit in fx.forget_limits {
            self.systemd.forget_time_limit(&unit);
        }
        if !fx.collect.is_empty() {
            if let Ok(mut u) = self.uncollected.lock() {
                u.extend(fx.collect);
                if u.len() >= reconcile::COLLECT_BATCH {
                    self.collect.notify_one();
                }
            }
        }
        if fx.kick {
            self.kick.notify_one();
        }
    }
}

#[cfg(test)]
#[path = "commit_tests.rs"]
mod tests;

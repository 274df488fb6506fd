//! Admission to the scheduler's queue: a pending job is queued only
//! while nothing keeps it out (a hold, a dependency not met, its array's
//! `%N`). A job kept out is not placed, never becomes the head, and blocks
//! nobody; its reason comes from its admission ([`State::reason`]). Holds and
//! releases are here too.

use super::*;
use crate::core::dependency::{Progress, Target, Verdict};
use crate::core::Reason;
use crate::daemon::job::{Admission, Hold};

/// What became of a job, as a dependency on it sees it.
pub(super) fn progress_of(state: JobState) -> Progress {
    let mut p = Progress::default();
    match state {
        JobState::Pending => p.pending = 1,
        JobState::Running => p.running = 1,
        JobState::Completed => p.ok = 1,
        _ => p.not_ok = 1,
    }
    p
}

impl State {
    /// What keeps pending `job` out of the queue now.
    fn admission_for(&self, job: &Job) -> Admission {
        if let Some(h) = job.hold() {
            return Admission::Held(h);
        }
        if let Some(a) = job.after() {
            let clear = !a.dependency.has_singleton() || self.singleton_clear(job);
            match a.dependency.verdict(|t| self.progress(t), clear) {
                Verdict::Met => {}
                Verdict::Wait => return Admission::Dependency,
                Verdict::Never => return Admission::Never,
            }
        }
        // An array's pending rest: no more tasks than its %N at once.
        if let Some(limit) = job.array.as_ref().and_then(|t| t.limit) {
            if job.array.as_ref().is_some_and(|t| t.array == job.id)
                && self.tasks_running(job.id) >= limit
            {
                return Admission::ArrayLimit;
            }
        }
        Admission::Queued
    }

    /// What became of a dependency's target (`None`: no record of it left).
    fn progress(&self, t: &Target) -> Option<Progress> {
        match t {
            Target::Job(id) => self
                .array_progress(*id)
                .or_else(|| self.find(*id).map(|f| progress_of(f.state()))),
            Target::Task(array, index) => self.task_progress(*array, *index),
        }
    }

    /// `singleton`: no job of the same owner and name runs, and no earlier
    /// pending one asks for the same (only the oldest is let through, so
    /// two never start in one pass).
    fn singleton_clear(&self, job: &Job) -> bool {
        let earlier = self
            .singles
            .get(&(job.uid, job.name.clone()))
            .is_some_and(|s| s.range(..job.id).next().is_some());
        !earlier
            && !self.sched.running_ids().any(|r| {
                self.jobs
                    .get(&r)
                    .is_some_and(|j| j.uid == job.uid && j.name == job.name)
            })
    }

    /// Pending job `job`, just queued or loaded, is looked at when the jobs
    /// it depends on move.
    pub(super) fn wait_for_targets(&mut self, id: JobId) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let Some(a) = job.after() else {
            return;
        };
        let targets: Vec<JobId> = a.dependency.targets().collect();
        let single = a
            .dependency
            .has_singleton()
            .then(|| (job.uid, job.name.clone()));
        for t in targets {
            self.waiters.entry(t).or_default().insert(id);
        }
        if let Some(key) = single {
            self.singles.entry(key).or_default().insert(id);
        }
    }

    /// Of `targets`, one that waits, directly or through others, for job
    /// `on` (or is `on`): a new dependency of `on` on it would be a cycle.
    /// One walk over the jobs that wait for `on` (the graph reversed, see
    /// `State::waiters`), however many targets there are.
    pub(super) fn cycle_through(
        &self,
        on: JobId,
        targets: &std::collections::BTreeSet<JobId>,
    ) -> Option<JobId> {
        let mut seen = std::collections::HashSet::new();
        let mut work = vec![on];
        while let Some(id) = work.pop() {
            if targets.contains(&id) {
                return Some(id);
            }
            if !seen.insert(id) {
                continue;
            }
            if let Some(w) = self.waiters.get(&id) {
                work.extend(w.iter().copied().filter(|w| !seen.contains(w)));
            }
        }
        None
    }

    /// Job `id` left the pending state: no longer a singleton in line.
    pub(super) fn leave_singles(&mut self, id: JobId) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        if !job.after().is_some_and(|a| a.dependency.has_singleton()) {
            return;
        }
        let key = (job.uid, job.name.clone());
        if let Some(set) = self.singles.get_mut(&key) {
            set.remove(&id);
            if set.is_empty() {
                self.singles.remove(&key);
            }
        }
    }

    /// The pending jobs to look at again now that job `id` moved: those
    /// waiting on it (let go of once it, or its whole array, ended) and the
    /// next singleton of its owner and name.
    pub(super) fn waiting_on(&mut self, id: JobId) -> Vec<JobId> {
        let Some(found) = self.find(id) else {
            return Vec::new();
        };
        // An array has ended once all its tasks have.
        let ended = match self.array_progress(id) {
            Some(p) => p.pending == 0 && p.running == 0,
            None => found.state().is_final(),
        };
        let mut waiting: Vec<JobId> = if ended {
            self.waiters
                .remove(&id)
                .unwrap_or_default()
                .into_iter()
                .collect()
        } else {
            self.waiters
                .get(&id)
                .map_or_else(Vec::new, |w| w.iter().copied().collect())
        };
        // (Most daemons have no singleton waiting: no key is built then.)
        if let Some(j) = self.jobs.get(&id).filter(|_| !self.singles.is_empty()) {
            if let Some(first) = self
                .singles
                .get(&(j.uid, j.name.clone()))
                .and_then(|s| s.first())
            {
                waiting.push(*first);
            }
        }
        waiting
    }

    /// Pending job `id` no longer waits on what its record says it depends
    /// on (its dependency is about to change): it leaves those waiters.
    pub(super) fn stop_waiting(&mut self, id: JobId) {
        let Some(a) = self.jobs.get(&id).and_then(Job::after) else {
            return;
        };
        let targets: Vec<JobId> = a.dependency.targets().collect();
        for t in targets {
            if let Some(w) = self.waiters.get_mut(&t) {
                w.remove(&id);
                if w.is_empty() {
                    self.waiters.remove(&t);
                }
            }
        }
    }

    /// Brings pending job `id`'s place up to date: queued for the scheduler
    /// when nothing keeps it out, out of the queue when something does.
    /// Whether it was queued now (a pass may start it).
    pub(super) fn readmit(&mut self, id: JobId) -> bool {
        let Some(job) = self.jobs.get(&id) else {
            return false;
        };
        if job.state() != JobState::Pending {
            return false;
        }
        let admission = self.admission_for(job);
        let queued = self.sched.is_pending(id);
        let mut added = false;
        if admission == Admission::Queued && !queued {
            self.sched
                .enqueue_for(id, job.demand.clone(), job.submission());
            added = true;
        } else if admission != Admission::Queued && queued {
            self.sched.dequeue(id);
        }
        if let Some(j) = self.jobs.get_mut(&id) {
            j.set_admission(admission);
        }
        added
    }

    /// Why pending job `id` waits: what keeps it out of the queue, or
    /// what the scheduler's last pass left.
    pub fn reason(&self, id: JobId) -> Option<Reason> {
        let gated = self.jobs.get(&id).and_then(|j| {
            let limit = j.array.as_ref().and_then(|t| t.limit).unwrap_or(0);
            j.admission().reason(limit)
        });
        match gated {
            Some(r) => Some(r),
            None => self.sched.reason(id),
        }
    }
}

/// Which hold a caller puts on a job: its owner's own is a user hold;
/// root's, or an admin's on someone else's job, an admin hold.
pub fn hold_by(uid: u32, owner: u32) -> Hold {
    if uid == owner && uid != 0 {
        Hold::User
    } else {
        Hold::Admin
    }
}

impl<U: Units> Daemon<U> {
    /// Holds pending job `id` (`admin`: the caller passed polkit for other
    /// users' jobs). Whether it was not held that way before.
    pub async fn hold(&self, uid: u32, id: JobId, admin: bool) -> ApiResult<bool> {
        let mut st = self.state.lock().await;
        if self.sight_of(&st, uid, id, admin)? != Sight::Own && !admin {
            return Err(self.not_yours(&st, id, " or an admin may hold it"));
        }
        let job = self.pending_job(&st, id, "held")?;
        let hold = hold_by(uid, job.uid);
        // An admin's hold stays an admin's hold.
        if job.hold() == Some(Hold::Admin) || job.hold() == Some(hold) {
            return Ok(false);
        }
        let held = job.with_hold(Some(hold));
        let fx = st.apply(Commit::Revised(held))?;
        drop(st);
        self.carry_out(fx);
        Ok(true)
    }

    /// Releases pending job `id`'s hold: its owner a user hold, an admin
    /// (`admin`: polkit, asked by the caller's edge) any. Whether it was held.
    pub async fn release(&self, uid: u32, id: JobId, admin: bool) -> ApiResult<bool> {
        let mut st = self.state.lock().await;
        if self.sight_of(&st, uid, id, admin)? != Sight::Own && !admin {
            return Err(self.not_yours(&st, id, " or an admin may release it"));
        }
        let job = self.pending_job(&st, id, "released")?;
        match job.hold() {
            None => return Ok(false),
            Some(Hold::Admin) if !(admin || uid == 0) => {
                return Err(ApiError::PermissionDenied(format!(
                    "job {id} is held by an admin; only an admin may release it"
                )))
            }
            Some(_) => {}
        }
        let released = job.with_hold(None);
        let fx = st.apply(Commit::Revised(released))?;
        drop(st);
        self.carry_out(fx);
        Ok(true)
    }

    /// Pending job `id`'s hold, if it has one (for the edge to know whether
    /// releasing it needs polkit).
    pub async fn hold_of(&self, id: JobId) -> Option<Hold> {
        self.state.lock().await.jobs.get(&id).and_then(Job::hold)
    }

    /// Job `id`, which must be pending for it to be `done` (held, released...).
    fn pending_job<'a>(&self, st: &'a State, id: JobId, done: &str) -> ApiResult<&'a Job> {
        let job = st.jobs.get(&id);
        match job {
            Some(j) if j.state() == JobState::Pending => Ok(j),
            _ => {
                let state = st.find(id).ok_or_else(|| no_such_job(id))?.state();
                Err(ApiError::WrongState(format!(
                    "job {id} is {}; only a pending job can be {done}",
                    state.name()
                )))
            }
        }
    }
}

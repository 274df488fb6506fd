//! Cancel: who may, and what it does in each state.

use super::*;
use crate::core::array::MAX_RANGES;

impl<U: Units> Daemon<U> {
    /// Cancels a job and returns the state it was in. `admin` says the caller
    /// passed the polkit check for other users' jobs.
    pub async fn cancel(&self, uid: u32, id: JobId, admin: bool) -> ApiResult<JobState> {
        // An array's ID names all its tasks, as `scancel 123` does: those
        // that started, then its own record (the tasks not started yet).
        let tasks = {
            let st = self.state.lock().await;
            let whole = st
                .jobs
                .get(&id)
                .is_some_and(|j| j.array.as_ref().is_some_and(|t| t.array == id));
            if whole {
                self.sight_of(&st, uid, id, admin)?;
                st.active_tasks(id)
            } else {
                Vec::new()
            }
        };
        let mut cancelled = false;
        for t in tasks {
            cancelled |= self.cancel_one(uid, t, admin).await.is_ok();
        }
        match self.cancel_one(uid, id, admin).await {
            Err(ApiError::WrongState(_)) if cancelled => Ok(JobState::Running),
            r => r,
        }
    }

    /// Cancels task `index` of array `array`: the task's own job if it
    /// started, else it is taken off the array's pending rest and recorded
    /// as a task cancelled before it started. Returns its job ID and the
    /// state it was in.
    pub async fn cancel_task(
        &self,
        uid: u32,
        array: JobId,
        index: u32,
        admin: bool,
    ) -> ApiResult<(JobId, JobState)> {
        let mut st = self.state.lock().await;
        if self.sight_of(&st, uid, array, admin)? != Sight::Own && !admin {
            return Err(self.not_yours(&st, array, " or an admin may cancel it"));
        }
        let no_task = || {
            ApiError::NoSuchJob(format!(
                "no task {array}_{index} (array {array} has no such index, or it was cleaned)"
            ))
        };
        if let Some(id) = st.started_task(array, index) {
            drop(st);
            return self.cancel_one(uid, id, admin).await.map(|s| (id, s));
        }
        let rest = st.jobs.get(&array).filter(|j| {
            j.state() == JobState::Pending
                && j.array.as_ref().is_some_and(|t| t.rest.contains(index))
        });
        let Some(rest) = rest else {
            return Err(no_task());
        };
        if !rest.holds_tasks() {
            // Its last task is the array's own record.
            drop(st);
            return self.cancel_one(uid, array, admin).await.map(|s| (array, s));
        }
        let whole = st
            .full(array)
            .map_err(ApiError::from)?
            .ok_or_else(no_task)?
            .into_owned();
        let id = st.next_id;
        let (task, rest) = whole.take_task(index, id).ok_or_else(no_task)?;
        let ranges = |j: &Job| j.array.as_ref().map_or(0, |t| t.rest.range_count());
        if ranges(&rest) > ranges(&whole).max(MAX_RANGES) {
            return Err(ApiError::InvalidArgs(format!(
                "cancelling task {index} would split the pending tasks of array {array} into more than {MAX_RANGES} ranges: cancel tasks at the ends of its ranges, or the whole array (xcancel {array})"
            )));
        }
        let task = task.cancelled_pending(uid, now_usec());
        let fx = st.apply(Commit::TaskWithdrawn { task, rest })?;
        drop(st);
        self.carry_out(fx);
        Ok((id, JobState::Pending))
    }

    /// The job that holds task `index` of array `array`: its own once it
    /// started, the array's record while it waits.
    pub async fn find_task(
        &self,
        uid: u32,
        array: JobId,
        index: u32,
        admin: bool,
    ) -> ApiResult<JobId> {
        let st = self.state.lock().await;
        self.sight_of(&st, uid, array, admin)?;
        let started = st.started_task(array, index);
        let waiting = st.jobs.get(&array).is_some_and(|j| {
            j.state() == JobState::Pending
                && j.array.as_ref().is_some_and(|t| t.rest.contains(index))
        });
        match started {
            Some(id) => Ok(id),
            None if waiting => Ok(array),
            None => Err(ApiError::NoSuchJob(format!(
                "no task {array}_{index} (array {array} has no such index, or it was cleaned)"
            ))),
        }
    }

    /// Cancels one job (see [`Daemon::cancel`]).
    async fn cancel_one(&self, uid: u32, id: JobId, admin: bool) -> ApiResult<JobState> {
        let mut st = self.state.lock().await;
        if self.sight_of(&st, uid, id, admin)? != Sight::Own && !admin {
            return Err(self.not_yours(&st, id, " or an admin may cancel it"));
        }
        let job = st.find(id).ok_or_else(|| no_such_job(id))?;
        match job.state() {
            JobState::Pending => {
                // Whole: its command comes back from its record, to be kept
                // in the new one. On disk first: a cancel that could not be
                // recorded changes nothing.
                let job = st
                    .full(id)
                    .map_err(ApiError::from)?
                    .ok_or_else(|| no_such_job(id))?;
                let job = job.cancelled_pending(uid, now_usec());
                let fx = st.apply(Commit::Withdrawn(job))?;
                drop(st);
                self.carry_out(fx);
                Ok(JobState::Pending)
            }
            JobState::Running => {
                let unit = crate::unit_name::of_job(id);
                let job = st.jobs.get(&id).expect("checked above");
                // Asked again: systemd is asked again (a stop job merges into
                // the one under way), the record, already saying so, is not
                // written again.
                if job.cancel_requested_by().is_none() {
                    let job = job.cancel_requested(uid);
                    st.apply(Commit::Revised(job))?;
                }
                drop(st);
                if let Err(e) = self.systemd.stop(&unit).await {
                    tracing::warn!("stopping {unit}: {e}");
                }
                // The unit watcher records the final state.
                self.reconcile(id).await;
                Ok(JobState::Running)
            }
            s => Err(ApiError::WrongState(format!(
                "job {id} already ended ({})",
                s.name()
            ))),
        }
    }
}

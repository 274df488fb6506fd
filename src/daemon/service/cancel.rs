//! Cancel: who may, and what it does in each state.

use super::*;

impl<U: Units> Daemon<U> {
    /// Cancels a job and returns the state it was in. `admin` says the caller
    /// passed the polkit check for other users' jobs.
    pub async fn cancel(&self, uid: u32, id: JobId, admin: bool) -> ApiResult<JobState> {
        let mut st = self.state.lock().await;
        if self.sight_of(&st, uid, id, admin)? != Sight::Own && !admin {
            return Err(self.not_yours(&st, id, " or an admin may cancel it"));
        }
        let job = st.find(id).ok_or_else(|| no_such_job(id))?;
        match job.state() {
            JobState::Pending => {
                // On disk first: a cancel that could not be recorded changes nothing.
                // Whole: its command comes back from its record, to be kept in the new one.
                let job = st
                    .full(id)
                    .map_err(ApiError::from)?
                    .ok_or_else(|| no_such_job(id))?;
                let job = job.cancelled_pending(uid, now_usec());
                st.store.save([&job]).map_err(ApiError::from)?;
                st.sched.dequeue(id);
                st.pending_done(id);
                // Its --output file is let go of with it.
                let had_output = st.jobs.insert(id, job).is_some_and(|j| j.has_output_fd());
                let woken = st.wake(id);
                drop(st);
                if had_output {
                    crate::daemon::output::unstore(id);
                }
                self.changed(id, JobState::Cancelled);
                self.woke(woken);
                self.kick.notify_one();
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
                    st.store.save([&job]).map_err(ApiError::from)?;
                    st.jobs.insert(id, job);
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

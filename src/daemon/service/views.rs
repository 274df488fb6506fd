//! What the D-Bus methods read or set beyond a job's life: one call each,
//! under the state lock, so that `bus::api` holds no lock of its own.

use super::*;
use crate::core::{Policy, UserLimits, Vendor};
use crate::daemon::bus::listing;
use crate::wire::dict::Dict;
use crate::wire::queue::JobSummary;

impl<U: Units> Daemon<U> {
    /// Whether `time_limit` (seconds) raises running job `id`'s time limit.
    pub async fn raises_time_limit(&self, id: JobId, time_limit: Option<u64>) -> bool {
        let st = self.state.lock().await;
        st.jobs.get(&id).is_some_and(|j| {
            j.state() == JobState::Running
                && time_limit.is_some_and(|t| t > j.demand.time_limit_secs)
        })
    }

    /// `GetJob` of job `id` for `uid` (`admin`: passed polkit for it): the
    /// job as `a{sv}`, with its command only for its owner and root, and
    /// whether the caller owns it and it is not over (it then hears its
    /// changes).
    pub async fn job_reply(&self, uid: u32, id: JobId, admin: bool) -> ApiResult<(Dict, bool)> {
        let st = self.state.lock().await;
        let own = self.sight_of(&st, uid, id, admin)? == Sight::Own;
        let job = st
            .full(id)
            .map_err(|e| ApiError::Failed(format!("reading job {id}'s record: {e:#}")))?
            .ok_or_else(|| no_such_job(id))?;
        let reason = st
            .reason(id)
            .map(|r| r.to_string())
            .or_else(|| job.flag().map(str::to_string));
        let mut m = crate::daemon::bus::wire_job::job_dict(&job, reason, own);
        crate::daemon::fairness::put_schedule(&mut m, &job, &st.sched);
        Ok((m, own && !job.state().is_final()))
    }

    /// Each user's fair share now that `uid` may see: everyone's on a
    /// public queue (and for root), their own only on a private one.
    pub async fn share_rows(&self, uid: u32, now: u64) -> Vec<crate::core::fairshare::ShareRow> {
        let public = self.settings.list_is_public || uid == 0;
        let rows = self.state.lock().await.sched.share_report(now);
        rows.into_iter()
            .filter(|r| public || r.uid == uid)
            .collect()
    }

    /// Where the accounting log is, if it is on.
    pub async fn accounting_dir(&self) -> ApiResult<std::path::PathBuf> {
        match &self.state.lock().await.ledger {
            Some(l) => Ok(l.dir().to_path_buf()),
            None => Err(ApiError::Failed(
                "the accounting log is off (see xlurmd's journal)".into(),
            )),
        }
    }

    /// The per-user limits and shares in force.
    pub async fn user_limits(&self) -> UserLimits {
        self.state.lock().await.sched.user_limits().clone()
    }

    /// Replaces the per-user limits and shares: kept in the state
    /// directory first, then in force from the next pass.
    pub async fn set_user_limits(&self, limits: UserLimits) -> ApiResult<()> {
        let mut st = self.state.lock().await;
        crate::daemon::fairness::save_user_limits(st.store.dir(), &limits)
            .map_err(|e| ApiError::Failed(format!("keeping the limits: {e:#}")))?;
        st.sched.set_user_limits(limits);
        drop(st);
        self.kick.notify_one();
        Ok(())
    }

    /// One page of `ListJobs` for `uid` with filter `f`.
    pub async fn list_page(&self, uid: u32, f: &listing::Filter) -> (Vec<JobSummary>, bool) {
        let st = self.state.lock().await;
        listing::collect(&st, uid, f, listing::PAGE_BYTES)
    }

    /// Every job `ListJobs` would list for `uid` with filter `f`, in a
    /// sealed memfd (`ListJobsByFileDescriptor`).
    pub async fn list_memfd(
        &self,
        uid: u32,
        f: &listing::Filter,
    ) -> ApiResult<std::os::fd::OwnedFd> {
        let st = self.state.lock().await;
        listing::to_memfd(|file| listing::encode(&st, uid, f, file))
            .map_err(|e| ApiError::Failed(format!("{e:#}")))
    }

    /// `GetMachine` for `caller`: on a private queue a device's holder is
    /// shown to the job's owner only; the per-user limits are the caller's.
    pub async fn machine(&self, caller: u32) -> Dict {
        // The caller's primary group, for group limits (NSS: off the event loop).
        let gid = self.submitter(caller).await.1;
        let owner = crate::core::Owner { uid: caller, gid };
        let viewer = (!self.settings.list_is_public).then_some(caller);
        let st = self.state.lock().await;
        let shown = |id: JobId| match viewer {
            None => true,
            Some(uid) => st.find(id).is_some_and(|j| owns(uid, j.uid())),
        };
        let about = crate::daemon::bus::machine::About {
            counters: self.counters.read(),
            gate: self.gate.is_on(),
            owner,
        };
        crate::daemon::bus::machine::machine_dict(&st, shown, &about)
    }

    pub async fn policy(&self) -> Policy {
        self.state.lock().await.sched.policy()
    }

    /// Changes the scheduling policy, live.
    pub async fn set_policy(&self, p: Policy) {
        self.state.lock().await.sched.set_policy(p);
        tracing::info!("policy set to {p}");
        self.kick.notify_one();
    }

    pub async fn max_running(&self) -> u32 {
        self.state.lock().await.sched.limits().max_running
    }

    /// Changes how many jobs may run at once, live.
    pub async fn set_max_running(&self, max_running: u32) {
        let mut st = self.state.lock().await;
        let mut limits = st.sched.limits().clone();
        limits.max_running = max_running;
        st.sched.set_limits(limits);
        drop(st);
        self.kick.notify_one();
    }

    /// Disables or enables devices `ids` of `vendor`: all exist, or nothing changes.
    pub async fn set_devices_disabled(
        &self,
        vendor: Vendor,
        ids: &[u32],
        disabled: bool,
    ) -> ApiResult<()> {
        self.state
            .lock()
            .await
            .sched
            .set_disabled(vendor, ids, disabled)
            .map_err(|e| ApiError::InvalidArgs(e.to_string()))?;
        self.kick.notify_one();
        Ok(())
    }

    /// The state directory (`/var/lib/xlurm`).
    pub async fn state_dir(&self) -> std::path::PathBuf {
        self.state.lock().await.store.dir().to_path_buf()
    }
}

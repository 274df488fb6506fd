//! Update (`xlurm update`, Slurm's `scontrol update`): a pending job's
//! resources, time limit, name, nice and dependency, checked as a
//! submission is; a running job's time limit, lowered by its owner or
//! raised by an admin.

use super::*;
use crate::core::{Demand, Request};
use crate::daemon::job::After;
use crate::daemon::spec::Changes;

/// How often its owner may change a running job's time limit (an admin may
/// always): each is a record written.
pub const MAX_LIVE_LIMIT_CHANGES: u8 = 8;

/// The least time between two reloads of systemd's manager for raised time
/// limits (an admin's; each stalls PID 1 for every user of the machine).
pub const RELOAD_SPACING: std::time::Duration = std::time::Duration::from_secs(1);

/// The request that gives `d` again (a default memory budget stays the
/// default, so that it follows a new CPU count).
fn request_of(d: &Demand) -> Request {
    Request {
        cpus: d.cpus,
        mem_bytes: (!d.mem_default).then_some(d.mem_bytes),
        devices: d.devices.clone(),
        exclusive: d.exclusive,
        numa_local: d.numa_local,
        time_limit_secs: Some(d.time_limit_secs),
    }
}

impl<U: Units> Daemon<U> {
    /// Changes job `id` as `changes` asks. `admin`: the caller passed polkit
    /// (for someone else's job, and to raise a running job's time limit).
    pub async fn update(
        &self,
        uid: u32,
        id: JobId,
        admin: bool,
        changes: Changes,
    ) -> ApiResult<()> {
        let st = self.state.lock().await;
        if self.sight_of(&st, uid, id, admin)? != Sight::Own && !admin {
            return Err(self.not_yours(&st, id, " or an admin may update it"));
        }
        let state = st.find(id).ok_or_else(|| no_such_job(id))?.state();
        match state {
            JobState::Pending => self.update_pending(st, uid, id, admin, changes),
            JobState::Running => {
                drop(st);
                self.update_running(uid, id, admin, changes).await
            }
            s => Err(ApiError::WrongState(format!(
                "job {id} already ended ({})",
                s.name()
            ))),
        }
    }

    fn update_pending(
        &self,
        mut st: tokio::sync::MutexGuard<'_, State>,
        uid: u32,
        id: JobId,
        admin: bool,
        ch: Changes,
    ) -> ApiResult<()> {
        let job = st.jobs.get(&id).ok_or_else(|| no_such_job(id))?;
        let mut req = request_of(&job.demand);
        if let Some(c) = ch.cpus {
            req.cpus = c;
        }
        if let Some(m) = ch.mem_bytes {
            req.mem_bytes = Some(m);
        }
        if let Some(g) = ch.gpus {
            if !req.devices.ids.is_empty() && g as usize != req.devices.ids.len() {
                return Err(ApiError::InvalidRequest(format!(
                    "job {id} asks for devices by ID ({:?}): a new count needs new IDs; cancel and submit it again",
                    req.devices.ids
                )));
            }
            req.devices.count = g;
        }
        if let Some(t) = ch.time_limit_secs {
            req.time_limit_secs = Some(t);
        }
        // Checked as a submission is.
        let demand = st
            .sched
            .validate(&req)
            .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
        // A nice an admin gave stays when its owner changes something else.
        if let Some(n) = ch.nice {
            crate::core::priority::check_nice(n, admin || uid == 0)
                .map_err(|e| ApiError::InvalidArgs(e.to_string()))?;
        }
        let nice = ch.nice.unwrap_or(job.nice);
        let owner = crate::core::Owner {
            uid: job.uid,
            gid: job.gid,
        };
        st.sched
            .check_submit(owner, &demand)
            .map_err(|e| ApiError::LimitExceeded(format!("{} {e}", job.user)))?;
        let after = match ch.dependency {
            None => job.after().cloned(),
            Some(None) => None,
            Some(Some(dependency)) => {
                // Seen as its owner sees the queue; never a cycle.
                self.check_dependency(&st, job.uid, &dependency)
                    .map_err(|e| ApiError::InvalidArgs(e.to_string()))?;
                let targets = dependency.targets().collect();
                if let Some(target) = st.cycle_through(id, &targets) {
                    let cycle = DependencyError::Cycle { target, id };
                    return Err(ApiError::InvalidArgs(cycle.to_string()));
                }
                Some(After {
                    dependency,
                    kill_on_invalid: job.after().is_some_and(|a| a.kill_on_invalid),
                })
            }
        };
        let mut new = job.with_after(after);
        new.demand = demand;
        new.nice = nice;
        if let Some(n) = ch.name {
            new.name = n;
        }
        // On disk first: an update that could not be recorded changes nothing.
        let fx = st.apply(Commit::Revised(new))?;
        drop(st);
        self.carry_out(fx);
        Ok(())
    }

    /// A running job's time limit. Lowered (or raised within what its unit
    /// has), it is xlurmd's own deadline (`deadline`): recorded, no word to
    /// systemd. Raised above its unit's (an admin), systemd takes it with a
    /// reload of its manager, which takes PID 1 a second or more on a busy
    /// machine: one at a time, at most one a second, and without the state
    /// lock (every other call would wait, and a reply it needs could queue
    /// behind them), so the job is looked at anew before and after.
    async fn update_running(&self, uid: u32, id: JobId, admin: bool, ch: Changes) -> ApiResult<()> {
        let st = self.state.lock().await;
        let Some(secs) = self.live_limit(&st, uid, id, admin, &ch)? else {
            return Ok(());
        };
        if secs <= st.jobs[&id].unit_limit_secs() {
            return self.set_own_limit(st, uid, id, secs);
        }
        drop(st);
        let mut last = self.limit_changes.lock().await;
        let mut st = self.state.lock().await;
        let Some(secs) = self.live_limit(&st, uid, id, admin, &ch)? else {
            return Ok(());
        };
        let job = &st.jobs[&id];
        // Raised meanwhile by another call as far as this one asks.
        if secs <= job.unit_limit_secs() {
            return self.set_own_limit(st, uid, id, secs);
        }
        let (before, before_unit) = (job.demand.time_limit_secs, job.unit_limit_secs());
        let new = job.with_time_limit(secs);
        let unit = job.unit();
        // On disk first, then systemd; if systemd refuses, the limit goes back.
        st.apply(Commit::Revised(new))?;
        drop(st);
        if let Some(wait) = last.and_then(|t| RELOAD_SPACING.checked_sub(t.elapsed())) {
            tokio::time::sleep(wait).await;
        }
        *last = Some(std::time::Instant::now());
        let taken = self.systemd.set_time_limit(&unit, secs).await;
        let mut st = self.state.lock().await;
        let still = st
            .jobs
            .get(&id)
            .filter(|j| j.state() == JobState::Running && j.demand.time_limit_secs == secs)
            .cloned();
        if let Err(e) = taken {
            // Only the limit goes back: a cancel may have been asked meanwhile.
            if let Some(back) = still {
                let back = back.time_limit_back(before, before_unit);
                if let Err(e) = st.apply(Commit::Revised(back)) {
                    tracing::error!(job = id, "putting back its time limit failed: {e}")
                }
            }
            return Err(ApiError::Failed(format!(
                "systemd did not take the new time limit: {e:#}"
            )));
        }
        if let Some(start) = still.map(|j| j.start_usec()) {
            st.sched.set_deadline(id, start / 1_000_000 + secs);
        }
        drop(st);
        tracing::info!(
            job = id,
            "job {id}: time limit {before} s -> {secs} s (systemd's too), by uid {uid}"
        );
        self.kick.notify_one();
        Ok(())
    }

    /// The new time limit `ch` asks of running job `id`, checked: `None`
    /// when it is the one it has.
    fn live_limit(
        &self,
        st: &State,
        uid: u32,
        id: JobId,
        admin: bool,
        ch: &Changes,
    ) -> ApiResult<Option<u64>> {
        let job = st.jobs.get(&id).ok_or_else(|| no_such_job(id))?;
        if job.state() != JobState::Running {
            return Err(ApiError::WrongState(format!(
                "job {id} is no longer running ({})",
                job.state().name()
            )));
        }
        if ch.beyond_time_limit() {
            return Err(ApiError::WrongState(format!(
                "job {id} is running: only its time limit can change now (as in Slurm)"
            )));
        }
        let Some(secs) = ch.time_limit_secs else {
            return Err(ApiError::InvalidArgs("nothing to change".into()));
        };
        let max = st.sched.limits().max_lifetime_secs;
        if secs == 0 || secs > max {
            return Err(ApiError::InvalidRequest(format!(
                "a time limit of {secs} s: jobs here may run 1 s to {max} s (--max-lifetime)"
            )));
        }
        let before = job.demand.time_limit_secs;
        if secs > before && !(admin || uid == 0) {
            return Err(ApiError::PermissionDenied(format!(
                "raising a running job's time limit needs the polkit authorization {} (an admin); its owner may lower it",
                crate::daemon::bus::api::ACTION_MANAGE
            )));
        }
        if secs == before {
            return Ok(None);
        }
        // Each change is a record written: an owner gets a few per run.
        let changes = job.run().map_or(0, |r| r.limit_changes);
        if changes >= MAX_LIVE_LIMIT_CHANGES && !(admin || uid == 0) {
            return Err(ApiError::LimitExceeded(format!(
                "job {id}'s time limit was changed {changes} times while it runs, the most its owner may; \
                 cancel it, or ask an admin"
            )));
        }
        Ok(Some(secs))
    }

    /// Running job `id`'s limit is `secs`, within its unit's: recorded, and
    /// kept by xlurmd's own deadline (`deadline`) where it is below.
    fn set_own_limit(
        &self,
        mut st: tokio::sync::MutexGuard<'_, State>,
        uid: u32,
        id: JobId,
        secs: u64,
    ) -> ApiResult<()> {
        let job = &st.jobs[&id];
        let (before, start) = (job.demand.time_limit_secs, job.start_usec());
        let new = job.with_time_limit(secs);
        st.apply(Commit::Revised(new))?;
        st.sched.set_deadline(id, start / 1_000_000 + secs);
        drop(st);
        tracing::info!(
            job = id,
            "job {id}: time limit {before} s -> {secs} s (kept by xlurmd), by uid {uid}"
        );
        self.deadlines.notify_one();
        self.kick.notify_one();
        Ok(())
    }
}

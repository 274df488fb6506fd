//! Time limits lowered while a job runs, enforced by xlurmd itself.
//!
//! systemd takes a new `RuntimeMaxSec` of a running transient unit only
//! through a drop-in and a reload of its manager (`SetUnitProperties`
//! refuses it on 252-257), and a reload stalls PID 1 for everyone: a user's
//! lowering must not cost that. So a lowered limit is xlurmd's own
//! deadline ([`Job::own_deadline`]): at it, the job is marked
//! (`stopped_at_limit`, recorded, so that a restart in between still says
//! why) and its unit stopped, and it ends TIMEOUT. Its unit keeps its first
//! limit as a backstop. The deadline follows from the record (start and
//! limit), so it holds across a restart of xlurmd: the loop looks at every
//! running job when it starts.

use super::*;

/// How long the loop sleeps when no lowered limit is pending (it wakes at
/// once when one is set: `Daemon::deadlines`).
pub const IDLE_WAKE: std::time::Duration = std::time::Duration::from_secs(300);

impl<U: Units> Daemon<U> {
    /// Stops the running jobs whose own deadline is at or before `now`
    /// (µs): the next deadline after `now`, if any. `restarted`: the first
    /// look since xlurmd started, which also stops again the jobs recorded as
    /// stopped at their limit that still run (it may have stopped before it
    /// could ask systemd).
    pub async fn enforce_deadlines(&self, now: u64, restarted: bool) -> Option<u64> {
        let (due, next) = {
            let mut st = self.state.lock().await;
            let mut due = Vec::new();
            let mut next: Option<u64> = None;
            let running: Vec<JobId> = st.sched.running_ids().collect();
            for id in running {
                let Some(job) = st.jobs.get(&id) else {
                    continue;
                };
                if restarted && job.run().is_some_and(|r| r.stopped_at_limit) {
                    due.push(id);
                    continue;
                }
                let Some(at) = job.own_deadline() else {
                    continue;
                };
                // Its start is not through yet: looked at again in a second.
                let in_flight = job.run().is_some_and(|r| r.in_flight());
                if at > now || in_flight {
                    let at = if in_flight { now + 1_000_000 } else { at };
                    next = Some(next.map_or(at, |n| n.min(at)));
                    continue;
                }
                let stopped = job.stopped_at_limit();
                match st.apply(Commit::Revised(stopped)) {
                    Ok(_) => due.push(id),
                    Err(e) => {
                        tracing::error!(job = id, "recording its stop at its time limit: {e}");
                        next = Some(next.map_or(now + 1_000_000, |n| n.min(now + 1_000_000)));
                    }
                }
            }
            (due, next)
        };
        for id in due {
            let unit = crate::unit_name::of_job(id);
            tracing::info!(
                job = id,
                "job {id} reached its time limit (lowered while it ran): stopping {unit}"
            );
            if let Err(e) = self.systemd.stop(&unit).await {
                tracing::warn!("stopping {unit}: {e}");
            }
            self.reconcile(id).await;
        }
        next
    }

    /// The loop that keeps the deadlines: at each one due, or when a limit
    /// was lowered.
    pub async fn keep_deadlines(&self) {
        let mut restarted = true;
        loop {
            let now = now_usec();
            let next = self.enforce_deadlines(now, restarted).await;
            restarted = false;
            let wait = match next {
                Some(at) => std::time::Duration::from_micros(at.saturating_sub(now_usec())),
                None => IDLE_WAKE,
            };
            let _ = tokio::time::timeout(wait, self.deadlines.notified()).await;
        }
    }
}

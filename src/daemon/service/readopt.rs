//! At start and every minute: re-adopting the units of jobs that ran while
//! the daemon was away, and cleaning what retention lets go.

use super::*;

impl<U: Units> Daemon<U> {
    /// At start: re-adopts running jobs whose units live, harvests finished
    /// ones, and marks vanished ones LOST. Job IDs continue past every job unit
    /// systemd still has, so a new job never collides with one (after a purge
    /// of the state directory, say).
    pub async fn readopt(&self) -> Result<()> {
        let loaded = self.systemd.list(crate::unit_name::ALL_JOBS).await?;
        // Units of jobs whose end was recorded but that were not collected
        // before the daemon stopped.
        {
            let st = self.state.lock().await;
            if let Ok(mut u) = self.uncollected.lock() {
                u.extend(
                    loaded
                        .iter()
                        .filter(|unit| {
                            crate::unit_name::job_of(unit)
                                .and_then(|id| st.find(id))
                                .is_some_and(|f| f.state().is_final())
                        })
                        .map(|unit| {
                            (
                                unit.clone(),
                                crate::daemon::systemd::outcome::Collect::for_state(None),
                            )
                        }),
                );
            }
        }
        if let Some(max) = loaded
            .iter()
            .filter_map(|u| crate::unit_name::job_of(u))
            .max()
        {
            let mut st = self.state.lock().await;
            if st.next_id <= max {
                tracing::warn!(
                    "job units up to xlurm-job-{max} exist; new job IDs start at {}",
                    max + 1
                );
                st.next_id = max + 1;
            }
        }
        let running: Vec<Job> = {
            let st = self.state.lock().await;
            st.jobs
                .values()
                .filter(|j| j.state() == JobState::Running)
                .cloned()
                .collect()
        };
        for job in running {
            match self.systemd.status(&job.unit()).await? {
                Some(status)
                    if job.invocation_id().is_empty()
                        || status.invocation_id == job.invocation_id() =>
                {
                    {
                        let mut st = self.state.lock().await;
                        if let Some(run) = job.run() {
                            let deadline = run.start_usec / 1_000_000 + job.demand.time_limit_secs;
                            let started = run.start_usec / 1_000_000;
                            let sub = job.submission();
                            st.sched.adopt_for(
                                job.id,
                                run.alloc.clone(),
                                deadline,
                                sub,
                                Some(started),
                            );
                        }
                    }
                    tracing::info!(job = job.id, "job {} re-adopted ({})", job.id, job.unit());
                    self.reconcile(job.id).await;
                }
                _ => {
                    let detail = format!(
                        "its unit {} vanished while xlurmd was down (a reboot?)",
                        job.unit()
                    );
                    // Through finalize like every end: its script snapshot goes too.
                    let outcome = Outcome {
                        detail,
                        ..Default::default()
                    };
                    self.finalize(job.id, JobState::Lost, outcome, None).await;
                }
            }
        }
        Ok(())
    }

    /// Drops ended jobs older than the retention period, and keeps those that
    /// ended more than a linger period ago in brief only (their D-Bus objects
    /// are gone by then: see `job_object`).
    pub async fn clean(&self) {
        let now = now_usec();
        let cutoff = now.saturating_sub(self.settings.retention_secs.saturating_mul(1_000_000));
        let linger = self.settings.object_linger.as_micros() as u64 + 60_000_000;
        let mut st = self.state.lock().await;
        // (Neither kind of change can fail: they only let go.)
        let _ = st.apply(Commit::Forgotten { cutoff });
        if let Some(l) = &st.ledger {
            match l.prune(now / 1_000_000, self.settings.accounting_retention_secs) {
                Ok(0) => {}
                Ok(n) => tracing::info!("accounting: removed {n} month(s) past the retention"),
                Err(e) => tracing::warn!("accounting: {e:#}"),
            }
        }
        for name in st.store.remove_old_damaged_logs(cutoff / 1_000_000) {
            tracing::info!("removed {name}: kept aside longer than the retention period");
        }
        let old: Vec<JobId> = st
            .jobs
            .values()
            .filter(|j| j.state().is_final() && j.end_usec().saturating_add(linger) < now)
            .map(|j| j.id)
            .collect();
        let _ = st.apply(Commit::Retired(old));
        st.trim();
        // Fair share: running jobs charged up to now, the queue reordered,
        // the ledger kept (a few bytes per user).
        st.reprioritize(now / 1_000_000, true);
        if let Err(e) = crate::daemon::fairness::save_usage(st.store.dir(), st.sched.usage()) {
            tracing::warn!("saving fair-share usage: {e:#}");
        }
        self.kick.notify_one();
        let next = st.next_id;
        if st.store.save_next_id(next).is_ok() {
            if let Err(e) = st.store.maybe_compact() {
                tracing::warn!("compacting the job log: {e:#}");
            }
        }
    }
}

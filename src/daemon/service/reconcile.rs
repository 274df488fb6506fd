//! A unit's change: reading it (or taking what its signals told), recording
//! the job's end once (`finalize`), restarting a start systemd lost, and
//! collecting ended units.

use super::*;

/// Ended units that wake the collector while jobs wait (see `collect_ended`).
pub const COLLECT_BATCH: usize = 8;

/// What a read of a running job's unit needs of the job.
struct Read {
    unit: String,
    cancelled: bool,
    /// xlurmd stopped it at its (lowered) time limit (`deadline`).
    at_limit: bool,
    invocation: String,
    /// The MemoryMax xlurm gave the unit.
    memory_max: u64,
    /// Its peak as last read from its cgroup.
    memory_peak: Option<u64>,
    /// An interactive job (`xrun --pty`): a hangup of its terminal cancels it.
    pty: bool,
}

impl Read {
    fn of(j: &Job) -> Read {
        let run = j.run();
        Read {
            unit: j.unit(),
            cancelled: j.cancel_requested_by().is_some(),
            at_limit: run.is_some_and(|r| r.stopped_at_limit),
            invocation: j.invocation_id().to_string(),
            memory_max: run.map_or(0, |r| r.alloc.mem_bytes),
            memory_peak: run.and_then(|r| r.memory_peak),
            pty: j.pty,
        }
    }
}

impl<U: Units> Daemon<U> {
    /// Records a final state, frees the job's resources and has its unit
    /// collected (`unit`: how, when its unit holds the end; see
    /// [`Commit::Ended`]). The unit keeps the job's result until then
    /// (`RemainAfterExit=yes`), so a crash in between loses nothing: the
    /// next start collects it (`readopt`). A LOST job that asked for it
    /// (`--requeue`) is queued again instead.
    pub(super) async fn finalize(
        &self,
        id: JobId,
        state: JobState,
        outcome: Outcome,
        unit: Option<crate::daemon::systemd::outcome::Collect>,
    ) {
        let mut st = self.state.lock().await;
        let Some(job) = st.jobs.get(&id) else {
            return;
        };
        if job.is_final() {
            return;
        }
        if state == JobState::Lost && job.requeue && job.restarts < MAX_REQUEUES {
            let job = job.requeued();
            let restarts = job.restarts;
            match st.apply(Commit::Requeued(job)) {
                Ok(fx) => {
                    drop(st);
                    tracing::warn!(
                        job = id,
                        "job {id} was lost ({}); queued again as it asked (--requeue), restart {restarts} of at most {MAX_REQUEUES}",
                        outcome.detail
                    );
                    self.carry_out(fx);
                }
                Err(e) => {
                    tracing::error!(job = id, "queueing it again after it was lost failed: {e}")
                }
            }
            return;
        }
        let why = outcome.detail.clone();
        let job = job.ended(state, outcome, now_usec());
        let fx = st.apply(Commit::Ended { job, unit });
        drop(st);
        tracing::info!(job = id, "job {id} {}: {why}", state.name());
        match fx {
            Ok(fx) => self.carry_out(fx),
            Err(e) => tracing::error!(job = id, "recording its end: {e}"),
        }
    }

    /// Reads job `id`'s unit and records its end if it finished.
    /// A unit's end arrives as several signals at once: calls for a job whose
    /// unit is being read already are folded into one more read after it, so
    /// systemd is asked once or twice, not once per signal.
    pub async fn reconcile(&self, id: JobId) {
        self.reconcile_with(id, None).await
    }

    /// [`Daemon::reconcile`] for a unit whose end its signals told
    /// (`outcome::Tracker`): only its accounting is read.
    pub async fn reconcile_with(&self, id: JobId, ended: Option<UnitStatus>) {
        let mut ended = ended;
        loop {
            let read = {
                let mut st = self.state.lock().await;
                let Some(j) = st.jobs.get_mut(&id) else {
                    return;
                };
                // Its start is in flight: kept for the launch, which takes
                // it under this lock too (`launched`), so a signal is either
                // kept there or handled here, never left behind.
                if j.heard_while_launching(&ended) {
                    return;
                }
                if j.is_final() {
                    // Its end is recorded, but stopping its exited unit had
                    // to SIGKILL what the job left behind, which leaves the
                    // unit failed: let systemd forget it.
                    if ended.as_ref().is_some_and(UnitStatus::failed) {
                        let unit = j.unit();
                        drop(st);
                        self.systemd.reset_failed(&unit).await;
                    }
                    return;
                }
                // A read under way reads once more after.
                if !j.begin_read() {
                    return;
                }
                Read::of(j)
            };
            self.reconcile_once(id, read, ended.take()).await;
            let again = self
                .state
                .lock()
                .await
                .jobs
                .get_mut(&id)
                .is_some_and(Job::end_read);
            if !again {
                return;
            }
        }
    }

    async fn reconcile_once(&self, id: JobId, job: Read, ended: Option<UnitStatus>) {
        let Read {
            unit,
            cancelled,
            at_limit,
            invocation,
            memory_max,
            memory_peak,
            pty,
        } = job;
        let signalled = ended.is_some();
        let read = match ended {
            Some(mut status) => {
                // Its resources are free from the moment its unit ended and
                // what it left behind is killed (a `setsid` child would run
                // on the next job's CPUs and GPU): the next job starts while
                // its accounting is read, not after.
                self.systemd.kill_leftovers(&unit).await;
                self.free_resources(id).await;
                // The MemoryMax xlurm gave the unit (for the OOM race in classify).
                status.memory_max = Some(memory_max);
                Ok(Some(self.systemd.accounting(&unit, status).await))
            }
            None => self.systemd.status(&unit).await,
        };
        match read {
            Ok(Some(mut status)) => {
                if status.memory_peak.is_none() {
                    status.memory_peak = memory_peak;
                }
                if !invocation.is_empty()
                    && !status.invocation_id.is_empty()
                    && status.invocation_id != invocation
                {
                    let detail = format!("its unit {unit} now belongs to another invocation");
                    self.finalize(
                        id,
                        JobState::Lost,
                        Outcome {
                            detail,
                            ..Default::default()
                        },
                        None,
                    )
                    .await;
                    return;
                }
                if invocation.is_empty() && !status.invocation_id.is_empty() {
                    self.invocation_heard(id, status.invocation_id.clone())
                        .await;
                }
                if status.finished() {
                    // Read, not signalled: its leftovers too go before its
                    // resources, which `finalize` frees.
                    if !signalled {
                        self.systemd.kill_leftovers(&unit).await;
                    }
                    let (state, outcome) = classify(&status, cancelled, pty);
                    let (state, outcome) = if at_limit && !cancelled {
                        crate::daemon::systemd::outcome::at_own_deadline(state, outcome)
                    } else {
                        (state, outcome)
                    };
                    let unit = crate::daemon::systemd::outcome::Collect::for_state(Some(
                        &status.active_state,
                    ));
                    self.finalize(id, state, outcome, Some(unit)).await;
                }
            }
            // Created but gone before it was ever seen running: systemd may
            // have lost its start job (daemon-reexec), or an admin stopped it.
            Ok(None) if !cancelled && !at_limit && invocation.is_empty() => {
                self.restart_lost(id, &unit).await
            }
            Ok(None) => {
                let (state, detail) = if cancelled {
                    (JobState::Cancelled, "cancelled".to_string())
                } else if at_limit {
                    (
                        JobState::Timeout,
                        crate::daemon::systemd::outcome::OWN_DEADLINE.to_string(),
                    )
                } else {
                    (JobState::Cancelled, format!("its unit {unit} was stopped outside xlurm (systemctl stop) before a result was recorded"))
                };
                self.finalize(
                    id,
                    state,
                    Outcome {
                        detail,
                        ..Default::default()
                    },
                    None,
                )
                .await;
            }
            Err(e) => tracing::warn!(job = id, "job {id}: reading {unit}: {e:#}"),
        }
    }

    /// Frees the resources of running job `id`, whose unit its signals
    /// told ended, and wakes the scheduler, before its end is read whole and
    /// recorded (`finalize`, which charges nothing twice). The unit's
    /// processes are gone, those it left behind killed first
    /// (`Units::kill_leftovers`). Should its end turn out to be
    /// another invocation's (LOST, perhaps requeued), its place was free
    /// all the same.
    async fn free_resources(&self, id: JobId) {
        // The scheduler knows what holds resources: a job it does not run
        // (ended, or never started) frees nothing.
        let mut st = self.state.lock().await;
        if st.release(id, now_usec()) {
            drop(st);
            self.kick.notify_one();
        }
    }

    /// Records the invocation job `id`'s unit runs under (from its signals
    /// or a read). Kept in memory and written with the job's next record:
    /// after a restart an empty one matches whatever runs the unit.
    pub async fn invocation_heard(&self, id: JobId, invocation: String) {
        let mut st = self.state.lock().await;
        let Some(j) = st.jobs.get_mut(&id) else {
            return;
        };
        // While its start is in flight its RUNNING is not announced yet:
        // the launch announces this after it (`launched`).
        if j.invocation_known(invocation) && !j.run().is_some_and(|r| r.in_flight()) {
            self.changes.send(id, Change::Invocation);
        }
    }

    /// Job `id`'s unit is gone and was never seen running. If the journal
    /// shows it never started either, systemd lost the start job (observed
    /// during `daemon-reexec`): start the unit again, at most
    /// [`MAX_RELAUNCHES`] times. If it did start, it was stopped outside
    /// xlurm before its result was read: CANCELLED, saying so.
    pub(super) async fn restart_lost(&self, id: JobId, unit: &str) {
        // One decision per job: a concurrent reconcile sees it in flight.
        let job = {
            let mut st = self.state.lock().await;
            let Some(j) = st.jobs.get_mut(&id) else {
                return;
            };
            if !j.claim_relaunch() {
                return;
            }
            j.clone()
        };
        let user_mode = self.settings.unit.user_mode;
        let ran = crate::daemon::journal::unit_started(
            &self.settings.journalctl,
            unit,
            job.start_usec(),
            user_mode,
        )
        .await;
        let stopped = |why: String| {
            Outcome {
            detail: format!(
                "its unit {unit} was stopped outside xlurm (systemctl stop) before a result was recorded{why}"
            ),
            ..Default::default()
        }
        };
        let outcome = match ran {
            Ok(true) => stopped(String::new()),
            Err(e) => stopped(format!(" (whether it ever ran is unknown: {e:#})")),
            Ok(false) if job.relaunches() >= MAX_RELAUNCHES => {
                let lost = LaunchError::LostAgain {
                    unit: unit.to_string(),
                    times: job.relaunches() + 1,
                };
                self.fail_launch(id, lost).await;
                return;
            }
            Ok(false) => {
                let relaunched = {
                    let mut st = self.state.lock().await;
                    let Some(j) = st
                        .jobs
                        .get(&id)
                        .filter(|j| j.run().is_some_and(|r| r.in_flight()))
                    else {
                        return;
                    };
                    // On disk first: the count is what bounds the relaunches.
                    let job = j.relaunched();
                    st.apply(Commit::Revised(job.clone())).map(|_| job)
                };
                let job = match relaunched {
                    Ok(job) => job,
                    Err(why) => {
                        let unit = unit.to_string();
                        self.fail_launch(id, LaunchError::Relaunch { unit, why })
                            .await;
                        return;
                    }
                };
                tracing::warn!(
                    job = id,
                    "job {id}: systemd lost the start of {unit} before it ever ran; starting it again ({}/{MAX_RELAUNCHES})",
                    job.relaunches()
                );
                // Handed back to the launch queue: the next scheduling pass
                // launches it, as it launches every start.
                self.relaunch(job);
                return;
            }
        };
        self.finalize(id, JobState::Cancelled, outcome, None).await;
    }

    /// Collects the units of jobs whose end is recorded (see `finalize`).
    /// Called when no job waits (`schedule`), by the periodic check of
    /// running jobs (`ServeConfig::recheck`, 5 s), once [`COLLECT_BATCH`]
    /// wait (the collector task), and before the daemon exits: while jobs
    /// wait to start, ended units are collected in batches, not one by one
    /// between starts. The batch is bounded so that the last jobs' units
    /// need not wait for a long batch when the queue empties (VM 11 counts
    /// a round until every unit is gone, as a bare unit's is when its
    /// `systemd-run --wait` returns). systemd answers
    /// calls and runs stop jobs on the one thread that also starts units:
    /// VM 11 measured 30 one-second-apart starts 8-12% sooner so. With no
    /// job waiting the calls go out at once, not one round trip after
    /// another (nothing to start has to queue behind them).
    pub async fn collect_ended(&self) {
        let units = match self.uncollected.lock() {
            Ok(mut u) => std::mem::take(&mut *u),
            Err(_) => return,
        };
        if units.is_empty() {
            return;
        }
        // Their ends must be on disk before their units, which hold them too, go.
        let mut st = self.state.lock().await;
        let idle = st.sched.pending_count() == 0;
        let synced = st.store.sync();
        drop(st);
        if let Err(e) = synced {
            tracing::error!(
                "syncing the job log failed; leaving {} ended jobs' units uncollected: {e:#}",
                units.len()
            );
            if let Ok(mut u) = self.uncollected.lock() {
                u.extend(units);
            }
            return;
        }
        let collect = |(unit, how): (String, crate::daemon::systemd::outcome::Collect)| async move {
            self.systemd.collect(&unit, how).await;
        };
        if idle {
            futures_util::future::join_all(units.into_iter().map(collect)).await;
        } else {
            for u in units {
                collect(u).await;
            }
        }
    }

    /// Reads the memory peak so far of each of `running` (job, unit) from
    /// its cgroup. systemd before 256 has no `MemoryPeak` and removes a unit's
    /// cgroup as soon as its processes are gone, so a job's peak is what was
    /// last read here: exact for a job whose use stopped growing before the
    /// last look (every `ServeConfig::recheck`), none for one shorter than that.
    pub async fn sample_memory_peaks(&self, running: &[(JobId, String)]) {
        let seen: Vec<(JobId, u64)> = running
            .iter()
            .filter_map(|(id, unit)| Some((*id, self.systemd.memory_peak_now(unit)?)))
            .collect();
        // Kept with each job still running (`Run::memory_peak`).
        let mut st = self.state.lock().await;
        for (id, peak) in seen {
            if let Some(j) = st.jobs.get_mut(&id) {
                j.saw_memory_peak(peak);
            }
        }
    }
}

//! The scheduling pass and each start: RUNNING persisted first, then
//! StartTransientUnit with its retries, and the handshake with the unit
//! watcher while a start is in flight (`job::Launch`); what a job needs at
//! its start (its script on disk, its devices' variables and nodes); the
//! relaunch queue of starts systemd lost.

use super::*;

impl<U: Units> Daemon<U> {
    /// One scheduling pass: start what fits.
    pub async fn schedule(self: &Arc<Self>) {
        // Starts made again first, stopping or not: they are in flight
        // already, and the daemon waits for them before it exits.
        let relaunches = match self.relaunches.lock() {
            Ok(mut r) => std::mem::take(&mut *r),
            Err(_) => Vec::new(),
        };
        for job in relaunches {
            let d = self.clone();
            tokio::spawn(async move { d.launch(job, None).await });
        }
        let mut st = self.state.lock().await;
        if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            drop(st);
            self.collect_ended().await;
            return;
        }
        let now = now_usec();
        let t0 = std::time::Instant::now();
        st.reprioritize(now / 1_000_000, false);
        let starts = st.sched.schedule(now / 1_000_000);
        self.counters
            .pass(t0.elapsed().as_nanos() as u64, starts.len() as u64);
        if starts.is_empty() {
            // Ends appended since the last sync would otherwise wait for the
            // next start to reach the disk: an OS crash meanwhile would make
            // them LOST (the units holding them do not survive a reboot).
            if let Err(e) = st.store.sync() {
                tracing::error!("syncing the job log failed: {e:#}");
            }
            // Nothing waits: collect the ended jobs' units now. While jobs
            // wait, the 5 s check collects them (see `collect_ended`).
            let idle = st.sched.pending_count() == 0;
            drop(st);
            if idle {
                self.collect_ended().await;
            }
            return;
        }
        // An array's next task starts as a job of its own, split off the
        // array's pending rest (which is written with it).
        let mut placed = Starts {
            jobs: Vec::with_capacity(starts.len()),
            now,
            ..Default::default()
        };
        for (id, alloc) in starts {
            // Its argv, environment and script come back from its record.
            match st.full(id) {
                Ok(Some(j)) if j.holds_tasks() => {
                    let task_id = st.next_id + placed.split.len() as u64;
                    if let Some((task, rest)) = j.split_task(task_id) {
                        placed.jobs.push(task.started(alloc, now));
                        placed.rests.push(rest);
                        placed.split.push((id, task_id));
                    }
                }
                Ok(Some(j)) => {
                    let mut j = j.into_owned();
                    j.last_task();
                    placed.jobs.push(j.started(alloc, now));
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!("job {id}: reading its record to start it: {e:#}; it waits");
                    if let Some(j) = st.jobs.get(&id) {
                        let demand = j.demand.clone();
                        st.sched.put_back(id, demand);
                    }
                }
            }
        }
        // RUNNING is on disk before systemd hears of it: a crash can never
        // start a job twice.
        let mut fx = match st.apply(Commit::Started(placed)) {
            Ok(fx) => fx,
            Err(e) => {
                tracing::error!("recording started jobs failed, putting them back: {e}");
                return;
            }
        };
        drop(st);
        let launches = std::mem::take(&mut fx.launches);
        self.carry_out(fx);
        // Launch concurrently: each waits for systemd on its own.
        for (job, output_fd) in launches {
            let d = self.clone();
            tokio::spawn(async move { d.launch(job, output_fd).await });
        }
    }

    /// Starts the unit of `job`, which is in flight (`Launch::InFlight`),
    /// with its `--output` descriptor if it has one.
    pub(super) async fn launch(&self, job: Job, output_fd: Option<std::os::fd::OwnedFd>) {
        let ready = async {
            let run_as = self.run_as(job.uid).await?;
            if let Some(script) = &job.command.script {
                let path = unit::script_path(&self.settings.unit, job.id);
                write_script(&path, script).map_err(LaunchError::Script)?;
            }
            let devices = job.alloc().map(|a| a.devices.clone()).unwrap_or_default();
            let (visibility, allow) = device_setup(&self.accel, &devices)?;
            if job.pty && output_fd.is_none() {
                return Err(LaunchError::TerminalLost);
            }
            Ok((run_as, visibility, allow))
        };
        let (run_as, visibility, allow) = match ready.await {
            Ok(ready) => ready,
            Err(e) => {
                self.fail_launch(job.id, e).await;
                return;
            }
        };
        // --output: systemd holds the user's file from here on (the job's tee
        // wrapper writes it), so the daemon lets go of it once the unit exists.
        if output_fd.is_none()
            && !job.pty
            && job.array.is_none()
            && job.output.as_ref().is_some_and(|o| o.error.is_empty())
        {
            self.output_lost(
                job.id,
                "its descriptor was lost when xlurmd restarted while the job was pending \
                 (systemctl restart empties systemd's descriptor store); \
                 the output is in the journal: xlurm log",
            )
            .await;
        }
        // The slice of jobs without accelerators found open: the unit closes
        // itself (`nodev_slice::keep_closed`).
        let own_policy;
        let settings = if self.nodev_open.load(std::sync::atomic::Ordering::Acquire) {
            own_policy = unit::UnitSettings {
                nodev_slice: None,
                ..self.settings.unit.clone()
            };
            &own_policy
        } else {
            &self.settings.unit
        };
        let props = unit::properties(
            &job,
            settings,
            Some(&run_as),
            &visibility,
            &allow,
            output_fd.as_ref().and_then(|fd| fd.try_clone().ok()),
        );
        if output_fd.is_some() {
            crate::daemon::output::unstore(job.id);
        }
        drop(output_fd);
        let result = self.start_unit(&job.unit(), &props).await;
        // RUNNING is announced once systemd has the unit, and before the
        // unit's own news is acted on (`launched`), so it comes first. Not
        // before StartTransientUnit: the looks it prompts (xrun's GetJob and
        // ReadLog) would compete with the start itself (issue 21). A start
        // that fails goes from PENDING to LAUNCH_FAILED. A start made again
        // (systemd lost the first, `restart_lost`) is not announced again.
        let announce = result.is_ok() && !job.run().is_some_and(|r| r.running_announced);
        if announce {
            self.changed(job.id, JobState::Running);
        }
        let (heard, cancelled) = self.launched(job.id, announce).await;
        match result {
            // From here on the unit's signals tell how it goes (startup.rs, watch.rs).
            Ok(_) => {
                tracing::info!(job = job.id, "job {} started as {}", job.id, job.unit());
                // Cancelled while systemd was creating the unit: that stop
                // found no unit, so stop it now.
                if cancelled {
                    if let Err(e) = self.systemd.stop(&job.unit()).await {
                        tracing::warn!(job = job.id, "stopping {}: {e}", job.unit());
                    }
                }
                match heard {
                    Heard::Ended(ended) if !cancelled => {
                        self.reconcile_with(job.id, Some(*ended)).await
                    }
                    Heard::Ended(_) | Heard::Changed => self.reconcile(job.id).await,
                    Heard::Nothing if cancelled => self.reconcile(job.id).await,
                    Heard::Nothing => {}
                }
            }
            Err(e) => self.fail_launch(job.id, LaunchError::Refused(e)).await,
        }
    }

    /// StartTransientUnit, retried while systemd is away (daemon-reexec, a bus
    /// hiccup). A start that reached systemd before it went away is found by
    /// looking for the unit before each retry, so a job never starts twice.
    pub(super) async fn start_unit(
        &self,
        unit: &str,
        props: &[(&str, zbus::Variant<'_>)],
    ) -> zbus::Result<()> {
        let mut attempt = 0u64;
        loop {
            match self.systemd.start(unit, props).await {
                Ok(_) => return Ok(()),
                // UnitExists after a lost reply: our own earlier start got through.
                Err(e)
                    if (transient(&e)
                        || attempt > 0 && crate::daemon::systemd::unit_exists(&e))
                        && attempt < 10 =>
                {
                    attempt += 1;
                    tracing::warn!(
                        "starting {unit}: {e}; systemd seems away, retrying ({attempt}/10)"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(300 * attempt)).await;
                    match self.systemd.status(unit).await {
                        // Created but never started (its start job was lost): start it.
                        Ok(Some(st)) if st.never_started() => {
                            match self.systemd.start_loaded(unit).await {
                                Ok(()) => return Ok(()),
                                Err(e) if transient(&e) => continue,
                                Err(e) => return Err(e),
                            }
                        }
                        // It reached systemd and runs (or ran).
                        Ok(Some(_)) => return Ok(()),
                        // Not there: try again. Still away: wait more.
                        Ok(None) | Err(_) => {}
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Hands `job`, whose start systemd lost and which is claimed again (in
    /// flight), to the next scheduling pass to launch.
    pub(super) fn relaunch(&self, job: Job) {
        if let Ok(mut r) = self.relaunches.lock() {
            r.push(job);
        }
        self.kick.notify_one();
    }

    /// Records why job `id`'s `--output` copy cannot be made (shown by `xqueue ID`).
    pub(super) async fn output_lost(&self, id: JobId, why: &str) {
        tracing::warn!(job = id, "job {id}: no --output copy: {why}");
        let mut st = self.state.lock().await;
        let Some(mut j) = st.jobs.get(&id).cloned() else {
            return;
        };
        if !j.output_lost(why) {
            return;
        }
        if let Err(e) = st.apply(Commit::Revised(j)) {
            tracing::warn!(job = id, "recording the lost output copy: {e}");
        }
    }

    /// Job `id` is launched or failed to, its RUNNING `announced` or not:
    /// what its unit's signals told meanwhile (to be handled now), and
    /// whether a cancel was asked for. Under the state lock, which a
    /// reconcile takes to look at the job: a signal is either kept for here
    /// or handled by that reconcile. An invocation ID heard while the start
    /// was in flight is announced now, after RUNNING (see `Daemon::invocation_heard`).
    pub(super) async fn launched(&self, id: JobId, announced: bool) -> (Heard, bool) {
        let mut st = self.state.lock().await;
        match st.jobs.get_mut(&id) {
            Some(j) => {
                if j.run().is_some_and(|r| !r.invocation_id.is_empty()) {
                    self.changes.send(id, Change::Invocation);
                }
                (j.launched(announced), j.cancel_requested_by().is_some())
            }
            None => (Heard::Nothing, false),
        }
    }

    /// Stops starting jobs, then waits (up to `limit`) until no launch is in
    /// flight: called before the daemon exits, so no job is left marked RUNNING
    /// without its unit. The flag is set under the state lock, so a scheduling
    /// pass either finished (its launches are in flight) or starts none.
    pub async fn stop_launching(&self, limit: std::time::Duration) {
        {
            let _st = self.state.lock().await;
            self.stopping
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let t0 = std::time::Instant::now();
        while self.any_in_flight().await && t0.elapsed() < limit {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Whether a job's start is in flight.
    async fn any_in_flight(&self) -> bool {
        let st = self.state.lock().await;
        let any = st
            .jobs
            .values()
            .any(|j| j.run().is_some_and(|r| r.in_flight()));
        any
    }

    pub(super) async fn fail_launch(&self, id: JobId, why: LaunchError) {
        tracing::warn!(job = id, "job {id} launch failed: {why}");
        let outcome = Outcome {
            result: crate::daemon::systemd::outcome::LAUNCH_FAILED_RESULT.into(),
            detail: why.to_string(),
            ..Default::default()
        };
        self.finalize(id, JobState::LaunchFailed, outcome, None)
            .await;
    }
}

/// A job's visibility variables and its `DeviceAllow` entries.
pub type DeviceSetup = (Vec<(String, String)>, Vec<(String, String)>);

/// The visibility variables and `DeviceAllow` entries of a job holding
/// `devices`, from the devices the backends discovered.
pub fn device_setup(
    accel: &[crate::accel::Active],
    devices: &[crate::core::DeviceRef],
) -> Result<DeviceSetup, DeviceSetupError> {
    let vendor = devices.first().map(|d| d.vendor);
    let env = crate::accel::visibility_env(vendor, devices)?;
    let discovered: Vec<crate::accel::DiscoveredDevice> = accel
        .iter()
        .flat_map(|a| a.devices.iter().cloned())
        .collect();
    let allow = crate::accel::device_allow(&discovered, devices)?
        .into_iter()
        .map(|p| (p.display().to_string(), "rw".to_string()))
        .collect();
    Ok((env, allow))
}

/// Writes a batch job's script snapshot, root-only, synced.
pub(super) fn write_script(path: &std::path::Path, script: &str) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    std::io::Write::write_all(&mut f, script.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

//! The daemon's logic: the queue, the scheduler, jobs, and their units.
//!
//! D-Bus methods (`api.rs`) are thin wrappers over the functions here, which
//! take the caller's uid as an argument so they can be tested without a bus.

use super::job::{Brief, Command, Ended, Job, JobState, Outcome, Strings};
use super::outcome::{classify, UnitStatus};
use super::spec::Spec;
use super::store::{Loaded, Store};
use super::systemd::Systemd;
use super::unit::{self, RunAs, UnitSettings};
use crate::core::{JobId, Scheduler};
use crate::wire::bus::transient;
use crate::wire::error::{ApiError, ApiResult};
use crate::wire::time::now_usec;
use anyhow::Result;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::{Mutex, Notify};

/// How often a job's unit is started again after systemd lost its start job.
pub const MAX_RELAUNCHES: u8 = 3;

/// Settings that do not change while the daemon runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub unit: UnitSettings,
    pub max_pending_per_user: usize,
    pub retention_secs: u64,
    pub list_is_public: bool,
    /// How long a finished job's D-Bus object stays (see `job_object`).
    pub object_linger: std::time::Duration,
    /// The `journalctl` program (see `journal`).
    pub journalctl: String,
}

pub struct State {
    pub sched: Scheduler,
    /// Jobs in full: pending, running, and those that ended a short while ago
    /// (while their D-Bus object lingers); see [`State::retire`].
    pub jobs: BTreeMap<JobId, Job>,
    /// Jobs that ended, in brief; their whole record is in the store.
    pub ended: Ended,
    strings: Strings,
    pub store: Store,
    pub next_id: JobId,
    pending_per_user: HashMap<u32, usize>,
    /// Jobs retired since memory was last given back (see `State::trim`).
    retired: usize,
}

/// Jobs in full and in brief, each in ID order, merged into one order;
/// `first(a, b)`: whether ID `a` comes before ID `b`.
fn merge<'a>(
    full: impl Iterator<Item = (&'a JobId, &'a Job)>,
    brief: impl Iterator<Item = (JobId, &'a Brief)>,
    first: fn(JobId, JobId) -> bool,
) -> impl Iterator<Item = (JobId, Found<'a>)> {
    let (mut full, mut brief) = (full.peekable(), brief.peekable());
    std::iter::from_fn(move || {
        let take_full = match (full.peek(), brief.peek()) {
            (Some((a, _)), Some((b, _))) => first(**a, *b),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        if take_full {
            full.next().map(|(id, j)| (*id, Found::Full(j)))
        } else {
            brief.next().map(|(id, b)| (id, Found::Brief(b)))
        }
    })
}

/// A job found by ID: in full, or ended and kept in brief.
pub enum Found<'a> {
    Full(&'a Job),
    Brief(&'a Brief),
}

impl Found<'_> {
    pub fn uid(&self) -> u32 {
        match self {
            Found::Full(j) => j.uid,
            Found::Brief(b) => b.uid,
        }
    }

    pub fn user(&self) -> &str {
        match self {
            Found::Full(j) => &j.user,
            Found::Brief(b) => &b.user,
        }
    }

    pub fn state(&self) -> JobState {
        match self {
            Found::Full(j) => j.state,
            Found::Brief(b) => b.state,
        }
    }
}

/// Everything the daemon's tasks share.
pub struct Daemon {
    pub state: Mutex<State>,
    pub settings: Settings,
    pub systemd: Systemd,
    /// Wakes the scheduling loop.
    pub kick: Notify,
    /// Tells the API layer what changed about which job (for signals).
    pub changes: tokio::sync::mpsc::UnboundedSender<(JobId, Change)>,
    /// The accelerator backends in use and the devices they found.
    pub accel: Vec<crate::accel::Active>,
    /// `--output` descriptors of jobs whose copy has not started (see `output`).
    pub outputs: Mutex<HashMap<JobId, std::os::fd::OwnedFd>>,
    /// Jobs between "marked RUNNING" and systemd's answer to StartTransientUnit:
    /// never reconciled, or a unit not created yet would look gone.
    launching: std::sync::Mutex<std::collections::HashSet<JobId>>,
    /// Set (under the state lock) when the daemon is stopping: no new launches.
    stopping: std::sync::atomic::AtomicBool,
    /// Jobs whose unit is being read, and whether to read it once more after.
    reconciling: std::sync::Mutex<HashMap<JobId, bool>>,
    /// Launching jobs whose unit signalled meanwhile, with its end if the
    /// signals told it (else it is read whole): handled once launched.
    signalled: std::sync::Mutex<HashMap<JobId, Option<UnitStatus>>>,
    /// Units of ended jobs (and their ActiveState when known) to collect
    /// once the jobs started in their place reached systemd (see `finalize`).
    uncollected: std::sync::Mutex<Vec<(String, Option<String>)>>,
    /// Submitters' accounts as lately resolved for their units (see `run_as`).
    accounts: std::sync::Mutex<Recent<RunAs>>,
    /// Running jobs' memory peak as last read from their cgroup, for when
    /// systemd reports none at the end (see `sample_memory_peaks`).
    peaks: std::sync::Mutex<HashMap<JobId, u64>>,
}

/// How long a submitter's resolved account serves the next starts.
const ACCOUNT_REUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// Values by uid, each kept for a while after it was looked up.
pub struct Recent<V> {
    kept: HashMap<u32, (std::time::Instant, V)>,
    keep: std::time::Duration,
}

impl<V: Clone> Recent<V> {
    pub fn new(keep: std::time::Duration) -> Recent<V> {
        Recent {
            kept: HashMap::new(),
            keep,
        }
    }

    /// The value for `uid` if it was put less than `keep` before `now`.
    pub fn get(&self, uid: u32, now: std::time::Instant) -> Option<V> {
        self.kept
            .get(&uid)
            .filter(|(at, _)| now.saturating_duration_since(*at) < self.keep)
            .map(|(_, v)| v.clone())
    }

    /// Keeps `v` for `uid` from `now`, and forgets what is too old.
    pub fn put(&mut self, uid: u32, v: V, now: std::time::Instant) {
        let keep = self.keep;
        self.kept
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < keep);
        self.kept.insert(uid, (now, v));
    }
}

/// What changed about a job, for the API layer's signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It is in this state now.
    State(JobState),
    /// Its unit's invocation became known (it started running).
    Invocation,
}

/// A page of a job's output (see `Daemon::read_log`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPage {
    pub lines: Vec<String>,
    /// Where the next page starts.
    pub cursor: String,
    /// The job's state when the page was read: once final, read until a page is empty.
    pub state: JobState,
    /// On the first page: 0, or the time (µs) before which the journal holds
    /// nothing any more, when that is after the job started (rotated away).
    pub missing_before: u64,
}

/// What a submission got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub id: JobId,
    pub mem_bytes: u64,
    pub mem_default: bool,
}

impl State {
    pub fn new(sched: Scheduler, loaded: Loaded, store: Store) -> State {
        let mut pending_per_user = HashMap::new();
        for j in loaded
            .jobs
            .values()
            .filter(|j| j.state == JobState::Pending)
        {
            *pending_per_user.entry(j.uid).or_insert(0) += 1;
        }
        State {
            sched,
            jobs: loaded.jobs,
            ended: loaded.ended,
            strings: loaded.strings,
            store,
            next_id: loaded.next_id,
            pending_per_user,
            retired: 0,
        }
    }

    /// Job `id`, in full or in brief.
    pub fn find(&self, id: JobId) -> Option<Found<'_>> {
        match self.jobs.get(&id) {
            Some(j) => Some(Found::Full(j)),
            None => self.ended.get(id).map(Found::Brief),
        }
    }

    /// Job `id` in full: from memory, or read back from the store if it ended
    /// a while ago.
    pub fn full(&self, id: JobId) -> anyhow::Result<Option<std::borrow::Cow<'_, Job>>> {
        match self.jobs.get(&id) {
            Some(j) => Ok(Some(std::borrow::Cow::Borrowed(j))),
            None if self.ended.contains(id) => {
                Ok(Some(std::borrow::Cow::Owned(self.store.read(id)?)))
            }
            None => Ok(None),
        }
    }

    /// After jobs were retired or cleaned: drops strings no record uses and
    /// hands freed memory back to the system (glibc keeps it otherwise, so
    /// a daemon that once held 100,000 pending jobs would stay that big).
    pub fn trim(&mut self) {
        if self.retired == 0 {
            return;
        }
        self.retired = 0;
        self.strings.prune();
        self.ended.shrink();
        self.sched.shrink();
        #[cfg(target_env = "gnu")]
        // SAFETY: malloc_trim only returns free heap pages to the kernel.
        unsafe {
            nix::libc::malloc_trim(0);
        }
    }

    /// Every job, newest (highest ID) first, in full or in brief.
    pub fn newest_first(&self) -> impl Iterator<Item = (JobId, Found<'_>)> {
        merge(self.jobs.iter().rev(), self.ended.iter_rev(), |a, b| a > b)
    }

    /// Every job from ID `from` on, oldest (lowest ID) first, in full or in brief.
    pub fn oldest_first(&self, from: JobId) -> impl Iterator<Item = (JobId, Found<'_>)> {
        merge(
            self.jobs.range(from..),
            self.ended.iter_from(from),
            |a, b| a < b,
        )
    }

    /// Keeps ended job `id` in brief only, from now on.
    pub fn retire(&mut self, id: JobId) {
        if !self.jobs.get(&id).is_some_and(|j| j.state.is_final()) {
            return;
        }
        if let Some(job) = self.jobs.remove(&id) {
            let brief = Brief::of(&job, |s| self.strings.get(s));
            self.ended.insert(id, brief);
            self.retired += 1;
        }
    }

    fn pending_done(&mut self, uid: u32) {
        if let Some(n) = self.pending_per_user.get_mut(&uid) {
            *n = n.saturating_sub(1);
        }
    }

    pub fn counts(&self) -> (usize, usize) {
        (self.sched.pending_count(), self.sched.running_count())
    }
}

fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}

/// The submitter's user, primary group and supplementary groups, resolved now.
pub fn resolve_run_as(uid: u32) -> Result<RunAs, String> {
    use nix::unistd::{getgrouplist, Gid, Group, Uid, User};
    let user = User::from_uid(Uid::from_raw(uid))
        .map_err(|e| format!("looking up uid {uid}: {e}"))?
        .ok_or_else(|| format!("uid {uid} no longer exists"))?;
    let group_name = |gid: Gid| {
        Group::from_gid(gid)
            .ok()
            .flatten()
            .map(|g| g.name)
            .unwrap_or_else(|| gid.as_raw().to_string())
    };
    let cname = std::ffi::CString::new(user.name.clone()).map_err(|e| e.to_string())?;
    let groups = getgrouplist(&cname, user.gid).unwrap_or_else(|_| vec![user.gid]);
    Ok(RunAs {
        group: group_name(user.gid),
        supplementary: groups
            .into_iter()
            .filter(|g| *g != user.gid)
            .map(group_name)
            .collect(),
        user: user.name,
    })
}

impl Daemon {
    pub fn new(
        state: State,
        settings: Settings,
        systemd: Systemd,
        accel: Vec<crate::accel::Active>,
    ) -> (
        Arc<Daemon>,
        tokio::sync::mpsc::UnboundedReceiver<(JobId, Change)>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let d = Arc::new(Daemon {
            state: Mutex::new(state),
            settings,
            systemd,
            kick: Notify::new(),
            changes: tx,
            accel,
            outputs: Mutex::new(HashMap::new()),
            launching: std::sync::Mutex::new(std::collections::HashSet::new()),
            stopping: std::sync::atomic::AtomicBool::new(false),
            reconciling: std::sync::Mutex::new(HashMap::new()),
            signalled: std::sync::Mutex::new(HashMap::new()),
            uncollected: std::sync::Mutex::new(Vec::new()),
            accounts: std::sync::Mutex::new(Recent::new(ACCOUNT_REUSE)),
            peaks: std::sync::Mutex::new(HashMap::new()),
        });
        (d, rx)
    }

    fn changed(&self, id: JobId, state: JobState) {
        let _ = self.changes.send((id, Change::State(state)));
    }

    /// Queues jobs for `uid`. All specs are checked before any is queued.
    pub async fn submit(&self, uid: u32, specs: Vec<Spec>) -> ApiResult<Vec<Submitted>> {
        self.submit_with_output(uid, specs, None).await
    }

    /// Like [`Daemon::submit`]; `output` is `(descriptor, path)` for a single job's `--output`.
    pub async fn submit_with_output(
        &self,
        uid: u32,
        specs: Vec<Spec>,
        output: Option<(std::os::fd::OwnedFd, String)>,
    ) -> ApiResult<Vec<Submitted>> {
        if output.is_some() && specs.len() != 1 {
            return Err(ApiError::InvalidArgs(
                "an output file goes with exactly one job".into(),
            ));
        }
        if let Some((fd, _)) = &output {
            super::output::check_fd(fd).map_err(ApiError::InvalidArgs)?;
        }
        let user = user_name(uid);
        let mut st = self.state.lock().await;
        let mut demands = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let d = st.sched.validate(&spec.request).map_err(|e| {
                ApiError::InvalidRequest(if specs.len() > 1 {
                    format!("job {}: {e}", i + 1)
                } else {
                    e.to_string()
                })
            })?;
            demands.push(d);
        }
        let pending = st.pending_per_user.get(&uid).copied().unwrap_or(0);
        if pending + specs.len() > self.settings.max_pending_per_user {
            return Err(ApiError::LimitExceeded(format!(
                "{user} has {pending} pending jobs; the limit is {} (admin option --max-pending-per-user)",
                self.settings.max_pending_per_user
            )));
        }
        let now = now_usec();
        let mut out = Vec::with_capacity(specs.len());
        let mut new_jobs = Vec::with_capacity(specs.len());
        for (spec, demand) in specs.into_iter().zip(demands) {
            let id = st.next_id;
            st.next_id += 1;
            out.push(Submitted {
                id,
                mem_bytes: demand.mem_bytes,
                mem_default: demand.mem_default,
            });
            new_jobs.push(Job {
                id,
                name: spec.name,
                uid,
                user: user.clone(),
                command: Command {
                    argv: spec.argv,
                    script: spec.script,
                    cwd: spec.cwd,
                    env: spec.env,
                },
                demand,
                state: JobState::Pending,
                submit_usec: now,
                start_usec: 0,
                end_usec: 0,
                alloc: None,
                invocation_id: String::new(),
                outcome: None,
                cancel_requested_by: None,
                relaunches: 0,
                output: output.as_ref().map(|(_, path)| super::job::OutputCopy {
                    path: path.clone(),
                    ..Default::default()
                }),
            });
        }
        if let Err(e) = st.store.save(new_jobs.iter()) {
            st.next_id -= new_jobs.len() as u64;
            tracing::error!("could not record a submission of {user}, nothing was queued: {e:#}");
            return Err(ApiError::Failed(format!(
                "could not record the job, nothing was queued: {e:#}"
            )));
        }
        let new_ids: Vec<JobId> = new_jobs.iter().map(|j| j.id).collect();
        for job in new_jobs {
            st.sched.enqueue(job.id, job.demand.clone());
            *st.pending_per_user.entry(uid).or_insert(0) += 1;
            st.jobs.insert(job.id, job);
        }
        drop(st);
        if let (Some((fd, _)), Some(id)) = (output, new_ids.first()) {
            super::output::store(*id, &fd);
            self.outputs.lock().await.insert(*id, fd);
        }
        for id in new_ids {
            self.changed(id, JobState::Pending);
        }
        self.kick.notify_one();
        Ok(out)
    }

    /// Whether `uid` may see details of, or act on, `job` without polkit.
    /// Whether caller `uid` may see and act on a job of `owner`'s.
    pub fn owns(uid: u32, owner: u32) -> bool {
        uid == 0 || uid == owner
    }

    /// Cancels a job and returns the state it was in. `admin` says the caller
    /// passed the polkit check for other users' jobs.
    pub async fn cancel(&self, uid: u32, id: JobId, admin: bool) -> ApiResult<JobState> {
        let mut st = self.state.lock().await;
        let job = st
            .find(id)
            .ok_or_else(|| ApiError::NoSuchJob(format!("no job {id}")))?;
        if !Self::owns(uid, job.uid()) && !admin {
            return Err(ApiError::PermissionDenied(format!(
                "job {id} belongs to {}; only its owner or an admin may cancel it",
                job.user()
            )));
        }
        let owner = job.uid();
        match job.state() {
            JobState::Pending => {
                st.sched.dequeue(id);
                st.pending_done(owner);
                let now = now_usec();
                let job = st.jobs.get_mut(&id).expect("checked above");
                job.state = JobState::Cancelled;
                job.end_usec = now;
                job.cancel_requested_by = Some(uid);
                job.outcome = Some(Outcome {
                    detail: "cancelled before it started".into(),
                    ..Default::default()
                });
                let job = job.clone();
                st.store.save([&job]).map_err(ApiError::from)?;
                drop(st);
                self.changed(id, JobState::Cancelled);
                self.kick.notify_one();
                Ok(JobState::Pending)
            }
            JobState::Running => {
                let unit = Job::unit_name(id);
                let job = st.jobs.get_mut(&id).expect("checked above");
                job.cancel_requested_by = Some(uid);
                let job = job.clone();
                st.store.save([&job]).map_err(ApiError::from)?;
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

    /// A page of job `id`'s output after `cursor`, for its owner and root.
    pub async fn read_log(
        &self,
        uid: u32,
        id: JobId,
        cursor: &str,
        max: u32,
    ) -> ApiResult<LogPage> {
        let (src, state) = {
            let st = self.state.lock().await;
            let found = st
                .find(id)
                .ok_or_else(|| ApiError::NoSuchJob(format!("no job {id}")))?;
            if !Self::owns(uid, found.uid()) {
                return Err(ApiError::PermissionDenied(format!(
                    "job {id} belongs to {}; only its owner and root may read its output",
                    found.user()
                )));
            }
            let job = st
                .full(id)
                .map_err(|e| ApiError::Failed(format!("reading job {id}'s record: {e:#}")))?
                .ok_or_else(|| ApiError::NoSuchJob(format!("no job {id}")))?;
            (self.log_source(&job), job.state)
        };
        let mut out = LogPage {
            lines: Vec::new(),
            cursor: cursor.to_string(),
            state,
            missing_before: 0,
        };
        if state == JobState::Pending {
            return Ok(out);
        }
        let max = max.clamp(1, 100_000);
        let read = |src| async move {
            super::journal::read(src, cursor, max)
                .await
                .map_err(|e| ApiError::Failed(format!("reading the journal: {e:#}")))
        };
        let mut page = read(&src).await?;
        if page.lines.is_empty() && state.is_final() {
            // The job ended, but journald may still be storing what it printed
            // last (it lags under load): `journalctl --sync` returns once all
            // that was sent before it is stored. Then look once more. A --user
            // daemon may not ask journald to sync: it looks again for a second.
            if src.user_mode {
                for _ in 0..10 {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    page = read(&src).await?;
                    if !page.lines.is_empty() {
                        break;
                    }
                }
            } else {
                match super::journal::sync(&src.journalctl).await {
                    Ok(()) => page = read(&src).await?,
                    Err(e) => tracing::warn!(job = id, "job {id}: journalctl --sync: {e:#}"),
                }
            }
        }
        if cursor.is_empty() && (!page.lines.is_empty() || state.is_final()) {
            // The first page: has journald rotated the job's first lines away?
            match super::journal::oldest_usec(
                &src.journalctl,
                src.uid,
                src.user_mode,
                src.start_usec,
            )
            .await
            {
                Ok(oldest) if oldest > src.start_usec => out.missing_before = oldest,
                Ok(oldest) => tracing::debug!(
                    job = id,
                    "job {id}: the journal's oldest entry of uid {} is from {oldest}, before the job",
                    src.uid
                ),
                Err(e) => tracing::warn!(job = id, "job {id}: reading the journal's head: {e:#}"),
            }
        }
        out.lines = page.lines;
        out.cursor = page.cursor;
        Ok(out)
    }

    /// Where job `job`'s output is in the journal.
    pub fn log_source(&self, job: &Job) -> super::journal::Source {
        super::journal::Source {
            id: job.id,
            uid: job.uid,
            unit: job.unit(),
            start_usec: job.start_usec,
            user_mode: self.settings.unit.user_mode,
            journalctl: self.settings.journalctl.clone(),
        }
    }

    /// One scheduling pass: start what fits.
    pub async fn schedule(self: &Arc<Self>) {
        let mut st = self.state.lock().await;
        if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            drop(st);
            self.collect_ended().await;
            return;
        }
        let now = now_usec();
        let starts = st.sched.schedule(now / 1_000_000);
        if starts.is_empty() {
            // Ends appended since the last sync would otherwise wait for the
            // next start to reach the disk: an OS crash meanwhile would make
            // them LOST (the units holding them do not survive a reboot).
            if let Err(e) = st.store.sync() {
                tracing::error!("syncing the job log failed: {e:#}");
            }
            // Nothing waits: collect the ended jobs' units now. While jobs
            // wait, the 5 s check collects them (see `collect_ended`).
            let idle = st.counts().0 == 0;
            drop(st);
            if idle {
                self.collect_ended().await;
            }
            return;
        }
        let mut started = Vec::with_capacity(starts.len());
        for (id, alloc) in starts {
            let Some(job) = st.jobs.get_mut(&id) else {
                continue;
            };
            job.state = JobState::Running;
            job.start_usec = now;
            job.alloc = Some(alloc);
            started.push(job.clone());
        }
        for j in &started {
            st.pending_done(j.uid);
        }
        if let Ok(mut l) = self.launching.lock() {
            l.extend(started.iter().map(|j| j.id));
        }
        // Persist RUNNING before systemd hears of it: a crash can never start a job twice.
        if let Err(e) = st.store.save(started.iter()) {
            tracing::error!("recording started jobs failed, putting them back: {e:#}");
            if let Ok(mut l) = self.launching.lock() {
                for j in &started {
                    l.remove(&j.id);
                }
            }
            for j in &started {
                *st.pending_per_user.entry(j.uid).or_default() += 1;
                st.sched.finish(j.id);
                st.sched.enqueue(j.id, j.demand.clone());
                if let Some(job) = st.jobs.get_mut(&j.id) {
                    job.state = JobState::Pending;
                    job.alloc = None;
                }
            }
            return;
        }
        drop(st);
        // Launch concurrently: each waits for systemd on its own.
        for job in started {
            self.changed(job.id, JobState::Running);
            let d = self.clone();
            tokio::spawn(async move { d.launch(job).await });
        }
    }

    /// Collects the units of jobs whose end is recorded (see `finalize`).
    /// Called when no job waits (`schedule`), by the periodic check of
    /// running jobs (`ServeConfig::recheck`, 5 s) and before the daemon
    /// exits: while jobs wait to start, ended units are collected in a batch
    /// every few seconds, not one by one between starts. systemd answers
    /// calls and runs stop jobs on the one thread that also starts units:
    /// VM 11 measured 30 one-second-apart starts 8-12% sooner so.
    pub async fn collect_ended(&self) {
        let units = match self.uncollected.lock() {
            Ok(mut u) => std::mem::take(&mut *u),
            Err(_) => return,
        };
        if units.is_empty() {
            return;
        }
        // Their ends must be on disk before their units, which hold them too, go.
        if let Err(e) = self.state.lock().await.store.sync() {
            tracing::error!(
                "syncing the job log failed; leaving {} ended jobs' units uncollected: {e:#}",
                units.len()
            );
            if let Ok(mut u) = self.uncollected.lock() {
                u.extend(units);
            }
            return;
        }
        for (unit, active_state) in units {
            self.systemd.collect(&unit, active_state.as_deref()).await;
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
        // Under the state lock, for jobs still running: `finalize` drops a
        // job's figure under it, so none is left behind for an ended job.
        let st = self.state.lock().await;
        if let Ok(mut p) = self.peaks.lock() {
            p.extend(seen.into_iter().filter(|(id, _)| {
                st.jobs
                    .get(id)
                    .is_some_and(|j| j.state == JobState::Running)
            }));
        }
    }

    /// The submitter `uid`'s account for a unit, resolved at start: looked
    /// up off the event loop (NSS may block: LDAP, or nss-systemd's varlink
    /// calls, some answered by systemd itself, which then starts the next
    /// unit later), and reused for `ACCOUNT_REUSE` so that a burst of starts
    /// asks once per user, while a changed account or group membership still
    /// reaches every job started a second later. Failures are not kept.
    async fn run_as(&self, uid: u32) -> Result<RunAs, String> {
        let recent = self
            .accounts
            .lock()
            .ok()
            .and_then(|a| a.get(uid, std::time::Instant::now()));
        if let Some(r) = recent {
            return Ok(r);
        }
        let r = tokio::task::spawn_blocking(move || resolve_run_as(uid))
            .await
            .map_err(|e| format!("looking up uid {uid}: {e}"))??;
        if let Ok(mut a) = self.accounts.lock() {
            a.put(uid, r.clone(), std::time::Instant::now());
        }
        Ok(r)
    }

    async fn launch(&self, job: Job) {
        let run_as = match self.run_as(job.uid).await {
            Ok(r) => Some(r),
            Err(e) => {
                self.fail_launch(job.id, format!("cannot resolve the submitter: {e}"))
                    .await;
                return;
            }
        };
        if let Some(script) = &job.command.script {
            let path = unit::script_path(&self.settings.unit, job.id);
            if let Err(e) = write_script(&path, script) {
                self.fail_launch(job.id, format!("cannot write the script snapshot: {e:#}"))
                    .await;
                return;
            }
        }
        let devices = job
            .alloc
            .as_ref()
            .map(|a| a.devices.clone())
            .unwrap_or_default();
        let (visibility, allow) = match device_setup(&self.accel, &devices) {
            Ok(x) => x,
            Err(e) => {
                self.fail_launch(job.id, format!("cannot set up its devices: {e}"))
                    .await;
                return;
            }
        };
        // --output: systemd holds the user's file from here on (the job's tee
        // wrapper writes it), so the daemon lets go of it once the unit exists.
        let output_fd = self.outputs.lock().await.remove(&job.id);
        if output_fd.is_none() && job.output.as_ref().is_some_and(|o| o.error.is_empty()) {
            self.output_lost(
                job.id,
                "its descriptor was lost when xlurmd restarted while the job was pending \
                 (systemctl restart empties systemd's descriptor store); \
                 the output is in the journal: xlurm log",
            )
            .await;
        }
        let props = unit::properties(
            &job,
            &self.settings.unit,
            run_as.as_ref(),
            &visibility,
            &allow,
            output_fd.as_ref().and_then(|fd| fd.try_clone().ok()),
        );
        if output_fd.is_some() {
            super::output::unstore(job.id);
        }
        drop(output_fd);
        let result = self.start_unit(&job.unit(), &props).await;
        let signalled = self.launched(job.id);
        match result {
            // From here on the unit's signals tell how it goes (run.rs).
            Ok(_) => {
                tracing::info!(job = job.id, "job {} started as {}", job.id, job.unit());
                // Cancelled while systemd was creating the unit: that stop
                // found no unit, so stop it now.
                let cancelled = self
                    .state
                    .lock()
                    .await
                    .jobs
                    .get(&job.id)
                    .is_some_and(|j| j.cancel_requested_by.is_some());
                if cancelled {
                    if let Err(e) = self.systemd.stop(&job.unit()).await {
                        tracing::warn!(job = job.id, "stopping {}: {e}", job.unit());
                    }
                }
                match signalled {
                    Some(Some(ended)) if !cancelled => {
                        self.reconcile_with(job.id, Some(ended)).await
                    }
                    Some(_) => self.reconcile(job.id).await,
                    None if cancelled => self.reconcile(job.id).await,
                    None => {}
                }
            }
            Err(e) => {
                self.fail_launch(job.id, format!("systemd refused the unit: {e}"))
                    .await
            }
        }
    }

    /// StartTransientUnit, retried while systemd is away (daemon-reexec, a bus
    /// hiccup). A start that reached systemd before it went away is found by
    /// looking for the unit before each retry, so a job never starts twice.
    async fn start_unit(
        &self,
        unit: &str,
        props: &[(&str, zbus::Variant<'_>)],
    ) -> Result<(), String> {
        let mut attempt = 0u64;
        loop {
            match self.systemd.start(unit, props).await {
                Ok(_) => return Ok(()),
                // UnitExists after a lost reply: our own earlier start got through.
                Err(e)
                    if (transient(&e) || attempt > 0 && e.to_string().contains("UnitExists"))
                        && attempt < 10 =>
                {
                    attempt += 1;
                    tracing::warn!(
                        "starting {unit}: {e}; systemd seems away, retrying ({attempt}/10)"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(300 * attempt)).await;
                    match self.systemd.status(unit).await {
                        // Created but never started (its start job was lost): start it.
                        Ok(Some(st))
                            if st.invocation_id.is_empty()
                                && !st.pending_job
                                && st.active_state == "inactive" =>
                        {
                            match self.systemd.start_loaded(unit).await {
                                Ok(()) => return Ok(()),
                                Err(e) if transient(&e) => continue,
                                Err(e) => return Err(e.to_string()),
                            }
                        }
                        // It reached systemd and runs (or ran).
                        Ok(Some(_)) => return Ok(()),
                        // Not there: try again. Still away: wait more.
                        Ok(None) | Err(_) => {}
                    }
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Records why job `id`'s `--output` copy cannot be made (shown by `xqueue ID`).
    async fn output_lost(&self, id: JobId, why: &str) {
        tracing::warn!(job = id, "job {id}: no --output copy: {why}");
        let mut st = self.state.lock().await;
        if let Some(j) = st.jobs.get_mut(&id) {
            if let Some(o) = j.output.as_mut() {
                o.error = why.to_string();
            }
            let j = j.clone();
            if let Err(e) = st.store.save([&j]) {
                tracing::warn!(job = id, "recording the lost output copy: {e:#}");
            }
        }
    }

    /// Job `id` is launched (or failed to): returns whether its unit
    /// signalled meanwhile (so it should be handled now), with its end if
    /// the signals told it.
    fn launched(&self, id: JobId) -> Option<Option<UnitStatus>> {
        let mut l = self.launching.lock().ok()?;
        l.remove(&id);
        self.signalled.lock().ok()?.remove(&id)
    }

    /// Stops starting jobs, then waits (up to `limit`) until no launch is in
    /// flight: called before the daemon exits, so no job is left marked RUNNING
    /// without its unit. The flag is set under the state lock, so a scheduling
    /// pass either finished (its launches are in `launching`) or starts none.
    pub async fn stop_launching(&self, limit: std::time::Duration) {
        {
            let _st = self.state.lock().await;
            self.stopping
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let t0 = std::time::Instant::now();
        while self.launching.lock().is_ok_and(|l| !l.is_empty()) && t0.elapsed() < limit {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    async fn fail_launch(&self, id: JobId, detail: String) {
        let _ = self.launched(id);
        tracing::warn!(job = id, "job {id} launch failed: {detail}");
        let outcome = Outcome {
            result: "launch-failed".into(),
            detail,
            ..Default::default()
        };
        self.finalize(id, JobState::LaunchFailed, outcome, None)
            .await;
    }

    /// Records a final state, frees the job's resources and has its unit
    /// collected (`unit_state`: its ActiveState when known, see
    /// [`Systemd::collect`]). The unit keeps the job's result until then
    /// (`RemainAfterExit=yes`), so a crash in between loses nothing: the
    /// next start collects it (`readopt`).
    async fn finalize(
        &self,
        id: JobId,
        state: JobState,
        outcome: Outcome,
        unit_state: Option<&str>,
    ) {
        let mut st = self.state.lock().await;
        let Some(job) = st.jobs.get_mut(&id) else {
            return;
        };
        if job.state.is_final() {
            return;
        }
        job.state = state;
        job.end_usec = now_usec();
        job.command.env = None;
        let why = outcome.detail.clone();
        job.outcome = Some(outcome);
        let job = job.clone();
        st.sched.finish(id);
        if let Ok(mut p) = self.peaks.lock() {
            p.remove(&id);
        }
        // A unit left to collect keeps the job's result until the record is
        // durable: it is synced with the next start's record (one fsync on
        // the way from a job's end to the next job's start) or before the
        // unit is collected (`collect_ended`). Without one, sync now.
        let recorded = if unit_state.is_some() {
            st.store.append([&job])
        } else {
            st.store.save([&job])
        };
        let recorded = match recorded {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(
                    job = id,
                    "recording the final state failed: {e:#}; its unit is kept, so the next start of xlurmd records it"
                );
                false
            }
        };
        drop(st);
        tracing::info!(job = id, "job {id} {}: {why}", state.name());
        self.changed(id, state);
        if job.command.script.is_some() {
            let _ = std::fs::remove_file(unit::script_path(&self.settings.unit, id));
        }
        // Collected once nothing waits, or by the 5 s check (see
        // `collect_ended`); never while its unit is all that holds its end.
        if let (true, Ok(mut u)) = (recorded, self.uncollected.lock()) {
            u.push((job.unit(), unit_state.map(str::to_string)));
        }
        self.kick.notify_one();
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
        {
            let Ok(mut r) = self.reconciling.lock() else {
                return;
            };
            if let Some(again) = r.get_mut(&id) {
                *again = true;
                return;
            }
            r.insert(id, false);
        }
        let mut ended = ended;
        loop {
            // Boxed: reconcile -> restart_lost -> launch -> reconcile.
            Box::pin(self.reconcile_once(id, ended.take())).await;
            let Ok(mut r) = self.reconciling.lock() else {
                return;
            };
            match r.get_mut(&id) {
                Some(again) if *again => *again = false,
                _ => {
                    r.remove(&id);
                    return;
                }
            }
        }
    }

    async fn reconcile_once(&self, id: JobId, ended: Option<UnitStatus>) {
        {
            // Under the launching lock, which `launched` takes too: a signal
            // is either seen there or handled here, never left behind.
            let Ok(l) = self.launching.lock() else {
                return;
            };
            if l.contains(&id) {
                if let Ok(mut s) = self.signalled.lock() {
                    let seen = s.entry(id).or_default();
                    // An end the signals told is kept over signals that told less.
                    if ended.is_some() {
                        *seen = ended;
                    }
                }
                return;
            }
        }
        let (unit, cancelled, invocation, memory_max) = {
            let st = self.state.lock().await;
            match st.jobs.get(&id) {
                Some(j) if j.state == JobState::Running => (
                    j.unit(),
                    j.cancel_requested_by.is_some(),
                    j.invocation_id.clone(),
                    j.alloc.as_ref().map(|a| a.mem_bytes),
                ),
                // Its end is recorded, but stopping its exited unit had to
                // SIGKILL what the job left behind, which leaves the unit
                // failed: let systemd forget it.
                Some(j)
                    if j.state.is_final()
                        && ended.as_ref().is_some_and(|u| u.active_state == "failed") =>
                {
                    let unit = j.unit();
                    drop(st);
                    self.systemd.reset_failed(&unit).await;
                    return;
                }
                _ => return,
            }
        };
        let read = match ended {
            Some(mut status) => {
                // The MemoryMax xlurm gave the unit (for the OOM race in classify).
                status.memory_max = memory_max;
                Ok(Some(self.systemd.accounting(&unit, status).await))
            }
            None => self.systemd.status(&unit).await,
        };
        match read {
            Ok(Some(mut status)) => {
                if status.memory_peak.is_none() {
                    status.memory_peak = self.peaks.lock().ok().and_then(|p| p.get(&id).copied());
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
                    self.started(id, status.invocation_id.clone()).await;
                }
                if status.finished() {
                    let (state, outcome) = classify(&status, cancelled);
                    self.finalize(id, state, outcome, Some(&status.active_state))
                        .await;
                }
            }
            // Created but gone before it was ever seen running: systemd may
            // have lost its start job (daemon-reexec), or an admin stopped it.
            Ok(None) if !cancelled && invocation.is_empty() => self.restart_lost(id, &unit).await,
            Ok(None) => {
                let (state, detail) = if cancelled {
                    (JobState::Cancelled, "cancelled".to_string())
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

    /// Records the invocation job `id`'s unit runs under (from its signals
    /// or a read). Kept in memory and written with the job's next record:
    /// after a restart an empty one matches whatever runs the unit.
    pub async fn started(&self, id: JobId, invocation: String) {
        let mut st = self.state.lock().await;
        if let Some(j) = st.jobs.get_mut(&id) {
            if j.state == JobState::Running && j.invocation_id.is_empty() {
                j.invocation_id = invocation;
                // It started: its environment is no longer needed.
                j.command.env = None;
                let _ = self.changes.send((id, Change::Invocation));
            }
        }
    }

    /// Job `id`'s unit is gone and was never seen running. If the journal
    /// shows it never started either, systemd lost the start job (observed
    /// during `daemon-reexec`): start the unit again, at most
    /// [`MAX_RELAUNCHES`] times. If it did start, it was stopped outside
    /// xlurm before its result was read: CANCELLED, saying so.
    async fn restart_lost(&self, id: JobId, unit: &str) {
        // One decision per job: a concurrent reconcile sees it launching.
        if !self.launching.lock().is_ok_and(|mut l| l.insert(id)) {
            return;
        }
        let job = {
            let st = self.state.lock().await;
            match st.jobs.get(&id) {
                Some(j) if j.state == JobState::Running && j.invocation_id.is_empty() => j.clone(),
                _ => {
                    drop(st);
                    self.launched(id);
                    return;
                }
            }
        };
        let user_mode = self.settings.unit.user_mode;
        let ran = super::journal::unit_started(
            &self.settings.journalctl,
            unit,
            job.start_usec,
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
            Ok(false) if job.relaunches >= MAX_RELAUNCHES => {
                self.fail_launch(
                    id,
                    format!(
                        "systemd lost the start of {unit} {} times in a row",
                        job.relaunches + 1
                    ),
                )
                .await;
                return;
            }
            Ok(false) => {
                let job = {
                    let mut st = self.state.lock().await;
                    let Some(j) = st.jobs.get_mut(&id) else {
                        drop(st);
                        self.launched(id);
                        return;
                    };
                    j.relaunches += 1;
                    if let Some(o) = j.output.as_mut().filter(|o| o.error.is_empty()) {
                        o.error = "the copy was lost when systemd lost the job's first start; \
                                   the output is in the journal: xlurm log"
                            .into();
                    }
                    let j = j.clone();
                    if let Err(e) = st.store.save([&j]) {
                        tracing::warn!(job = id, "recording the relaunch: {e:#}");
                    }
                    j
                };
                tracing::warn!(
                    job = id,
                    "job {id}: systemd lost the start of {unit} before it ever ran; starting it again ({}/{MAX_RELAUNCHES})",
                    job.relaunches
                );
                // Boxed: launch -> reconcile -> restart_lost -> launch.
                Box::pin(self.launch(job)).await;
                return;
            }
        };
        self.launched(id);
        self.finalize(id, JobState::Cancelled, outcome, None).await;
    }

    /// At start: re-adopts running jobs whose units live, harvests finished
    /// ones, and marks vanished ones LOST. Job IDs continue past every job unit
    /// systemd still has, so a new job never collides with one (after a purge
    /// of the state directory, say).
    pub async fn readopt(&self) -> Result<()> {
        let loaded = self.systemd.list("xlurm-job-*.service").await?;
        // Units of jobs whose end was recorded but that were not collected
        // before the daemon stopped.
        {
            let st = self.state.lock().await;
            if let Ok(mut u) = self.uncollected.lock() {
                u.extend(
                    loaded
                        .iter()
                        .filter(|unit| {
                            Job::id_from_unit(unit)
                                .and_then(|id| st.find(id))
                                .is_some_and(|f| f.state().is_final())
                        })
                        .map(|unit| (unit.clone(), None)),
                );
            }
        }
        if let Some(max) = loaded.iter().filter_map(|u| Job::id_from_unit(u)).max() {
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
                .filter(|j| j.state == JobState::Running)
                .cloned()
                .collect()
        };
        for job in running {
            match self.systemd.status(&job.unit()).await? {
                Some(status)
                    if job.invocation_id.is_empty()
                        || status.invocation_id == job.invocation_id =>
                {
                    {
                        let mut st = self.state.lock().await;
                        if let Some(alloc) = job.alloc.clone() {
                            let deadline = job.start_usec / 1_000_000 + job.demand.time_limit_secs;
                            st.sched.adopt(job.id, alloc, deadline);
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
                    let mut st = self.state.lock().await;
                    if let Some(j) = st.jobs.get_mut(&job.id) {
                        j.state = JobState::Lost;
                        j.end_usec = now_usec();
                        j.outcome = Some(Outcome {
                            detail,
                            ..Default::default()
                        });
                        let j = j.clone();
                        st.store.save([&j])?;
                    }
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
        let State {
            store, jobs, ended, ..
        } = &mut *st;
        let mut removed = 0;
        jobs.retain(|id, j| {
            let keep = !(j.state.is_final() && j.end_usec < cutoff);
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
        st.retired += removed;
        let old: Vec<JobId> = st
            .jobs
            .values()
            .filter(|j| j.state.is_final() && j.end_usec.saturating_add(linger) < now)
            .map(|j| j.id)
            .collect();
        for id in old {
            st.retire(id);
        }
        st.trim();
        let next = st.next_id;
        if st.store.save_next_id(next).is_ok() {
            if let Err(e) = st.store.maybe_compact() {
                tracing::warn!("compacting the job log: {e:#}");
            }
        }
    }
}

/// A job's visibility variables and its `DeviceAllow` entries.
pub type DeviceSetup = (Vec<(String, String)>, Vec<(String, String)>);

/// The visibility variables and `DeviceAllow` entries of a job holding
/// `devices`, from the devices the backends discovered.
pub fn device_setup(
    accel: &[crate::accel::Active],
    devices: &[crate::core::DeviceRef],
) -> Result<DeviceSetup, String> {
    let vendor = devices.first().map(|d| d.vendor);
    let env = crate::accel::visibility_env(vendor, devices).map_err(|e| e.to_string())?;
    let discovered: Vec<crate::accel::DiscoveredDevice> = accel
        .iter()
        .flat_map(|a| a.devices.iter().cloned())
        .collect();
    let allow = crate::accel::device_allow(&discovered, devices)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|p| (p.display().to_string(), "rw".to_string()))
        .collect();
    Ok((env, allow))
}

fn write_script(path: &std::path::Path, script: &str) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::Recent;
    use std::time::{Duration, Instant};

    #[test]
    fn a_resolved_account_serves_only_within_its_time() {
        let t0 = Instant::now();
        let mut r = Recent::new(Duration::from_secs(1));
        assert_eq!(r.get(1001, t0), None);
        r.put(1001, "alice", t0);
        assert_eq!(r.get(1001, t0 + Duration::from_millis(999)), Some("alice"));
        assert_eq!(r.get(1002, t0), None, "another user's is never given");
        assert_eq!(r.get(1001, t0 + Duration::from_secs(1)), None, "too old");
        // Old ones are forgotten as new ones come.
        r.put(1002, "bob", t0 + Duration::from_secs(2));
        assert_eq!(r.kept.len(), 1);
        assert_eq!(r.get(1002, t0 + Duration::from_secs(2)), Some("bob"));
    }
}

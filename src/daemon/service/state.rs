//! The daemon's tables: jobs in full and in brief, the scheduler's books,
//! the store, and the counts kept beside them.

use super::*;

pub struct State {
    pub sched: Scheduler,
    /// Jobs in full: pending, running, and those that ended a short while ago
    /// (while their D-Bus object lingers); see [`State::retire`].
    pub jobs: crate::daemon::job::Jobs,
    /// Jobs that ended, in brief; their whole record is in the store.
    pub ended: Briefs,
    pub(super) strings: Strings,
    pub store: Store,
    /// One record per ended job, for usage reports (`daemon::accounting`);
    /// `None` when its directory could not be made (logged).
    pub ledger: Option<crate::daemon::accounting::Ledger>,
    pub next_id: JobId,
    /// What each user's pending jobs hold, against their budgets.
    pub(super) usage: HashMap<u32, crate::core::Usage>,
    /// Jobs retired since memory was last given back (see `State::trim`).
    pub(super) retired: usize,
    /// When priorities were last brought up to date (seconds).
    reprioritized_at: u64,
    /// The pending jobs that depend on each job, exactly: a job is in the
    /// set of each job its dependency names while it is pending (see
    /// `admission`), so a walk over them is the dependency graph reversed.
    pub(super) waiters: HashMap<JobId, std::collections::BTreeSet<JobId>>,
    /// Pending `singleton` jobs by owner and name, oldest first.
    pub(super) singles: HashMap<(u32, String), std::collections::BTreeSet<JobId>>,
    /// Each array's tasks that started, and their counts (see `arrays`).
    pub(super) arrays: HashMap<JobId, super::arrays::ArrayBook>,
}

/// How often a scheduling pass brings priorities up to date with usage
/// (running jobs charged so far, ended ones): the keys of a long queue are
/// recomputed in about 10 ms per 100,000 jobs, so not at every pass.
pub const REPRIORITIZE_EVERY_SECS: u64 = 5;

/// Jobs in full and in brief, each in ID order, merged into one order;
/// `first(a, b)`: whether ID `a` comes before ID `b`.
fn merge<'a>(
    full: impl Iterator<Item = (&'a JobId, &'a Job)>,
    brief: impl Iterator<Item = (JobId, &'a Brief)>,
    first: fn(JobId, JobId) -> bool,
) -> impl Iterator<Item = (JobId, Found<'a>)> {
    crate::daemon::job::merge_sorted(
        full.map(|(id, j)| (*id, Found::Full(j))),
        brief.map(|(id, b)| (id, Found::Brief(b))),
        move |a, b| first(a.0, b.0),
    )
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
            Found::Full(j) => j.state(),
            Found::Brief(b) => b.state,
        }
    }
}

impl State {
    /// Adds ended `job` to the accounting log (a failure is logged: the
    /// job log keeps the end either way).
    pub fn to_ledger(&self, job: &Job) {
        if let Some(l) = &self.ledger {
            if let Err(e) = l.append(&crate::daemon::accounting::record_of(job)) {
                tracing::warn!(job = job.id, "accounting: {e:#}");
            }
        }
    }

    /// Hands one poll's `load` of device `slot` (`vendor`:`index`) to the
    /// job holding it, when the job's own allocation names the device (an
    /// exclusive job holds every device but is not judged on those it did
    /// not ask for): `(job, owner, change)` when its idleness changed.
    pub fn observe_load(
        &mut self,
        slot: usize,
        vendor: crate::core::Vendor,
        index: u32,
        load: &crate::core::Load,
        now: u64,
        rule: crate::core::IdleRule,
    ) -> Option<(JobId, String, crate::core::IdleChange)> {
        let holder = self.sched.holder(slot)?;
        let job = self.jobs.get_mut(&holder)?;
        let own = job.alloc().is_some_and(|a| {
            a.devices
                .iter()
                .any(|r| r.vendor == vendor && r.index == index)
        });
        if !own {
            return None;
        }
        match job.observe_load(slot, load, now, rule) {
            crate::core::IdleChange::None => None,
            change => Some((holder, job.user.clone(), change)),
        }
    }

    /// The tables for what the store loaded: its pending jobs are queued in
    /// `sched` and counted per user.
    pub fn new(mut sched: Scheduler, mut loaded: Loaded, store: Store) -> State {
        // What completed jobs took, oldest end first, for expected starts.
        let mut done: Vec<&Job> = loaded
            .jobs
            .values()
            .filter(|j| j.state() == JobState::Completed)
            .collect();
        done.sort_by_key(|j| (j.end_usec(), j.id));
        for j in done {
            sched.record_runtime(
                j.kind(),
                j.start_usec() / 1_000_000,
                j.end_usec() / 1_000_000,
            );
        }
        let mut usage: HashMap<u32, crate::core::Usage> = HashMap::new();
        let mut pending = Vec::new();
        for j in loaded
            .jobs
            .values_mut()
            .filter(|j| j.state() == JobState::Pending)
        {
            usage.entry(j.uid).or_default().add(j.usage());
            pending.push(j.id);
            j.detach();
        }
        let ledger = match crate::daemon::accounting::Ledger::open(store.dir()) {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::error!("the accounting log is off: {e:#}");
                None
            }
        };
        let mut st = State {
            sched,
            jobs: loaded.jobs,
            ended: loaded.ended,
            strings: loaded.strings,
            store,
            ledger,
            next_id: loaded.next_id,
            usage,
            retired: 0,
            reprioritized_at: 0,
            waiters: HashMap::new(),
            singles: HashMap::new(),
            arrays: HashMap::new(),
        };
        st.index_arrays();
        // Queued unless something keeps them out (see `admission`).
        for id in &pending {
            st.wait_for_targets(*id);
        }
        for id in &pending {
            st.readmit(*id);
        }
        st.settle_loaded(&pending);
        // Reading the log left its scratch (each record parsed whole, the
        // index of records) free in the heap: give it back now, not never.
        crate::daemon::heap::give_back();
        st
    }

    /// Brings priorities up to date at `now` (seconds) if the last time
    /// was [`REPRIORITIZE_EVERY_SECS`] ago or more, or `force`.
    pub fn reprioritize(&mut self, now: u64, force: bool) {
        if force || now.saturating_sub(self.reprioritized_at) >= REPRIORITIZE_EVERY_SECS {
            self.sched.reprioritize(now);
            self.reprioritized_at = now;
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
            Some(j) if j.detached().is_some() => {
                let mut j = j.clone();
                j.attach(self.store.read(id)?);
                Ok(Some(std::borrow::Cow::Owned(j)))
            }
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
        crate::daemon::heap::give_back();
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

    /// Pending job `job` was queued: its owner holds what it holds.
    pub(super) fn pending_added(&mut self, job: &Job) {
        self.usage.entry(job.uid).or_default().add(job.usage());
    }

    /// Pending job `id` leaves the queue (it starts or is cancelled): its
    /// owner no longer holds what it held. Call before replacing its record.
    pub(super) fn pending_done(&mut self, id: JobId) {
        self.leave_singles(id);
        self.stop_waiting(id);
        let Some((uid, held)) = self.jobs.get(&id).map(|j| (j.uid, j.usage())) else {
            return;
        };
        if let Some(u) = self.usage.get_mut(&uid) {
            u.sub(held);
            if u.is_empty() {
                self.usage.remove(&uid);
            }
        }
    }

    /// What user `uid`'s pending jobs hold.
    pub fn usage_of(&self, uid: u32) -> crate::core::Usage {
        self.usage.get(&uid).copied().unwrap_or_default()
    }

    /// Pending jobs (queued, and those a hold, a dependency or their
    /// array's `%N` keeps out of the queue) and running ones.
    pub fn counts(&self) -> (usize, usize) {
        let pending = self.usage.values().map(|u| u.jobs).sum();
        (pending, self.sched.running_count())
    }
}

//! The daemon's logic: the queue, the scheduler, jobs, and their units.
//!
//! D-Bus methods (`api.rs`) are thin wrappers over the functions here, which
//! take the caller's uid as an argument so they can be tested without a bus.

use super::job::{Brief, Briefs, Command, Heard, Job, JobState, Outcome, Strings, MAX_REQUEUES};
use super::spec::Spec;
use super::store::{Loaded, Store};
use super::systemd::outcome::{classify, UnitStatus};
use super::systemd::unit::{self, RunAs};
use super::systemd::{Systemd, Units};
use crate::core::{JobId, Scheduler};
use crate::wire::bus::transient;
use crate::wire::error::{ApiError, ApiResult};
use crate::wire::keys::{machine, Key};
use crate::wire::time::now_usec;
use anyhow::Result;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{Mutex, Notify};

mod access;
mod accounts;
mod admission;
mod arrays;
mod cancel;
mod commit;
mod deadline;
mod error;
mod launch;
mod logs;
mod readopt;
mod reconcile;
mod state;
mod submit;
mod update;
mod views;

pub use crate::daemon::settings::Settings;
pub use access::{no_such_job, owns, sight, Sight};
pub(crate) use accounts::user_name;
use accounts::ACCOUNT_REUSE;
pub use accounts::{resolve_account, Account, Accounts, Recent};
pub use admission::hold_by;
pub use commit::{Commit, CommitError, Effects, Starts};
pub use error::{AccountError, DependencyError, DeviceSetupError, LaunchError};
pub use launch::{device_setup, DeviceSetup};
pub use logs::{LogPage, LogReads};
pub use state::{Found, State};
pub use submit::{Submitted, GPU_DEFAULT_HINT};

/// How often a job's unit is started again after systemd lost its start job.
pub const MAX_RELAUNCHES: u8 = 3;

/// Everything the daemon's tasks share.
pub struct Daemon<U = Systemd> {
    pub state: Mutex<State>,
    pub settings: Settings,
    pub systemd: U,
    /// Wakes the scheduling loop.
    pub kick: Notify,
    /// Wakes the collector: [`reconcile::COLLECT_BATCH`] ended units wait (see `collect_ended`).
    pub collect: Notify,
    /// Wakes the deadline loop: a running job's time limit was lowered (see `deadline`).
    pub deadlines: Notify,
    /// Tells the API layer what changed about which job (for signals).
    pub changes: ChangeQueue,
    /// The accelerator backends in use and the devices they found.
    pub accel: Vec<crate::accel::Active>,
    /// Set (under the state lock) when the daemon is stopping: no new launches.
    stopping: std::sync::atomic::AtomicBool,
    /// The accelerator gate (`daemon::device_gate`).
    pub gate: crate::daemon::device_gate::Gate,
    /// The uids of the bus connections that called lately.
    pub callers: crate::daemon::bus::callers::Callers,
    /// polkit's verdicts kept, and each user's turns to ask (see `bus::polkit`).
    pub polkit: crate::daemon::bus::polkit::Polkit,
    /// Set while the slice of jobs without accelerators is found open to
    /// devices and cannot be closed (`nodev_slice::keep_closed`): each such
    /// job's unit then closes itself.
    pub nodev_open: std::sync::atomic::AtomicBool,
    /// What it did since it started, for metrics (`xlurm metrics`).
    pub counters: Counters,
    /// Units of ended jobs, and how each is collected, once the jobs
    /// started in their place reached systemd (see `collect_ended`).
    uncollected: std::sync::Mutex<Vec<(String, crate::daemon::systemd::outcome::Collect)>>,
    /// Starts systemd lost, claimed again (in flight), for the next
    /// scheduling pass to launch (see `restart_lost`).
    relaunches: std::sync::Mutex<Vec<Job>>,
    /// Submitters' accounts as lately looked up, shared with `workdirs`.
    accounts: Accounts,
    /// Checks working directories with the submitter's rights (see `as_user`).
    workdirs: super::as_user::Checker,
    /// Turns to read the journal (see `LogReads`).
    log_reads: logs::LogReads,
    /// One raise of a running job's time limit above its unit's at a time
    /// (see `update_running`): each waits for systemd's reload without the
    /// state lock, and the record and systemd must agree on the last one.
    /// When the last reload was asked, to space them out.
    limit_changes: Mutex<Option<std::time::Instant>>,
}

/// What xlurmd did since it started, for metrics (`xlurm metrics`, through
/// `GetMachine`): counters only grow.
#[derive(Debug, Default)]
pub struct Counters {
    /// Jobs submitted (each array counts once).
    pub submitted: std::sync::atomic::AtomicU64,
    /// Jobs handed to systemd.
    pub started: std::sync::atomic::AtomicU64,
    /// Scheduling passes, and the time they took in all and the last one.
    pub passes: std::sync::atomic::AtomicU64,
    pub pass_nsec: std::sync::atomic::AtomicU64,
    pub last_pass_nsec: std::sync::atomic::AtomicU64,
}

impl Counters {
    fn add(c: &std::sync::atomic::AtomicU64, n: u64) {
        c.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// One scheduling pass of `nsec` that started `started` jobs.
    pub fn pass(&self, nsec: u64, started: u64) {
        Self::add(&self.passes, 1);
        Self::add(&self.pass_nsec, nsec);
        self.last_pass_nsec
            .store(nsec, std::sync::atomic::Ordering::Relaxed);
        Self::add(&self.started, started);
    }

    pub fn submitted(&self, n: u64) {
        Self::add(&self.submitted, n);
    }

    /// Each counter's value now, under its key in `GetMachine`.
    pub fn read(&self) -> [(Key<u64>, u64); 5] {
        let r = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        [
            (machine::SUBMITTED_TOTAL, r(&self.submitted)),
            (machine::STARTED_TOTAL, r(&self.started)),
            (machine::SCHED_PASSES_TOTAL, r(&self.passes)),
            (machine::SCHED_PASS_NSEC_TOTAL, r(&self.pass_nsec)),
            (machine::SCHED_LAST_PASS_NSEC, r(&self.last_pass_nsec)),
        ]
    }
}

/// What changed about a job, for the API layer's signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It is in this state now.
    State(JobState),
    /// Its unit's invocation became known (it started running).
    Invocation,
    /// Its use of its accelerators changed how it shows (IdleGPU).
    Usage,
}

/// What changed about which job, queued for the API layer, which sends each
/// as a signal and then says so ([`ChangeQueue::sent`]): a stopping daemon
/// waits for the last one ([`ChangeQueue::flush`]), so a RUNNING queued by a
/// launch it let finish is on the bus before it exits.
pub struct ChangeQueue {
    /// Counted and sent under one lock, so the count read by
    /// [`ChangeQueue::flush`] covers exactly the changes ahead of it.
    queued: std::sync::Mutex<Queued>,
    sent: std::sync::atomic::AtomicU64,
}

/// The channel to the API layer, and how many changes went into it.
struct Queued {
    tx: tokio::sync::mpsc::UnboundedSender<(JobId, Change)>,
    count: u64,
}

impl ChangeQueue {
    fn new(tx: tokio::sync::mpsc::UnboundedSender<(JobId, Change)>) -> ChangeQueue {
        ChangeQueue {
            queued: std::sync::Mutex::new(Queued { tx, count: 0 }),
            sent: Default::default(),
        }
    }

    fn queued(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.queued.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `change` of job `id` (nothing when no one listens any more).
    pub fn send(&self, id: JobId, change: Change) {
        let mut q = self.queued();
        if q.tx.send((id, change)).is_ok() {
            q.count += 1;
        }
    }

    /// One change taken from the queue was sent (or dropped on purpose).
    pub fn sent(&self) {
        self.sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits (up to `limit`) until every change queued before the call was
    /// sent; whether they all were.
    pub async fn flush(&self, limit: std::time::Duration) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        let queued = self.queued().count;
        let t0 = std::time::Instant::now();
        loop {
            if self.sent.load(SeqCst) >= queued {
                return true;
            }
            if t0.elapsed() >= limit {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

impl<U: Units> Daemon<U> {
    pub fn new(
        state: State,
        settings: Settings,
        systemd: U,
        accel: Vec<crate::accel::Active>,
    ) -> (
        Arc<Daemon<U>>,
        tokio::sync::mpsc::UnboundedReceiver<(JobId, Change)>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let accounts = Accounts::new(ACCOUNT_REUSE);
        let d = Arc::new(Daemon {
            state: Mutex::new(state),
            settings,
            systemd,
            kick: Notify::new(),
            collect: Notify::new(),
            deadlines: Notify::new(),
            changes: ChangeQueue::new(tx),
            accel,
            stopping: std::sync::atomic::AtomicBool::new(false),
            gate: Default::default(),
            callers: Default::default(),
            polkit: Default::default(),
            nodev_open: Default::default(),
            counters: Default::default(),
            uncollected: std::sync::Mutex::new(Vec::new()),
            relaunches: std::sync::Mutex::new(Vec::new()),
            accounts: accounts.clone(),
            workdirs: super::as_user::Checker::new(accounts),
            log_reads: logs::LogReads::default(),
            limit_changes: Mutex::new(None),
        });
        (d, rx)
    }

    pub(super) fn changed(&self, id: JobId, state: JobState) {
        self.changes.send(id, Change::State(state));
    }
}

#[cfg(test)]
mod handler_tests;

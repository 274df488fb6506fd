//! Where a job is, with only what is valid there, and every way it moves on.
//!
//! A job is [`Stage::Pending`], [`Stage::Running`] or [`Stage::Ended`]. The
//! transitions that change its record ([`Job::started`],
//! [`Job::cancel_requested`], [`Job::relaunched`], [`Job::ended`],
//! [`Job::cancelled_pending`]) return the job as it is to be and leave
//! `self` as it is: a handler persists the new record first and changes
//! memory only once it is on disk, so memory and disk never disagree. What
//! is never stored (the start's handshake with the unit watcher, a read of
//! the unit under way, the last memory peak seen) changes in place.

use super::{Command, Job, JobState, Outcome};
use crate::core::Allocation;
use crate::daemon::systemd::outcome::UnitStatus;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// A job's stage and what belongs to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    Pending(Waiting),
    /// Boxed, as [`Stage::Ended`]: a pending job, the many, stays small.
    Running(Box<Run>),
    Ended(Box<End>),
}

/// A pending job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiting {
    /// Set while its argv, environment and script are only in its record on
    /// disk ([`Job::detach`]): the bytes they held, still counted against
    /// its owner's budget.
    pub detached: Option<std::num::NonZeroU64>,
    /// Its `--output` descriptor (see `daemon::output`), held until its
    /// unit is started with it.
    pub output_fd: Option<HeldFd>,
    /// Stored: held back by its owner or an admin (`--hold`, `xlurm hold`).
    pub hold: Option<Hold>,
    /// Stored: what it waits for (`--dependency`). Boxed: most jobs have none.
    pub after: Option<Box<After>>,
    /// Never stored: whether it is in the scheduler's queue, and if not, why
    /// (worked out by `service::admission` from its hold, dependency and array).
    pub admission: Admission,
}

/// A pending job's `--dependency`, and what to do when it can never be met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct After {
    pub dependency: crate::core::Dependency,
    /// `--kill-on-invalid-dep=yes`: cancel it then, instead of letting it
    /// wait with `DependencyNeverSatisfied`.
    pub kill_on_invalid: bool,
}

/// Who holds a pending job back: only an admin may release an admin's hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    User,
    Admin,
}

impl Hold {
    pub fn name(self) -> &'static str {
        match self {
            Hold::User => "user",
            Hold::Admin => "admin",
        }
    }
}

/// Whether a pending job is in the scheduler's queue (`Queued`), and if
/// not, what keeps it out. Only queued jobs are placed, counted as the
/// head, or block others.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Admission {
    #[default]
    Queued,
    Held(Hold),
    /// Its dependency is not met yet.
    Dependency,
    /// Its dependency can never be met.
    Never,
    /// Its array runs as many tasks as its `%N` allows.
    ArrayLimit,
}

impl Admission {
    /// Why it waits outside the queue (`None` when queued); `limit`: its
    /// array's `%N`.
    pub fn reason(self, limit: u32) -> Option<crate::core::Reason> {
        use crate::core::Reason;
        match self {
            Admission::Queued => None,
            Admission::Held(h) => Some(Reason::Held {
                by_admin: h == Hold::Admin,
            }),
            Admission::Dependency => Some(Reason::Dependency),
            Admission::Never => Some(Reason::DependencyNeverSatisfied),
            Admission::ArrayLimit => Some(Reason::ArrayTaskLimit { limit }),
        }
    }
}

/// A running job: placed and handed to systemd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub alloc: Allocation,
    /// Microseconds since the epoch.
    pub start_usec: u64,
    /// systemd's InvocationID of the unit, hex; empty until it is known.
    pub invocation_id: String,
    /// Set when a cancel was asked for (by whom): it ends CANCELLED.
    pub cancel_requested_by: Option<u32>,
    /// How often its unit was started again because systemd lost the start
    /// job before the unit ever ran (see `Daemon::restart_lost`).
    pub relaunches: u8,
    /// Never stored: where its start is.
    pub launch: Launch,
    /// Never stored: whether its unit is being read.
    pub reading: Reading,
    /// Never stored: its memory peak as last read from its cgroup, for when
    /// systemd reports none at the end (see `sample_memory_peaks`).
    pub memory_peak: Option<u64>,
    /// Never stored: how often its owner changed its time limit while it
    /// runs (see `service::update`).
    pub limit_changes: u8,
    /// The time limit its unit has (RuntimeMaxSec) where that is above the
    /// job's own: its limit was lowered while it ran, and xlurmd enforces
    /// the lower one itself (`service::deadline`), for systemd's manager is
    /// never reloaded for a lowering. 0: its unit's is the job's.
    pub unit_limit_secs: u64,
    /// xlurmd stopped it at its time limit (a lowered one): it ends TIMEOUT.
    pub stopped_at_limit: bool,
    /// Never stored: whether this daemon announced its RUNNING (a start
    /// made again after systemd lost one is not announced again; after a
    /// restart, none was).
    pub running_announced: bool,
    /// Never stored while it runs (kept with its end): what its
    /// accelerators did, from the device polls.
    pub gpu: crate::core::GpuUse,
}

/// Between "persisted RUNNING" and systemd's answer to StartTransientUnit a
/// job is [`Launch::InFlight`]: nothing reconciles it (a unit not created
/// yet would look gone), the unit signals that arrive are kept and handled
/// once systemd answered, and the daemon waits for it before it exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    InFlight(Heard),
    Done,
}

/// What the unit's signals told while its start was in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Heard {
    #[default]
    Nothing,
    /// It changed: read it whole.
    Changed,
    /// It ended, as the signals told.
    Ended(Box<UnitStatus>),
}

/// Concurrent reads of one unit fold into one more read after the one under way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reading {
    #[default]
    Idle,
    Busy,
    /// Busy, and asked again meanwhile: read once more after.
    BusyAgain,
}

/// A job that ended, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    /// One of the final states.
    pub state: JobState,
    /// 0 if it never started.
    pub start_usec: u64,
    pub end_usec: u64,
    /// What it held, if it started.
    pub alloc: Option<Allocation>,
    pub invocation_id: String,
    pub outcome: Outcome,
    pub cancel_requested_by: Option<u32>,
    pub relaunches: u8,
}

/// A descriptor shared by the clones of one pending job (equal when it is
/// the same descriptor).
#[derive(Debug, Clone)]
pub struct HeldFd(pub Arc<OwnedFd>);

impl PartialEq for HeldFd {
    fn eq(&self, other: &HeldFd) -> bool {
        self.0.as_raw_fd() == other.0.as_raw_fd()
    }
}

impl Eq for HeldFd {}

impl HeldFd {
    /// The descriptor itself, or a duplicate if a clone of the job still
    /// shares it.
    pub fn into_fd(self) -> Option<OwnedFd> {
        Arc::try_unwrap(self.0)
            .or_else(|shared| shared.try_clone())
            .ok()
    }
}

impl Run {
    fn new(alloc: Allocation, start_usec: u64) -> Run {
        Run {
            alloc,
            start_usec,
            invocation_id: String::new(),
            cancel_requested_by: None,
            relaunches: 0,
            launch: Launch::InFlight(Heard::Nothing),
            reading: Reading::Idle,
            memory_peak: None,
            limit_changes: 0,
            unit_limit_secs: 0,
            stopped_at_limit: false,
            running_announced: false,
            gpu: Default::default(),
        }
    }

    /// A running job as its record tells it, after a restart: nothing in flight.
    pub fn loaded(
        alloc: Allocation,
        start_usec: u64,
        invocation_id: String,
        cancel_requested_by: Option<u32>,
        relaunches: u8,
    ) -> Run {
        Run {
            invocation_id,
            cancel_requested_by,
            relaunches,
            launch: Launch::Done,
            ..Run::new(alloc, start_usec)
        }
    }

    pub fn in_flight(&self) -> bool {
        matches!(self.launch, Launch::InFlight(_))
    }
}

impl Job {
    /// PENDING to RUNNING: placed (`alloc`) and started at `now` (µs), its
    /// start in flight. Its `--output` descriptor stays with the pending job
    /// ([`Job::output_fd`]) for the launch to take.
    pub fn started(&self, alloc: Allocation, now: u64) -> Job {
        debug_assert_eq!(self.state(), JobState::Pending);
        Job {
            stage: Stage::Running(Box::new(Run::new(alloc, now))),
            ..self.clone()
        }
    }

    /// A running job that `by` (a uid) asked to cancel: it ends CANCELLED
    /// when its unit stops.
    pub fn cancel_requested(&self, by: u32) -> Job {
        let mut j = self.clone();
        if let Stage::Running(r) = &mut j.stage {
            r.cancel_requested_by = Some(by);
        }
        j
    }

    /// A running job whose start systemd lost, started once more: its
    /// `--output` copy is gone with the first start.
    pub fn relaunched(&self) -> Job {
        let mut j = self.clone();
        if let Stage::Running(r) = &mut j.stage {
            r.relaunches = r.relaunches.saturating_add(1);
        }
        if let Some(o) = j.output.as_mut().filter(|o| o.error.is_empty()) {
            o.error = "the copy was lost when systemd lost the job's first start; \
                       the output is in the journal: xlurm log"
                .into();
        }
        j
    }

    /// PENDING or RUNNING to a final `state`, at `now` (µs), for the reason
    /// `outcome` gives. Its forwarded environment goes with it.
    pub fn ended(&self, state: JobState, outcome: Outcome, now: u64) -> Job {
        debug_assert!(state.is_final() && !self.state().is_final());
        let end = match &self.stage {
            Stage::Running(r) => End {
                state,
                start_usec: r.start_usec,
                end_usec: now,
                alloc: Some(r.alloc.clone()),
                invocation_id: r.invocation_id.clone(),
                outcome: Outcome {
                    gpu: outcome
                        .gpu
                        .or_else(|| (!r.gpu.is_empty()).then(|| Box::new(r.gpu.clone()))),
                    ..outcome
                },
                cancel_requested_by: r.cancel_requested_by,
                relaunches: r.relaunches,
            },
            Stage::Pending(_) | Stage::Ended(_) => End {
                state,
                start_usec: self.start_usec(),
                end_usec: now,
                alloc: self.alloc().cloned(),
                invocation_id: self.invocation_id().to_string(),
                outcome,
                cancel_requested_by: self.cancel_requested_by(),
                relaunches: self.relaunches(),
            },
        };
        Job {
            stage: Stage::Ended(Box::new(end)),
            command: Command {
                env: None,
                ..self.command.clone()
            },
            ..self.clone()
        }
    }

    /// A pending job whose dependency can never be met, cancelled as its
    /// owner asked (`--kill-on-invalid-dep=yes`).
    pub fn cancelled_dependency(&self, now: u64) -> Job {
        let dependency = self
            .after()
            .map(|a| a.dependency.to_string())
            .unwrap_or_default();
        let outcome = Outcome {
            detail: format!(
                "DependencyNeverSatisfied: {dependency} can never be met (--kill-on-invalid-dep)"
            ),
            ..Default::default()
        };
        self.ended(JobState::Cancelled, outcome, now)
    }

    /// A `--requeue` job that was LOST, queued again with its ID: pending,
    /// one restart more. Its `--output` copy went with the lost run.
    pub fn requeued(&self) -> Job {
        let mut j = Job {
            stage: Stage::Pending(Waiting::default()),
            restarts: self.restarts.saturating_add(1),
            ..self.clone()
        };
        if let Some(o) = j.output.as_mut().filter(|o| o.error.is_empty()) {
            o.error = "the copy went with the run that was lost; \
                       the output is in the journal: xlurm log"
                .into();
        }
        j
    }

    /// A pending job its owner (or an admin, `by`) cancelled before it started.
    pub fn cancelled_pending(&self, by: u32, now: u64) -> Job {
        let outcome = Outcome {
            detail: "cancelled before it started".into(),
            ..Default::default()
        };
        let mut j = self.ended(JobState::Cancelled, outcome, now);
        if let Stage::Ended(e) = &mut j.stage {
            e.cancel_requested_by = Some(by);
        }
        j
    }

    /// A pending job held (`Some`) or released (`None`).
    pub fn with_hold(&self, hold: Option<Hold>) -> Job {
        let mut j = self.clone();
        if let Stage::Pending(w) = &mut j.stage {
            w.hold = hold;
        }
        j
    }

    /// A pending job's dependency.
    pub fn after(&self) -> Option<&After> {
        match &self.stage {
            Stage::Pending(w) => w.after.as_deref(),
            _ => None,
        }
    }

    /// A pending job with its dependency set (`Some`) or cleared.
    pub fn with_after(&self, after: Option<After>) -> Job {
        let mut j = self.clone();
        if let Stage::Pending(w) = &mut j.stage {
            w.after = after.map(Box::new);
        }
        j
    }

    /// A pending job's hold.
    pub fn hold(&self) -> Option<Hold> {
        match &self.stage {
            Stage::Pending(w) => w.hold,
            _ => None,
        }
    }

    /// A pending job's admission (see [`Admission`]); `Queued` in other stages.
    pub fn admission(&self) -> Admission {
        match &self.stage {
            Stage::Pending(w) => w.admission,
            _ => Admission::Queued,
        }
    }

    /// Sets a pending job's admission.
    pub fn set_admission(&mut self, admission: Admission) {
        if let Stage::Pending(w) = &mut self.stage {
            w.admission = admission;
        }
    }

    /// Why its `--output` copy cannot be made; whether that is news.
    pub fn output_lost(&mut self, why: &str) -> bool {
        match self.output.as_mut() {
            Some(o) if o.error != why => {
                o.error = why.to_string();
                true
            }
            _ => false,
        }
    }

    /// The invocation its unit runs under became known: it started, and its
    /// environment is no longer needed. Whether that is news. Kept in memory
    /// and written with the job's next record: after a restart an empty one
    /// matches whatever runs the unit.
    pub fn invocation_known(&mut self, invocation: String) -> bool {
        let Stage::Running(r) = &mut self.stage else {
            return false;
        };
        if !r.invocation_id.is_empty() {
            return false;
        }
        r.invocation_id = invocation;
        if !self.requeue {
            self.command.env = None;
        }
        true
    }

    /// A unit that systemd lost the start of is to be started again: claims
    /// the start (in flight again), unless one is in flight already or the
    /// unit was seen running. Whether it was claimed.
    pub fn claim_relaunch(&mut self) -> bool {
        match &mut self.stage {
            Stage::Running(r) if r.invocation_id.is_empty() && !r.in_flight() => {
                r.launch = Launch::InFlight(Heard::Nothing);
                true
            }
            _ => false,
        }
    }

    /// systemd answered its start (or it failed), and its RUNNING was
    /// `announced` (or not): what the unit's signals told meanwhile, if
    /// anything.
    pub fn launched(&mut self, announced: bool) -> Heard {
        match &mut self.stage {
            Stage::Running(r) => {
                r.running_announced |= announced;
                match std::mem::replace(&mut r.launch, Launch::Done) {
                    Launch::InFlight(heard) => heard,
                    Launch::Done => Heard::Nothing,
                }
            }
            _ => Heard::Nothing,
        }
    }

    /// Its unit signalled (`ended`: its end, if the signals told it). While
    /// its start is in flight the signal is kept for the launch (an end
    /// over signals that told less) and `true` returned.
    pub fn heard_while_launching(&mut self, ended: &Option<UnitStatus>) -> bool {
        let Stage::Running(r) = &mut self.stage else {
            return false;
        };
        let Launch::InFlight(heard) = &mut r.launch else {
            return false;
        };
        match ended {
            Some(status) => *heard = Heard::Ended(Box::new(status.clone())),
            None if *heard == Heard::Nothing => *heard = Heard::Changed,
            None => {}
        }
        true
    }

    /// A read of its unit begins: `false` if one is under way (it is then
    /// asked to read once more after) or the job is not running.
    pub fn begin_read(&mut self) -> bool {
        let Stage::Running(r) = &mut self.stage else {
            return false;
        };
        match r.reading {
            Reading::Idle => {
                r.reading = Reading::Busy;
                true
            }
            Reading::Busy | Reading::BusyAgain => {
                r.reading = Reading::BusyAgain;
                false
            }
        }
    }

    /// A read of its unit ended: whether it was asked to read once more
    /// meanwhile (and the job still runs).
    pub fn end_read(&mut self) -> bool {
        let Stage::Running(r) = &mut self.stage else {
            return false;
        };
        std::mem::take(&mut r.reading) == Reading::BusyAgain
    }

    /// One poll's load of its device `slot` (a running job's), at `now`
    /// (seconds): whether its idleness changed.
    pub fn observe_load(
        &mut self,
        slot: usize,
        load: &crate::core::Load,
        now: u64,
        rule: crate::core::IdleRule,
    ) -> crate::core::IdleChange {
        match &mut self.stage {
            Stage::Running(r) => r.gpu.observe(slot, load, now, rule),
            _ => crate::core::IdleChange::None,
        }
    }

    /// Its memory peak so far, as read from its cgroup.
    pub fn saw_memory_peak(&mut self, peak: u64) {
        if let Stage::Running(r) = &mut self.stage {
            r.memory_peak = Some(peak);
        }
    }

    /// Takes its `--output` descriptor (a pending job's), leaving none.
    pub fn take_output_fd(&mut self) -> Option<OwnedFd> {
        match &mut self.stage {
            Stage::Pending(w) => w.output_fd.take().and_then(HeldFd::into_fd),
            _ => None,
        }
    }

    /// Gives a pending job its `--output` descriptor.
    pub fn hold_output_fd(&mut self, fd: OwnedFd) {
        if let Stage::Pending(w) = &mut self.stage {
            w.output_fd = Some(HeldFd(Arc::new(fd)));
        }
    }

    pub fn has_output_fd(&self) -> bool {
        matches!(&self.stage, Stage::Pending(w) if w.output_fd.is_some())
    }
}

//! The scheduler: queue, running jobs, books, and one pass that decides which
//! jobs start now with which resources.
//!
//! A pass walks the queue in priority order (see [`super::priority`]; in
//! `fifo` mode submission order) and stops as early as it can prove nothing
//! more will start (the running limit, no CPU left in the view later jobs may
//! use, fifo-strict's blocked head). A job its owner's limits hold back is
//! skipped in a few comparisons and never becomes the head. Once the head is
//! known, a job that a summary of the free resources ([`Room`](super::alloc::Room)) shows cannot
//! fit is skipped without a placement, in a few comparisons; request shapes
//! whose placement failed are remembered for the rest of the pass (free
//! resources only shrink during a pass, so a shape that failed keeps
//! failing). A pass over a long queue that cannot start anything thus costs
//! O(n) cheap checks plus one placement per distinct shape that passes them.
//! Pending reasons are not stored per job; [`Scheduler::reason`] derives one
//! on demand from the state the last pass left.
//!
//! The pass and the reasons it leaves are `scheduler/pass.rs`; owners, fair
//! share and limits `scheduler/fair.rs`; estimated starts
//! `scheduler/estimate.rs`.

mod estimate;
mod fair;
mod pass;
mod shape;

pub use fair::UserUse;

use super::alloc::{Allocation, Need};
use super::books::{Avail, Books};
use super::device::{Health, Vendor};
use super::fairshare::{Meters, UsageWeights};
use super::limits::{Held, UserLimits};
use super::machine::Machine;
use super::policy::Policy;
use super::priority::{PriorityConfig, Submission};
use super::request::{validate, Demand, Limits, Request, RequestError};
use super::users::Users;
use super::JobId;
use std::collections::{BTreeMap, HashMap};

/// A job that holds resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    pub alloc: Allocation,
    /// When its time limit ends, in seconds since the epoch.
    pub deadline: u64,
}

/// What the last pass left behind, to derive pending reasons from.
#[derive(Debug, Clone, Default)]
struct PassInfo {
    /// The first job that did not fit.
    head: Option<JobId>,
    /// The head's reserved start under strict-backfill.
    shadow: Option<u64>,
}

/// The easy-backfill budget: idle resources frozen when `head` first blocked.
#[derive(Debug, Clone)]
struct Budget {
    head: JobId,
    avail: Avail,
}

/// Queue order: `(order, id)`, where `order` packs the rank (0 except under
/// largest-first: more devices first) above the priority key (highest
/// first; 0 in `fifo` mode), so that the key stays 16 bytes (see
/// `fair::queue_key`).
type QueueKey = (u64, JobId);

/// What a pass reads of every queued job, kept apart from the full demands so
/// that walking a long queue touches as little memory as possible.
#[derive(Debug, Clone, Copy)]
struct Brief {
    need: Need,
    /// Saturated at `u32::MAX` (136 years), to keep the record 32 bytes.
    time_limit_secs: u32,
    /// The owner's index in [`Users`].
    user: u32,
}

// What a pass walks per job: a 16-byte key and this 32-byte record.
const _: () = assert!(std::mem::size_of::<Brief>() == 32);

impl Brief {
    fn of(d: &Demand, user: u32) -> Brief {
        Brief {
            need: Need::of(d),
            time_limit_secs: d.time_limit_secs.min(u32::MAX as u64) as u32,
            user,
        }
    }
}

/// A pending job.
#[derive(Debug, Clone)]
struct Queued {
    key: QueueKey,
    demand: Demand,
    sub: Submission,
    user: u32,
}

/// The owner of a running job and what it holds against their limits.
#[derive(Debug, Clone)]
struct RunInfo {
    user: u32,
    sub: Submission,
    held: Held,
    /// When it started (seconds); `None` when not known (re-adopted).
    started: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Scheduler {
    machine: Machine,
    books: Books,
    running: HashMap<JobId, Running>,
    run_info: HashMap<JobId, RunInfo>,
    queue: BTreeMap<QueueKey, Brief>,
    pending: HashMap<JobId, Queued>,
    policy: Policy,
    limits: Limits,
    budget: Option<Budget>,
    last: PassInfo,
    /// How many running jobs hold the whole machine.
    exclusive: usize,
    prio: PriorityConfig,
    weights: UsageWeights,
    meters: Meters,
    /// The admin's limits and shares (users given none have
    /// `prio.default_share`).
    user_limits: UserLimits,
    users: Users,
    /// What completed jobs of each kind took, for expected starts.
    runtimes: super::runtimes::Runtimes,
    /// The latest time seen (a pass, a re-keying, an end, a submission).
    clock: u64,
    /// Decayed usage and shares of all active users at the last re-keying,
    /// for the factor of a user seen for the first time.
    totals: (f64, u64),
}

impl Scheduler {
    /// A scheduler in `fifo` priority mode without user limits: submission
    /// order, as before priorities existed. See [`Scheduler::set_priority`].
    pub fn new(machine: Machine, policy: Policy, limits: Limits) -> Scheduler {
        let prio = PriorityConfig::default();
        Scheduler {
            books: Books::new(&machine),
            weights: UsageWeights::for_machine(&machine),
            machine,
            running: HashMap::new(),
            run_info: HashMap::new(),
            queue: BTreeMap::new(),
            pending: HashMap::new(),
            policy,
            limits,
            budget: None,
            last: PassInfo::default(),
            exclusive: 0,
            meters: Meters::new(prio.half_life_secs),
            prio,
            user_limits: UserLimits::default(),
            users: Users::default(),
            runtimes: Default::default(),
            clock: 0,
            totals: (0.0, 0),
        }
    }

    /// [`Scheduler::new`] with priority settings.
    pub fn with_priority(
        machine: Machine,
        policy: Policy,
        limits: Limits,
        prio: PriorityConfig,
    ) -> Scheduler {
        let mut s = Scheduler::new(machine, policy, limits);
        s.set_priority(prio);
        s
    }

    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn free(&self) -> &Avail {
        &self.books.free
    }

    /// Gives back the room its tables kept after a big queue drained.
    pub fn shrink(&mut self) {
        self.pending.shrink_to_fit();
        self.running.shrink_to_fit();
        self.run_info.shrink_to_fit();
    }

    pub fn pending_count(&self) -> usize {
        self.queue.len()
    }

    pub fn running_count(&self) -> usize {
        self.running.len()
    }

    /// The jobs that hold resources now.
    pub fn running_ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.running.keys().copied()
    }

    pub fn running(&self, id: JobId) -> Option<&Running> {
        self.running.get(&id)
    }

    pub fn is_pending(&self, id: JobId) -> bool {
        self.pending.contains_key(&id)
    }

    /// The job holding device `slot`.
    pub fn holder(&self, slot: usize) -> Option<JobId> {
        self.books.holder.get(slot).copied().flatten()
    }

    /// The last job device `slot` was given to, even if it has let go since.
    pub fn last_holder(&self, slot: usize) -> Option<JobId> {
        self.books.last_holder.get(slot).copied().flatten()
    }

    /// Checks a request against this machine; see [`validate`].
    pub fn validate(&self, req: &Request) -> Result<Demand, RequestError> {
        validate(req, &self.machine, &self.limits)
    }

    /// Queues a validated demand of an unknown owner, submitted now: in
    /// `fifo` mode all there is; see [`Scheduler::enqueue_for`].
    pub fn enqueue(&mut self, id: JobId, demand: Demand) {
        let sub = Submission {
            owner: super::priority::Owner::UNKNOWN,
            nice: 0,
            submitted_at: self.clock,
            kind: 0,
        };
        self.enqueue_for(id, demand, sub);
    }

    /// Removes a pending job; false when it was not pending.
    pub fn dequeue(&mut self, id: JobId) -> bool {
        match self.pending.remove(&id) {
            Some(q) => {
                let s = &mut self.users.states[q.user as usize];
                s.pending = s.pending.saturating_sub(1);
                self.queue.remove(&q.key).is_some()
            }
            None => false,
        }
    }

    pub fn demand(&self, id: JobId) -> Option<&Demand> {
        self.pending.get(&id).map(|q| &q.demand)
    }

    /// Records a job of an unknown owner that already holds `alloc` (one
    /// re-adopted after a restart); see [`Scheduler::adopt_for`].
    pub fn adopt(&mut self, id: JobId, alloc: Allocation, deadline: u64) {
        let sub = Submission {
            owner: super::priority::Owner::UNKNOWN,
            nice: 0,
            submitted_at: self.clock,
            kind: 0,
        };
        self.adopt_for(id, alloc, deadline, sub, None);
    }

    /// Releases a running job's resources; its usage is charged up to the
    /// latest time the scheduler saw (see [`Scheduler::finish_at`]).
    pub fn finish(&mut self, id: JobId) -> Option<Allocation> {
        self.finish_at(id, self.clock)
    }

    /// Changes a running job's deadline (an admin retime).
    pub fn set_deadline(&mut self, id: JobId, deadline: u64) -> bool {
        match self.running.get_mut(&id) {
            Some(r) => {
                r.deadline = deadline;
                true
            }
            None => false,
        }
    }

    /// Switches policy live; the queue is re-ordered and any budget dropped.
    pub fn set_policy(&mut self, policy: Policy) {
        if policy == self.policy {
            return;
        }
        self.policy = policy;
        self.budget = None;
        self.rekey(true);
    }

    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Sets a device's monitoring state.
    pub fn set_health(&mut self, slot: usize, health: Health) {
        if let Some(d) = self.machine.devices.get_mut(slot) {
            d.health = health;
        }
    }

    /// A device's load at the last poll (shown, never scheduled on).
    pub fn set_load(&mut self, slot: usize, load: crate::core::Load) {
        if let Some(d) = self.machine.devices.get_mut(slot) {
            d.load = load;
        }
    }

    /// Disables or enables devices. All `ids` must exist or nothing changes.
    pub fn set_disabled(
        &mut self,
        vendor: Vendor,
        ids: &[u32],
        disabled: bool,
    ) -> Result<(), RequestError> {
        let mut slots = Vec::new();
        for id in ids {
            match self.machine.slot(vendor, *id) {
                Some(s) if !slots.contains(&s) => slots.push(s),
                Some(_) => return Err(RequestError::DuplicateId(*id)),
                None => {
                    return Err(RequestError::UnknownId {
                        vendor,
                        id: *id,
                        have: self.machine.vendor_ids(vendor),
                    })
                }
            }
        }
        for s in slots {
            self.machine.devices[s].disabled = disabled;
        }
        Ok(())
    }

    fn exclusive_running(&self) -> bool {
        self.exclusive > 0
    }
}

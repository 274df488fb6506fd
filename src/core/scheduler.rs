//! The scheduler: queue, running jobs, books, and one pass that decides which
//! jobs start now with which resources.
//!
//! A pass walks the queue in policy order and stops as early as it can prove
//! nothing more will start (the running limit, no CPU left in the view later
//! jobs may use, fifo-strict's blocked head). Once the head is known, a job
//! that a summary of the free resources ([`Room`]) shows cannot fit is skipped
//! without a placement, in a few comparisons; request shapes whose placement
//! failed are remembered for the rest of the pass (free resources only shrink
//! during a pass, so a shape that failed keeps failing). A pass over a long
//! queue that cannot start anything thus costs O(n) cheap checks plus one
//! placement per distinct shape that passes them. Pending reasons are not
//! stored per job; [`Scheduler::reason`] derives one on demand from the state
//! the last pass left.

use super::alloc::{place, Allocation, Need, Room};
use super::books::{Avail, Books};
use super::device::{Health, Vendor};
use super::machine::Machine;
use super::policy::Policy;
use super::reason::Reason;
use super::request::{validate, Demand, Limits, Request, RequestError};
use super::JobId;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

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

/// Queue order: `(rank, id)`; rank is 0 except under largest-first.
type QueueKey = (u32, JobId);

/// What a pass reads of every queued job, kept apart from the full demands so
/// that walking a long queue touches as little memory as possible.
#[derive(Debug, Clone, Copy)]
struct Brief {
    need: Need,
    time_limit_secs: u64,
}

#[derive(Debug, Clone)]
pub struct Scheduler {
    machine: Machine,
    books: Books,
    running: HashMap<JobId, Running>,
    queue: BTreeMap<QueueKey, Brief>,
    /// Each pending job's rank and demand.
    pending: HashMap<JobId, (u32, Demand)>,
    policy: Policy,
    limits: Limits,
    budget: Option<Budget>,
    last: PassInfo,
    /// How many running jobs hold the whole machine.
    exclusive: usize,
}

/// The shape of a demand: everything placement looks at, plus whether it is
/// short (ends before strict-backfill's reservation), for remembering failures
/// within a pass.
#[derive(Hash, PartialEq, Eq)]
struct Shape<'a> {
    cpus: u32,
    mem: u64,
    count: u32,
    vendor: Option<Vendor>,
    ids: &'a [u32],
    exclude: &'a [u32],
    exclusive: bool,
    numa_local: bool,
    short: bool,
}

impl<'a> Shape<'a> {
    fn of(d: &'a Demand, short: bool) -> Shape<'a> {
        Shape {
            cpus: d.cpus,
            mem: d.mem_bytes,
            count: d.devices.count,
            vendor: d.devices.vendor,
            ids: &d.devices.ids,
            exclude: &d.devices.exclude,
            exclusive: d.exclusive,
            numa_local: d.numa_local,
            short,
        }
    }
}

/// FxHash (rustc's hasher): the failure set is keyed by small integers
/// from one process, so it needs speed, not flooding resistance.
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(n as u64);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type FastHash = BuildHasherDefault<FxHasher>;

impl Scheduler {
    pub fn new(machine: Machine, policy: Policy, limits: Limits) -> Scheduler {
        Scheduler {
            books: Books::new(&machine),
            machine,
            running: HashMap::new(),
            queue: BTreeMap::new(),
            pending: HashMap::new(),
            policy,
            limits,
            budget: None,
            last: PassInfo::default(),
            exclusive: 0,
        }
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
    }

    pub fn pending_count(&self) -> usize {
        self.queue.len()
    }

    pub fn running_count(&self) -> usize {
        self.running.len()
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

    fn rank(&self, d: &Demand) -> u32 {
        match self.policy {
            Policy::LargestFirst => u32::MAX - d.devices.count,
            _ => 0,
        }
    }

    /// Queues a validated demand.
    pub fn enqueue(&mut self, id: JobId, demand: Demand) {
        let rank = self.rank(&demand);
        let brief = Brief {
            need: Need::of(&demand),
            time_limit_secs: demand.time_limit_secs,
        };
        self.queue.insert((rank, id), brief);
        self.pending.insert(id, (rank, demand));
    }

    /// Removes a pending job; false when it was not pending.
    pub fn dequeue(&mut self, id: JobId) -> bool {
        match self.pending.remove(&id) {
            Some((rank, _)) => self.queue.remove(&(rank, id)).is_some(),
            None => false,
        }
    }

    pub fn demand(&self, id: JobId) -> Option<&Demand> {
        self.pending.get(&id).map(|(_, d)| d)
    }

    /// Records a job that already holds `alloc` (one re-adopted after a restart).
    pub fn adopt(&mut self, id: JobId, alloc: Allocation, deadline: u64) {
        // Adopting a running job again replaces its allocation.
        self.finish(id);
        self.books.charge(&self.machine, id, &alloc);
        if alloc.exclusive {
            self.exclusive += 1;
        }
        self.running.insert(id, Running { alloc, deadline });
    }

    /// Releases a running job's resources.
    pub fn finish(&mut self, id: JobId) -> Option<Allocation> {
        let r = self.running.remove(&id)?;
        self.books.release(&self.machine, id, &r.alloc);
        if r.alloc.exclusive {
            self.exclusive -= 1;
        }
        Some(r.alloc)
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
        self.queue.clear();
        let old = std::mem::take(&mut self.pending);
        for (id, (_, d)) in old {
            self.enqueue(id, d);
        }
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

    /// One scheduling pass at time `now`: the jobs to start and their
    /// allocations, already charged to the books and counted as running.
    pub fn schedule(&mut self, now: u64) -> Vec<(JobId, Allocation)> {
        let mut starts: Vec<(JobId, Allocation)> = Vec::new();
        let mut head: Option<JobId> = None;
        // What jobs after the head may use (backfill policies), and summaries
        // of it and of the free resources for the quick fit test.
        let mut view: Option<(Avail, Room)> = None;
        let machine = &self.machine;
        let mut free_room = Room::of(&self.books.free, machine);
        let mut shadow: Option<u64> = None;
        let mut failed: HashSet<Shape, FastHash> = HashSet::default();
        let max_running = self.limits.max_running as usize;
        // Whether the pass stopped before it could tell which job blocks.
        let mut stopped_early = false;
        for (&(_, id), brief) in &self.queue {
            if self.running.len() >= max_running || free_room.cpus() == 0 {
                stopped_early = true;
                break;
            }
            // Short jobs under strict-backfill may use everything free; other
            // jobs after the head only the view.
            let short = shadow.is_some_and(|s| now.saturating_add(brief.time_limit_secs) <= s);
            let (avail, room) = match &view {
                Some((v, r)) if !short => (v, r),
                _ => (&self.books.free, &free_room),
            };
            if head.is_some() {
                // Nothing can start in an empty view (strict-backfill's short
                // jobs still may use what is free).
                if room.cpus() == 0 && self.policy != Policy::StrictBackfill {
                    break;
                }
                // After the head every failure only means "skip", so a job
                // that certainly does not fit needs no placement.
                if !room.admits(&brief.need) {
                    continue;
                }
            }
            let demand = &self.pending[&id].1;
            let shape = Shape::of(demand, short);
            if failed.contains(&shape) {
                continue;
            }
            match place(demand, machine, avail) {
                Ok(alloc) => {
                    self.books.charge(machine, id, &alloc);
                    free_room = Room::of(&self.books.free, machine);
                    if let Some((v, r)) = view.as_mut() {
                        v.take(machine, &alloc);
                        *r = Room::of(v, machine);
                    }
                    if let Some(b) = self.budget.as_mut() {
                        b.avail.take(machine, &alloc);
                    }
                    if alloc.exclusive {
                        self.exclusive += 1;
                    }
                    let deadline = now.saturating_add(demand.time_limit_secs);
                    self.running.insert(
                        id,
                        Running {
                            alloc: alloc.clone(),
                            deadline,
                        },
                    );
                    starts.push((id, alloc));
                }
                Err(reason) => {
                    // Free resources only shrink during a pass, so this shape
                    // keeps failing, and for the same reason before the head
                    // (the device counts behind a device reason do not change).
                    failed.insert(shape);
                    // A job waiting on devices that are busy outside xlurm,
                    // unknown or disabled holds nothing back: freeing resources
                    // would not help it, so it does not become the head.
                    let devices = matches!(
                        reason,
                        Reason::DevicesBusy | Reason::DevicesUnknown | Reason::DevicesDisabled
                    );
                    if devices || head.is_some() {
                        continue;
                    }
                    head = Some(id);
                    match self.policy {
                        Policy::FifoStrict => break,
                        Policy::LargestFirst => {}
                        Policy::EasyBackfill => {
                            let budget = match &self.budget {
                                Some(b) if b.head == id => b.avail.intersect(&self.books.free),
                                _ => self.books.free.clone(),
                            };
                            self.budget = Some(Budget {
                                head: id,
                                avail: budget.clone(),
                            });
                            let room = Room::of(&budget, machine);
                            view = Some((budget, room));
                        }
                        Policy::StrictBackfill => {
                            let (time, plan) =
                                reserve_for_head(demand, machine, &self.books.free, &self.running);
                            let mut long_view = self.books.free.clone();
                            if let Some(plan) = &plan {
                                long_view.take(machine, plan);
                            }
                            shadow = Some(time);
                            let room = Room::of(&long_view, machine);
                            view = Some((long_view, room));
                        }
                    }
                }
            }
        }
        for (id, _) in &starts {
            self.dequeue(*id);
        }
        // The budget lives while its head waits: a pass that stopped before
        // reaching any blocked job (at the running limit, say) keeps it, so
        // resources freed later are still held for the head.
        let keep = self.policy == Policy::EasyBackfill
            && (head.is_some() || stopped_early)
            && self
                .budget
                .as_ref()
                .is_some_and(|b| self.pending.contains_key(&b.head));
        if !keep {
            self.budget = None;
        }
        self.last = PassInfo { head, shadow };
        starts
    }

    /// Why pending job `id` has not started, judged against the state the last
    /// pass left; `None` when the job is not pending.
    pub fn reason(&self, id: JobId) -> Option<Reason> {
        let demand = self.demand(id)?;
        if self.exclusive_running() {
            return Some(Reason::Exclusive);
        }
        let free = &self.books.free;
        let now_fit = place(demand, &self.machine, free).err();
        if self.running.len() >= self.limits.max_running as usize {
            return Some(Reason::MaxRunning);
        }
        Some(match (self.last.head, now_fit) {
            // Devices busy outside xlurm, unknown or disabled: freeing
            // resources would not help, whatever the job's place in the queue
            // (such a job never becomes the head).
            (
                _,
                Some(r @ (Reason::DevicesBusy | Reason::DevicesUnknown | Reason::DevicesDisabled)),
            ) => r,
            (Some(h), now_fit) if h == id => now_fit.unwrap_or(Reason::Priority),
            // Held behind the head, even where it would fit.
            (Some(_), _) if self.policy == Policy::FifoStrict => Reason::Priority,
            (_, now_fit) => now_fit.unwrap_or(Reason::Priority),
        })
    }

    /// The head's reserved start under strict-backfill, from the last pass.
    pub fn reserved_start(&self) -> Option<(JobId, u64)> {
        Some((self.last.head?, self.last.shadow?))
    }

    /// The first job the last pass could not start (the head), if any.
    pub fn head(&self) -> Option<JobId> {
        self.last.head
    }
}

/// When the blocked `head` can start if running jobs hold their resources
/// until their deadlines, and what it would get then. Without a time at which
/// it fits (devices busy outside xlurm, say), the reservation is "never" and
/// reserves nothing.
fn reserve_for_head(
    head: &Demand,
    machine: &Machine,
    free: &Avail,
    running: &HashMap<JobId, Running>,
) -> (u64, Option<Allocation>) {
    let mut ends: Vec<(u64, JobId)> = running.iter().map(|(id, r)| (r.deadline, *id)).collect();
    ends.sort_unstable();
    let mut sim = free.clone();
    let mut i = 0;
    while i < ends.len() {
        let t = ends[i].0;
        // Release every job ending at `t` before trying.
        while i < ends.len() && ends[i].0 == t {
            sim.give(machine, &running[&ends[i].1].alloc);
            i += 1;
        }
        if !Room::of(&sim, machine).may_fit(head) {
            continue;
        }
        if let Ok(plan) = place(head, machine, &sim) {
            return (t, Some(plan));
        }
    }
    (u64::MAX, None)
}

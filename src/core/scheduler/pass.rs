//! One scheduling pass (which jobs start now, with which resources), the
//! strict-backfill reservation for the head, and the pending reasons derived
//! from the state a pass left.

use super::shape::{FastHash, Shape};
use super::{Budget, PassInfo, RunInfo, Running, Scheduler};
use crate::core::alloc::{place, place_avoiding, Allocation, Room};
use crate::core::books::Avail;
use crate::core::limits::Held;
use crate::core::machine::Machine;
use crate::core::policy::Policy;
use crate::core::reason::Reason;
use crate::core::request::Demand;
use crate::core::JobId;
use std::collections::{HashMap, HashSet};

impl Scheduler {
    /// One scheduling pass at time `now`: the jobs to start and their
    /// allocations, already charged to the books and counted as running.
    pub fn schedule(&mut self, now: u64) -> Vec<(JobId, Allocation)> {
        self.clock = self.clock.max(now);
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
        // Under the backfill policies the head's owner keeps room under their
        // limits for the head: their later jobs start only beside it.
        let mut claim: Option<(u32, Held)> = None;
        for (&(_, id), brief) in &self.queue {
            if self.running.len() >= max_running || free_room.cpus() == 0 {
                stopped_early = true;
                break;
            }
            // Short jobs under strict-backfill may use everything free; other
            // jobs after the head only the view.
            let short =
                shadow.is_some_and(|s| now.saturating_add(brief.time_limit_secs as u64) <= s);
            // A job its owner's limits hold back waits without blocking anyone.
            let owned = &self.users.states[brief.user as usize].room;
            let claimed;
            let mut limits = owned;
            if limits.limited {
                if let Some((_, h)) = claim.filter(|(u, _)| *u == brief.user && !short) {
                    claimed = owned.less(&h);
                    limits = &claimed;
                }
                if !limits.admits(&brief.need) {
                    continue;
                }
            }
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
            let queued = &self.pending[&id];
            let demand = &queued.demand;
            let shape = Shape::of(demand, short);
            if failed.contains(&shape) {
                continue;
            }
            // An `auto` job whose owner reached the limit of some vendor
            // tries the others only; what fails there may fit another owner.
            let barred = match (limits.limited, brief.need.count, brief.need.vendor) {
                (true, n @ 1.., None) if !demand.exclusive => limits.vendors_over(n),
                _ => Vec::new(),
            };
            let placed = if barred.is_empty() {
                place(demand, machine, avail)
            } else {
                match place_avoiding(demand, machine, avail, &barred) {
                    Some(r) => r,
                    None => continue,
                }
            };
            match placed {
                Ok(alloc) => {
                    let held = Held::of_alloc(&alloc, machine);
                    self.users.take(brief.user, &held, machine);
                    let rate = self.weights.rate(&held);
                    self.meters.start(id, queued.sub.owner.uid, rate, now);
                    self.run_info.insert(
                        id,
                        RunInfo {
                            user: brief.user,
                            sub: queued.sub,
                            held,
                            started: Some(now),
                        },
                    );
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
                    if barred.is_empty() {
                        failed.insert(shape);
                    }
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
                    if limits.limited && self.policy.backfills() {
                        claim = Some((brief.user, Held::of_need(&brief.need, machine)));
                    }
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
        if let Some(hit) = self.limit_hit(id) {
            return Some(Reason::UserLimit(hit));
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

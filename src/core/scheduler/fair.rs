//! The scheduler's owners: submissions with an owner, nice and time, the
//! fair-share usage of running jobs, the priority order of the queue, and
//! per-user limits.

use super::{Brief, QueueKey, Queued, RunInfo, Running, Scheduler};
use crate::core::alloc::Allocation;
use crate::core::device::Vendor;
use crate::core::fairshare::{factor, ShareRow, UsageLedger, UsageWeights, FROM_NEXT};
use crate::core::limits::{Held, LimitError, LimitHit, Resource, Uid, UserLimits};
use crate::core::policy::Policy;
use crate::core::priority::{
    priority_at, sort_key, Owner, Priority, PriorityConfig, PriorityMode, Submission,
};
use crate::core::request::Demand;
use crate::core::JobId;
use std::collections::BTreeMap;

/// What a user holds and has pending, for `xlurm limits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserUse {
    pub held: Held,
    pub pending: u32,
}

impl Scheduler {
    /// Queues a validated demand with its owner, nice value and submission
    /// time (the daemon's submission path). Costs O(log n): the key uses the
    /// owner's fair-share factor as of the last [`Scheduler::reprioritize`].
    pub fn enqueue_for(&mut self, id: JobId, demand: Demand, sub: Submission) {
        if self.pending.contains_key(&id) {
            self.dequeue(id);
        }
        self.clock = self.clock.max(sub.submitted_at);
        let user = self.user_index(sub.owner);
        self.users.states[user as usize].pending += 1;
        let key = self.key_of(&demand, &sub, user, id);
        self.queue.insert(key, Brief::of(&demand, user));
        self.pending.insert(
            id,
            Queued {
                key,
                demand,
                sub,
                user,
            },
        );
    }

    /// Records a job that already holds `alloc` (one re-adopted after a
    /// restart), with its submission and the time it started: its usage is
    /// charged from the later of that and the restored ledger's time
    /// (`None`: from the next time the scheduler is given).
    pub fn adopt_for(
        &mut self,
        id: JobId,
        alloc: Allocation,
        deadline: u64,
        sub: Submission,
        started_at: Option<u64>,
    ) {
        // Adopting a running job again replaces its allocation; its meter
        // restarts from the ledger's time, where the old one stood.
        let _ = self.meters.cancel(id);
        self.finish(id);
        self.books.charge(&self.machine, id, &alloc);
        if alloc.exclusive {
            self.exclusive += 1;
        }
        let user = self.user_index(sub.owner);
        let held = Held::of_alloc(&alloc, &self.machine);
        self.users.take(user, &held, &self.machine);
        let rate = self.weights.rate(&held);
        let since = started_at.unwrap_or(FROM_NEXT);
        self.meters.start(id, sub.owner.uid, rate, since);
        self.run_info.insert(
            id,
            RunInfo {
                user,
                sub,
                held,
                started: started_at,
            },
        );
        self.running.insert(id, Running { alloc, deadline });
    }

    /// Releases a running job's resources at `now`, charging its usage up to
    /// then (the daemon's end path).
    pub fn finish_at(&mut self, id: JobId, now: u64) -> Option<Allocation> {
        let r = self.running.remove(&id)?;
        self.books.release(&self.machine, id, &r.alloc);
        if r.alloc.exclusive {
            self.exclusive -= 1;
        }
        if let Some(info) = self.run_info.remove(&id) {
            self.users.give(info.user, &info.held, &self.machine);
        }
        self.clock = self.clock.max(now);
        self.meters.stop(id, now);
        Some(r.alloc)
    }

    /// Undoes a start the daemon could not carry out: releases job `id`
    /// without charging it and queues `demand` again with its original
    /// submission (owner, nice, time). False when `id` does not run.
    pub fn put_back(&mut self, id: JobId, demand: Demand) -> bool {
        let Some(info) = self.run_info.get(&id).cloned() else {
            return false;
        };
        let _ = self.meters.cancel(id);
        self.finish(id);
        self.enqueue_for(id, demand, info.sub);
        true
    }

    /// The owner and submission of a pending or running job.
    pub fn submission(&self, id: JobId) -> Option<Submission> {
        match self.pending.get(&id) {
            Some(q) => Some(q.sub),
            None => self.run_info.get(&id).map(|i| i.sub),
        }
    }

    /// Pending jobs in the order a pass considers them.
    pub fn queue_order(&self) -> impl Iterator<Item = JobId> + '_ {
        self.queue.keys().map(|k| k.1)
    }

    pub fn priority_config(&self) -> &PriorityConfig {
        &self.prio
    }

    /// The weights usage is charged with.
    pub fn usage_weights(&self) -> UsageWeights {
        self.weights
    }

    /// Changes the priority settings live (mode, weights, half-life...); the
    /// queue is re-keyed at once. New usage weights apply to jobs started
    /// from now on.
    pub fn set_priority(&mut self, prio: PriorityConfig) {
        self.prio = prio.clamped();
        self.weights = self
            .prio
            .usage_weights
            .unwrap_or_else(|| UsageWeights::for_machine(&self.machine));
        self.meters.ledger.half_life_secs = self.prio.half_life_secs;
        self.refactor();
        self.rekey(true);
    }

    /// Charges running jobs up to `now`, recomputes every user's fair-share
    /// factor and re-keys the pending jobs whose key changed (or rebuilds the
    /// order when most did). The daemon calls it every few minutes (Slurm's
    /// `PriorityCalcPeriod` is 5), after restoring the ledger, and may after
    /// a job ends; a pass does not call it, so a pass stays O(n).
    pub fn reprioritize(&mut self, now: u64) {
        self.clock = self.clock.max(now);
        self.meters.advance(now);
        let users = &self.users;
        self.meters.prune(|uid| {
            users
                .get(uid)
                .is_some_and(|i| users.states[i as usize].pending > 0)
        });
        self.refactor();
        self.rekey(false);
    }

    /// Every user's fair-share factor from the ledger as it stands.
    fn refactor(&mut self) {
        let ledger = &self.meters.ledger;
        let active = |uid: Uid, jobs: bool| jobs || ledger.usage(uid) > 0.0;
        let shares: Vec<u32> = self
            .users
            .states
            .iter()
            .map(|s| self.share_of(s.uid))
            .collect();
        let mut total_shares: u64 = 0;
        for (s, share) in self.users.states.iter().zip(&shares) {
            if active(s.uid, s.pending > 0 || s.held.jobs > 0) {
                total_shares += *share as u64;
            }
        }
        for uid in ledger.users.keys() {
            if self.users.get(*uid).is_none() {
                total_shares += self.share_of(*uid) as u64;
            }
        }
        let total = ledger.total();
        for (s, share) in self.users.states.iter_mut().zip(shares) {
            let f = factor(ledger.usage(s.uid), total, share, total_shares);
            s.factor = f;
            s.fair_points = self.prio.fair_points(f);
        }
        self.totals = (total, total_shares);
    }

    /// `uid`'s fair-share shares: the admin's setting for the user, their
    /// group (the primary group of their latest submission) or everyone,
    /// else the default.
    fn share_of(&self, uid: Uid) -> u32 {
        let gid = self
            .users
            .get(uid)
            .map(|i| self.users.states[i as usize].gid);
        self.user_limits
            .shares(uid, gid)
            .unwrap_or(self.prio.default_share)
    }

    /// A job's queue key under the current policy and priority settings.
    pub(super) fn key_of(&self, d: &Demand, sub: &Submission, user: u32, id: JobId) -> QueueKey {
        let points = self.users.states[user as usize].fair_points;
        queue_key(self.policy, &self.prio, points, d, sub, id, self.clock)
    }

    /// Recomputes every pending job's key; moves those that changed, or
    /// rebuilds the whole order (one sort) when `all` or when more than an
    /// eighth did.
    pub(super) fn rekey(&mut self, all: bool) {
        let mut moved: Vec<(QueueKey, QueueKey)> = Vec::new();
        let users = &self.users.states;
        for (id, q) in self.pending.iter_mut() {
            let points = users[q.user as usize].fair_points;
            let key = queue_key(
                self.policy,
                &self.prio,
                points,
                &q.demand,
                &q.sub,
                *id,
                self.clock,
            );
            if key != q.key {
                moved.push((q.key, key));
                q.key = key;
            }
        }
        if all || moved.len() > self.pending.len() / 8 {
            let mut entries: Vec<(QueueKey, Brief)> = self
                .pending
                .values()
                .map(|q| (q.key, Brief::of(&q.demand, q.user)))
                .collect();
            entries.sort_unstable_by_key(|(k, _)| *k);
            // Already sorted: the map is built in one linear pass.
            self.queue = entries.into_iter().collect();
        } else {
            for (old, new) in moved {
                if let Some(b) = self.queue.remove(&old) {
                    self.queue.insert(new, b);
                }
            }
        }
    }

    /// The index of `owner`'s user, added when new.
    fn user_index(&mut self, owner: Owner) -> u32 {
        let share = self
            .user_limits
            .shares(owner.uid, Some(owner.gid))
            .unwrap_or(self.prio.default_share);
        let (total, shares) = self.totals;
        let usage = self.meters.ledger.usage(owner.uid);
        let shares = if usage > 0.0 {
            shares
        } else {
            shares + share as u64
        };
        let f = factor(usage, total, share, shares);
        let fresh = (f, self.prio.fair_points(f));
        self.users.entry(
            owner.uid,
            owner.gid,
            &self.user_limits,
            &self.machine,
            fresh,
        )
    }

    /// A pending job's priority at `now` and its parts.
    pub fn priority(&self, id: JobId, now: u64) -> Option<Priority> {
        let q = self.pending.get(&id)?;
        let f = self.users.states[q.user as usize].factor;
        Some(priority_at(&self.prio, f, &q.sub, now))
    }

    /// The usage ledger as of the last charge: what the daemon persists
    /// (after [`Scheduler::reprioritize`], so that it is recent).
    pub fn usage(&self) -> &UsageLedger {
        &self.meters.ledger
    }

    /// Replaces the ledger with a saved one (at daemon start, before or
    /// after re-adopting running jobs) and recomputes the factors.
    pub fn restore_usage(&mut self, mut ledger: UsageLedger) {
        ledger.half_life_secs = self.prio.half_life_secs;
        self.meters.restore(ledger);
        self.refactor();
        self.rekey(false);
    }

    /// `xlurm share` at `now` (Slurm's `sshare`): every user with usage or
    /// jobs, by UID, with running jobs charged up to `now`.
    pub fn share_report(&self, now: u64) -> Vec<ShareRow> {
        let mut usage: BTreeMap<Uid, f64> = BTreeMap::new();
        let ledger = &self.meters.ledger;
        let d = ledger.decay(now.saturating_sub(ledger.at));
        for (uid, u) in &ledger.users {
            usage.insert(*uid, u * d);
        }
        for id in self.running.keys() {
            if let Some(m) = self.meters.meter(*id) {
                let since = if m.since == FROM_NEXT { now } else { m.since };
                let from = since.max(ledger.at).min(now);
                *usage.entry(m.uid).or_insert(0.0) += m.rate * ledger.integral(now - from);
            }
        }
        for s in &self.users.states {
            if s.pending > 0 || s.held.jobs > 0 {
                usage.entry(s.uid).or_insert(0.0);
            }
        }
        let share = |uid: &Uid| self.share_of(*uid);
        let total: f64 = usage.values().sum();
        let total_shares: u64 = usage.keys().map(|u| share(u) as u64).sum();
        usage
            .iter()
            .map(|(uid, u)| ShareRow {
                uid: *uid,
                raw_shares: share(uid),
                norm_shares: share(uid) as f64 / total_shares.max(1) as f64,
                raw_usage: *u,
                effective_usage: if total > 0.0 { u / total } else { 0.0 },
                fair_share: factor(*u, total, share(uid), total_shares),
            })
            .collect()
    }

    pub fn user_limits(&self) -> &UserLimits {
        &self.user_limits
    }

    /// Sets the admin's per-user limits and shares live; limits apply from
    /// the next pass (running jobs above a lowered limit are not stopped),
    /// shares re-order the queue now.
    pub fn set_user_limits(&mut self, limits: UserLimits) {
        self.user_limits = limits;
        self.users.relimit(&self.user_limits, &self.machine);
        self.refactor();
        self.rekey(false);
    }

    /// What `uid` holds and has pending now.
    pub fn user_use(&self, uid: Uid) -> Option<UserUse> {
        let s = &self.users.states[self.users.get(uid)? as usize];
        Some(UserUse {
            held: s.held,
            pending: s.pending,
        })
    }

    /// The limits that hold for `owner` and how much of each is in use.
    pub fn standing(&self, owner: Owner) -> Vec<crate::core::limits::Standing> {
        let (held, pending) = self
            .user_use(owner.uid)
            .map_or((Held::default(), 0), |u| (u.held, u.pending));
        let gid = self
            .users
            .get(owner.uid)
            .map_or(owner.gid, |i| self.users.states[i as usize].gid);
        self.user_limits
            .resolve(owner.uid, gid)
            .standing(&held, pending)
    }

    /// The submission check against `owner`'s limits: refuses `demand` if it
    /// alone exceeds one (naming it) or if `owner` has as many pending jobs
    /// as allowed. Pure: nothing is queued.
    pub fn check_submit(&self, owner: Owner, demand: &Demand) -> Result<(), LimitError> {
        let limits = self.user_limits.resolve(owner.uid, owner.gid);
        let pending = self
            .users
            .get(owner.uid)
            .map_or(0, |i| self.users.states[i as usize].pending);
        limits.alone(&Held::of_demand(demand, &self.machine))?;
        let count = demand.devices.count;
        if count > 0 && demand.devices.vendor.is_none() && !demand.exclusive {
            // An `auto` job: some vendor it could use must allow `count`.
            let over = |v: Vendor| limits.per_vendor[v.index()].filter(|(l, _)| *l < count);
            let cands: Vec<Vendor> = self.auto_vendors(count);
            if let (Some(first), true) = (cands.first(), cands.iter().all(|v| over(*v).is_some())) {
                if let Some((limit, scope)) = over(*first) {
                    return Err(LimitError::NeverFits {
                        what: Resource::VendorGpus(*first),
                        asked: count as u64,
                        limit: limit as u64,
                        scope,
                    });
                }
            }
        }
        limits.one_more(pending)
    }

    /// The vendors with at least `count` devices.
    fn auto_vendors(&self, count: u32) -> Vec<Vendor> {
        Vendor::ALL
            .into_iter()
            .filter(|v| self.machine.vendor_count(*v) >= count as usize)
            .collect()
    }

    /// The limit pending job `id` would take its owner past now, if any.
    pub(super) fn limit_hit(&self, id: JobId) -> Option<LimitHit> {
        let q = self.pending.get(&id)?;
        let s = &self.users.states[q.user as usize];
        if !s.room.limited {
            return None;
        }
        let adding = Held::of_demand(&q.demand, &self.machine);
        if let Some(hit) = s.limits.hit(&s.held, &adding) {
            return Some(hit);
        }
        let d = &q.demand.devices;
        if d.count == 0 || d.vendor.is_some() || q.demand.exclusive {
            return None;
        }
        // An `auto` job held back when every vendor it could use is at its limit.
        let cands = self.auto_vendors(d.count);
        let barred = s.room.vendors_over(d.count);
        if cands.is_empty() || !cands.iter().all(|v| barred.contains(v)) {
            return None;
        }
        let v = cands[0];
        let (limit, _) = s.limits.per_vendor[v.index()]?;
        Some(LimitHit {
            what: Resource::VendorGpus(v),
            in_use: s.held.per_vendor[v.index()] as u64,
            limit: limit as u64,
            need: d.count as u64,
        })
    }
}

/// The queue key of a job, see [`QueueKey`]: the rank in the top 8 bits
/// (under largest-first `255 - devices`, at most 255 devices told apart),
/// below it the priority key, biased and inverted so that the highest comes
/// first, clamped to 56 bits (keys stay within about ±2^52, see
/// [`sort_key`]).
fn queue_key(
    policy: Policy,
    prio: &PriorityConfig,
    fair_points: i64,
    d: &Demand,
    sub: &Submission,
    id: JobId,
    now: u64,
) -> QueueKey {
    const HALF: i64 = 1 << 55;
    let rank = match policy {
        Policy::LargestFirst => 255 - d.devices.count.min(255) as u64,
        _ => 0,
    };
    let key = match prio.mode {
        PriorityMode::Fifo => 0,
        PriorityMode::Fair => sort_key(prio, fair_points, sub, now),
    };
    let biased = (key.clamp(-HALF, HALF - 1) + HALF) as u64;
    (rank << 56 | ((1u64 << 56) - 1 - biased), id)
}

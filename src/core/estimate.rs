//! When a pending job will start: a plan of the queue over time.
//!
//! The plan assumes every running job holds its resources until its
//! deadline (its time limit), as strict-backfill's reservation does, and
//! walks the pending jobs in queue order, giving each the earliest time at
//! which it fits for its whole time limit beside the running jobs and the
//! jobs planned before it, within its owner's limits and the running limit
//! (a conservative backfill plan). Under `fifo-strict` no job is planned
//! before one ahead of it that waits for resources. The estimate is thus a
//! bound as long as jobs end by their limits, no job of higher priority
//! arrives and the settings stay; jobs usually end earlier.
//!
//! Some starts cannot be bounded, and say why ([`Unknown`]): a running job
//! without a time limit holds what the job needs; its devices are busy
//! outside xlurm, unknown or disabled (no job's end frees them); its owner's
//! limits (lowered since) can never let it run; under fifo-strict it waits
//! behind such a job; or more than [`DEPTH`] jobs are ahead of it.
//!
//! The plan is conservative: every planned job that overlaps a job's run
//! counts in full for the whole run, even one that ends early in it. Under
//! fifo-strict, where every job ahead starts no later, that is exact.
//!
//! Cost: the plan keeps the free resources after each running job's end
//! (a step profile that only grows) and the planned jobs; a job is tried at
//! each time something ends, from the first at which the free resources
//! alone could hold it. A sweep keeps the totals that the planned jobs
//! overlapping the run hold, so a time that cannot work costs a few
//! comparisons; a placement is tried only where the totals leave room. The
//! plan stops after [`DEPTH`] jobs.

use super::alloc::{place, Allocation, Room};
use super::books::Avail;
use super::device::Vendor;
use super::limits::{Held, LimitHit, Resolved};
use super::machine::Machine;
use super::policy::Policy;
use super::reason::Reason;
use super::request::Demand;
use super::JobId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// How many pending jobs, in queue order, get an estimate.
pub const DEPTH: usize = 500;

/// A pending job's estimated start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "start", rename_all = "snake_case")]
pub enum Estimate {
    /// At the latest at this time (seconds since the epoch), under the
    /// plan's assumptions; `now` when it would start at once.
    At {
        time: u64,
    },
    Unknown(Unknown),
}

impl Estimate {
    /// The start time, when there is one.
    pub fn time(&self) -> Option<u64> {
        match self {
            Estimate::At { time } => Some(*time),
            Estimate::Unknown(_) => None,
        }
    }
}

/// Why a start cannot be bounded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum Unknown {
    /// A running job without a time limit holds what it needs.
    NoTimeLimit { job: JobId },
    /// Its devices are busy outside xlurm, unknown or disabled.
    Devices { reason: Reason },
    /// Its owner's limits never let it run.
    UserLimit { hit: LimitHit },
    /// Under fifo-strict it waits behind a job whose start is unknown.
    Behind { job: JobId },
    /// More jobs are ahead of it than the plan looks at.
    TooDeep { depth: usize },
}

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unknown::NoTimeLimit { job } => {
                write!(f, "running job {job} has no time limit")
            }
            Unknown::Devices { reason } => write!(f, "{reason}"),
            Unknown::UserLimit { hit } => write!(f, "beyond the user's limit ({hit})"),
            Unknown::Behind { job } => write!(f, "waits behind job {job}, whose start is unknown"),
            Unknown::TooDeep { depth } => write!(f, "more than {depth} jobs ahead"),
        }
    }
}

impl fmt::Display for Estimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Estimate::At { time } => write!(f, "{time}"),
            Estimate::Unknown(u) => write!(f, "unknown: {u}"),
        }
    }
}

/// A running job as the plan sees it.
pub struct RunningJob<'a> {
    pub id: JobId,
    pub alloc: &'a Allocation,
    /// `u64::MAX`: no time limit.
    pub deadline: u64,
    /// The owner's index, for their limits.
    pub user: u32,
    pub held: Held,
}

/// A job placed in the plan.
struct Planned {
    start: u64,
    end: u64,
    alloc: Allocation,
    totals: Totals,
}

/// Free (or held) CPUs, bytes and usable devices per vendor, in total: a
/// quick necessary test before a placement.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    cpus: u32,
    mem: u64,
    devices: [u32; Vendor::ALL.len()],
}

impl Totals {
    fn free(avail: &Avail, machine: &Machine) -> Totals {
        let mut t = Totals {
            cpus: avail.cpus.len(),
            mem: avail.mem.iter().sum(),
            ..Totals::default()
        };
        for (d, free) in machine.devices.iter().zip(&avail.devices) {
            if *free && d.usable() {
                t.devices[d.vendor.index()] += 1;
            }
        }
        t
    }

    fn held(alloc: &Allocation) -> Totals {
        let mut t = Totals {
            cpus: alloc.cpus.len(),
            mem: alloc.mem_charge.iter().map(|(_, b)| b).sum(),
            ..Totals::default()
        };
        for d in &alloc.devices {
            t.devices[d.vendor.index()] += 1;
        }
        t
    }

    fn add(&mut self, o: &Totals) {
        self.cpus += o.cpus;
        self.mem += o.mem;
        for (a, b) in self.devices.iter_mut().zip(&o.devices) {
            *a += b;
        }
    }

    /// Removes what [`Totals::add`] added.
    fn remove(&mut self, o: &Totals) {
        self.cpus -= o.cpus;
        self.mem -= o.mem;
        for (a, b) in self.devices.iter_mut().zip(&o.devices) {
            *a -= b;
        }
    }

    fn take(&mut self, o: &Totals) {
        self.cpus = self.cpus.saturating_sub(o.cpus);
        self.mem = self.mem.saturating_sub(o.mem);
        for (a, b) in self.devices.iter_mut().zip(&o.devices) {
            *a = a.saturating_sub(*b);
        }
    }

    fn may_fit(&self, d: &Demand) -> bool {
        if d.exclusive {
            return true;
        }
        let c = d.devices.count;
        self.cpus >= d.cpus
            && self.mem >= d.mem_bytes
            && (c == 0
                || match d.devices.vendor {
                    Some(v) => self.devices[v.index()] >= c,
                    None => self.devices.iter().any(|n| *n >= c),
                })
    }
}

/// One user's jobs over time, kept only for users with limits.
#[derive(Default)]
struct Timeline {
    spans: Vec<(u64, u64, Held)>,
}

impl Timeline {
    /// Whether `adding` stays within `limits` over `[t, end)`: checked at `t`
    /// and wherever another of the user's jobs starts in that window.
    fn admits(&self, limits: &Resolved, adding: &Held, t: u64, end: u64) -> bool {
        let probes = std::iter::once(t).chain(
            self.spans
                .iter()
                .map(|s| s.0)
                .filter(|s| *s > t && *s < end),
        );
        for at in probes {
            let mut sum = Held::default();
            for (s, e, h) in &self.spans {
                if *s <= at && at < *e {
                    sum.add(h);
                }
            }
            if limits.hit(&sum, adding).is_some() {
                return false;
            }
        }
        true
    }
}

/// The plan: the step profile of free resources and the planned jobs.
pub struct Planner<'a> {
    machine: &'a Machine,
    policy: Policy,
    max_running: usize,
    /// Times at which running jobs end (the first is `now`), the free
    /// resources from then on, a summary of them, and the jobs still running.
    times: Vec<u64>,
    base: Vec<Avail>,
    rooms: Vec<Room>,
    totals: Vec<Totals>,
    counts: Vec<usize>,
    /// Running jobs without a time limit, in ID order.
    endless: Vec<(JobId, Allocation)>,
    planned: Vec<Planned>,
    /// Indices into `planned` by start and by end.
    by_start: Vec<usize>,
    by_end: Vec<usize>,
    timelines: HashMap<u32, Timeline>,
    /// fifo-strict: no job is planned before this.
    floor: u64,
    /// fifo-strict: the first job ahead whose start is unknown.
    blocked: Option<JobId>,
    seen: usize,
}

impl<'a> Planner<'a> {
    /// A plan at `now` with `free` resources and `running` jobs; `limited`
    /// says which users have limits.
    pub fn new(
        machine: &'a Machine,
        free: &Avail,
        now: u64,
        policy: Policy,
        max_running: usize,
        mut running: Vec<RunningJob<'_>>,
        limited: impl Fn(u32) -> bool,
    ) -> Planner<'a> {
        running.sort_by_key(|r| (r.deadline, r.id));
        let mut p = Planner {
            machine,
            policy,
            max_running,
            times: vec![now],
            base: vec![free.clone()],
            rooms: Vec::new(),
            totals: Vec::new(),
            counts: vec![running.len()],
            endless: Vec::new(),
            planned: Vec::new(),
            by_start: Vec::new(),
            by_end: Vec::new(),
            timelines: HashMap::new(),
            floor: now,
            blocked: None,
            seen: 0,
        };
        for r in &running {
            if limited(r.user) {
                let spans = &mut p.timelines.entry(r.user).or_default().spans;
                spans.push((now, r.deadline, r.held));
            }
            if r.deadline == u64::MAX {
                p.endless.push((r.id, r.alloc.clone()));
                continue;
            }
            // An overdue job is taken to end at once.
            let t = r.deadline.max(now + 1);
            if p.times.last() != Some(&t) {
                let (avail, count) = (p.base.last().cloned(), p.counts.last().copied());
                p.times.push(t);
                p.base.push(avail.unwrap_or_else(|| Avail::none(machine)));
                p.counts.push(count.unwrap_or(0));
            }
            if let (Some(a), Some(c)) = (p.base.last_mut(), p.counts.last_mut()) {
                a.give(machine, r.alloc);
                *c -= 1;
            }
        }
        p.rooms = p.base.iter().map(|a| Room::of(a, machine)).collect();
        p.totals = p.base.iter().map(|a| Totals::free(a, machine)).collect();
        p.endless.sort_by_key(|(id, _)| *id);
        p
    }

    /// Plans the next job in queue order and returns its estimate.
    pub fn plan(&mut self, id: JobId, demand: &Demand, user: u32, limits: &Resolved) -> Estimate {
        self.seen += 1;
        if self.seen > DEPTH {
            return Estimate::Unknown(Unknown::TooDeep { depth: DEPTH });
        }
        let adding = Held::of_demand(demand, self.machine);
        if let Some(hit) = limits.hit(&Held::default(), &adding) {
            return Estimate::Unknown(Unknown::UserLimit { hit });
        }
        if let Err(reason) = place(demand, self.machine, &Avail::all(self.machine)) {
            return Estimate::Unknown(Unknown::Devices { reason });
        }
        if let Some(job) = self.blocked {
            return Estimate::Unknown(Unknown::Behind { job });
        }
        match self.earliest(demand, user, limits, &adding) {
            Some((start, alloc, by_limit)) => {
                let end = start.saturating_add(demand.time_limit_secs);
                if let Some(tl) = self.timelines.get_mut(&user) {
                    tl.spans.push((start, end, adding));
                } else if limits.is_limited() {
                    let spans = vec![(start, end, adding)];
                    self.timelines.insert(user, Timeline { spans });
                }
                if self.policy == Policy::FifoStrict && !by_limit {
                    self.floor = self.floor.max(start);
                }
                let totals = Totals::held(&alloc);
                let k = self.planned.len();
                let at = self
                    .by_start
                    .partition_point(|j| self.planned[*j].start <= start);
                self.by_start.insert(at, k);
                let at = self.by_end.partition_point(|j| self.planned[*j].end <= end);
                self.by_end.insert(at, k);
                self.planned.push(Planned {
                    start,
                    end,
                    alloc,
                    totals,
                });
                Estimate::At { time: start }
            }
            None => {
                let job = self.endless.first().map_or(id, |(j, _)| *j);
                if self.policy == Policy::FifoStrict {
                    self.blocked = Some(id);
                }
                Estimate::Unknown(Unknown::NoTimeLimit { job })
            }
        }
    }

    /// The earliest start of `demand` in the plan, its allocation then, and
    /// whether its owner's limits (not resources) made it that late.
    fn earliest(
        &self,
        demand: &Demand,
        user: u32,
        limits: &Resolved,
        adding: &Held,
    ) -> Option<(u64, Allocation, bool)> {
        // The free resources only grow along the profile: nothing before the
        // first point that could hold the job alone is worth trying.
        let first = self.rooms.partition_point(|r| !r.may_fit(demand));
        let lo = self.floor.max(*self.times.get(first)?);
        let mut cands: Vec<u64> = self.times[first..]
            .iter()
            .copied()
            .chain(self.planned.iter().map(|p| p.end))
            .chain(std::iter::once(lo))
            .filter(|t| *t >= lo && *t != u64::MAX)
            .collect();
        cands.sort_unstable();
        cands.dedup();
        let timeline = self.timelines.get(&user);
        let mut by_limit = false;
        // A sweep over the candidates keeps what the planned jobs overlapping
        // the run hold: those that start before it ends, less those that end
        // before it starts.
        let (mut si, mut ei) = (0, 0);
        let (mut held, mut n) = (Totals::default(), 0usize);
        for t in cands {
            let i = self.times.partition_point(|x| *x <= t) - 1;
            let end = t.saturating_add(demand.time_limit_secs);
            while let Some(p) = self.by_start.get(si).map(|k| &self.planned[*k]) {
                if p.start >= end {
                    break;
                }
                held.add(&p.totals);
                (si, n) = (si + 1, n + 1);
            }
            while let Some(p) = self.by_end.get(ei).map(|k| &self.planned[*k]) {
                if p.end > t {
                    break;
                }
                held.remove(&p.totals);
                (ei, n) = (ei + 1, n - 1);
            }
            let mut left = self.totals[i];
            left.take(&held);
            if self.counts[i] + n >= self.max_running || !left.may_fit(demand) {
                continue;
            }
            let overlap = || self.planned.iter().filter(|p| p.start < end && p.end > t);
            let mut view = self.base[i].clone();
            for p in overlap() {
                view.take(self.machine, &p.alloc);
            }
            let Ok(alloc) = place(demand, self.machine, &view) else {
                continue;
            };
            if let Some(tl) = timeline {
                if !tl.admits(limits, adding, t, end) {
                    by_limit = true;
                    continue;
                }
            }
            return Some((t, alloc, by_limit));
        }
        None
    }
}

//! Per-user limits: what one user's running jobs may hold at once, and how
//! many jobs they may have pending.
//!
//! The admin sets limits for a user, for the members of a Unix group, and a
//! default for everyone ([`UserLimits`]). Each is a limit *per user*: a group
//! limit of 4 GPUs lets every member hold 4, not the group together. Each
//! resource is resolved on its own, the most specific setting winning: the
//! user's, else their group's (the primary group of their latest
//! submission), else the default; a resource set nowhere is unlimited.
//!
//! Limited resources: running jobs, CPUs, memory, accelerators of any vendor
//! ("GPUs"), accelerators of one vendor, and pending jobs. A running job
//! counts what it holds: its CPUs, the bytes charged to its nodes and its
//! devices; an exclusive job holds the whole machine.
//!
//! Two checks use the limits. At submission, [`Resolved::admit`] refuses a
//! request that could never run within its owner's limits (or one pending job
//! too many) with a [`LimitError`] naming the limit. At every pass, a job
//! that would take its owner past a limit now is skipped and waits with
//! reason `UserLimit (GPUs: 4 of 4 in use)` ([`LimitHit`]); it is never the
//! head a policy protects, so it holds nobody else back.

use super::alloc::{Allocation, Need};
use super::device::Vendor;
use super::machine::Machine;
use super::request::{format_bytes, Demand};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A Unix user ID.
pub type Uid = u32;
/// A Unix group ID.
pub type Gid = u32;

const VENDORS: usize = Vendor::ALL.len();

/// One setting of limits: every field left `None` is not limited here (and
/// falls through to the group's or the default setting).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UserLimit {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_jobs: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_jobs: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
    /// Accelerators of any vendor, together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// Accelerators of one vendor.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus_per_vendor: BTreeMap<Vendor, u32>,
    /// Not a limit: the user's fair-share shares (`core::fairshare`), set
    /// beside the limits so that one admin file says what each user gets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shares: Option<u32>,
}

/// The admin's limits: per user, per Unix group (for each member), and the
/// default for every user.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UserLimits {
    pub default: UserLimit,
    pub groups: BTreeMap<Gid, UserLimit>,
    pub users: BTreeMap<Uid, UserLimit>,
}

/// Where a limit was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scope", content = "id", rename_all = "snake_case")]
pub enum Scope {
    User(Uid),
    Group(Gid),
    Default,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::User(u) => write!(f, "the limit set for user {u}"),
            Scope::Group(g) => write!(f, "the limit set for group {g}"),
            Scope::Default => f.write_str("the default limit per user"),
        }
    }
}

/// A limited resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "resource", content = "vendor", rename_all = "snake_case")]
pub enum Resource {
    RunningJobs,
    PendingJobs,
    Cpus,
    Memory,
    /// Accelerators of any vendor.
    Gpus,
    /// Accelerators of one vendor.
    VendorGpus(Vendor),
}

impl Resource {
    fn label(self) -> String {
        match self {
            Resource::RunningJobs => "running jobs".into(),
            Resource::PendingJobs => "pending jobs".into(),
            Resource::Cpus => "CPUs".into(),
            Resource::Memory => "memory".into(),
            Resource::Gpus => "GPUs".into(),
            Resource::VendorGpus(v) => format!("{v} GPUs"),
        }
    }

    fn show(self, n: u64) -> String {
        match self {
            Resource::Memory => format_bytes(n),
            _ => n.to_string(),
        }
    }
}

/// What a user's running jobs hold, or what one job would add.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub jobs: u32,
    pub cpus: u32,
    pub mem: u64,
    /// Devices of all vendors.
    pub devices: u32,
    pub per_vendor: [u32; VENDORS],
}

impl Held {
    /// What a running job with `alloc` holds.
    pub fn of_alloc(alloc: &Allocation, machine: &Machine) -> Held {
        let mut h = Held {
            jobs: 1,
            cpus: alloc.cpus.len(),
            mem: alloc.mem_charge.iter().map(|(_, b)| b).sum(),
            ..Held::default()
        };
        for slot in alloc.held_slots(machine) {
            h.devices += 1;
            h.per_vendor[machine.devices[slot].vendor.index()] += 1;
        }
        h
    }

    /// What `demand` will hold once it runs, as far as is known before it is
    /// placed: an `auto` job's vendor is not (its devices count only in
    /// [`Held::devices`]).
    pub fn of_demand(demand: &Demand, machine: &Machine) -> Held {
        Held::of_need(&Need::of(demand), machine)
    }

    /// [`Held::of_demand`] from the compact record a pass reads.
    pub fn of_need(need: &Need, machine: &Machine) -> Held {
        if need.exclusive {
            let mut h = Held {
                jobs: 1,
                cpus: machine.topology.total_cpus(),
                mem: machine.topology.total_mem(),
                devices: machine.devices.len() as u32,
                ..Held::default()
            };
            for d in &machine.devices {
                h.per_vendor[d.vendor.index()] += 1;
            }
            return h;
        }
        let mut h = Held {
            jobs: 1,
            cpus: need.cpus,
            mem: need.mem,
            devices: need.count,
            ..Held::default()
        };
        if let Some(v) = need.vendor {
            h.per_vendor[v.index()] = need.count;
        }
        h
    }

    pub fn add(&mut self, o: &Held) {
        self.jobs += o.jobs;
        self.cpus += o.cpus;
        self.mem += o.mem;
        self.devices += o.devices;
        for (a, b) in self.per_vendor.iter_mut().zip(&o.per_vendor) {
            *a += b;
        }
    }

    pub fn sub(&mut self, o: &Held) {
        self.jobs = self.jobs.saturating_sub(o.jobs);
        self.cpus = self.cpus.saturating_sub(o.cpus);
        self.mem = self.mem.saturating_sub(o.mem);
        self.devices = self.devices.saturating_sub(o.devices);
        for (a, b) in self.per_vendor.iter_mut().zip(&o.per_vendor) {
            *a = a.saturating_sub(*b);
        }
    }

    fn get(&self, r: Resource) -> u64 {
        match r {
            Resource::RunningJobs => self.jobs as u64,
            Resource::PendingJobs => 0,
            Resource::Cpus => self.cpus as u64,
            Resource::Memory => self.mem,
            Resource::Gpus => self.devices as u64,
            Resource::VendorGpus(v) => self.per_vendor[v.index()] as u64,
        }
    }
}

/// Why a job waits for its owner's limit: `UserLimit (GPUs: 4 of 4 in use)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitHit {
    #[serde(flatten)]
    pub what: Resource,
    pub in_use: u64,
    pub limit: u64,
    pub need: u64,
}

impl fmt::Display for LimitHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.what;
        write!(
            f,
            "{}: {} of {} in use",
            r.label(),
            r.show(self.in_use),
            r.show(self.limit)
        )?;
        if self.in_use < self.limit {
            write!(f, ", needs {}", r.show(self.need))?;
        }
        Ok(())
    }
}

/// One limit that holds for a user, and how much of it is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub what: Resource,
    pub used: u64,
    pub limit: u64,
    pub scope: Scope,
}

impl Standing {
    /// What is limited, as `xinfo` and reasons name it (`GPUs`, `memory`).
    pub fn label(&self) -> String {
        self.what.label()
    }
}

impl fmt::Display for Standing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.what;
        write!(
            f,
            "{}: {} of {} ({})",
            r.label(),
            r.show(self.used),
            r.show(self.limit),
            self.scope
        )
    }
}

/// A submission refused for its owner's limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// The job alone holds more than the limit allows: it could never start.
    #[error("asks for {} {}, but {scope} is {} at once", what.show(*asked), what.label(), what.show(*limit))]
    NeverFits {
        what: Resource,
        asked: u64,
        limit: u64,
        scope: Scope,
    },
    /// The owner already has as many pending jobs as allowed.
    #[error("{pending} pending jobs already; {scope} is {limit} pending jobs")]
    TooManyPending {
        pending: u64,
        limit: u64,
        scope: Scope,
    },
}

impl LimitError {
    /// The resource the refused submission ran into.
    pub fn resource(&self) -> Resource {
        match self {
            LimitError::NeverFits { what, .. } => *what,
            LimitError::TooManyPending { .. } => Resource::PendingJobs,
        }
    }
}

type Bound<T> = Option<(T, Scope)>;

/// One user's limits after resolution: for each resource, the limit and
/// where it was set, or `None` for unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    pub running_jobs: Bound<u32>,
    pub pending_jobs: Bound<u32>,
    pub cpus: Bound<u32>,
    pub mem_bytes: Bound<u64>,
    pub gpus: Bound<u32>,
    pub per_vendor: [Bound<u32>; VENDORS],
}

impl UserLimits {
    /// No limits at all.
    pub fn is_empty(&self) -> bool {
        *self == UserLimits::default()
    }

    /// The fair-share shares of `uid` (in primary group `gid`, where known):
    /// the user's setting, else their group's, else the default's; `None`
    /// where the admin set none.
    pub fn shares(&self, uid: Uid, gid: Option<Gid>) -> Option<u32> {
        self.users
            .get(&uid)
            .and_then(|l| l.shares)
            .or_else(|| gid.and_then(|g| self.groups.get(&g)).and_then(|l| l.shares))
            .or(self.default.shares)
    }

    /// The limits that apply to `uid` in primary group `gid`.
    pub fn resolve(&self, uid: Uid, gid: Gid) -> Resolved {
        let layers = [
            (self.users.get(&uid), Scope::User(uid)),
            (self.groups.get(&gid), Scope::Group(gid)),
            (Some(&self.default), Scope::Default),
        ];
        fn pick<T: Copy>(
            layers: &[(Option<&UserLimit>, Scope)],
            get: impl Fn(&UserLimit) -> Option<T>,
        ) -> Bound<T> {
            layers
                .iter()
                .find_map(|(l, scope)| l.and_then(&get).map(|v| (v, *scope)))
        }
        let mut per_vendor = [None; VENDORS];
        for v in Vendor::ALL {
            per_vendor[v.index()] = pick(&layers, |l| l.gpus_per_vendor.get(&v).copied());
        }
        Resolved {
            running_jobs: pick(&layers, |l| l.running_jobs),
            pending_jobs: pick(&layers, |l| l.pending_jobs),
            cpus: pick(&layers, |l| l.cpus),
            mem_bytes: pick(&layers, |l| l.mem_bytes),
            gpus: pick(&layers, |l| l.gpus),
            per_vendor,
        }
    }
}

impl Resolved {
    /// Whether any resource is limited.
    pub fn is_limited(&self) -> bool {
        *self != Resolved::default()
    }

    /// Every limit that holds, as `(resource, limit, scope)`.
    fn bounds(&self) -> impl Iterator<Item = (Resource, u64, Scope)> + '_ {
        let w = |r: Resource, b: Bound<u32>| b.map(|(v, s)| (r, v as u64, s));
        [
            w(Resource::RunningJobs, self.running_jobs),
            w(Resource::Cpus, self.cpus),
            self.mem_bytes.map(|(v, s)| (Resource::Memory, v, s)),
            w(Resource::Gpus, self.gpus),
        ]
        .into_iter()
        .chain(
            Vendor::ALL
                .into_iter()
                .map(move |v| w(Resource::VendorGpus(v), self.per_vendor[v.index()])),
        )
        .flatten()
    }

    /// Each limit that holds for a user holding `held` with `pending` jobs
    /// waiting, pending jobs' limit included, and how much of it is in use
    /// (what `xinfo` shows its caller).
    pub fn standing(&self, held: &Held, pending: u32) -> Vec<Standing> {
        let pend = self
            .pending_jobs
            .map(|(v, s)| (Resource::PendingJobs, v as u64, s));
        self.bounds()
            .chain(pend)
            .map(|(what, limit, scope)| Standing {
                what,
                used: match what {
                    Resource::PendingJobs => pending as u64,
                    r => held.get(r),
                },
                limit,
                scope,
            })
            .collect()
    }

    /// The first limit `adding` would take a user holding `held` past; only
    /// what the job adds is checked (an admin may lower a limit below what
    /// is in use).
    pub fn hit(&self, held: &Held, adding: &Held) -> Option<LimitHit> {
        self.bounds().find_map(|(what, limit, _)| {
            let (in_use, need) = (held.get(what), adding.get(what));
            (need > 0 && in_use + need > limit).then_some(LimitHit {
                what,
                in_use,
                limit,
                need,
            })
        })
    }

    /// The submission check: refuses a job that alone exceeds a limit, or
    /// that would be one pending job more than allowed (`pending` is how
    /// many its owner has).
    pub fn admit(&self, job: &Held, pending: u32) -> Result<(), LimitError> {
        self.alone(job)?;
        self.one_more(pending)
    }

    /// Refuses a job that alone holds more than a limit allows.
    pub fn alone(&self, job: &Held) -> Result<(), LimitError> {
        match self
            .bounds()
            .find(|(what, limit, _)| job.get(*what) > *limit)
        {
            Some((what, limit, scope)) => Err(LimitError::NeverFits {
                what,
                asked: job.get(what),
                limit,
                scope,
            }),
            None => Ok(()),
        }
    }

    /// Refuses one more pending job to a user who has `pending`.
    pub fn one_more(&self, pending: u32) -> Result<(), LimitError> {
        match self.pending_jobs {
            Some((limit, scope)) if pending >= limit => Err(LimitError::TooManyPending {
                pending: pending as u64,
                limit: limit as u64,
                scope,
            }),
            _ => Ok(()),
        }
    }

    /// What is left under each limit for a user holding `held`, for the
    /// quick test of a pass.
    pub fn headroom(&self, held: &Held, machine: &Machine) -> Headroom {
        let left = |b: Option<u64>, used: u64| b.map_or(u64::MAX, |l| l.saturating_sub(used));
        let per_vendor = std::array::from_fn(|i| {
            left(
                self.per_vendor[i].map(|(v, _)| v as u64),
                held.per_vendor[i] as u64,
            )
        });
        let mut room = Headroom {
            limited: self.is_limited(),
            jobs: left(self.running_jobs.map(|(v, _)| v as u64), held.jobs as u64),
            cpus: left(self.cpus.map(|(v, _)| v as u64), held.cpus as u64),
            mem: left(self.mem_bytes.map(|(v, _)| v), held.mem),
            devices: left(self.gpus.map(|(v, _)| v as u64), held.devices as u64),
            per_vendor,
            exclusive: false,
        };
        let whole = Held::of_need(&Need::EXCLUSIVE, machine);
        room.exclusive = self.hit(held, &whole).is_none();
        room
    }
}

/// What a user may still take under their limits, kept per user so that a
/// pass tests each job in a few comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headroom {
    /// Whether any limit applies (when not, every test passes).
    pub limited: bool,
    pub jobs: u64,
    pub cpus: u64,
    pub mem: u64,
    pub devices: u64,
    pub per_vendor: [u64; VENDORS],
    /// Whether an exclusive job (the whole machine) fits.
    pub exclusive: bool,
}

impl Default for Headroom {
    fn default() -> Self {
        Headroom {
            limited: false,
            jobs: u64::MAX,
            cpus: u64::MAX,
            mem: u64::MAX,
            devices: u64::MAX,
            per_vendor: [u64::MAX; VENDORS],
            exclusive: true,
        }
    }
}

impl Headroom {
    /// Whether a job needing `need` stays within every limit; for an `auto`
    /// job, whether some vendor is within its limit (see
    /// [`Headroom::vendors_over`]).
    #[inline]
    pub fn admits(&self, need: &Need) -> bool {
        if !self.limited {
            return true;
        }
        if self.jobs == 0 {
            return false;
        }
        if need.exclusive {
            return self.exclusive;
        }
        if (need.cpus as u64) > self.cpus || need.mem > self.mem {
            return false;
        }
        if need.count == 0 {
            return true;
        }
        let c = need.count as u64;
        c <= self.devices
            && match need.vendor {
                Some(v) => c <= self.per_vendor[v.index()],
                None => self.per_vendor.iter().any(|l| c <= *l),
            }
    }

    /// What is left once `h` more is held (an exclusive job no longer fits).
    pub fn less(&self, h: &Held) -> Headroom {
        Headroom {
            limited: self.limited,
            jobs: self.jobs.saturating_sub(h.jobs as u64),
            cpus: self.cpus.saturating_sub(h.cpus as u64),
            mem: self.mem.saturating_sub(h.mem),
            devices: self.devices.saturating_sub(h.devices as u64),
            per_vendor: std::array::from_fn(|i| {
                self.per_vendor[i].saturating_sub(h.per_vendor[i] as u64)
            }),
            exclusive: false,
        }
    }

    /// The vendors whose own limit leaves fewer than `count` devices: an
    /// `auto` job must not be given theirs.
    pub fn vendors_over(&self, count: u32) -> Vec<Vendor> {
        Vendor::ALL
            .into_iter()
            .filter(|v| (count as u64) > self.per_vendor[v.index()])
            .collect()
    }
}

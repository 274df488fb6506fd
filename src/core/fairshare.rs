//! Fair-share usage: what each user ran recently, decayed with a half-life,
//! and the fair-share factor derived from it.
//!
//! **Usage** is resource-time. A running job is charged, per second,
//!
//! ```text
//! rate = w_cpu * CPUs + w_gpu * devices + w_mem * GiB of memory
//! ```
//!
//! for what it holds (an exclusive job holds the whole machine). The
//! default weights make every resource count as its share of the machine,
//! in CPU-seconds: `w_cpu = 1`, `w_gpu = CPUs / devices` (on 256 CPUs and 8
//! GPUs a GPU counts as 32 CPUs) and `w_mem = CPUs / GiB of memory` (on 256
//! CPUs and 2 TiB, 1 GiB counts as 1/8 CPU). So holding all GPUs for an hour
//! costs as much as holding all CPUs for an hour. Only ratios between users
//! matter, so the unit is irrelevant.
//!
//! **Decay**: usage `t` seconds old counts `2^(-t / half_life)` (Slurm's
//! `PriorityDecayHalfLife`, default 7 days; 0 disables decay). Charging is
//! exact, not sampled: a job running at `rate` from `a` to `b` adds, valued
//! at `b`, `rate * ∫_a^b 2^(-(b-s)/h) ds = rate * h/ln2 * (1 - 2^(-(b-a)/h))`,
//! so charging every minute or once at the end gives the same usage (up to
//! rounding), and running jobs count while they run.
//!
//! **Factor** (Slurm's classic fair share): `F = 2^(-U/S)`, where `U` is the
//! user's share of all decayed usage (0 to 1) and `S` the user's share of
//! the shares of all active users (users with usage, or with jobs pending or
//! running; each has `default_share` unless the admin set another). A user
//! who used nothing has `F = 1`, one who used exactly their share `F = 0.5`,
//! one who used everything while sharing with another user `2^-2 = 0.25`. A
//! share of 0 makes `F = 0`.
//!
//! [`UsageLedger`] is the persistent part (a map of users to numbers, cheap to
//! save); [`Meters`] charge the running jobs and are rebuilt when the daemon
//! re-adopts them.

use super::alloc::Allocation;
use super::limits::{Held, Uid};
use super::machine::Machine;
use super::JobId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const GIB: f64 = (1u64 << 30) as f64;

/// Users whose usage decayed below this (resource-seconds) and who have no
/// jobs are dropped from the ledger.
pub const NEGLIGIBLE: f64 = 1.0;

/// What a second of each resource costs, in CPU-seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UsageWeights {
    pub cpu: f64,
    /// Per device (of any vendor).
    pub gpu: f64,
    /// Per GiB of memory.
    pub mem_gib: f64,
}

impl UsageWeights {
    /// Every resource counts as its share of `machine`.
    pub fn for_machine(machine: &Machine) -> UsageWeights {
        let cpus = machine.topology.total_cpus().max(1) as f64;
        let devices = machine.devices.len();
        let mem = machine.topology.total_mem() as f64 / GIB;
        UsageWeights {
            cpu: 1.0,
            gpu: if devices == 0 {
                0.0
            } else {
                cpus / devices as f64
            },
            mem_gib: if mem > 0.0 { cpus / mem } else { 0.0 },
        }
    }

    /// Resource-seconds per second of what `held` holds.
    pub fn rate(&self, held: &Held) -> f64 {
        self.cpu * held.cpus as f64
            + self.gpu * held.devices as f64
            + self.mem_gib * held.mem as f64 / GIB
    }

    /// The rate of a running job with `alloc`.
    pub fn rate_of(&self, alloc: &Allocation, machine: &Machine) -> f64 {
        self.rate(&Held::of_alloc(alloc, machine))
    }
}

/// Each user's decayed usage, valued at time `at`: what the daemon persists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageLedger {
    /// Seconds since the epoch at which the usages are valued; every running
    /// job has been charged up to here.
    pub at: u64,
    /// 0: no decay.
    pub half_life_secs: u64,
    /// Decayed resource-seconds per user.
    pub users: BTreeMap<Uid, f64>,
}

impl UsageLedger {
    pub fn new(half_life_secs: u64) -> UsageLedger {
        UsageLedger {
            at: 0,
            half_life_secs,
            users: BTreeMap::new(),
        }
    }

    /// How much of a usage `dt` seconds old still counts.
    pub fn decay(&self, dt: u64) -> f64 {
        match self.half_life_secs {
            0 => 1.0,
            h => (-(dt as f64) / h as f64).exp2(),
        }
    }

    /// What one unit of rate charged over the last `dt` seconds is worth now.
    pub fn integral(&self, dt: u64) -> f64 {
        match self.half_life_secs {
            0 => dt as f64,
            h => h as f64 / std::f64::consts::LN_2 * (1.0 - self.decay(dt)),
        }
    }

    /// A user's decayed usage as of [`UsageLedger::at`].
    pub fn usage(&self, uid: Uid) -> f64 {
        self.users.get(&uid).copied().unwrap_or(0.0)
    }

    pub fn total(&self) -> f64 {
        self.users.values().sum()
    }

    /// Values every usage at `now` (no-op unless `now` is later).
    fn decay_to(&mut self, now: u64) {
        if now <= self.at {
            return;
        }
        let d = self.decay(now - self.at);
        if d != 1.0 {
            for u in self.users.values_mut() {
                *u *= d;
            }
        }
        self.at = now;
    }
}

/// [`Meter::since`] of a job whose start is unknown: it is charged from the
/// next time the ledger is advanced.
pub const FROM_NEXT: u64 = u64::MAX;

/// A running job's charge: its owner, rate and how far it has been charged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Meter {
    pub uid: Uid,
    pub rate: f64,
    pub since: u64,
}

/// The ledger plus the meters of the running jobs.
#[derive(Debug, Clone)]
pub struct Meters {
    pub ledger: UsageLedger,
    /// By job ID, so that charges are added in the same order in every run.
    meters: BTreeMap<JobId, Meter>,
}

impl Meters {
    pub fn new(half_life_secs: u64) -> Meters {
        Meters {
            ledger: UsageLedger::new(half_life_secs),
            meters: BTreeMap::new(),
        }
    }

    /// Charges every running job up to `now` and values the ledger at `now`.
    pub fn advance(&mut self, now: u64) {
        if now <= self.ledger.at {
            return;
        }
        self.ledger.decay_to(now);
        for m in self.meters.values_mut() {
            if m.since == FROM_NEXT {
                m.since = now;
            } else if m.since < now {
                let worth = self.ledger.integral(now - m.since);
                *self.ledger.users.entry(m.uid).or_insert(0.0) += m.rate * worth;
                m.since = now;
            }
        }
    }

    /// Starts charging job `id` from `since` (a job re-adopted after a
    /// restart is charged from where the saved ledger stopped).
    pub fn start(&mut self, id: JobId, uid: Uid, rate: f64, since: u64) {
        let since = since.max(self.ledger.at);
        self.ledger.users.entry(uid).or_insert(0.0);
        self.meters.insert(id, Meter { uid, rate, since });
    }

    /// Charges job `id` up to `now` and stops its meter.
    pub fn stop(&mut self, id: JobId, now: u64) {
        if self.meters.contains_key(&id) {
            self.advance(now);
            self.meters.remove(&id);
        }
    }

    /// Stops job `id`'s meter without charging it further (a start undone).
    pub fn cancel(&mut self, id: JobId) -> Option<Meter> {
        self.meters.remove(&id)
    }

    pub fn meter(&self, id: JobId) -> Option<&Meter> {
        self.meters.get(&id)
    }

    /// Replaces the ledger (a saved one, at daemon start). Meters already
    /// running are charged from the later of their start and the ledger's time.
    pub fn restore(&mut self, ledger: UsageLedger) {
        let at = ledger.at;
        self.ledger = ledger;
        for m in self.meters.values_mut() {
            m.since = m.since.max(at);
            self.ledger.users.entry(m.uid).or_insert(0.0);
        }
    }

    /// Drops users with negligible usage for whom `keep` is false.
    pub fn prune(&mut self, keep: impl Fn(Uid) -> bool) {
        let running: std::collections::BTreeSet<Uid> =
            self.meters.values().map(|m| m.uid).collect();
        self.ledger
            .users
            .retain(|uid, u| *u >= NEGLIGIBLE || keep(*uid) || running.contains(uid));
    }
}

/// Slurm's classic fair-share factor `2^(-U/S)` for a user holding `usage`
/// of `total` usage with `share` of `total_shares`.
pub fn factor(usage: f64, total: f64, share: u32, total_shares: u64) -> f64 {
    if share == 0 {
        return 0.0;
    }
    let u = if total > 0.0 {
        (usage / total).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let s = share as f64 / (total_shares.max(share as u64)) as f64;
    (-u / s).exp2()
}

/// One user's line of `xlurm share` (Slurm's `sshare`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareRow {
    pub uid: Uid,
    /// The user's shares and their fraction of all active users' shares.
    pub raw_shares: u32,
    pub norm_shares: f64,
    /// Decayed resource-seconds, and the fraction of everyone's.
    pub raw_usage: f64,
    pub effective_usage: f64,
    /// `2^(-effective_usage / norm_shares)`.
    pub fair_share: f64,
}

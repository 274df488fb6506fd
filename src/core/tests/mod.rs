//! Rule-by-rule tests of the core on fake topologies and device states,
//! one file per rule family; the shared fakes and helpers live here.

use super::*;

mod array;
mod budgets;
mod dependency;
mod estimate;
mod fairshare;
mod limits;
mod placement;
mod policies;
mod priority;
mod regressions;
mod validation;

const GIB: u64 = 1 << 30;

/// A test of which error a bad input gives.
type Is<E> = fn(&E) -> bool;
/// A bad input, which error it gives and words its message must hold.
type Case<'a, E> = (&'a str, Is<E>, &'a str);

fn gpus(vendor: Vendor, n: u32, node_of: impl Fn(u32) -> Option<u32>) -> Vec<Device> {
    (0..n)
        .map(|i| Device::new(vendor, i, format!("{vendor}-uuid-{i}"), node_of(i)))
        .collect()
}

/// 2 nodes x 4 CPUs x 8 GiB, GPUs 0,1 on node 0 and 2,3 on node 1.
fn two_nodes() -> Machine {
    Machine::new(
        Topology::uniform(2, 4, 8 * GIB),
        gpus(Vendor::Nv, 4, |i| Some(i / 2)),
    )
}

/// 8 nodes x 32 CPUs x 256 GiB, GPU i on node i.
fn big() -> Machine {
    Machine::new(
        Topology::uniform(8, 32, 256 * GIB),
        gpus(Vendor::Nv, 8, Some),
    )
}

fn limits() -> Limits {
    Limits {
        max_running: 32,
        max_lifetime_secs: 3600,
        min_job_mem: 64 << 20,
    }
}

fn req(cpus: u32, gpus: u32) -> Request {
    Request {
        cpus,
        mem_bytes: Some(GIB),
        devices: DeviceRequest {
            count: gpus,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn sched(machine: Machine, policy: Policy) -> Scheduler {
    Scheduler::new(machine, policy, limits())
}

fn submit(s: &mut Scheduler, id: JobId, r: Request) {
    let d = s.validate(&r).expect("valid request");
    s.enqueue(id, d);
}

fn started(starts: &[(JobId, Allocation)]) -> Vec<JobId> {
    let mut ids: Vec<JobId> = starts.iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    ids
}

/// The default memory budget a job of `cpus` CPUs is given on `topo`.
fn default_budget_on(topo: Topology) -> impl Fn(u32) -> u64 {
    let s = sched(Machine::new(topo, vec![]), Policy::FifoStrict);
    move |cpus| {
        s.validate(&Request {
            cpus,
            mem_bytes: None,
            ..Default::default()
        })
        .unwrap()
        .mem_bytes
    }
}

/// `uid` in a group of its own number.
fn owner(uid: u32) -> Owner {
    Owner { uid, gid: uid }
}

/// A scheduler in `fair` priority mode with the default weights.
fn fair(machine: Machine, policy: Policy) -> Scheduler {
    Scheduler::with_priority(machine, policy, limits(), PriorityConfig::fair())
}

/// Submits `r` as job `id` of `uid` at time `at`, nice 0.
fn submit_as(s: &mut Scheduler, id: JobId, r: Request, uid: u32, at: u64) {
    submit_nice(s, id, r, uid, at, 0);
}

fn submit_nice(s: &mut Scheduler, id: JobId, r: Request, uid: u32, at: u64, nice: i32) {
    let d = s.validate(&r).expect("valid request");
    let sub = Submission {
        owner: owner(uid),
        nice,
        submitted_at: at,
        kind: 0,
    };
    s.enqueue_for(id, d, sub);
}

/// A ledger valued at `at` with the given usages (no decay).
fn ledger(at: u64, usages: &[(u32, f64)]) -> UsageLedger {
    UsageLedger {
        at,
        half_life_secs: 0,
        users: usages.iter().copied().collect(),
    }
}

//! The states the passes are timed on: the machines, the running jobs
//! adopted on them, the queues, and fair share's users and limits.

use super::*;

pub(crate) const GIB: u64 = 1 << 30;

pub(crate) const HOUR: u64 = 3600;

pub(crate) const NOW: u64 = 1_000_000;

/// splitmix64: a small deterministic generator.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) name: &'static str,
    pub(crate) cpus_per_node: u32,
    pub(crate) mem_per_node: u64,
    /// Memory each one-CPU running job holds.
    pub(crate) job_mem: u64,
}

pub(crate) const MACHINES: [Shape; 2] = [
    Shape {
        name: "256cpu",
        cpus_per_node: 32,
        mem_per_node: 256 * GIB,
        job_mem: 8 * GIB,
    },
    Shape {
        name: "1024cpu",
        cpus_per_node: 128,
        mem_per_node: 512 * GIB,
        job_mem: 3 * GIB + GIB / 2,
    },
];

/// CPUs left free on every node.
pub(crate) const FREE_PER_NODE: u32 = 3;

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Queue {
    Hard,
    Fill,
    Distinct,
}

impl Queue {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Queue::Hard => "hard",
            Queue::Fill => "fill",
            Queue::Distinct => "distinct",
        }
    }
}

pub(crate) fn machine(shape: Shape) -> Machine {
    let devices = (0..NODES)
        .map(|i| Device::new(Vendor::Nv, i, format!("GPU-{i}"), Some(i)))
        .collect();
    Machine::new(
        Topology::uniform(NODES, shape.cpus_per_node, shape.mem_per_node),
        devices,
    )
}

pub(crate) fn limits() -> Limits {
    Limits {
        max_running: 2000,
        max_lifetime_secs: 7 * 24 * HOUR,
        min_job_mem: 256 << 20,
    }
}

/// Adopts the running jobs: per node one GPU job (1 GPU, 1 CPU, 16 GiB) and
/// one-CPU jobs on all but `FREE_PER_NODE` CPUs. Returns the running IDs.
pub(crate) fn adopt_running(s: &mut Scheduler, shape: Shape, rng: &mut Rng) -> Vec<JobId> {
    let mut ids = Vec::new();
    let mut id: JobId = 1;
    for node in 0..NODES {
        let base = node * shape.cpus_per_node;
        let used = shape.cpus_per_node - FREE_PER_NODE;
        for k in 0..used {
            let gpu = k == 0;
            let mem = if gpu { 16 * GIB } else { shape.job_mem };
            let alloc = Allocation {
                cpus: [base + k].into_iter().collect(),
                mem_nodes: [node].into_iter().collect(),
                mem_bytes: mem,
                mem_charge: vec![(node, mem)],
                devices: if gpu {
                    vec![DeviceRef {
                        vendor: Vendor::Nv,
                        index: node,
                        uuid: format!("GPU-{node}"),
                    }]
                } else {
                    vec![]
                },
                spread: false,
                exclusive: false,
            };
            s.adopt(id, alloc, NOW + rng.range(HOUR, 7 * 24 * HOUR));
            ids.push(id);
            id += 1;
        }
    }
    ids
}

/// One queued request of the given mix; `i` is its position.
pub(crate) fn pending_request(
    q: Queue,
    i: usize,
    free_cpus: u32,
    free_mem: u64,
    rng: &mut Rng,
) -> Request {
    let time = Some(rng.range(60, 7 * 24 * HOUR));
    let gpus = |n: u32| DeviceRequest {
        count: n,
        ..Default::default()
    };
    let mut r = if i == 0 {
        Request {
            cpus: 8,
            devices: gpus(4),
            ..Default::default()
        }
    } else if q == Queue::Fill && rng.below(100) == 0 {
        Request {
            cpus: 1,
            mem_bytes: Some(GIB),
            ..Default::default()
        }
    } else {
        match rng.below(20) {
            // GPU jobs: every GPU is held.
            0..=5 => {
                let mut d = gpus(rng.range(1, 2) as u32);
                match rng.below(10) {
                    0 => {
                        d.vendor = Some(Vendor::Nv);
                        d.ids = (0..d.count).map(|_| rng.below(8) as u32).collect();
                        d.ids.sort_unstable();
                        d.ids.dedup();
                        d.count = d.ids.len() as u32;
                    }
                    1 => d.exclude = vec![rng.below(8) as u32],
                    2 => d.vendor = Some(Vendor::Nv),
                    _ => {}
                }
                Request {
                    cpus: rng.range(1, 8) as u32,
                    devices: d,
                    ..Default::default()
                }
            }
            // Wider than the free CPUs.
            6..=11 => Request {
                cpus: rng.range(free_cpus as u64 + 1, 96) as u32,
                ..Default::default()
            },
            // Small, but more memory than is free.
            12..=15 => Request {
                cpus: rng.range(1, 4) as u32,
                mem_bytes: Some(free_mem + rng.range(1, 64) * GIB),
                ..Default::default()
            },
            // numa-local, wider than any node's free CPUs.
            16..=18 => Request {
                cpus: rng.range(FREE_PER_NODE as u64 + 1, 32) as u32,
                numa_local: true,
                mem_bytes: Some(rng.range(1, 16) * GIB),
                ..Default::default()
            },
            _ => Request {
                cpus: 1,
                exclusive: true,
                ..Default::default()
            },
        }
    };
    r.time_limit_secs = time;
    if q == Queue::Distinct && !r.exclusive {
        // A memory size no other job asks for (and still no fit: CPU-bound
        // jobs keep their CPU shortage, memory-bound ones grow).
        let base = r.mem_bytes.unwrap_or(GIB);
        r.mem_bytes = Some(base + 4096 * i as u64);
    }
    r
}

/// A scheduler in the state described at the top, with `pending` queued jobs.
pub(crate) fn build(
    shape: Shape,
    q: Queue,
    pending: usize,
    policy: Policy,
) -> (Scheduler, Vec<JobId>) {
    build_with(shape, q, pending, policy, false)
}

/// The `fair` rows' settings: fair-share priority; per-user limits (by
/// default 64 running jobs, 128 CPUs, 2 GPUs, 1 TiB; one user in ten is in
/// group 100, limited to 1 running job); decayed usage for every user; the
/// running jobs spread over the users.
pub(crate) fn make_fair(s: &mut Scheduler, running: &[JobId], rng: &mut Rng) {
    s.set_priority(PriorityConfig::fair());
    let mut limits = UserLimits {
        default: UserLimit {
            running_jobs: Some(64),
            cpus: Some(128),
            gpus: Some(2),
            mem_bytes: Some(1 << 40),
            ..Default::default()
        },
        ..Default::default()
    };
    limits.groups.insert(
        100,
        UserLimit {
            running_jobs: Some(1),
            ..Default::default()
        },
    );
    s.set_user_limits(limits);
    s.restore_usage(UsageLedger {
        at: NOW,
        half_life_secs: 7 * 24 * HOUR,
        users: (0..USERS)
            .map(|u| (UID0 + u, rng.below(10_000_000) as f64))
            .collect(),
    });
    for &id in running {
        let r = s.running(id).expect("adopted").clone();
        let sub = submission(id as u32 * 7, 0, rng);
        s.adopt_for(id, r.alloc, r.deadline, sub, Some(NOW - HOUR));
    }
}

/// A submission of user number `u` (mod [`USERS`]) in the last 3 days; one
/// in ten `nice`.
pub(crate) fn submission(u: u32, nice: i32, rng: &mut Rng) -> Submission {
    let u = u % USERS;
    Submission {
        owner: Owner {
            uid: UID0 + u,
            gid: 100 + u % 10,
        },
        nice: if rng.below(10) == 0 { nice } else { 0 },
        submitted_at: NOW - rng.below(3 * 24 * HOUR),
        kind: 0,
    }
}

/// [`build`], and with `fair` the settings of [`make_fair`] and pending jobs
/// of random users.
pub(crate) fn build_with(
    shape: Shape,
    q: Queue,
    pending: usize,
    policy: Policy,
    fair: bool,
) -> (Scheduler, Vec<JobId>) {
    let mut rng = Rng(0x5eed ^ pending as u64);
    let mut owners = Rng(0xfa1e ^ pending as u64);
    let mut s = Scheduler::new(machine(shape), policy, limits());
    let running = adopt_running(&mut s, shape, &mut rng);
    if fair {
        make_fair(&mut s, &running, &mut owners);
    }
    let free_cpus = s.free().free_cpus();
    let free_mem: u64 = s.free().mem.iter().sum();
    for i in 0..pending {
        let req = pending_request(q, i, free_cpus, free_mem, &mut rng);
        let d = s.validate(&req).expect("benchmark request is valid");
        let id = 100_000 + i as JobId;
        if fair {
            let u = owners.below(USERS as u64) as u32;
            let sub = submission(u, 100, &mut owners);
            s.enqueue_for(id, d, sub);
        } else {
            s.enqueue(id, d);
        }
    }
    if fair {
        s.reprioritize(NOW);
    }
    (s, running)
}

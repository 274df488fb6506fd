//! Property tests of the scheduler core, against its public API only.
//!
//! Each case builds a random machine (one node, two nodes, the 8 x 32-CPU
//! 8-GPU box, or a small irregular one with memory-only nodes, sparse node IDs
//! and reserved CPUs), random device health and admin state, and replays a
//! random interleaving of submit / pass / clock advance / finish / cancel /
//! set_policy / set_health / set_disabled against a [`Scheduler`], checking
//! after every step:
//! - no CPU or device is held by two jobs, no node's memory is over-committed,
//!   and the books (free resources, device holders) match the running jobs;
//! - every allocation satisfies its demand;
//! - `reason()` is `Some` exactly for pending jobs;
//! - fifo-strict never starts a job while an earlier one waits (unless the
//!   earlier one could not start even on an idle machine);
//! - strict-backfill keeps every reservation it announced (see
//!   [`Model::check_reservations`] for exactly what is promised);
//! - replaying the same steps on a fresh scheduler gives the same allocations;
//! - once every job finishes, the books are back to the initial free state.

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use xlurm::core::alloc::{place, Room};
use xlurm::core::books::Avail;
use xlurm::core::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// The tests' maximum job lifetime; clock steps are of the same order.
const LIFETIME: u64 = 1000;

// ---------------------------------------------------------------- scenarios

#[derive(Debug, Clone)]
enum TopoSpec {
    /// One node: CPUs, memory in 512 MiB units.
    Single(u32, u64),
    /// Two equal nodes.
    Two(u32, u64),
    /// 8 nodes x 32 CPUs x 256 GiB; GPUs split over the nodes by `split`.
    Big { split: u8 },
    /// Irregular nodes: (CPUs, memory units, node ID step); `holes` reserves
    /// every third CPU of the nodes that have more than one.
    Small {
        nodes: Vec<(u32, u64, u32)>,
        holes: bool,
    },
}

#[derive(Debug, Clone)]
struct DevSpec {
    vendor: u8,
    node: Option<u8>,
    health: u8,
    disabled: bool,
}

#[derive(Debug, Clone)]
struct RawReq {
    cpus: (u8, u32),
    mem: Option<u32>,
    count: u8,
    vendor: u8,
    ids: Vec<u8>,
    exclude: Vec<u8>,
    exclusive: bool,
    numa_local: bool,
    time: Option<u16>,
}

#[derive(Debug, Clone)]
enum Op {
    Submit(RawReq),
    Pass,
    /// Moves the clock; every job whose deadline has come finishes.
    Advance(u16),
    /// Finishes a running job early (the n-th by ID).
    Finish(u16),
    /// Removes a pending job (the n-th by ID).
    Cancel(u16),
    SetPolicy(u8),
    SetHealth(u8, u8),
    SetDisabled(u8, bool),
    /// Moves a running job's deadline (the n-th by ID) to now + 1 + x.
    SetDeadline(u16, u16),
    SetMaxRunning(u8),
    /// A daemon restart: a fresh scheduler adopts the running jobs and
    /// queues the pending ones again.
    Restart,
}

#[derive(Debug, Clone)]
struct Scenario {
    topo: TopoSpec,
    devices: Vec<DevSpec>,
    policy: u8,
    max_running: u32,
    ops: Vec<Op>,
}

const VENDORS: [Vendor; 3] = [Vendor::Nv, Vendor::Asc, Vendor::Hcu];

fn policy_of(p: u8) -> Policy {
    Policy::ALL[p as usize % 4]
}

fn health_of(h: u8) -> Health {
    match h % 8 {
        5 => Health::Busy { processes: 1 },
        6 => Health::Unknown {
            error: "query failed".into(),
        },
        7 => Health::Unhealthy {
            error: "ECC".into(),
        },
        _ => Health::Ok,
    }
}

fn topology(spec: &TopoSpec) -> Topology {
    let unit = 512 * MIB;
    match spec {
        TopoSpec::Single(c, m) => Topology::single(*c, m * unit),
        TopoSpec::Two(c, m) => Topology::uniform(2, *c, m * unit),
        TopoSpec::Big { .. } => Topology::uniform(8, 32, 256 * GIB),
        TopoSpec::Small { nodes, holes } => {
            let (mut id, mut cpu) = (0u32, 0u32);
            let mut out = Vec::new();
            for (c, m, step) in nodes {
                let mut cpus = IdSet::range(cpu, cpu + c);
                if *holes && *c > 1 {
                    for x in (cpu..cpu + c).step_by(3) {
                        cpus.remove(x);
                    }
                }
                out.push(Node {
                    id,
                    cpus,
                    mem_bytes: m * unit,
                });
                cpu += c + 1;
                id += step;
            }
            if out.iter().all(|n| n.cpus.is_empty()) {
                out[0].cpus.insert(cpu);
            }
            Topology::from_nodes(out)
        }
    }
}

fn machine(sc: &Scenario) -> Machine {
    let topo = topology(&sc.topo);
    let node_ids: Vec<u32> = topo.nodes.iter().map(|n| n.id).collect();
    let mut devices = Vec::new();
    if let TopoSpec::Big { split } = sc.topo {
        for i in 0..8u32 {
            let node = match split % 4 {
                0 => Some(i),
                1 => Some(i / 2),
                2 => Some(i % 2 * 4),
                _ => (i % 3 != 0).then_some(i),
            };
            let mut d = Device::new(Vendor::Nv, i, format!("GPU-{i}"), node);
            if let Some(spec) = sc.devices.get(i as usize) {
                d.health = health_of(spec.health);
                d.disabled = spec.disabled;
            }
            devices.push(d);
        }
    } else {
        let mut next = [0u32; 3];
        for spec in &sc.devices {
            let v = spec.vendor as usize % 3;
            let node = spec.node.map(|n| node_ids[n as usize % node_ids.len()]);
            let mut d = Device::new(
                VENDORS[v],
                next[v],
                format!("{}-{}", VENDORS[v], next[v]),
                node,
            );
            d.health = health_of(spec.health);
            d.disabled = spec.disabled;
            devices.push(d);
            next[v] += 1;
        }
    }
    Machine::new(topo, devices)
}

fn request(raw: &RawReq, m: &Machine) -> Request {
    let total = m.topology.total_cpus();
    let cpus = match raw.cpus.0 % 8 {
        0 => raw.cpus.1 % (total + 2),
        1 | 2 => 1 + raw.cpus.1 % total,
        _ => 1 + raw.cpus.1 % total.div_ceil(4),
    };
    let total_mem = m.topology.total_mem();
    let mem = raw.mem.map(|f| match f % 16 {
        0 => (total_mem / 64) * (f as u64 % 72),
        1 => 1 + f as u64 % (64 * MIB),
        _ => ((total_mem / 64) * (f as u64 % 33)).max(MIB),
    });
    let vendor = match raw.vendor % 20 {
        0..=11 => None,
        12..=15 => Some(Vendor::Nv),
        16..=18 => Some(Vendor::Asc),
        _ => Some(Vendor::Mtt),
    };
    // Half CPU jobs; device jobs mostly by count, some with exact or excluded
    // IDs; malformed lists now and then.
    let malformed = raw.count % 16 == 15;
    let mut ids: Vec<u32> = raw.ids.iter().map(|i| *i as u32 % 5).collect();
    let mut exclude: Vec<u32> = raw.exclude.iter().map(|i| *i as u32 % 5).collect();
    if !malformed {
        ids.sort_unstable();
        ids.dedup();
        exclude.sort_unstable();
        exclude.dedup();
    }
    let (count, ids, exclude) = match raw.count % 16 {
        _ if malformed => (raw.count as u32 % 4, ids, exclude),
        0..=7 => (0, vec![], vec![]),
        8..=11 => (1 + raw.count as u32 % 3, vec![], vec![]),
        12 | 13 if !ids.is_empty() => (ids.len() as u32, ids, vec![]),
        _ => (1 + raw.count as u32 % 2, vec![], exclude),
    };
    Request {
        cpus,
        mem_bytes: mem,
        devices: DeviceRequest {
            count,
            vendor,
            ids,
            exclude,
        },
        exclusive: raw.exclusive,
        numa_local: raw.numa_local,
        time_limit_secs: raw.time.map(|t| t as u64 % (LIFETIME + 2)),
    }
}

fn raw_req() -> impl Strategy<Value = RawReq> {
    (
        (any::<u8>(), any::<u32>()),
        prop::option::weighted(0.6, any::<u32>()),
        any::<u8>(),
        any::<u8>(),
        prop::collection::vec(any::<u8>(), 0..3),
        prop::collection::vec(any::<u8>(), 0..2),
        prop::bool::weighted(0.06),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.8, any::<u16>()),
    )
        .prop_map(
            |(cpus, mem, count, vendor, ids, exclude, exclusive, numa_local, time)| RawReq {
                cpus,
                mem,
                count,
                vendor,
                ids,
                exclude,
                exclusive,
                numa_local,
                time,
            },
        )
}

/// Operations; `admin` adds the steps that void reservations (policy, health,
/// disabled changes).
fn op(admin: bool) -> BoxedStrategy<Op> {
    let base = prop_oneof![
        7 => raw_req().prop_map(Op::Submit),
        4 => Just(Op::Pass),
        3 => (0..400u16).prop_map(Op::Advance),
        2 => any::<u16>().prop_map(Op::Finish),
        1 => any::<u16>().prop_map(Op::Cancel),
        1 => Just(Op::Restart),
    ];
    if !admin {
        return base.boxed();
    }
    prop_oneof![
        17 => base,
        1 => any::<u8>().prop_map(Op::SetPolicy),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(s, h)| Op::SetHealth(s, h)),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(s, d)| Op::SetDisabled(s, d)),
        1 => (any::<u16>(), any::<u16>()).prop_map(|(n, x)| Op::SetDeadline(n, x)),
        1 => any::<u8>().prop_map(Op::SetMaxRunning),
    ]
    .boxed()
}

fn dev_spec() -> impl Strategy<Value = DevSpec> {
    (
        any::<u8>(),
        prop::option::weighted(0.8, any::<u8>()),
        any::<u8>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(vendor, node, health, disabled)| DevSpec {
            vendor,
            node,
            health,
            disabled,
        })
}

fn small_topo() -> impl Strategy<Value = TopoSpec> {
    prop_oneof![
        (1..=8u32, 1..=16u64).prop_map(|(c, m)| TopoSpec::Single(c, m)),
        (1..=6u32, 1..=16u64).prop_map(|(c, m)| TopoSpec::Two(c, m)),
        (
            prop::collection::vec((0..=6u32, 1..=16u64, 1..=2u32), 1..=4),
            any::<bool>()
        )
            .prop_map(|(nodes, holes)| TopoSpec::Small { nodes, holes }),
    ]
}

fn scenario(
    topo: impl Strategy<Value = TopoSpec>,
    policy: impl Strategy<Value = u8>,
    admin: bool,
    ops: usize,
) -> impl Strategy<Value = Scenario> {
    (
        topo,
        prop::collection::vec(dev_spec(), 0..=8),
        policy,
        prop_oneof![Just(2u32), Just(4), Just(64)],
        prop::collection::vec(op(admin), 1..ops),
    )
        .prop_map(|(topo, devices, policy, max_running, ops)| Scenario {
            topo,
            devices,
            policy,
            max_running,
            ops,
        })
}

// ---------------------------------------------------------------- the model

struct Job {
    alloc: Allocation,
    deadline: u64,
}

/// What one run produced, for the determinism check.
type Trace = Vec<(u64, Vec<(JobId, Allocation)>, Option<(JobId, u64)>)>;

struct Model {
    s: Scheduler,
    initial: Avail,
    now: u64,
    next_id: JobId,
    pending: BTreeMap<JobId, Demand>,
    running: BTreeMap<JobId, Job>,
    /// Strict-backfill reservations still to be kept: head -> latest start.
    promises: BTreeMap<JobId, u64>,
    trace: Trace,
    checks: bool,
    /// Runs a second, idle pass after each pass (see [`check`]).
    idle_passes: bool,
}

impl Model {
    fn new(sc: &Scenario, checks: bool, idle_passes: bool) -> Model {
        let limits = Limits {
            max_running: sc.max_running,
            max_lifetime_secs: LIFETIME,
            min_job_mem: 64 * MIB,
        };
        let s = Scheduler::new(machine(sc), policy_of(sc.policy), limits);
        Model {
            initial: s.free().clone(),
            s,
            now: 0,
            next_id: 1,
            pending: BTreeMap::new(),
            running: BTreeMap::new(),
            promises: BTreeMap::new(),
            trace: Vec::new(),
            checks,
            idle_passes,
        }
    }

    fn step(&mut self, op: &Op) {
        match op {
            Op::Submit(raw) => {
                let req = request(raw, self.s.machine());
                if let Ok(d) = self.s.validate(&req) {
                    assert!(d.time_limit_secs >= 1 && d.time_limit_secs <= LIFETIME);
                    if self.checks {
                        check_can_ever_run(self.s.machine(), &d);
                    }
                    let id = self.next_id;
                    self.next_id += 1;
                    self.s.enqueue(id, d.clone());
                    self.pending.insert(id, d);
                }
            }
            Op::Pass => self.pass(),
            Op::Advance(dt) => {
                self.now += *dt as u64;
                let due: Vec<JobId> = self
                    .running
                    .iter()
                    .filter(|(_, j)| j.deadline <= self.now)
                    .map(|(id, _)| *id)
                    .collect();
                for id in due {
                    self.finish(id);
                }
            }
            Op::Finish(n) => {
                if let Some(id) = nth(self.running.keys(), *n) {
                    self.finish(id);
                }
            }
            Op::Cancel(n) => {
                if let Some(id) = nth(self.pending.keys(), *n) {
                    assert!(self.s.dequeue(id));
                    assert!(!self.s.dequeue(id));
                    self.pending.remove(&id);
                    self.promises.remove(&id);
                }
            }
            Op::SetPolicy(p) => {
                self.s.set_policy(policy_of(*p));
                self.promises.clear();
            }
            Op::SetHealth(slot, h) => {
                let n = self.s.machine().devices.len();
                if n > 0 {
                    self.s.set_health(*slot as usize % n, health_of(*h));
                    self.promises.clear();
                }
            }
            Op::SetDisabled(slot, disabled) => {
                let n = self.s.machine().devices.len();
                if n > 0 {
                    let d = &self.s.machine().devices[*slot as usize % n];
                    let (vendor, index) = (d.vendor, d.index);
                    self.s.set_disabled(vendor, &[index], *disabled).unwrap();
                    self.promises.clear();
                }
            }
            Op::SetDeadline(n, x) => {
                if let Some(id) = nth(self.running.keys(), *n) {
                    let deadline = self.now + 1 + *x as u64 % LIFETIME;
                    assert!(self.s.set_deadline(id, deadline));
                    self.running.get_mut(&id).unwrap().deadline = deadline;
                    self.promises.clear();
                }
                assert!(!self.s.set_deadline(0, 1), "job 0 never runs");
            }
            Op::SetMaxRunning(v) => {
                let limits = Limits {
                    max_running: [1, 2, 4, 64][*v as usize % 4],
                    ..self.s.limits().clone()
                };
                self.s.set_limits(limits);
                self.promises.clear();
            }
            Op::Restart => {
                let free = self.s.free().clone();
                let mut s = Scheduler::new(
                    self.s.machine().clone(),
                    self.s.policy(),
                    self.s.limits().clone(),
                );
                for (id, job) in &self.running {
                    s.adopt(*id, job.alloc.clone(), job.deadline);
                }
                for (id, d) in &self.pending {
                    s.enqueue(*id, d.clone());
                }
                self.s = s;
                assert_eq!(self.s.free(), &free, "adopting gives the same books");
            }
        }
        if self.checks {
            self.check_books();
            self.check_reasons();
        }
    }

    fn finish(&mut self, id: JobId) {
        let job = self.running.remove(&id).unwrap();
        assert_eq!(self.s.finish(id), Some(job.alloc));
        assert_eq!(self.s.finish(id), None);
    }

    fn pass(&mut self) {
        let policy = self.s.policy();
        let before: BTreeMap<JobId, Demand> = self.pending.clone();
        let starts = self.s.schedule(self.now);
        let reserved = self.s.reserved_start();
        self.trace.push((self.now, starts.clone(), reserved));
        let mut started = BTreeSet::new();
        for (id, alloc) in &starts {
            assert!(started.insert(*id), "job {id} started twice in one pass");
            let demand = self
                .pending
                .remove(id)
                .unwrap_or_else(|| panic!("job {id} started but was not pending"));
            if self.checks {
                check_alloc(&self.s, *id, &demand, alloc);
            }
            let r = self.s.running(*id).expect("started job is running");
            assert_eq!(&r.alloc, alloc);
            assert_eq!(r.deadline, self.now + demand.time_limit_secs);
            self.running.insert(
                *id,
                Job {
                    alloc: alloc.clone(),
                    deadline: r.deadline,
                },
            );
        }
        assert!(self.running.len() <= self.s.limits().max_running as usize || starts.is_empty());
        if self.idle_passes && policy != Policy::StrictBackfill {
            let again = self.s.schedule(self.now);
            assert_eq!(again, vec![], "a second pass at {} started jobs", self.now);
        }
        if !self.checks {
            return;
        }
        if policy == Policy::FifoStrict {
            self.check_fifo(&before, &started);
        }
        if policy == Policy::StrictBackfill {
            self.check_reservations(reserved);
        } else {
            self.promises.clear();
        }
    }

    /// fifo-strict: a job may start while an earlier one waits only when the
    /// earlier one could not start even on an idle machine (it waits on
    /// devices that are busy outside xlurm, unhealthy or disabled).
    fn check_fifo(&self, before: &BTreeMap<JobId, Demand>, started: &BTreeSet<JobId>) {
        let Some(last) = started.iter().next_back() else {
            return;
        };
        let idle = Avail::all(self.s.machine());
        for (id, d) in before.range(..last) {
            if !started.contains(id) {
                assert!(
                    place(d, self.s.machine(), &idle).is_err(),
                    "fifo-strict started {last} while {id} waits and could run on an idle machine"
                );
            }
        }
    }

    /// Strict-backfill's promise. When a pass at time `n` announces that head
    /// `h` is reserved for time `t` (`t > n`), then as long as
    /// - every running job ends no later than its deadline,
    /// - device health and disabled states, the policy and the limits do not
    ///   change, and running jobs' deadlines are not moved,
    /// - new jobs are queued behind `h` (IDs only grow), and `h` is not cancelled,
    ///
    /// a pass at any time `>= t` starts `h` (if an earlier one has not), and
    /// every later pass that reserves for `h` announces a time no later than
    /// `t`. Passes between `n` and `t` may start `h` earlier.
    fn check_reservations(&mut self, reserved: Option<(JobId, u64)>) {
        if let Some((h, t)) = reserved {
            assert!(self.s.is_pending(h), "reserved head {h} is not pending");
            if t != u64::MAX {
                assert!(
                    t > self.now,
                    "reservation {t} not in the future of {}",
                    self.now
                );
                let entry = self.promises.entry(h).or_insert(t);
                assert!(
                    t <= *entry,
                    "head {h}'s reservation moved from {} to {t}",
                    *entry
                );
                *entry = t;
            }
        }
        self.promises.retain(|h, _| self.pending.contains_key(h));
        for (h, t) in &self.promises {
            assert!(
                *t > self.now,
                "head {h} reserved for {t} still waits at {} ({:?})",
                self.now,
                self.s.reason(*h)
            );
        }
    }

    fn check_reasons(&self) {
        assert_eq!(self.s.pending_count(), self.pending.len());
        assert_eq!(self.s.running_count(), self.running.len());
        let m = self.s.machine();
        let room = Room::of(self.s.free(), m);
        for (id, d) in &self.pending {
            // The quick fit test never rules out a job that fits, and is
            // exact for plain CPU jobs.
            let fits = place(d, m, self.s.free()).is_ok();
            assert!(!fits || room.may_fit(d), "quick test rules out {d:?}");
            if d.devices.count == 0 && !d.exclusive {
                assert_eq!(room.may_fit(d), fits, "quick test inexact for {d:?}");
            }
            assert!(self.s.is_pending(*id));
            assert_eq!(self.s.demand(*id), Some(d));
            assert!(self.s.reason(*id).is_some(), "no reason for pending {id}");
        }
        for id in self.running.keys() {
            assert!(!self.s.is_pending(*id));
            assert_eq!(self.s.reason(*id), None);
        }
    }

    /// No CPU or device held twice, memory within each node, and the books
    /// equal to "everything minus what running jobs hold".
    fn check_books(&self) {
        let m = self.s.machine();
        let topo = &m.topology;
        let mut cpus = CpuSet::new();
        let mut mem = vec![0u64; topo.nodes.len()];
        let mut holder: Vec<Option<JobId>> = vec![None; m.devices.len()];
        for (id, job) in &self.running {
            let r = self.s.running(*id).expect("model job runs");
            assert_eq!(r.alloc, job.alloc);
            assert!(
                cpus.is_disjoint(&job.alloc.cpus),
                "job {id} shares CPUs {}",
                cpus.intersection(&job.alloc.cpus)
            );
            cpus.union_with(&job.alloc.cpus);
            for (node, bytes) in &job.alloc.mem_charge {
                let pos = topo.node_pos(*node).expect("charged node exists");
                mem[pos] += bytes;
            }
            for slot in job.alloc.held_slots(m) {
                assert_eq!(holder[slot], None, "device slot {slot} held twice");
                holder[slot] = Some(*id);
            }
        }
        let free = self.s.free();
        for (pos, node) in topo.nodes.iter().enumerate() {
            assert!(
                mem[pos] <= node.mem_bytes,
                "node {} over budget: {} > {}",
                node.id,
                mem[pos],
                node.mem_bytes
            );
            assert_eq!(
                free.mem[pos],
                node.mem_bytes - mem[pos],
                "free memory of node {}",
                node.id
            );
        }
        let mut want = topo.all_cpus();
        want.subtract(&cpus);
        assert_eq!(free.cpus.to_list(), want.to_list(), "free CPUs");
        for (slot, h) in holder.iter().enumerate() {
            assert_eq!(self.s.holder(slot), *h, "holder of slot {slot}");
            assert_eq!(free.devices[slot], h.is_none(), "free flag of slot {slot}");
        }
    }

    fn drain(&mut self) {
        let ids: Vec<JobId> = self.running.keys().copied().collect();
        for id in ids {
            self.finish(id);
        }
        if self.checks {
            self.check_books();
            let free = self.s.free();
            assert_eq!(free.cpus.to_list(), self.initial.cpus.to_list());
            assert_eq!(free.mem, self.initial.mem);
            assert_eq!(free.devices, self.initial.devices);
            assert_eq!(free, &Avail::all(self.s.machine()));
            assert!((0..self.s.machine().devices.len()).all(|s| self.s.holder(s).is_none()));
        }
        let ids: Vec<JobId> = self.pending.keys().copied().collect();
        for id in ids {
            assert!(self.s.dequeue(id));
        }
        assert_eq!(self.s.pending_count(), 0);
        assert_eq!(self.s.running_count(), 0);
    }
}

fn nth<'a>(mut keys: impl ExactSizeIterator<Item = &'a JobId>, n: u16) -> Option<JobId> {
    let len = keys.len();
    (len > 0).then(|| *keys.nth(n as usize % len).unwrap())
}

/// What validation accepts fits the idle machine once every device is healthy
/// (validation looks at disabled devices, not at health, which changes).
fn check_can_ever_run(m: &Machine, d: &Demand) {
    let mut healthy = m.clone();
    for dev in &mut healthy.devices {
        dev.health = Health::Ok;
    }
    if let Err(r) = place(d, &healthy, &Avail::all(&healthy)) {
        panic!("accepted {d:?} can never run on {:?}: {r:?}", m.topology);
    }
}

/// Every allocation gives exactly what was asked, from usable devices.
fn check_alloc(s: &Scheduler, id: JobId, d: &Demand, a: &Allocation) {
    let m = s.machine();
    let topo = &m.topology;
    let mem_nodes: BTreeSet<u32> = a.mem_charge.iter().map(|(n, _)| *n).collect();
    assert_eq!(mem_nodes.len(), a.mem_charge.len(), "a node charged twice");
    assert_eq!(
        a.mem_nodes.iter().collect::<BTreeSet<_>>(),
        mem_nodes,
        "AllowedMemoryNodes are the charged nodes"
    );
    assert!(
        a.mem_charge.iter().all(|(_, b)| *b > 0)
            || d.exclusive
            || d.mem_bytes < a.mem_charge.len() as u64,
        "a node in AllowedMemoryNodes without a charge: {a:?}"
    );
    assert_eq!(a.exclusive, d.exclusive);
    // Devices: count, one vendor, the asked vendor/IDs, no excluded ID, usable.
    assert_eq!(a.devices.len(), d.devices.count as usize, "device count");
    let slots: BTreeSet<usize> = a
        .devices
        .iter()
        .map(|r| m.slot(r.vendor, r.index).expect("allocated device exists"))
        .collect();
    assert_eq!(slots.len(), a.devices.len(), "a device given twice");
    if let Some(first) = a.devices.first() {
        assert!(
            a.devices.iter().all(|r| r.vendor == first.vendor),
            "mixed vendors"
        );
        if let Some(v) = d.devices.vendor {
            assert_eq!(first.vendor, v);
        }
    }
    if !d.devices.ids.is_empty() {
        let want: BTreeSet<u32> = d.devices.ids.iter().copied().collect();
        let got: BTreeSet<u32> = a.devices.iter().map(|r| r.index).collect();
        assert_eq!(got, want, "exact device IDs");
    }
    for (r, slot) in a
        .devices
        .iter()
        .zip(a.devices.iter().map(|r| m.slot(r.vendor, r.index).unwrap()))
    {
        assert!(
            !d.devices.exclude.contains(&r.index),
            "excluded device {} given",
            r.index
        );
        assert!(
            m.devices[slot].usable(),
            "unusable device {} given",
            r.index
        );
        assert_eq!(r.uuid, m.devices[slot].uuid);
        assert_eq!(s.holder(slot), Some(id));
    }
    let cpu_nodes: BTreeSet<u32> = a.cpu_nodes(m).iter().collect();
    if d.exclusive {
        assert_eq!(
            a.cpus.to_list(),
            topo.all_cpus().to_list(),
            "exclusive CPUs"
        );
        let all: Vec<(u32, u64)> = topo.nodes.iter().map(|n| (n.id, n.mem_bytes)).collect();
        assert_eq!(a.mem_charge, all, "exclusive memory");
        assert!(a.mem_bytes >= d.mem_bytes);
        assert_eq!(a.spread, topo.nodes.len() > 1);
        assert!((0..m.devices.len()).all(|slot| s.holder(slot) == Some(id)));
        return;
    }
    assert_eq!(a.cpus.len(), d.cpus, "CPU count");
    assert!(a.cpus.is_subset(&topo.all_cpus()));
    assert_eq!(a.mem_bytes, d.mem_bytes);
    assert_eq!(
        a.mem_charge.iter().map(|(_, b)| b).sum::<u64>(),
        d.mem_bytes
    );
    if d.numa_local {
        assert_eq!(mem_nodes.len(), 1, "numa-local memory on one node");
        assert_eq!(cpu_nodes, mem_nodes, "numa-local CPUs on the memory node");
    }
    let with_memory = |n: &u32| topo.nodes.iter().any(|t| t.id == *n && t.mem_bytes > 0);
    assert!(
        cpu_nodes
            .iter()
            .filter(|n| with_memory(n))
            .all(|n| mem_nodes.contains(n)),
        "the nodes of the job's CPUs are in its AllowedMemoryNodes: {a:?}"
    );
    assert!(
        mem_nodes.iter().all(with_memory),
        "a node without memory in {a:?}"
    );
    let spans = cpu_nodes.union(&mem_nodes).count();
    assert_eq!(a.spread, spans > 1, "spread flag for {a:?}");
}

fn run(sc: &Scenario, checks: bool, idle_passes: bool) -> Trace {
    let mut model = Model::new(sc, checks, idle_passes);
    for op in &sc.ops {
        model.step(op);
    }
    // A last pass, then drain.
    model.step(&Op::Pass);
    model.drain();
    model.trace
}

fn check(sc: &Scenario) {
    let trace = run(sc, true, false);
    // The same steps on a fresh scheduler (fresh hash seeds) decide the same.
    assert_eq!(run(sc, false, false), trace, "replay differs");
    // A pass right after a pass, with nothing changed in between, starts
    // nothing and changes nothing later (fifo-strict, easy-backfill and
    // largest-first; strict-backfill may re-plan its reservation once the
    // backfilled jobs run).
    assert_eq!(
        run(sc, false, true),
        trace,
        "an idle pass changed what happens later"
    );
}

// ---------------------------------------------------------------- properties

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    /// Everything at once on small machines: any policy, policy switches,
    /// health and disabled changes.
    #[test]
    fn small_machines_keep_every_invariant(sc in scenario(small_topo(), 0..4u8, true, 60)) {
        check(&sc);
    }

    /// Strict-backfill without the steps that void reservations: every
    /// announced reservation is kept.
    #[test]
    fn strict_backfill_keeps_reservations(sc in scenario(small_topo(), Just(2u8), false, 60)) {
        check(&sc);
    }

    /// fifo-strict never lets a later job overtake a waiting one.
    #[test]
    fn fifo_strict_never_overtakes(sc in scenario(small_topo(), Just(0u8), true, 50)) {
        check(&sc);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The 8-node, 256-CPU, 8-GPU machine, GPUs split over nodes in several ways.
    #[test]
    fn big_machine_keeps_every_invariant(
        sc in scenario((0..4u8).prop_map(|split| TopoSpec::Big { split }), 0..4u8, true, 80)
    ) {
        check(&sc);
    }

    /// The big machine under strict-backfill, reservations kept.
    #[test]
    fn big_machine_strict_backfill_keeps_reservations(
        sc in scenario((0..4u8).prop_map(|split| TopoSpec::Big { split }), Just(2u8), false, 80)
    ) {
        check(&sc);
    }
}

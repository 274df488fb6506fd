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
//!
//! Fair share, per-user limits and estimated starts (issue 17, at the end of
//! the file): of two equal pending jobs, the one whose owner has less decayed
//! usage starts first unless the other's age outweighs it by the documented
//! weights; no job is passed by jobs submitted long enough after it, so none
//! waits forever while later jobs keep starting; no start ever takes its
//! owner past a limit; each policy's head protection holds in priority order
//! (a job held by its owner's limit is never the head); with one owner the
//! `fair` mode decides exactly like `fifo`; under fifo-strict every job
//! starts by its estimated start.

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use xlurm::core::alloc::{place, place_avoiding, Room};
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
    /// A submission of user `u % USERS` with nice `n`, checked against the
    /// user's limits first.
    SubmitAs(RawReq, u8, i8),
    Reprioritize,
    /// New per-user limits, from [`user_limits`].
    SetUserLimits(u8),
}

#[derive(Debug, Clone)]
struct Scenario {
    topo: TopoSpec,
    devices: Vec<DevSpec>,
    policy: u8,
    max_running: u32,
    ops: Vec<Op>,
    /// Owners, priority and limits; `None`: plain submissions, `fifo`.
    fair: Option<FairSpec>,
}

#[derive(Debug, Clone)]
struct FairSpec {
    /// `fair` priority (else `fifo`, still with owners and limits).
    fair: bool,
    /// Every job of one unknown owner, no limits (see
    /// [`one_owner_fair_decides_like_fifo`]).
    single: bool,
    /// Each user's decayed usage at time 0.
    usages: Vec<u32>,
    limits: u8,
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
    scenario_of(topo, policy, op(admin), ops)
}

/// A scenario of up to `ops` steps drawn from `op`.
fn scenario_of(
    topo: impl Strategy<Value = TopoSpec>,
    policy: impl Strategy<Value = u8>,
    op: BoxedStrategy<Op>,
    ops: usize,
) -> impl Strategy<Value = Scenario> {
    (
        topo,
        prop::collection::vec(dev_spec(), 0..=8),
        policy,
        prop_oneof![Just(2u32), Just(4), Just(64)],
        prop::collection::vec(op, 1..ops),
    )
        .prop_map(|(topo, devices, policy, max_running, ops)| Scenario {
            topo,
            devices,
            policy,
            max_running,
            ops,
            fair: None,
        })
}

// ---------------------------------------------------------------- the model

struct Job {
    alloc: Allocation,
    deadline: u64,
    start: u64,
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
    /// Submissions of the jobs queued with [`Op::SubmitAs`].
    subs: BTreeMap<JobId, Submission>,
    /// The limits the model last set (mirrored, resolved by [`resolve`]).
    user_limits: UserLimits,
}

impl Model {
    fn new(sc: &Scenario, checks: bool, idle_passes: bool) -> Model {
        let limits = Limits {
            max_running: sc.max_running,
            max_lifetime_secs: LIFETIME,
            min_job_mem: 64 * MIB,
        };
        let mut s = Scheduler::new(machine(sc), policy_of(sc.policy), limits);
        let mut user_limits = UserLimits::default();
        if let Some(f) = &sc.fair {
            s.set_priority(fair_config(f.fair));
            if !f.single {
                user_limits = self::user_limits(f.limits);
                s.set_user_limits(user_limits.clone());
                let users = f.usages.iter().enumerate();
                s.restore_usage(UsageLedger {
                    at: 0,
                    half_life_secs: 0,
                    users: users.map(|(u, x)| (u as u32, *x as f64)).collect(),
                });
            }
        }
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
            subs: BTreeMap::new(),
            user_limits,
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
                let owned = !self.subs.is_empty() || !self.user_limits.is_empty();
                if owned {
                    s.set_priority(self.s.priority_config().clone());
                    s.set_user_limits(self.user_limits.clone());
                    s.restore_usage(self.s.usage().clone());
                }
                for (id, job) in &self.running {
                    match self.subs.get(id) {
                        Some(sub) => {
                            let a = job.alloc.clone();
                            s.adopt_for(*id, a, job.deadline, *sub, Some(job.start));
                        }
                        None => s.adopt(*id, job.alloc.clone(), job.deadline),
                    }
                }
                for (id, d) in &self.pending {
                    match self.subs.get(id) {
                        Some(sub) => s.enqueue_for(*id, d.clone(), *sub),
                        None => s.enqueue(*id, d.clone()),
                    }
                }
                if owned {
                    // The daemon re-keys once it has restored everything.
                    s.reprioritize(self.now);
                    self.promises.clear();
                }
                self.s = s;
                assert_eq!(self.s.free(), &free, "adopting gives the same books");
            }
            Op::SubmitAs(raw, u, nice) => self.submit_as(raw, *u, *nice),
            Op::Reprioritize => {
                self.s.reprioritize(self.now);
                self.promises.clear();
            }
            Op::SetUserLimits(seed) => {
                self.user_limits = user_limits(*seed);
                self.s.set_user_limits(self.user_limits.clone());
                self.promises.clear();
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
        let order: Vec<JobId> = self.s.queue_order().collect();
        let held = self.held_by_user();
        if self.s.priority_config().mode == PriorityMode::Fair && self.subs.is_empty() {
            // One owner: re-keying never changes the order.
            self.s.reprioritize(self.now);
        }
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
                    start: self.now,
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
        if !self.subs.is_empty() {
            self.check_owned_pass(&order, held, &starts);
        } else if policy == Policy::FifoStrict {
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

    /// What each user's running jobs hold.
    fn held_by_user(&self) -> BTreeMap<u32, Held> {
        let mut held: BTreeMap<u32, Held> = BTreeMap::new();
        for (id, job) in &self.running {
            if let Some(sub) = self.subs.get(id) {
                let h = Held::of_alloc(&job.alloc, self.s.machine());
                held.entry(sub.owner.uid).or_default().add(&h);
            }
        }
        held
    }

    /// A submission through the limits check; what it refuses must be over
    /// a limit, what it accepts within them.
    fn submit_as(&mut self, raw: &RawReq, u: u8, nice: i8) {
        let req = request(raw, self.s.machine());
        let Ok(d) = self.s.validate(&req) else {
            return;
        };
        let uid = u as u32 % USERS;
        let owner = Owner {
            uid,
            gid: 100 + uid % 2,
        };
        let m = self.s.machine();
        let lim = resolve(&self.user_limits, owner);
        let alone = over_at_turn(&lim, m, &Held::default(), &d);
        let pending = self
            .pending
            .keys()
            .filter(|id| self.subs.get(id).is_some_and(|s| s.owner.uid == uid))
            .count() as u64;
        let full = lim.pending.is_some_and(|l| pending >= l);
        match self.s.check_submit(owner, &d) {
            Err(LimitError::NeverFits { .. }) => {
                assert!(alone.is_some(), "refused {d:?} that fits {lim:?}");
                return;
            }
            Err(LimitError::TooManyPending { .. }) => {
                assert!(alone.is_none() && full, "refused pending {pending} {lim:?}");
                return;
            }
            Ok(()) => assert!(alone.is_none() && !full, "accepted {d:?} over {lim:?}"),
        }
        let id = self.next_id;
        self.next_id += 1;
        let sub = Submission {
            owner,
            nice: nice as i32 * 100,
            submitted_at: self.now,
            kind: 0,
        };
        self.s.enqueue_for(id, d.clone(), sub);
        self.pending.insert(id, d);
        self.subs.insert(id, sub);
        // A job queued ahead of a reserved head voids its promise.
        let order: Vec<JobId> = self.s.queue_order().collect();
        let pos = |j: JobId| order.iter().position(|x| *x == j);
        self.promises.retain(|h, _| pos(*h) < pos(id));
    }

    /// The checks of a pass over owned jobs, in queue (priority) order:
    /// - no start takes its owner past a limit;
    /// - fifo-strict starts no job while one ahead of it waits, unless that
    ///   one could not start even on an idle machine or was held by its
    ///   owner's limit at its turn;
    /// - the head is never a job held by its owner's limit;
    /// - a reserved head whose promise a job ahead of it (once held by its
    ///   limit) broke by starting is no longer held to it.
    fn check_owned_pass(
        &mut self,
        order: &[JobId],
        mut held: BTreeMap<u32, Held>,
        starts: &[(JobId, Allocation)],
    ) {
        let m = self.s.machine();
        let before = held.clone();
        for (id, alloc) in starts {
            let owner = self.subs[id].owner;
            let lim = resolve(&self.user_limits, owner);
            let add = Held::of_alloc(alloc, m);
            let h = held.entry(owner.uid).or_default();
            assert_eq!(over(&lim, h, &add), None, "job {id} over {lim:?}: {h:?}");
            h.add(&add);
        }
        let pos: BTreeMap<JobId, usize> = order.iter().enumerate().map(|(i, j)| (*j, i)).collect();
        let started: BTreeMap<JobId, &Allocation> = starts.iter().map(|(j, a)| (*j, a)).collect();
        // Pending job `e`'s owner's limits, and what the owner held at its turn.
        let at_turn = |e: JobId| {
            let owner = self.subs[&e].owner;
            let mut held = before.get(&owner.uid).copied().unwrap_or_default();
            for (j, a) in &started {
                if pos[j] < pos[&e] && self.subs[j].owner.uid == owner.uid {
                    held.add(&Held::of_alloc(a, m));
                }
            }
            (resolve(&self.user_limits, owner), held)
        };
        // Whether `e` was held by its owner's limit at its turn.
        let held_back = |e: JobId| {
            let (lim, held) = at_turn(e);
            over_at_turn(&lim, m, &held, &self.pending[&e]).is_some()
        };
        // Whether `e` could not start even on an idle machine, with the
        // vendors its owner's limits leave an `auto` job.
        let idle = Avail::all(m);
        let never = |e: JobId| {
            let d = &self.pending[&e];
            let (lim, held) = at_turn(e);
            let c = d.devices.count as u64;
            let barred: Vec<Vendor> = lim
                .vendor
                .iter()
                .filter(|(v, l)| held.per_vendor[v.index()] as u64 + c > **l)
                .map(|(v, _)| *v)
                .collect();
            if c > 0 && d.devices.vendor.is_none() && !d.exclusive && !barred.is_empty() {
                !matches!(place_avoiding(d, m, &idle, &barred), Some(Ok(_)))
            } else {
                place(d, m, &idle).is_err()
            }
        };
        if self.s.policy() == Policy::FifoStrict {
            if let Some(last) = started.keys().map(|j| pos[j]).max() {
                for e in &order[..last] {
                    if started.contains_key(e) {
                        continue;
                    }
                    assert!(
                        never(*e) || held_back(*e),
                        "fifo-strict started job {} while {e} waits",
                        order[last]
                    );
                }
            }
        }
        if let Some(h) = self.s.head() {
            assert!(!held_back(h), "head {h} is held by its owner's limit");
        }
        let first_start = started.keys().map(|j| pos[j]).min();
        self.promises
            .retain(|h, _| first_start.is_none_or(|f| pos.get(h).is_none_or(|p| *p < f)));
        // A job ahead of a promised head that became eligible (its owner's
        // running job ended) is the head now: the promise was for a queue
        // that no longer is.
        if let Some(new) = self.s.head().and_then(|h| pos.get(&h).copied()) {
            self.promises
                .retain(|h, _| pos.get(h).is_none_or(|p| *p <= new));
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

// ------------------------------------------- fair share and limits (issue 17)

/// Users of the owned scenarios: UIDs 0..USERS, group 100 + UID % 2.
const USERS: u32 = 4;
const DAY: u64 = 24 * 3600;

/// The owned scenarios' priority settings: ages and usage on the scale of
/// the tests' clock (max age 2,000 s, half-life 3,000 s).
fn fair_config(fair: bool) -> PriorityConfig {
    PriorityConfig {
        mode: if fair {
            PriorityMode::Fair
        } else {
            PriorityMode::Fifo
        },
        max_age_secs: 2000,
        half_life_secs: 3000,
        ..PriorityConfig::fair()
    }
}

/// Limits of every kind and level, chosen by `seed`.
fn user_limits(seed: u8) -> UserLimits {
    let seed = seed as usize;
    let pick = |n: usize, k: usize| (seed / k) % n;
    let mut l = UserLimits::default();
    l.default.running_jobs = [None, Some(1), Some(3)][pick(3, 1)];
    l.default.cpus = [None, Some(2), Some(5)][pick(3, 3)];
    l.default.gpus = [None, Some(1)][pick(2, 9)];
    if pick(2, 18) == 1 {
        l.default.gpus_per_vendor.insert(Vendor::Nv, 1);
    }
    if pick(2, 36) == 1 {
        let group = UserLimit {
            mem_bytes: Some(2 * GIB),
            running_jobs: Some(2),
            ..UserLimit::default()
        };
        l.groups.insert(101, group);
    }
    if pick(2, 72) == 1 {
        let user = UserLimit {
            running_jobs: Some(4),
            pending_jobs: Some(3),
            cpus: Some(64),
            ..UserLimit::default()
        };
        l.users.insert(2, user);
    }
    l
}

/// A user's limits, resolved here independently of the library: per
/// resource the user's setting, else the group's, else the default.
#[derive(Debug, Default)]
struct Lim {
    running: Option<u64>,
    pending: Option<u64>,
    cpus: Option<u64>,
    mem: Option<u64>,
    gpus: Option<u64>,
    vendor: BTreeMap<Vendor, u64>,
}

fn resolve(l: &UserLimits, o: Owner) -> Lim {
    let layers: Vec<&UserLimit> = [l.users.get(&o.uid), l.groups.get(&o.gid), Some(&l.default)]
        .into_iter()
        .flatten()
        .collect();
    let pick = |f: &dyn Fn(&UserLimit) -> Option<u64>| layers.iter().find_map(|x| f(x));
    let mut vendor = BTreeMap::new();
    for v in Vendor::ALL {
        if let Some(n) = pick(&|x| x.gpus_per_vendor.get(&v).map(|n| *n as u64)) {
            vendor.insert(v, n);
        }
    }
    Lim {
        running: pick(&|x| x.running_jobs.map(u64::from)),
        pending: pick(&|x| x.pending_jobs.map(u64::from)),
        cpus: pick(&|x| x.cpus.map(u64::from)),
        mem: pick(&|x| x.mem_bytes),
        gpus: pick(&|x| x.gpus.map(u64::from)),
        vendor,
    }
}

/// The first limit that `adding` takes a user holding `held` past (only
/// what it adds counts).
fn over(lim: &Lim, held: &Held, adding: &Held) -> Option<String> {
    let mut checks = vec![
        (
            "running jobs",
            lim.running,
            held.jobs as u64,
            adding.jobs as u64,
        ),
        ("CPUs", lim.cpus, held.cpus as u64, adding.cpus as u64),
        ("memory", lim.mem, held.mem, adding.mem),
        ("GPUs", lim.gpus, held.devices as u64, adding.devices as u64),
    ];
    for (v, n) in &lim.vendor {
        let i = v.index();
        checks.push((
            "vendor GPUs",
            Some(*n),
            held.per_vendor[i] as u64,
            adding.per_vendor[i] as u64,
        ));
    }
    checks
        .into_iter()
        .find(|(_, l, h, a)| l.is_some_and(|l| *a > 0 && h + a > l))
        .map(|(what, ..)| what.to_string())
}

/// Whether pending `d` is over its owner's limits beside `held`; an `auto`
/// job is when every vendor it could use is at its own limit.
fn over_at_turn(lim: &Lim, m: &Machine, held: &Held, d: &Demand) -> Option<String> {
    let adding = Held::of_demand(d, m);
    if let Some(what) = over(lim, held, &adding) {
        return Some(what);
    }
    let c = d.devices.count;
    if c == 0 || d.devices.vendor.is_some() || d.exclusive {
        return None;
    }
    let cands: Vec<Vendor> = Vendor::ALL
        .into_iter()
        .filter(|v| m.vendor_count(*v) >= c as usize)
        .collect();
    let barred = |v: &Vendor| {
        lim.vendor
            .get(v)
            .is_some_and(|l| held.per_vendor[v.index()] as u64 + c as u64 > *l)
    };
    (!cands.is_empty() && cands.iter().all(barred)).then(|| "auto GPUs".to_string())
}

fn op_owned() -> BoxedStrategy<Op> {
    prop_oneof![
        8 => (raw_req(), any::<u8>(), -5..5i8).prop_map(|(r, u, n)| Op::SubmitAs(r, u, n)),
        4 => Just(Op::Pass),
        3 => (0..400u16).prop_map(Op::Advance),
        2 => any::<u16>().prop_map(Op::Finish),
        1 => any::<u16>().prop_map(Op::Cancel),
        1 => Just(Op::Restart),
        1 => Just(Op::Reprioritize),
        1 => any::<u8>().prop_map(Op::SetUserLimits),
    ]
    .boxed()
}

/// Scenarios of owned jobs: users with usage, nice values and limits, in
/// `fair` or `fifo` priority.
fn owned_scenario(
    topo: impl Strategy<Value = TopoSpec>,
    policy: impl Strategy<Value = u8>,
    ops: usize,
) -> impl Strategy<Value = Scenario> {
    let fair = (
        prop::bool::weighted(0.8),
        prop::collection::vec(0..1000u32, USERS as usize),
        any::<u8>(),
    );
    (scenario_of(topo, policy, op_owned(), ops), fair).prop_map(
        |(mut sc, (fair, usages, limits))| {
            let single = false;
            sc.fair = Some(FairSpec {
                fair,
                single,
                usages,
                limits,
            });
            sc
        },
    )
}

fn sub(uid: u32, at: u64, nice: i32) -> Submission {
    Submission {
        owner: Owner { uid, gid: uid },
        nice,
        submitted_at: at,
        kind: 0,
    }
}

/// 1 CPU, nothing else; the tests' limits.
fn one_cpu() -> Machine {
    Machine::new(Topology::single(1, 4 * GIB), vec![])
}

fn test_limits() -> Limits {
    Limits {
        max_running: 64,
        max_lifetime_secs: LIFETIME,
        min_job_mem: 64 * MIB,
    }
}

/// Of two equal jobs (1 CPU each, waiting on a 1-CPU machine), the one that
/// starts is the one the documented formula ranks first:
/// `10,000 * 2^(-U/S) + 20,000 * min(wait / 7 days, 1) - nice`, `U` the
/// owner's share of all usage, `S` their share of the active users' (here
/// the two owners and the blocker's, so 1/3); equal priorities go in
/// submission order.
fn pair(ua: u32, ub: u32, ta: u64, tb: u64, gap: u64, na: i32, nb: i32) -> Option<JobId> {
    let cfg = PriorityConfig {
        half_life_secs: 0,
        usage_weights: Some(UsageWeights {
            cpu: 0.0,
            gpu: 0.0,
            mem_gib: 0.0,
        }),
        ..PriorityConfig::fair()
    };
    assert_eq!(
        (cfg.weight_fairshare, cfg.weight_age, cfg.max_age_secs),
        (10_000, 20_000, 7 * DAY),
        "the documented weights"
    );
    let mut s = Scheduler::with_priority(one_cpu(), Policy::FifoStrict, test_limits(), cfg);
    let usage = [(1, ua as f64), (2, ub as f64)].into_iter().collect();
    s.restore_usage(UsageLedger {
        at: 0,
        half_life_secs: 0,
        users: usage,
    });
    let d = s.validate(&Request::default()).unwrap();
    s.enqueue_for(9, d.clone(), sub(3, 0, 0));
    assert_eq!(s.schedule(0).len(), 1);
    s.enqueue_for(1, d.clone(), sub(1, ta, na));
    s.enqueue_for(2, d, sub(2, tb, nb));
    let now = ta.max(tb) + gap;
    s.reprioritize(now);
    s.finish_at(9, now);
    let starts = s.schedule(now);
    assert_eq!(starts.len(), 1);
    // The formula, in whole points of fair share and exact age.
    let total = (ua + ub) as f64;
    let f = |u: u32| match total {
        0.0 => 1.0,
        _ => (-(u as f64 / total) * 3.0).exp2(),
    };
    let points = |u: u32| 10_000.0 * f(u);
    if [points(ua), points(ub)]
        .iter()
        .any(|p| (p.fract() - 0.5).abs() < 1e-6)
    {
        return None; // rounding at .5 may go either way
    }
    let m = (7 * DAY) as i128;
    let key = |u: u32, t: u64, n: i32| {
        m * (points(u).round() as i128 - n as i128) + 20_000 * (now - t).min(7 * DAY) as i128
    };
    let (ka, kb) = (key(ua, ta, na), key(ub, tb, nb));
    let want = if kb > ka { 2 } else { 1 };
    assert_eq!(starts[0].0, want, "keys {ka} {kb}");
    Some(starts[0].0)
}

/// One 1-CPU job every 4 s (from user 1..4) on a 1-CPU machine where each
/// runs 5 s; job `x` comes from the heaviest user 0. Returns the start of
/// each job.
fn stream(usages: &[u32], users: &[u8], x: usize, policy: Policy) -> BTreeMap<JobId, u64> {
    let cfg = PriorityConfig {
        max_age_secs: 1000,
        ..PriorityConfig::fair()
    };
    let mut s = Scheduler::with_priority(one_cpu(), policy, test_limits(), cfg);
    let mut usage: BTreeMap<u32, f64> = usages
        .iter()
        .enumerate()
        .map(|(u, x)| (u as u32 + 1, *x as f64))
        .collect();
    usage.insert(0, 1e6);
    s.restore_usage(UsageLedger {
        at: 0,
        half_life_secs: 0,
        users: usage,
    });
    let d = s
        .validate(&Request {
            time_limit_secs: Some(5),
            ..Request::default()
        })
        .unwrap();
    let mut starts = BTreeMap::new();
    let mut running: Option<(JobId, u64)> = None;
    for now in 0..4 * users.len() as u64 + 2000 {
        if let Some((id, end)) = running {
            if end <= now {
                s.finish_at(id, now);
                running = None;
            }
        }
        if now % 4 == 0 && ((now / 4) as usize) < users.len() {
            let k = (now / 4) as usize;
            let uid = if k == x { 0 } else { 1 + users[k] as u32 % 4 };
            s.enqueue_for(k as JobId, d.clone(), sub(uid, now, 0));
        }
        if now % 60 == 0 {
            s.reprioritize(now);
        }
        for (id, _) in s.schedule(now) {
            starts.insert(id, now);
            running = Some((id, now + 5));
        }
    }
    starts
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Owned jobs on small machines, any policy, with limits changing: every
    /// check of the plain scenarios, plus those of [`Model::check_owned_pass`].
    #[test]
    fn owned_jobs_keep_every_invariant_and_limit(sc in owned_scenario(small_topo(), 0..4u8, 60)) {
        check(&sc);
    }

    /// fifo-strict with owners: nothing passes the highest-priority job that
    /// waits for resources; jobs held by their limits hold nobody back.
    #[test]
    fn owned_fifo_strict_never_overtakes_in_priority_order(
        sc in owned_scenario(small_topo(), Just(0u8), 50)
    ) {
        check(&sc);
    }

    /// strict-backfill with owners: a reservation is kept unless a job of
    /// higher priority arrives or becomes eligible, or priorities are
    /// recomputed.
    #[test]
    fn owned_strict_backfill_keeps_reservations(
        sc in owned_scenario(small_topo(), Just(2u8), 60)
    ) {
        check(&sc);
    }

    /// With one owner (and no limits) `fair` decides exactly like `fifo`.
    #[test]
    fn one_owner_fair_decides_like_fifo(sc in scenario(small_topo(), 0..4u8, true, 60)) {
        let fifo = run(&sc, false, false);
        let mut fair = sc.clone();
        fair.fair = Some(FairSpec { fair: true, single: true, usages: vec![], limits: 0 });
        check(&fair);
        prop_assert_eq!(run(&fair, false, false), fifo);
    }

    /// Of two equal pending jobs, the one whose owner has less decayed usage
    /// starts first unless the other's age outweighs it by the weights.
    #[test]
    fn less_usage_starts_first_unless_age_outweighs_it(
        ua in 0..1000u32, ub in 0..1000u32,
        ta in 0..10 * DAY, tb in 0..10 * DAY, gap in 0..10 * DAY,
        na in prop_oneof![Just(0i32), 0..5000i32], nb in prop_oneof![Just(0i32), 0..5000i32],
    ) {
        let first = pair(ua, ub, ta, tb, gap, na, nb);
        if ta == tb && na == nb && ua != ub {
            let lighter = if ua < ub { 1 } else { 2 };
            prop_assert!(first.is_none_or(|f| f == lighter));
        }
    }

    /// A stream of later jobs from lighter users keeps starting; the heavy
    /// user's job still starts before any job submitted `max_age * w_fs /
    /// w_age` (500 s) after it, and within `max_age`.
    #[test]
    fn no_job_waits_forever_while_later_jobs_keep_starting(
        usages in prop::collection::vec(0..1000u32, 4),
        users in prop::collection::vec(any::<u8>(), 150),
        x in 20..100usize,
        policy in 0..4u8,
    ) {
        let starts = stream(&usages, &users, x, policy_of(policy));
        let tx = starts.get(&(x as JobId)).copied();
        prop_assert!(tx.is_some(), "job {} never started", x);
        let tx = tx.unwrap_or_default();
        let submitted = |k: usize| 4 * k as u64;
        prop_assert!(tx - submitted(x) < 1000, "waited {} s", tx - submitted(x));
        for (k, t) in &starts {
            if submitted(*k as usize) >= submitted(x) + 500 {
                prop_assert!(*t > tx, "job {} ({} s later) started at {} before {} at {}",
                    k, submitted(*k as usize) - submitted(x), t, x, tx);
            }
        }
        prop_assert!(starts.len() > x + 50, "later jobs kept starting");
    }

    /// Under fifo-strict, with jobs ending at their time limits and no new
    /// arrivals, every job starts by its estimated start; under
    /// strict-backfill the head's estimate is its reservation.
    #[test]
    fn jobs_start_by_their_estimated_start(
        sc in scenario(small_topo(), prop_oneof![Just(0u8), Just(2u8)], false, 30)
    ) {
        estimates_hold(&sc);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Owned jobs on the big machine.
    #[test]
    fn big_machine_owned_jobs_keep_every_invariant_and_limit(
        sc in owned_scenario((0..4u8).prop_map(|split| TopoSpec::Big { split }), 0..4u8, 80)
    ) {
        check(&sc);
    }
}

/// Submits the scenario's requests at time 0 (with its passes between),
/// estimates every pending job's start, then runs every job to its time
/// limit with a pass at each end.
fn estimates_hold(sc: &Scenario) {
    let limits = Limits {
        max_running: sc.max_running,
        max_lifetime_secs: LIFETIME,
        min_job_mem: 64 * MIB,
    };
    let policy = policy_of(sc.policy);
    let mut s = Scheduler::new(machine(sc), policy, limits);
    let mut deadline: BTreeMap<JobId, u64> = BTreeMap::new();
    let mut next: JobId = 1;
    for op in &sc.ops {
        match op {
            Op::Submit(raw) => {
                if let Ok(d) = s.validate(&request(raw, s.machine())) {
                    s.enqueue(next, d);
                    next += 1;
                }
            }
            Op::Pass => {
                for (id, _) in s.schedule(0) {
                    deadline.insert(id, s.running(id).unwrap().deadline);
                }
            }
            _ => {}
        }
    }
    let estimates: BTreeMap<JobId, Estimate> = s.estimates(0, 1000, false).into_iter().collect();
    let mut now = 0;
    loop {
        let starts = s.schedule(now);
        let reserved = s.reserved_start().filter(|(_, t)| *t != u64::MAX);
        if let (Policy::StrictBackfill, Some((h, t)), 64..) = (policy, reserved, sc.max_running) {
            let e = s.estimated_start(h, now);
            assert_eq!(e, Some(Estimate::At { time: t }), "head {h} at {now}");
        }
        for (id, _) in starts {
            deadline.insert(id, s.running(id).unwrap().deadline);
            if policy == Policy::FifoStrict {
                match &estimates[&id] {
                    Estimate::At { time } => {
                        assert!(now <= *time, "job {id} started at {now}, estimated {time}")
                    }
                    e => panic!("job {id} started at {now}, estimated {e}"),
                }
            }
        }
        let running: Vec<(JobId, u64)> = deadline
            .iter()
            .filter(|(id, _)| s.running(**id).is_some())
            .map(|(id, t)| (*id, *t))
            .collect();
        let Some(t) = running.iter().map(|(_, t)| *t).min() else {
            break;
        };
        now = t;
        for (id, end) in running {
            if end <= now {
                s.finish_at(id, now);
            }
        }
    }
    for (id, e) in &estimates {
        if s.is_pending(*id) {
            assert!(
                matches!(e, Estimate::Unknown(_)),
                "job {id} estimated {e} never started"
            );
        }
    }
}

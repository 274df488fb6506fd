//! Fair share, per-user limits and estimated starts (issue 17).

use super::*;

// ------------------------------------------- fair share and limits (issue 17)

/// Users of the owned scenarios: UIDs 0..USERS, group 100 + UID % 2.
pub(crate) const USERS: u32 = 4;
pub(crate) const DAY: u64 = 24 * 3600;

/// The owned scenarios' priority settings: ages and usage on the scale of
/// the tests' clock (max age 2,000 s, half-life 3,000 s).
pub(crate) fn fair_config(fair: bool) -> PriorityConfig {
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
pub(crate) fn user_limits(seed: u8) -> UserLimits {
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
pub(crate) struct Lim {
    pub(crate) running: Option<u64>,
    pub(crate) pending: Option<u64>,
    pub(crate) cpus: Option<u64>,
    pub(crate) mem: Option<u64>,
    pub(crate) gpus: Option<u64>,
    pub(crate) vendor: BTreeMap<Vendor, u64>,
}

pub(crate) fn resolve(l: &UserLimits, o: Owner) -> Lim {
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
pub(crate) fn over(lim: &Lim, held: &Held, adding: &Held) -> Option<String> {
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
pub(crate) fn over_at_turn(lim: &Lim, m: &Machine, held: &Held, d: &Demand) -> Option<String> {
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

pub(crate) fn op_owned() -> BoxedStrategy<Op> {
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
pub(crate) fn owned_scenario(
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

pub(crate) fn sub(uid: u32, at: u64, nice: i32) -> Submission {
    Submission {
        owner: Owner { uid, gid: uid },
        nice,
        submitted_at: at,
        kind: 0,
    }
}

/// 1 CPU, nothing else; the tests' limits.
pub(crate) fn one_cpu() -> Machine {
    Machine::new(Topology::single(1, 4 * GIB), vec![])
}

pub(crate) fn test_limits() -> Limits {
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
pub(crate) fn pair(
    ua: u32,
    ub: u32,
    ta: u64,
    tb: u64,
    gap: u64,
    na: i32,
    nb: i32,
) -> Option<JobId> {
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
pub(crate) fn stream(
    usages: &[u32],
    users: &[u8],
    x: usize,
    policy: Policy,
) -> BTreeMap<JobId, u64> {
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
pub(crate) fn estimates_hold(sc: &Scenario) {
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

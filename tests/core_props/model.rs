//! The model: a scheduler driven by the scenario's steps, with what it
//! expects of each step kept beside it.

use super::*;

impl Model {
    pub(crate) fn new(sc: &Scenario, checks: bool, idle_passes: bool) -> Model {
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

    pub(crate) fn step(&mut self, op: &Op) {
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

    pub(crate) fn finish(&mut self, id: JobId) {
        let job = self.running.remove(&id).unwrap();
        assert_eq!(self.s.finish(id), Some(job.alloc));
        assert_eq!(self.s.finish(id), None);
    }

    pub(crate) fn pass(&mut self) {
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

    /// What each user's running jobs hold.
    pub(crate) fn held_by_user(&self) -> BTreeMap<u32, Held> {
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
    pub(crate) fn submit_as(&mut self, raw: &RawReq, u: u8, nice: i8) {
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

    pub(crate) fn drain(&mut self) {
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

pub(crate) fn nth<'a>(mut keys: impl ExactSizeIterator<Item = &'a JobId>, n: u16) -> Option<JobId> {
    let len = keys.len();
    (len > 0).then(|| *keys.nth(n as usize % len).unwrap())
}

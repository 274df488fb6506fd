//! The invariants checked after each step: fifo order, reservations kept,
//! reasons, the books, owners' limits, and each allocation against its demand.

use super::*;

impl Model {
    /// fifo-strict: a job may start while an earlier one waits only when the
    /// earlier one could not start even on an idle machine (it waits on
    /// devices that are busy outside xlurm, unhealthy or disabled).
    pub(crate) fn check_fifo(&self, before: &BTreeMap<JobId, Demand>, started: &BTreeSet<JobId>) {
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
    pub(crate) fn check_reservations(&mut self, reserved: Option<(JobId, u64)>) {
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

    pub(crate) fn check_reasons(&self) {
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
    pub(crate) fn check_books(&self) {
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

    /// The checks of a pass over owned jobs, in queue (priority) order:
    /// - no start takes its owner past a limit;
    /// - fifo-strict starts no job while one ahead of it waits, unless that
    ///   one could not start even on an idle machine or was held by its
    ///   owner's limit at its turn;
    /// - the head is never a job held by its owner's limit;
    /// - a reserved head whose promise a job ahead of it (once held by its
    ///   limit) broke by starting is no longer held to it.
    pub(crate) fn check_owned_pass(
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
}

/// What validation accepts fits the idle machine once every device is healthy
/// (validation looks at disabled devices, not at health, which changes).
pub(crate) fn check_can_ever_run(m: &Machine, d: &Demand) {
    let mut healthy = m.clone();
    for dev in &mut healthy.devices {
        dev.health = Health::Ok;
    }
    if let Err(r) = place(d, &healthy, &Avail::all(&healthy)) {
        panic!("accepted {d:?} can never run on {:?}: {r:?}", m.topology);
    }
}

/// Every allocation gives exactly what was asked, from usable devices.
pub(crate) fn check_alloc(s: &Scheduler, id: JobId, d: &Demand, a: &Allocation) {
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

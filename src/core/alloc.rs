//! Placement: which CPUs, memory nodes and devices a job gets.
//!
//! Rules, in order:
//! 1. Devices come from one vendor: the one asked for, or the first in
//!    [`Vendor::ALL`] order that fits (`auto`). Exact IDs must all be free.
//!    Otherwise devices on one NUMA node are preferred, then the lowest IDs.
//! 2. CPUs and memory come from one node whenever one fits: the node of the
//!    job's devices if it has room, else the fullest node that still fits
//!    (best fit, so big holes stay open for big jobs).
//! 3. A job no single node fits is spread over several nodes, unless it is
//!    `numa_local`; memory is charged per node, and only charged nodes go
//!    into `AllowedMemoryNodes`.
//! 4. An exclusive job fits only on an idle machine and holds all of it.
//!
//! A job that does not fit gets the mildest reason that explains it: held
//! resources (`Resources`, `Exclusive`) before busy, unknown or disabled
//! devices, across every vendor an `auto` job could use. An exclusive job's
//! devices are judged as on the idle machine, so one whose devices are busy
//! says so even while the machine is in use. The scheduler relies on this: a
//! job failing for a device reason could not start however many jobs ended.

use super::books::Avail;
use super::device::{DeviceRef, Health, Vendor};
use super::idset::{CpuSet, NodeSet};
use super::machine::Machine;
use super::reason::{Reason, Shortage};
use super::request::Demand;
use serde::{Deserialize, Serialize};

/// Everything a job's unit needs from the scheduler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub cpus: CpuSet,
    /// `AllowedMemoryNodes`: the nodes charged for the job's memory.
    pub mem_nodes: NodeSet,
    /// `MemoryMax`.
    pub mem_bytes: u64,
    /// Bytes charged to each node.
    pub mem_charge: Vec<(u32, u64)>,
    /// The devices the job may see and open.
    pub devices: Vec<DeviceRef>,
    /// Whether CPUs or memory span more than one node.
    pub spread: bool,
    /// Whether the job holds the whole machine.
    pub exclusive: bool,
}

impl Allocation {
    /// The device slots this allocation keeps from others: its own devices, or
    /// every device for an exclusive job.
    pub fn held_slots<'a>(&'a self, machine: &'a Machine) -> Box<dyn Iterator<Item = usize> + 'a> {
        if self.exclusive {
            Box::new(0..machine.devices.len())
        } else {
            Box::new(
                self.devices
                    .iter()
                    .filter_map(|d| machine.slot(d.vendor, d.index)),
            )
        }
    }

    /// The nodes the job's CPUs lie on.
    pub fn cpu_nodes(&self, machine: &Machine) -> NodeSet {
        machine
            .topology
            .nodes
            .iter()
            .filter(|n| !n.cpus.is_disjoint(&self.cpus))
            .map(|n| n.id)
            .collect()
    }
}

/// Places `demand` within `avail`, or says why it does not fit.
pub fn place(demand: &Demand, machine: &Machine, avail: &Avail) -> Result<Allocation, Reason> {
    if demand.exclusive {
        return place_exclusive(demand, machine, avail);
    }
    if demand.devices.count == 0 {
        let (cpus, charge, spread) = place_cpus(demand, machine, avail, None)?;
        return Ok(build(demand, cpus, charge, spread, Vec::new()));
    }
    let mut reason: Option<Reason> = None;
    for vendor in candidate_vendors(demand, machine) {
        match place_on_vendor(demand, machine, avail, vendor) {
            Ok(a) => return Ok(a),
            Err(r) => keep_mildest(&mut reason, r),
        }
    }
    Err(reason.unwrap_or(Reason::Resources(Shortage::Devices {
        vendor: demand.devices.vendor,
        need: demand.devices.count,
        free: 0,
    })))
}

/// [`place`] for a non-exclusive `auto` device job that must not get the
/// devices of the `barred` vendors (its owner's limit for them is reached);
/// `None` when no vendor that could ever hold it is left.
pub fn place_avoiding(
    demand: &Demand,
    machine: &Machine,
    avail: &Avail,
    barred: &[Vendor],
) -> Option<Result<Allocation, Reason>> {
    let mut reason: Option<Reason> = None;
    for vendor in candidate_vendors(demand, machine) {
        if barred.contains(&vendor) {
            continue;
        }
        match place_on_vendor(demand, machine, avail, vendor) {
            Ok(a) => return Some(Ok(a)),
            Err(r) => keep_mildest(&mut reason, r),
        }
    }
    reason.map(Err)
}

/// A summary of free resources for a cheap test that rules out jobs which
/// certainly do not fit, without building a placement: free CPUs and memory
/// per node and in total, usable free devices per vendor, and whether the
/// machine is idle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    node_cpus: Vec<u32>,
    node_mem: Vec<u64>,
    cpus: u32,
    mem: u64,
    devices: [u32; Vendor::ALL.len()],
    idle: bool,
}

impl Room {
    pub fn of(avail: &Avail, machine: &Machine) -> Room {
        let nodes = &machine.topology.nodes;
        // CPUs on a node whose memory is all budgeted can take no job (see
        // `place_cpus`): they are not counted as free.
        let node_cpus: Vec<u32> = nodes
            .iter()
            .zip(&avail.mem)
            .map(|(n, m)| match *m > 0 || n.mem_bytes == 0 {
                true => avail.cpus.intersection_len(&n.cpus),
                false => 0,
            })
            .collect();
        let mut devices = [0u32; Vendor::ALL.len()];
        let mut all_devices = true;
        for (dev, free) in machine.devices.iter().zip(&avail.devices) {
            all_devices &= *free;
            if *free && dev.usable() {
                devices[dev.vendor.index()] += 1;
            }
        }
        let cpus = node_cpus.iter().sum();
        let idle = all_devices
            && avail.cpus.len() == machine.topology.total_cpus()
            && nodes.iter().zip(&avail.mem).all(|(n, m)| *m == n.mem_bytes);
        Room {
            cpus,
            mem: avail.mem.iter().sum(),
            node_mem: avail.mem.clone(),
            node_cpus,
            devices,
            idle,
        }
    }

    /// Free CPUs in total.
    pub fn cpus(&self) -> u32 {
        self.cpus
    }

    /// False when [`place`] would certainly fail for `demand` in the view this
    /// summarises; true when it may succeed. Exact for jobs without devices
    /// that are not exclusive.
    #[inline]
    pub fn may_fit(&self, demand: &Demand) -> bool {
        self.admits(&Need::of(demand))
    }

    /// [`Room::may_fit`] for a demand's [`Need`].
    #[inline]
    pub fn admits(&self, need: &Need) -> bool {
        if need.exclusive {
            return self.idle;
        }
        if need.count > 0 {
            let enough = match need.vendor {
                Some(v) => self.devices[v.index()] >= need.count,
                None => self.devices.iter().any(|n| *n >= need.count),
            };
            if !enough {
                return false;
            }
        }
        let (c, m) = (need.cpus, need.mem);
        if need.numa_local {
            self.node_cpus
                .iter()
                .zip(&self.node_mem)
                .any(|(nc, nm)| *nc >= c && *nm >= m)
        } else {
            self.cpus >= c && self.mem >= m
        }
    }
}

/// What the quick fit test reads of a [`Demand`]: small, so that the
/// scheduler can keep one per queued job where a pass walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub mem: u64,
    pub cpus: u32,
    pub count: u32,
    pub vendor: Option<Vendor>,
    pub exclusive: bool,
    pub numa_local: bool,
}

impl Need {
    /// An exclusive job: it holds the whole machine, whatever it asked for.
    pub const EXCLUSIVE: Need = Need {
        mem: 0,
        cpus: 0,
        count: 0,
        vendor: None,
        exclusive: true,
        numa_local: false,
    };

    pub fn of(d: &Demand) -> Need {
        Need {
            mem: d.mem_bytes,
            cpus: d.cpus,
            count: d.devices.count,
            vendor: d.devices.vendor,
            exclusive: d.exclusive,
            numa_local: d.numa_local,
        }
    }
}

/// How hard a failure is to cure: freeing resources helps a `Resources` (or
/// `Exclusive`) failure, but not a busy, unhealthy or disabled device.
fn severity(r: &Reason) -> u8 {
    match r {
        Reason::DevicesBusy => 1,
        Reason::DevicesUnknown => 2,
        Reason::DevicesDisabled => 3,
        _ => 0,
    }
}

/// Keeps the mildest of the vendors' failures (the first among equals): an
/// `auto` job that one vendor could give once jobs finish waits on resources,
/// even if an earlier vendor's devices are busy. The scheduler relies on this:
/// a job failing with a device reason holds nothing back.
fn keep_mildest(kept: &mut Option<Reason>, r: Reason) {
    let milder = match kept {
        Some(k) => severity(&r) < severity(k),
        None => true,
    };
    if milder {
        *kept = Some(r);
    }
}

/// Vendors to try, in order: the chosen one, or every vendor with enough
/// devices (not counting excluded ones) to ever fit.
fn candidate_vendors(demand: &Demand, machine: &Machine) -> Vec<Vendor> {
    let d = &demand.devices;
    match d.vendor {
        Some(v) => vec![v],
        None => Vendor::ALL
            .into_iter()
            .filter(|v| {
                machine
                    .devices
                    .iter()
                    .filter(|dev| dev.vendor == *v && !d.exclude.contains(&dev.index))
                    .count()
                    >= d.count as usize
            })
            .collect(),
    }
}

fn build(
    demand: &Demand,
    cpus: CpuSet,
    mem_charge: Vec<(u32, u64)>,
    spread: bool,
    devices: Vec<DeviceRef>,
) -> Allocation {
    Allocation {
        cpus,
        mem_nodes: mem_charge.iter().map(|(n, _)| *n).collect(),
        mem_bytes: demand.mem_bytes,
        mem_charge,
        devices,
        spread,
        exclusive: demand.exclusive,
    }
}

fn place_exclusive(
    demand: &Demand,
    machine: &Machine,
    avail: &Avail,
) -> Result<Allocation, Reason> {
    // Devices are chosen as on the idle machine first: an exclusive job whose
    // devices are busy, unhealthy or disabled says so whether or not the
    // machine is idle, so it never holds the queue back for an idle machine it
    // could not use anyway.
    let all = Avail::all(machine);
    let devices = if demand.devices.count == 0 {
        Vec::new()
    } else {
        let mut found = None;
        let mut reason = None;
        for vendor in candidate_vendors(demand, machine) {
            match choose_devices(demand, machine, &all, vendor) {
                Ok(groups) => {
                    found = Some(groups.into_iter().next().unwrap_or_default());
                    break;
                }
                Err(r) => keep_mildest(&mut reason, r),
            }
        }
        let slots = found.ok_or_else(|| reason.unwrap_or(Reason::DevicesUnknown))?;
        refs(machine, &slots)
    };
    if *avail != all {
        return Err(Reason::Exclusive);
    }
    let topo = &machine.topology;
    let charge: Vec<(u32, u64)> = topo.nodes.iter().map(|n| (n.id, n.mem_bytes)).collect();
    let mut alloc = build(
        demand,
        topo.all_cpus(),
        charge,
        topo.nodes.len() > 1,
        devices,
    );
    alloc.mem_bytes = topo.total_mem().max(demand.mem_bytes);
    Ok(alloc)
}

fn refs(machine: &Machine, slots: &[usize]) -> Vec<DeviceRef> {
    slots
        .iter()
        .map(|s| {
            let d = &machine.devices[*s];
            DeviceRef {
                vendor: d.vendor,
                index: d.index,
                uuid: d.uuid.clone(),
            }
        })
        .collect()
}

fn place_on_vendor(
    demand: &Demand,
    machine: &Machine,
    avail: &Avail,
    vendor: Vendor,
) -> Result<Allocation, Reason> {
    let groups = choose_devices(demand, machine, avail, vendor)?;
    // Try each candidate device set whose devices share a node, with that node
    // preferred for CPUs; the last candidate is the fallback set.
    let mut last_err = None;
    for slots in &groups {
        let pref = common_node(machine, slots);
        match place_cpus(demand, machine, avail, pref) {
            Ok((cpus, charge, spread)) => {
                let local = pref.is_some_and(|p| charge.len() == 1 && charge[0].0 == p);
                if local || pref.is_none() || slots == groups.last().unwrap_or(slots) {
                    return Ok(build(demand, cpus, charge, spread, refs(machine, slots)));
                }
            }
            Err(r) => last_err = Some(r),
        }
    }
    Err(last_err.unwrap_or(Reason::DevicesUnknown))
}

/// The node most of `slots` are on, if any device's node is known.
fn common_node(machine: &Machine, slots: &[usize]) -> Option<u32> {
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for s in slots {
        if let Some(n) = machine.devices[*s].numa_node {
            match counts.iter_mut().find(|(node, _)| *node == n) {
                Some((_, c)) => *c += 1,
                None => counts.push((n, 1)),
            }
        }
    }
    counts.sort_by_key(|(n, c)| (std::cmp::Reverse(*c), *n));
    counts.first().map(|(n, _)| *n)
}

/// Candidate device sets, best first: one per NUMA node that can give all the
/// devices (lowest IDs on it), then the lowest free IDs overall.
fn choose_devices(
    demand: &Demand,
    machine: &Machine,
    avail: &Avail,
    vendor: Vendor,
) -> Result<Vec<Vec<usize>>, Reason> {
    let d = &demand.devices;
    let is_free = |s: usize| avail.devices[s] && machine.devices[s].usable();
    if !d.ids.is_empty() {
        let slots: Vec<usize> = d
            .ids
            .iter()
            .filter_map(|id| machine.slot(vendor, *id))
            .collect();
        if slots.len() != d.ids.len() {
            return Err(Reason::DevicesDisabled);
        }
        if slots.iter().all(|s| is_free(*s)) {
            return Ok(vec![slots]);
        }
        return Err(shortage_reason(
            machine,
            avail,
            &slots,
            d.count,
            Some(vendor),
        ));
    }
    let cands: Vec<usize> = (0..machine.devices.len())
        .filter(|s| {
            machine.devices[*s].vendor == vendor && !d.exclude.contains(&machine.devices[*s].index)
        })
        .collect();
    let free: Vec<usize> = cands.iter().copied().filter(|s| is_free(*s)).collect();
    let need = d.count as usize;
    if free.len() < need {
        return Err(shortage_reason(
            machine,
            avail,
            &cands,
            d.count,
            Some(vendor),
        ));
    }
    let mut nodes: Vec<u32> = free
        .iter()
        .filter_map(|s| machine.devices[*s].numa_node)
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut groups: Vec<Vec<usize>> = nodes
        .into_iter()
        .filter_map(|n| {
            let on: Vec<usize> = free
                .iter()
                .copied()
                .filter(|s| machine.devices[*s].numa_node == Some(n))
                .take(need)
                .collect();
            (on.len() == need).then_some(on)
        })
        .collect();
    let lowest: Vec<usize> = free[..need].to_vec();
    if !groups.contains(&lowest) {
        groups.push(lowest);
    }
    Ok(groups)
}

/// Why `need` of the devices in `slots` are not free: held by jobs
/// (Resources), busy, unknown or unhealthy, or disabled; the mildest cause
/// that would explain the shortage is named.
fn shortage_reason(
    machine: &Machine,
    avail: &Avail,
    slots: &[usize],
    need: u32,
    vendor: Option<Vendor>,
) -> Reason {
    let (mut free, mut held, mut busy, mut unknown) = (0u32, 0u32, 0u32, 0u32);
    for s in slots {
        let dev = &machine.devices[*s];
        if dev.disabled {
            continue;
        }
        match (&dev.health, avail.devices[*s]) {
            (Health::Ok, true) => free += 1,
            (_, false) => held += 1,
            (Health::Busy { .. }, true) => busy += 1,
            (Health::Unknown { .. } | Health::Unhealthy { .. }, true) => unknown += 1,
        }
    }
    if free + held >= need {
        Reason::Resources(Shortage::Devices { vendor, need, free })
    } else if free + held + busy >= need {
        Reason::DevicesBusy
    } else if free + held + busy + unknown >= need {
        Reason::DevicesUnknown
    } else {
        Reason::DevicesDisabled
    }
}

type CpuPlacement = (CpuSet, Vec<(u32, u64)>, bool);

/// CPUs and memory for `demand`, on node `pref` when it fits there.
fn place_cpus(
    demand: &Demand,
    machine: &Machine,
    avail: &Avail,
    pref: Option<u32>,
) -> Result<CpuPlacement, Reason> {
    let (c, m) = (demand.cpus, demand.mem_bytes);
    let nodes = &machine.topology.nodes;
    let free_cpus: Vec<u32> = nodes
        .iter()
        .map(|n| avail.cpus.intersection_len(&n.cpus))
        .collect();
    let fits = |i: usize| free_cpus[i] >= c && avail.mem[i] >= m;
    let single = |i: usize| -> CpuPlacement {
        let cpus = avail
            .cpus
            .intersection(&nodes[i].cpus)
            .take_lowest(c)
            .unwrap_or_default();
        (cpus, vec![(nodes[i].id, m)], false)
    };
    if let Some(i) = pref.and_then(|p| machine.topology.node_pos(p)) {
        if fits(i) {
            return Ok(single(i));
        }
    }
    let best = (0..nodes.len())
        .filter(|i| fits(*i))
        .min_by_key(|i| (free_cpus[*i], avail.mem[*i], nodes[*i].id));
    if let Some(i) = best {
        return Ok(single(i));
    }
    if demand.numa_local {
        let with_cpus = (0..nodes.len())
            .filter(|i| free_cpus[*i] >= c)
            .max_by_key(|i| (avail.mem[*i], std::cmp::Reverse(nodes[*i].id)));
        return Err(match with_cpus {
            None => Reason::Resources(Shortage::Cpus {
                need: c,
                free: free_cpus.iter().copied().max().unwrap_or(0),
            }),
            Some(i) => Reason::Resources(Shortage::Memory {
                node: Some(nodes[i].id),
                need: m,
                free: avail.mem[i],
            }),
        });
    }
    let total_cpus: u32 = free_cpus.iter().sum();
    let total_mem: u64 = avail.mem.iter().sum();
    if total_cpus < c {
        return Err(Reason::Resources(Shortage::Cpus {
            need: c,
            free: total_cpus,
        }));
    }
    if total_mem < m {
        return Err(Reason::Resources(Shortage::Memory {
            node: None,
            need: m,
            free: total_mem,
        }));
    }
    // Nodes with the most free memory first. A node whose memory is all
    // budgeted gives no CPUs: the job's pages would land there uncharged (a
    // node without memory at all, whose CPUs use other nodes' memory, may).
    let mut order: Vec<usize> = (0..nodes.len())
        .filter(|i| avail.mem[*i] > 0 || nodes[*i].mem_bytes == 0)
        .collect();
    order.sort_by_key(|i| (std::cmp::Reverse(avail.mem[*i]), nodes[*i].id));
    // The nodes that together have the CPUs and the memory, and the CPUs
    // taken on each.
    let mut used: Vec<(usize, u32)> = Vec::new();
    let mut cpus = CpuSet::new();
    let (mut cpus_left, mut room_left) = (c, m);
    for i in order {
        if cpus_left == 0 && room_left == 0 {
            break;
        }
        let take = cpus_left.min(free_cpus[i]);
        if take > 0 {
            let got = avail
                .cpus
                .intersection(&nodes[i].cpus)
                .take_lowest(take)
                .unwrap_or_default();
            cpus.union_with(&got);
            cpus_left -= take;
        }
        room_left = room_left.saturating_sub(avail.mem[i]);
        used.push((i, take));
    }
    if cpus_left > 0 {
        // The other free CPUs are on nodes with no memory left to budget.
        return Err(Reason::Resources(Shortage::Cpus {
            need: c,
            free: c - cpus_left,
        }));
    }
    Ok((cpus, spread_charge(m, c, &used, &avail.mem, nodes), true))
}

/// How a spread job's `m` bytes are charged to the `used` (node position,
/// CPUs taken) nodes: every node with memory that gives CPUs is in its
/// `AllowedMemoryNodes` (the kernel puts pages near the CPU that touches
/// them), so each gets its CPUs' share of `m`, at most what it has free; the
/// rest goes first to nodes not charged yet, then to those with room, in
/// order. A node with memory left without a charge (only when `m` is smaller
/// than the number of nodes) is still listed, with 0 bytes; a node without
/// memory is not (the kernel refuses it in a cpuset's mems).
fn spread_charge(
    m: u64,
    c: u32,
    used: &[(usize, u32)],
    free_mem: &[u64],
    nodes: &[super::topology::Node],
) -> Vec<(u32, u64)> {
    let mut charge: Vec<u64> = used
        .iter()
        .map(|&(i, take)| ((m as u128 * take as u128 / c.max(1) as u128) as u64).min(free_mem[i]))
        .collect();
    let mut left = m - charge.iter().sum::<u64>();
    for (k, &(i, _)) in used.iter().enumerate() {
        if left > 0 && charge[k] == 0 && free_mem[i] > 0 {
            charge[k] = 1;
            left -= 1;
        }
    }
    for (k, &(i, _)) in used.iter().enumerate() {
        let more = left.min(free_mem[i] - charge[k]);
        charge[k] += more;
        left -= more;
    }
    let mut out: Vec<(u32, u64)> = used
        .iter()
        .zip(charge)
        .filter(|((i, take), bytes)| *bytes > 0 || (*take > 0 && nodes[*i].mem_bytes > 0))
        .map(|((i, _), bytes)| (nodes[*i].id, bytes))
        .collect();
    out.sort_by_key(|(n, _)| *n);
    out
}

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
use super::device::{DeviceRef, Vendor};
use super::idset::{CpuSet, NodeSet};
use super::machine::Machine;
use super::reason::{Reason, Shortage};
use super::request::Demand;
use serde::{Deserialize, Serialize};

mod cpus;
mod devices;
mod room;

use cpus::place_cpus;
use devices::{candidate_vendors, choose_devices, common_node, refs};
pub use room::{Need, Room};

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

//! Which devices a job gets: the vendors to try, candidate sets best first
//! (one NUMA node, then the lowest IDs), and why none is free.

use crate::core::books::Avail;
use crate::core::device::{DeviceRef, Health, Vendor};
use crate::core::machine::Machine;
use crate::core::reason::{Reason, Shortage};
use crate::core::request::Demand;

/// Vendors to try, in order: the chosen one, or every vendor with enough
/// devices (not counting excluded ones) to ever fit.
pub(super) fn candidate_vendors(demand: &Demand, machine: &Machine) -> Vec<Vendor> {
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

pub(super) fn refs(machine: &Machine, slots: &[usize]) -> Vec<DeviceRef> {
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

/// The node most of `slots` are on, if any device's node is known.
pub(super) fn common_node(machine: &Machine, slots: &[usize]) -> Option<u32> {
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
pub(super) fn choose_devices(
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

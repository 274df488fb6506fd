//! The allocation books: which CPUs, memory and devices are free right now.
//!
//! [`Avail`] is a view of free resources. The books keep the real one; policies
//! build narrower ones (a frozen backfill budget, the free resources minus the
//! head job's reservation) and place jobs against those.

use super::alloc::Allocation;
use super::idset::CpuSet;
use super::machine::Machine;
use super::JobId;
use serde::{Deserialize, Serialize};

/// Free resources: CPUs, bytes per node (by node position), and device slots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Avail {
    pub cpus: CpuSet,
    pub mem: Vec<u64>,
    pub devices: Vec<bool>,
}

impl Avail {
    /// Everything on the machine.
    pub fn all(machine: &Machine) -> Avail {
        Avail {
            cpus: machine.topology.all_cpus(),
            mem: machine.topology.nodes.iter().map(|n| n.mem_bytes).collect(),
            devices: vec![true; machine.devices.len()],
        }
    }

    /// Nothing at all.
    pub fn none(machine: &Machine) -> Avail {
        Avail {
            cpus: CpuSet::new(),
            mem: vec![0; machine.topology.nodes.len()],
            devices: vec![false; machine.devices.len()],
        }
    }

    /// Removes what `alloc` holds. Memory saturates at zero.
    pub fn take(&mut self, machine: &Machine, alloc: &Allocation) {
        self.cpus.subtract(&alloc.cpus);
        for (node, bytes) in &alloc.mem_charge {
            if let Some(pos) = machine.topology.node_pos(*node) {
                self.mem[pos] = self.mem[pos].saturating_sub(*bytes);
            }
        }
        for slot in alloc.held_slots(machine) {
            self.devices[slot] = false;
        }
    }

    /// Gives back what `alloc` holds.
    pub fn give(&mut self, machine: &Machine, alloc: &Allocation) {
        self.cpus.union_with(&alloc.cpus);
        for (node, bytes) in &alloc.mem_charge {
            if let Some(pos) = machine.topology.node_pos(*node) {
                self.mem[pos] = self.mem[pos].saturating_add(*bytes);
            }
        }
        for slot in alloc.held_slots(machine) {
            self.devices[slot] = true;
        }
    }

    /// The resources in both views.
    pub fn intersect(&self, other: &Avail) -> Avail {
        Avail {
            cpus: self.cpus.intersection(&other.cpus),
            mem: self
                .mem
                .iter()
                .zip(&other.mem)
                .map(|(a, b)| *a.min(b))
                .collect(),
            devices: self
                .devices
                .iter()
                .zip(&other.devices)
                .map(|(a, b)| *a && *b)
                .collect(),
        }
    }

    pub fn free_cpus(&self) -> u32 {
        self.cpus.len()
    }
}

/// The real books: free resources and who holds each device.
#[derive(Debug, Clone)]
pub struct Books {
    pub free: Avail,
    /// The job holding each device slot.
    pub holder: Vec<Option<JobId>>,
    /// The last job each device slot was given to, kept after it lets go:
    /// device monitoring tells by it that a slot changed hands during a poll.
    pub last_holder: Vec<Option<JobId>>,
}

impl Books {
    pub fn new(machine: &Machine) -> Books {
        Books {
            free: Avail::all(machine),
            holder: vec![None; machine.devices.len()],
            last_holder: vec![None; machine.devices.len()],
        }
    }

    pub fn charge(&mut self, machine: &Machine, job: JobId, alloc: &Allocation) {
        self.free.take(machine, alloc);
        for slot in alloc.held_slots(machine) {
            self.holder[slot] = Some(job);
            self.last_holder[slot] = Some(job);
        }
    }

    pub fn release(&mut self, machine: &Machine, job: JobId, alloc: &Allocation) {
        self.free.give(machine, alloc);
        for slot in alloc.held_slots(machine) {
            if self.holder[slot] == Some(job) {
                self.holder[slot] = None;
            }
        }
    }
}

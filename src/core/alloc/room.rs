//! The quick fit test: a summary of free resources ([`Room`]) against what a
//! queued job needs ([`Need`]), without building a placement.

use crate::core::books::Avail;
use crate::core::device::Vendor;
use crate::core::machine::Machine;
use crate::core::request::Demand;

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

//! The machine as the scheduler knows it: topology plus devices.

use super::device::{Device, Vendor};
use super::topology::Topology;
use serde::{Deserialize, Serialize};

/// Topology and devices. Devices are kept sorted by (vendor, index); a device's
/// position in [`Machine::devices`] is its *slot*, which the books use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub topology: Topology,
    pub devices: Vec<Device>,
}

impl Machine {
    pub fn new(topology: Topology, mut devices: Vec<Device>) -> Machine {
        devices.sort_by_key(|d| (d.vendor, d.index));
        devices.dedup_by_key(|d| (d.vendor, d.index));
        Machine { topology, devices }
    }

    /// The slot of a vendor's device with logical index `index`.
    pub fn slot(&self, vendor: Vendor, index: u32) -> Option<usize> {
        self.devices
            .binary_search_by_key(&(vendor, index), |d| (d.vendor, d.index))
            .ok()
    }

    pub fn vendor_count(&self, vendor: Vendor) -> usize {
        self.devices.iter().filter(|d| d.vendor == vendor).count()
    }

    /// `nv:4, asc:2`, or `none`.
    pub fn vendor_summary(&self) -> String {
        self.summary(|_| true)
    }

    /// Like [`Machine::vendor_summary`], counting only devices not disabled.
    pub fn enabled_summary(&self) -> String {
        self.summary(|d| !d.disabled)
    }

    fn summary(&self, keep: impl Fn(&Device) -> bool) -> String {
        let parts: Vec<String> = Vendor::ALL
            .into_iter()
            .filter_map(|v| {
                let n = self
                    .devices
                    .iter()
                    .filter(|d| d.vendor == v && keep(d))
                    .count();
                (n > 0).then(|| format!("{v}:{n}"))
            })
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }

    /// A vendor's IDs as a list, e.g. `0-3`.
    pub fn vendor_ids(&self, vendor: Vendor) -> String {
        let ids: super::idset::IdSet = self
            .devices
            .iter()
            .filter(|d| d.vendor == vendor)
            .map(|d| d.index)
            .collect();
        if ids.is_empty() {
            "none".into()
        } else {
            ids.to_list()
        }
    }
}

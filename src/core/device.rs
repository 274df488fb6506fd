//! Accelerators as the scheduler sees them: vendors, devices and their health.
//!
//! Which job holds a device is not stored here: the allocation books
//! (`books.rs`) own that, so a device can never be "held" in two places.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The accelerator vendors xlurm schedules, in the order `auto` tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Nv,
    Asc,
    Mtt,
    Mx,
    Ppu,
    Hcu,
}

impl Vendor {
    /// Every vendor in `auto` order: NVIDIA, Ascend, Moore Threads, MetaX, PPU, HCU.
    pub const ALL: [Vendor; 6] = [
        Vendor::Nv,
        Vendor::Asc,
        Vendor::Mtt,
        Vendor::Mx,
        Vendor::Ppu,
        Vendor::Hcu,
    ];

    /// The short name used on the command line, in D-Bus and in `xqueue`.
    pub fn short(self) -> &'static str {
        match self {
            Vendor::Nv => "nv",
            Vendor::Asc => "asc",
            Vendor::Mtt => "mtt",
            Vendor::Mx => "mx",
            Vendor::Ppu => "ppu",
            Vendor::Hcu => "hcu",
        }
    }

    /// The long name accepted as an alias of [`Vendor::short`].
    pub fn long(self) -> &'static str {
        match self {
            Vendor::Nv => "nvidia",
            Vendor::Asc => "ascend",
            Vendor::Mtt => "mthreads",
            Vendor::Mx => "metax",
            Vendor::Ppu => "ppu",
            Vendor::Hcu => "hcu",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short())
    }
}

/// A vendor name that is none of `nv|asc|mtt|mx|ppu|hcu` or their long forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown device vendor {0:?}: use one of nv|asc|mtt|mx|ppu|hcu (or nvidia|ascend|mthreads|metax)")]
pub struct UnknownVendor(pub String);

impl FromStr for Vendor {
    type Err = UnknownVendor;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Vendor::ALL
            .into_iter()
            .find(|v| s.eq_ignore_ascii_case(v.short()) || s.eq_ignore_ascii_case(v.long()))
            .ok_or_else(|| UnknownVendor(s.to_string()))
    }
}

/// What monitoring last said about a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Health {
    /// The query succeeded and no outside process uses it.
    #[default]
    Ok,
    /// Processes that are not the xlurm job holding it use the device.
    Busy { processes: u32 },
    /// The last query failed or returned nonsense (a changed UUID, say).
    Unknown { error: String },
    /// The vendor library reports the device unhealthy.
    Unhealthy { error: String },
}

/// A device's load at one poll, where its library tells it (a part the
/// library lacks, or a query that fails, is `None`: load never makes a
/// device unknown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    /// The share of the last sample period the device was busy, percent
    /// (NVML's GPU utilization, Ascend's AI Core rate...), 0 to 100.
    pub util_pct: Option<u8>,
    /// Device memory in use, bytes.
    pub mem_used: Option<u64>,
    /// Device memory in all, bytes.
    pub mem_total: Option<u64>,
}

impl Load {
    /// A percentage from a library, kept to 0..=100.
    pub fn pct(v: u32) -> u8 {
        v.min(100) as u8
    }
}

/// One accelerator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub vendor: Vendor,
    /// The vendor's logical index (what users pass to `-i`).
    pub index: u32,
    pub uuid: String,
    /// The NUMA node the device hangs off, when known.
    pub numa_node: Option<u32>,
    pub health: Health,
    /// Excluded by the admin.
    pub disabled: bool,
    /// Its load at the last poll.
    #[serde(default)]
    pub load: Load,
}

impl Device {
    pub fn new(
        vendor: Vendor,
        index: u32,
        uuid: impl Into<String>,
        numa_node: Option<u32>,
    ) -> Self {
        Device {
            vendor,
            index,
            uuid: uuid.into(),
            numa_node,
            health: Health::Ok,
            disabled: false,
            load: Load::default(),
        }
    }

    /// Whether the device may be given to a job, ignoring who holds it now.
    pub fn usable(&self) -> bool {
        !self.disabled && self.health == Health::Ok
    }
}

/// A device as a job's allocation names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceRef {
    pub vendor: Vendor,
    pub index: u32,
    pub uuid: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_names_parse_both_ways() {
        for v in Vendor::ALL {
            assert_eq!(v.short().parse::<Vendor>().unwrap(), v);
            assert_eq!(v.long().parse::<Vendor>().unwrap(), v);
            assert_eq!(v.to_string(), v.short());
        }
        assert_eq!("NVIDIA".parse::<Vendor>().unwrap(), Vendor::Nv);
        let err = "amd".parse::<Vendor>().unwrap_err();
        assert!(err.to_string().contains("nv|asc|mtt|mx|ppu|hcu"));
    }

    #[test]
    fn only_healthy_enabled_devices_are_usable() {
        let mut d = Device::new(Vendor::Nv, 0, "GPU-0", Some(0));
        assert!(d.usable());
        d.health = Health::Busy { processes: 1 };
        assert!(!d.usable());
        d.health = Health::Ok;
        d.disabled = true;
        assert!(!d.usable());
    }
}

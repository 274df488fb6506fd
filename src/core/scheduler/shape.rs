//! Helpers of a pass: the shape of a demand, by which failed placements are
//! remembered for the rest of the pass, and a fast hasher for that set.

use crate::core::device::Vendor;
use crate::core::request::Demand;
use std::hash::{BuildHasherDefault, Hasher};

/// The shape of a demand: everything placement looks at, plus whether it is
/// short (ends before strict-backfill's reservation), for remembering failures
/// within a pass.
#[derive(Hash, PartialEq, Eq)]
pub(super) struct Shape<'a> {
    cpus: u32,
    mem: u64,
    count: u32,
    vendor: Option<Vendor>,
    ids: &'a [u32],
    exclude: &'a [u32],
    exclusive: bool,
    numa_local: bool,
    short: bool,
}

impl<'a> Shape<'a> {
    pub(super) fn of(d: &'a Demand, short: bool) -> Shape<'a> {
        Shape {
            cpus: d.cpus,
            mem: d.mem_bytes,
            count: d.devices.count,
            vendor: d.devices.vendor,
            ids: &d.devices.ids,
            exclude: &d.devices.exclude,
            exclusive: d.exclusive,
            numa_local: d.numa_local,
            short,
        }
    }
}

/// FxHash (rustc's hasher): the failure set is keyed by small integers
/// from one process, so it needs speed, not flooding resistance.
#[derive(Default, Clone, Copy)]
pub(super) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(n as u64);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(super) type FastHash = BuildHasherDefault<FxHasher>;

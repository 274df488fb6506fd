//! The device visibility variables a job's environment gets.

use crate::core::{DeviceRef, Vendor};

/// Every visibility variable xlurm sets. A job gets all of them: its own vendor's list
/// its devices, every other one says "no device" ([`NONE_VISIBLE`]).
pub const VISIBILITY_VARIABLES: [&str; 7] = [
    "CUDA_VISIBLE_DEVICES",
    "ASCEND_RT_VISIBLE_DEVICES",
    "MTHREADS_VISIBLE_DEVICES",
    "MUSA_VISIBLE_DEVICES",
    "MACA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
];

/// The value meaning "no device". `-1` is an index no runtime has, so CUDA (and the
/// CUDA-compatible MACA, HGGC and HIP runtimes), the Ascend runtime, MUSA and ROCr all
/// see zero devices; an empty string is avoided because several runtimes treat an empty
/// variable as unset, i.e. every device visible.
pub const NONE_VISIBLE: &str = "-1";

/// Set for NVIDIA jobs so that CUDA numbers devices as NVML does (by PCI bus).
pub const CUDA_DEVICE_ORDER: (&str, &str) = ("CUDA_DEVICE_ORDER", "PCI_BUS_ID");

/// A job's devices do not match the vendor it was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VisibilityError {
    #[error("a CPU job cannot hold devices (got {0} device(s))")]
    DevicesForCpuJob(usize),
    #[error("a {expected} job holds a {found} device (index {index})")]
    MixedVendors {
        expected: Vendor,
        found: Vendor,
        index: u32,
    },
}

/// The environment variables a job running on `devices` (all of `vendor`; `None` and
/// no devices for a CPU job) must get, overriding anything inherited:
///
/// | vendor | variables |
/// |---|---|
/// | nv  | `CUDA_VISIBLE_DEVICES`=UUIDs, `CUDA_DEVICE_ORDER=PCI_BUS_ID` |
/// | asc | `ASCEND_RT_VISIBLE_DEVICES`=logical ids |
/// | mtt | `MTHREADS_VISIBLE_DEVICES`=UUIDs, `MUSA_VISIBLE_DEVICES`=indices |
/// | mx  | `CUDA_VISIBLE_DEVICES`=indices, `MACA_VISIBLE_DEVICES`=indices |
/// | ppu | `CUDA_VISIBLE_DEVICES`=UUIDs |
/// | hcu | `ROCR_VISIBLE_DEVICES`=indices, `HIP_VISIBLE_DEVICES` and `CUDA_VISIBLE_DEVICES`=`0..N-1` |
///
/// Every other variable of [`VISIBILITY_VARIABLES`] is [`NONE_VISIBLE`]. Devices are
/// listed in index order. The output order is fixed (that of `VISIBILITY_VARIABLES`,
/// then `CUDA_DEVICE_ORDER`).
pub fn visibility_env(
    vendor: Option<Vendor>,
    devices: &[DeviceRef],
) -> Result<Vec<(String, String)>, VisibilityError> {
    let Some(vendor) = vendor else {
        if !devices.is_empty() {
            return Err(VisibilityError::DevicesForCpuJob(devices.len()));
        }
        return Ok(none_visible());
    };
    if let Some(d) = devices.iter().find(|d| d.vendor != vendor) {
        return Err(VisibilityError::MixedVendors {
            expected: vendor,
            found: d.vendor,
            index: d.index,
        });
    }
    if devices.is_empty() {
        return Ok(none_visible());
    }
    let mut sorted: Vec<&DeviceRef> = devices.iter().collect();
    sorted.sort_by_key(|d| d.index);
    let uuids = sorted
        .iter()
        .map(|d| d.uuid.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let indices = sorted
        .iter()
        .map(|d| d.index.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let view = (0..sorted.len())
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let own: Vec<(&str, String)> = match vendor {
        Vendor::Nv => vec![("CUDA_VISIBLE_DEVICES", uuids)],
        Vendor::Asc => vec![("ASCEND_RT_VISIBLE_DEVICES", indices)],
        Vendor::Mtt => vec![
            ("MTHREADS_VISIBLE_DEVICES", uuids),
            ("MUSA_VISIBLE_DEVICES", indices),
        ],
        Vendor::Mx => vec![
            ("CUDA_VISIBLE_DEVICES", indices.clone()),
            ("MACA_VISIBLE_DEVICES", indices),
        ],
        Vendor::Ppu => vec![("CUDA_VISIBLE_DEVICES", uuids)],
        Vendor::Hcu => vec![
            ("ROCR_VISIBLE_DEVICES", indices),
            ("HIP_VISIBLE_DEVICES", view.clone()),
            ("CUDA_VISIBLE_DEVICES", view),
        ],
    };
    let mut env: Vec<(String, String)> = VISIBILITY_VARIABLES
        .iter()
        .map(|&var| {
            let value = own
                .iter()
                .find(|(v, _)| *v == var)
                .map(|(_, value)| value.clone())
                .unwrap_or_else(|| NONE_VISIBLE.to_string());
            (var.to_string(), value)
        })
        .collect();
    if vendor == Vendor::Nv {
        env.push((CUDA_DEVICE_ORDER.0.into(), CUDA_DEVICE_ORDER.1.into()));
    }
    Ok(env)
}

fn none_visible() -> Vec<(String, String)> {
    VISIBILITY_VARIABLES
        .iter()
        .map(|v| (v.to_string(), NONE_VISIBLE.to_string()))
        .collect()
}

//! T-Head PPU through HGML v2 (`libhgml.so`), whose API copies NVML's under `hgml*`
//! names; the NVML machinery in `nvml.rs` does the work.
//!
//! Functions used (signatures assumed identical to their NVML namesakes, including the
//! `hgmlPciInfo_t` and `hgmlProcessInfo_t` layouts and the status codes
//! `HGML_ERROR_INSUFFICIENT_SIZE` = 7 and `HGML_ERROR_GPU_IS_LOST` = 15):
//!
//! ```c
//! hgmlReturn_t hgmlInit_v2(void);
//! hgmlReturn_t hgmlShutdown(void);
//! const char  *hgmlErrorString(hgmlReturn_t result);
//! hgmlReturn_t hgmlDeviceGetCount_v2(unsigned int *deviceCount);
//! hgmlReturn_t hgmlDeviceGetHandleByIndex_v2(unsigned int index, hgmlDevice_t *device);
//! hgmlReturn_t hgmlDeviceGetUUID(hgmlDevice_t device, char *uuid, unsigned int length);
//! hgmlReturn_t hgmlDeviceGetComputeRunningProcesses_v3(hgmlDevice_t device,
//!                  unsigned int *infoCount, hgmlProcessInfo_t *infos);  /* or _v2 */
//! /* optional: */
//! hgmlReturn_t hgmlDeviceGetPciInfo_v2(hgmlDevice_t device, hgmlPciInfo_t *pci);
//! hgmlReturn_t hgmlDeviceGetNumaNodeId(hgmlDevice_t device, unsigned int *node);
//! hgmlReturn_t hgmlDeviceGetUtilizationRates(hgmlDevice_t, hgmlUtilization_t *);
//! hgmlReturn_t hgmlDeviceGetMemoryInfo(hgmlDevice_t, hgmlMemory_t *);
//! ```
//!
//! HGML has no health query xlurm relies on: a PPU is unhealthy only when a query says
//! the device is lost; other failures, invalid answers and UUID changes make it unknown.
//! Device nodes: `/dev/alixpu_ppu<index>`, `/dev/alixpu`, `/dev/alixpu_ctl`. HGML has no
//! call naming a device's node and the PPU driver's sysfs layout is not documented, so
//! the per-device node follows the HGML index; discovery fails, naming the node, when
//! it does not exist (under `AccelConfig::dev_root`).

use super::loader::Lib;
use super::nvml::{opt, req, Nodes, NvmlLike, Table};
use super::{AccelConfig, AccelError};
use crate::core::Vendor;

pub(crate) type Hgml = NvmlLike;

impl NvmlLike {
    /// HGML: the v3 compute-process query, else v2 (same layout).
    pub fn hgml(lib: Lib, config: &AccelConfig) -> Result<Self, AccelError> {
        const V3: &str = "hgmlDeviceGetComputeRunningProcesses_v3";
        const V2: &str = "hgmlDeviceGetComputeRunningProcesses_v2";
        // SAFETY: the types are the NVML-shaped signatures listed in the module docs.
        let t = unsafe {
            Table {
                init: req(&lib, "hgmlInit_v2")?,
                shutdown: req(&lib, "hgmlShutdown")?,
                error_string: req(&lib, "hgmlErrorString")?,
                count: req(&lib, "hgmlDeviceGetCount_v2")?,
                handle: req(&lib, "hgmlDeviceGetHandleByIndex_v2")?,
                uuid: req(&lib, "hgmlDeviceGetUUID")?,
                pci: opt(&lib, "hgmlDeviceGetPciInfo_v2"),
                compute: match opt(&lib, V3).or_else(|| opt(&lib, V2)) {
                    Some(f) => f,
                    None => return Err(lib.missing(V3, &format!(" (nor {V2})"))),
                },
                graphics: None,
                minor: None,
                numa: opt(&lib, "hgmlDeviceGetNumaNodeId"),
                utilization: opt(&lib, "hgmlDeviceGetUtilizationRates"),
                memory: opt(&lib, "hgmlDeviceGetMemoryInfo"),
            }
        };
        NvmlLike::start(Vendor::Ppu, "HGML v2", lib, t, Nodes::Ppu, config)
    }
}

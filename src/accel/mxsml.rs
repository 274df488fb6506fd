//! MetaX through MXSML (`libmxsml.so`): its NVML-like extension API (`mxSmlEx*`,
//! `MxSmlExtension.h`) plus the base API's availability query. `mx-smi` is not used.
//!
//! Functions used (`mxSmlExReturn_t` and `mxSmlReturn_t` are C enums, 0 = success;
//! `MXSMLEX_ERROR_INSUFFICIENT_SIZE` = 7):
//!
//! ```c
//! mxSmlExReturn_t mxSmlExInit(void);
//! mxSmlExReturn_t mxSmlExShutdown(void);
//! const char     *mxSmlExErrorString(mxSmlExReturn_t result);
//! mxSmlExReturn_t mxSmlExDeviceGetCount(unsigned int *deviceCount);
//! mxSmlExReturn_t mxSmlExGetDeviceHandleByIndex(unsigned int deviceId,
//!                                               mxsmlExDevice_t *deviceHandle);
//! mxSmlExReturn_t mxSmlExDeviceGetUUID(mxsmlExDevice_t deviceHandle, char *uuid,
//!                                      unsigned int length);
//! mxSmlExReturn_t mxSmlExDeviceGetPciInfo(mxsmlExDevice_t deviceHandle,
//!                                         mxSmlExPciInfo_t *pci);
//! mxSmlExReturn_t mxSmlExDeviceGetComputeRunningProcesses(mxsmlExDevice_t deviceHandle,
//!                     unsigned int *infoCount, mxsmlExProcessInfo_t *infos);
//! mxSmlReturn_t   mxSmlInit(void);
//! mxSmlReturn_t   mxSmlGetDeviceUnavailableReason(unsigned int deviceId,
//!                     mxSmlDeviceUnavailableReasonInfo_t *reasonInfo);
//! /* optional: */
//! const char     *mxSmlGetErrorString(mxSmlReturn_t result);
//! /* optional (load), the extension API's first: */
//! mxSmlExReturn_t mxSmlExDeviceGetUtilization(mxsmlExDevice_t deviceHandle,
//!                                             mxsmlExUtilization_t *utilization);
//! mxSmlExReturn_t mxSmlExDeviceGetMemoryInfo(mxsmlExDevice_t deviceHandle,
//!                                            mxsmlExMemory_t *memory);
//! mxSmlReturn_t   mxSmlGetDeviceIpUsage(unsigned int deviceId, mxSmlUsageIp_t ip,
//!                                       int *usage);
//! mxSmlReturn_t   mxSmlGetMemoryInfo(unsigned int deviceId, mxSmlMemoryInfo_t *memory);
//!
//! typedef struct { char busIdLegacy[16]; unsigned int domain, bus, device, pciDeviceId,
//!                  pciSubSystemId; char busId[32]; } mxSmlExPciInfo_t;
//! typedef struct { unsigned int computeInstanceId, gpuInstanceId, pid;
//!                  unsigned long long usedGpuMemory; } mxsmlExProcessInfo_t;
//! typedef struct { int unavailableCode; char unavailableReason[64]; }
//!                  mxSmlDeviceUnavailableReasonInfo_t;
//! typedef struct { unsigned int gpu, memory; } mxsmlExUtilization_t;      /* percent */
//! typedef struct { unsigned long long free, total, used; } mxsmlExMemory_t;  /* bytes */
//! typedef enum { MXSML_Usage_Dla, MXSML_Usage_Vpue, MXSML_Usage_Vpud,
//!                MXSML_Usage_Xcore = 4 } mxSmlUsageIp_t;                 /* percent */
//! typedef struct { long visVramTotal, visVramUse, vramTotal, vramUse, xttTotal,
//!                  xttUse; } mxSmlMemoryInfo_t;                               /* KB */
//! ```
//!
//! The base API's device id is assumed to equal the extension API's index. An
//! unavailable code other than 0 makes the device unhealthy (with the reason); query
//! errors, invalid answers and UUID changes make it unknown. Device nodes: `/dev/mxcd`
//! and the device's own DRM nodes (`/dev/dri/renderD*`, `/dev/dri/card*`, from sysfs).
//!
//! Load: the busy percent is `mxSmlExDeviceGetUtilization`'s `gpu`, memory
//! `mxSmlExDeviceGetMemoryInfo`'s `total` and `used` (bytes; note the field order, free
//! first). Where the library lacks one of them, or it fails, the base API's answer is
//! taken instead: `mxSmlGetDeviceIpUsage` of the compute cores (`MXSML_Usage_Xcore`, for
//! C-class devices) and `mxSmlGetMemoryInfo`'s `vramTotal` and `vramUse` (KB, turned
//! into bytes). A part neither gives is `None`.

use super::loader::{buf_string, c_string, fill_list, Lib};
use super::nodes::{normalize_bdf, required_drm_nodes, sysfs_numa_node};
use super::nvml::{opt, req, F};
use super::{
    AccelConfig, AccelError, Backend, Condition, DevicePoll, DiscoveredDevice, Load, QueryError,
};
use crate::core::Vendor;
use std::ffi::{c_char, c_int, c_long, c_uint, c_ulonglong, c_void};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

type Ret = c_uint;
type Dev = *mut c_void;

const INSUFFICIENT_SIZE: Ret = 7;
const UUID_BUFFER: usize = 96;

#[repr(C)]
#[derive(Clone, Copy)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ProcessInfo {
    compute_instance_id: c_uint,
    gpu_instance_id: c_uint,
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UnavailableReason {
    code: c_int,
    reason: [c_char; 64],
}

/// `mxsmlExUtilization_t`: percent.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ExUtilization {
    gpu: c_uint,
    memory: c_uint,
}

/// `mxsmlExMemory_t`: bytes (free first, unlike NVML's).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ExMemory {
    free: c_ulonglong,
    total: c_ulonglong,
    used: c_ulonglong,
}

/// `mxSmlMemoryInfo_t`: KB.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct MemoryInfo {
    vis_vram_total: c_long,
    vis_vram_use: c_long,
    vram_total: c_long,
    vram_use: c_long,
    xtt_total: c_long,
    xtt_use: c_long,
}

/// `MXSML_Usage_Xcore` (`mxSmlUsageIp_t`): the compute cores of a C-class device.
const USAGE_XCORE: c_int = 4;

struct Api {
    ex_init: F<unsafe extern "C" fn() -> Ret>,
    base_init: F<unsafe extern "C" fn() -> Ret>,
    shutdown: F<unsafe extern "C" fn() -> Ret>,
    error_string: F<unsafe extern "C" fn(Ret) -> *const c_char>,
    count: F<unsafe extern "C" fn(*mut c_uint) -> Ret>,
    handle: F<unsafe extern "C" fn(c_uint, *mut Dev) -> Ret>,
    uuid: F<unsafe extern "C" fn(Dev, *mut c_char, c_uint) -> Ret>,
    pci: F<unsafe extern "C" fn(Dev, *mut PciInfo) -> Ret>,
    procs: F<unsafe extern "C" fn(Dev, *mut c_uint, *mut ProcessInfo) -> Ret>,
    unavailable: F<unsafe extern "C" fn(c_uint, *mut UnavailableReason) -> Ret>,
    base_error_string: Option<F<unsafe extern "C" fn(Ret) -> *const c_char>>,
    ex_utilization: Option<F<unsafe extern "C" fn(Dev, *mut ExUtilization) -> Ret>>,
    ex_memory: Option<F<unsafe extern "C" fn(Dev, *mut ExMemory) -> Ret>>,
    ip_usage: Option<F<unsafe extern "C" fn(c_uint, c_int, *mut c_int) -> Ret>>,
    memory_info: Option<F<unsafe extern "C" fn(c_uint, *mut MemoryInfo) -> Ret>>,
}

pub(crate) struct Mxsml {
    lib: Lib,
    api: Api,
    sysfs_root: PathBuf,
    lock: Mutex<()>,
}

fn text(f: unsafe extern "C" fn(Ret) -> *const c_char, status: Ret) -> String {
    // SAFETY: returns a static string or null.
    let text = unsafe { c_string(f(status)) };
    if text.is_empty() {
        format!("error {status}")
    } else {
        format!("{text} ({status})")
    }
}

impl Mxsml {
    pub fn new(lib: Lib, config: &AccelConfig) -> Result<Self, AccelError> {
        // SAFETY: the signatures are MxSmlExtension.h's and mxsml.h's (module docs).
        let api = unsafe {
            Api {
                ex_init: req(&lib, "mxSmlExInit")?,
                base_init: req(&lib, "mxSmlInit")?,
                shutdown: req(&lib, "mxSmlExShutdown")?,
                error_string: req(&lib, "mxSmlExErrorString")?,
                count: req(&lib, "mxSmlExDeviceGetCount")?,
                handle: req(&lib, "mxSmlExGetDeviceHandleByIndex")?,
                uuid: req(&lib, "mxSmlExDeviceGetUUID")?,
                pci: req(&lib, "mxSmlExDeviceGetPciInfo")?,
                procs: req(&lib, "mxSmlExDeviceGetComputeRunningProcesses")?,
                unavailable: req(&lib, "mxSmlGetDeviceUnavailableReason")?,
                base_error_string: opt(&lib, "mxSmlGetErrorString"),
                ex_utilization: opt(&lib, "mxSmlExDeviceGetUtilization"),
                ex_memory: opt(&lib, "mxSmlExDeviceGetMemoryInfo"),
                ip_usage: opt(&lib, "mxSmlGetDeviceIpUsage"),
                memory_info: opt(&lib, "mxSmlGetMemoryInfo"),
            }
        };
        // SAFETY: no arguments.
        let status = unsafe { (api.ex_init.f)() };
        if status != 0 {
            let e = QueryError::new(api.ex_init.name, text(api.error_string.f, status));
            return Err(AccelError::query(Vendor::Mx, e));
        }
        let backend = Mxsml {
            lib,
            api,
            sysfs_root: config.sysfs_root.clone(),
            lock: Mutex::new(()),
        };
        // SAFETY: no arguments. (Dropping `backend` on failure shuts the extension down.)
        let status = unsafe { (backend.api.base_init.f)() };
        if status != 0 {
            let e = QueryError::new(backend.api.base_init.name, backend.base_message(status));
            return Err(AccelError::query(Vendor::Mx, e));
        }
        Ok(backend)
    }

    fn base_message(&self, status: Ret) -> String {
        match &self.api.base_error_string {
            Some(f) => text(f.f, status),
            None => format!("error {status}"),
        }
    }

    fn fail(&self, name: &str, index: u32, status: Ret) -> QueryError {
        QueryError::new(
            format!("{name}({index})"),
            text(self.api.error_string.f, status),
        )
    }

    fn count(&self) -> Result<u32, QueryError> {
        let mut n: c_uint = 0;
        // SAFETY: writes one unsigned int.
        let status = unsafe { (self.api.count.f)(&mut n) };
        if status != 0 {
            let message = text(self.api.error_string.f, status);
            return Err(QueryError::new(self.api.count.name, message));
        }
        Ok(n)
    }

    fn handle(&self, index: u32) -> Result<Dev, QueryError> {
        let mut dev: Dev = std::ptr::null_mut();
        // SAFETY: writes one handle.
        let status = unsafe { (self.api.handle.f)(index, &mut dev) };
        if status != 0 {
            return Err(self.fail(self.api.handle.name, index, status));
        }
        Ok(dev)
    }

    fn uuid(&self, dev: Dev, index: u32) -> Result<String, QueryError> {
        let mut buf = [0 as c_char; UUID_BUFFER];
        // SAFETY: the buffer's length is passed.
        let status = unsafe { (self.api.uuid.f)(dev, buf.as_mut_ptr(), UUID_BUFFER as c_uint) };
        if status != 0 {
            return Err(self.fail(self.api.uuid.name, index, status));
        }
        let uuid = buf_string(&buf);
        if uuid.trim().is_empty() {
            return Err(QueryError::new(
                format!("{}({index})", self.api.uuid.name),
                "empty UUID",
            ));
        }
        Ok(uuid)
    }

    fn bdf(&self, dev: Dev, index: u32) -> Result<String, QueryError> {
        let mut info = PciInfo {
            bus_id_legacy: [0; 16],
            domain: 0,
            bus: 0,
            device: 0,
            pci_device_id: 0,
            pci_sub_system_id: 0,
            bus_id: [0; 32],
        };
        // SAFETY: writes one mxSmlExPciInfo_t.
        let status = unsafe { (self.api.pci.f)(dev, &mut info) };
        if status != 0 {
            return Err(self.fail(self.api.pci.name, index, status));
        }
        let bus_id = buf_string(&info.bus_id);
        normalize_bdf(&bus_id).ok_or_else(|| {
            QueryError::new(
                format!("{}({index})", self.api.pci.name),
                format!("invalid PCI address {bus_id:?}"),
            )
        })
    }

    fn processes(&self, dev: Dev, index: u32) -> Result<Vec<u32>, QueryError> {
        let zero = ProcessInfo {
            compute_instance_id: 0,
            gpu_instance_id: 0,
            pid: 0,
            used_gpu_memory: 0,
        };
        let list = fill_list(zero, INSUFFICIENT_SIZE, |count, buf| {
            // SAFETY: `buf` holds `*count` entries.
            unsafe { (self.api.procs.f)(dev, count, buf) }
        })
        .map_err(|status| self.fail(self.api.procs.name, index, status))?;
        let mut pids: Vec<u32> = list.iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }

    fn condition(&self, index: u32) -> Result<Condition, QueryError> {
        let mut info = UnavailableReason {
            code: 0,
            reason: [0; 64],
        };
        let name = self.api.unavailable.name;
        // SAFETY: writes one mxSmlDeviceUnavailableReasonInfo_t.
        let status = unsafe { (self.api.unavailable.f)(index, &mut info) };
        if status != 0 {
            return Err(QueryError::new(
                format!("{name}({index})"),
                self.base_message(status),
            ));
        }
        Ok(if info.code == 0 {
            Condition::Healthy
        } else {
            let reason = buf_string(&info.reason);
            Condition::Unhealthy(format!(
                "{name}({index}): unavailable (code {}): {}",
                info.code,
                if reason.is_empty() {
                    "no reason given"
                } else {
                    &reason
                }
            ))
        })
    }

    /// The busy percent: the extension API's, else the base API's compute cores.
    fn utilization(&self, dev: Option<Dev>, index: u32) -> Option<u8> {
        if let (Some(f), Some(dev)) = (&self.api.ex_utilization, dev) {
            let mut u = ExUtilization::default();
            // SAFETY: writes one mxsmlExUtilization_t.
            if unsafe { (f.f)(dev, &mut u) } == 0 {
                return Some(Load::pct(u.gpu));
            }
        }
        let f = self.api.ip_usage.as_ref()?;
        let mut usage: c_int = 0;
        // SAFETY: writes one int.
        let status = unsafe { (f.f)(index, USAGE_XCORE, &mut usage) };
        (status == 0 && usage >= 0).then(|| Load::pct(usage as u32))
    }

    /// Memory (used, total) in bytes: the extension API's, else the base API's VRAM.
    fn memory(&self, dev: Option<Dev>, index: u32) -> Option<(u64, u64)> {
        if let (Some(f), Some(dev)) = (&self.api.ex_memory, dev) {
            let mut m = ExMemory::default();
            // SAFETY: writes one mxsmlExMemory_t.
            if unsafe { (f.f)(dev, &mut m) } == 0 && m.total > 0 {
                return Some((m.used.min(m.total), m.total));
            }
        }
        let f = self.api.memory_info.as_ref()?;
        let mut m = MemoryInfo::default();
        // SAFETY: writes one mxSmlMemoryInfo_t.
        if unsafe { (f.f)(index, &mut m) } != 0 || m.vram_total <= 0 || m.vram_use < 0 {
            return None;
        }
        let total = (m.vram_total as u64).saturating_mul(1024);
        let used = (m.vram_use as u64).saturating_mul(1024);
        Some((used.min(total), total))
    }

    /// The device's load (`dev`: its extension API handle, if that could be had); a
    /// part neither API gives is left out.
    fn load(&self, dev: Option<Dev>, index: u32) -> Load {
        let memory = self.memory(dev, index);
        Load {
            util_pct: self.utilization(dev, index),
            mem_used: memory.map(|(used, _)| used),
            mem_total: memory.map(|(_, total)| total),
        }
    }

    fn discover_one(&self, index: u32) -> Result<DiscoveredDevice, AccelError> {
        let q = |e| AccelError::query(Vendor::Mx, e);
        let dev = self.handle(index).map_err(q)?;
        let uuid = self.uuid(dev, index).map_err(q)?;
        let bdf = self.bdf(dev, index).map_err(q)?;
        let mut device_nodes = vec![PathBuf::from("/dev/mxcd")];
        device_nodes.extend(required_drm_nodes(
            Vendor::Mx,
            &self.sysfs_root,
            Some(&bdf),
            index,
            true,
        )?);
        Ok(DiscoveredDevice {
            vendor: Vendor::Mx,
            index,
            uuid,
            numa_node: sysfs_numa_node(&self.sysfs_root, &bdf),
            pci_bdf: Some(bdf),
            device_nodes,
        })
    }
}

impl Backend for Mxsml {
    fn vendor(&self) -> Vendor {
        Vendor::Mx
    }

    fn library(&self) -> &Path {
        &self.lib.path
    }

    fn api(&self) -> &'static str {
        "MXSML extension API"
    }

    fn discover(&self) -> Result<Vec<DiscoveredDevice>, AccelError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.count().map_err(|e| AccelError::query(Vendor::Mx, e))?;
        (0..n).map(|i| self.discover_one(i)).collect()
    }

    fn poll(&self, devices: &[DiscoveredDevice]) -> Result<Vec<DevicePoll>, QueryError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.count()?;
        Ok(devices
            .iter()
            .map(|d| {
                let (uuid, processes, load) = match self.handle(d.index) {
                    Err(e) => (Err(e.clone()), Err(e), self.load(None, d.index)),
                    Ok(dev) => (
                        self.uuid(dev, d.index),
                        self.processes(dev, d.index),
                        self.load(Some(dev), d.index),
                    ),
                };
                DevicePoll {
                    index: d.index,
                    uuid,
                    processes,
                    condition: self.condition(d.index),
                    load,
                }
            })
            .collect())
    }
}

impl Drop for Mxsml {
    fn drop(&mut self) {
        // SAFETY: mxSmlExInit succeeded (construction fails before otherwise).
        unsafe {
            (self.api.shutdown.f)();
        }
    }
}

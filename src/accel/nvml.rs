//! NVIDIA through NVML (`libnvidia-ml.so.1`), and the machinery shared with T-Head's
//! HGML, which copies NVML's API under `hgml*` names (see `hgml.rs`).
//!
//! NVML functions used (from `nvml.h`; `nvmlReturn_t` is a C enum, `int`-sized):
//!
//! ```c
//! nvmlReturn_t nvmlInit_v2(void);
//! nvmlReturn_t nvmlShutdown(void);
//! const char  *nvmlErrorString(nvmlReturn_t result);
//! nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
//! nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
//! nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
//! nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber);
//! nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci);
//! nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
//!                  unsigned int *infoCount, nvmlProcessInfo_t *infos);
//! /* optional: */
//! nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t, unsigned int *,
//!                  nvmlProcessInfo_t *);
//! nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node);
//! nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
//!                  nvmlUtilization_t *utilization);
//! nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
//!
//! typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;   /* percent */
//! typedef struct { unsigned long long total, free, used; } nvmlMemory_t;  /* bytes */
//!
//! typedef struct { char busIdLegacy[16]; unsigned int domain, bus, device,
//!                  pciDeviceId, pciSubSystemId; char busId[32]; } nvmlPciInfo_t;
//! typedef struct { unsigned int pid; unsigned long long usedGpuMemory;
//!                  unsigned int gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;
//! ```
//!
//! `NVML_ERROR_INSUFFICIENT_SIZE` (7) makes the process queries retry with the count the
//! library asked for; `NVML_ERROR_GPU_IS_LOST` (15) from any device query marks the
//! device unhealthy; any other failure is a query error (the device becomes unknown).

use super::loader::{buf_string, c_string, fill_list, Lib};
use super::nodes::{format_bdf, normalize_bdf, require_node, sysfs_numa_node};
use super::{
    AccelConfig, AccelError, Backend, Condition, DevicePoll, DiscoveredDevice, Load, QueryError,
};
use crate::core::Vendor;
use std::ffi::{c_char, c_uint, c_ulonglong, c_void};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

type Ret = c_uint;
type Dev = *mut c_void;

const SUCCESS: Ret = 0;
const INSUFFICIENT_SIZE: Ret = 7;
const GPU_IS_LOST: Ret = 15;
const UUID_BUFFER: usize = 96;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct PciInfo {
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
pub(crate) struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

const NO_PROCESS: ProcessInfo = ProcessInfo {
    pid: 0,
    used_gpu_memory: 0,
    gpu_instance_id: 0,
    compute_instance_id: 0,
};

/// `nvmlUtilization_t`: percent of the last sample period.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

/// `nvmlMemory_t` (version 1): bytes.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

type ProcessesFn = unsafe extern "C" fn(Dev, *mut c_uint, *mut ProcessInfo) -> Ret;
type DevUintFn = unsafe extern "C" fn(Dev, *mut c_uint) -> Ret;

/// A function pointer and the symbol it came from (for messages).
#[derive(Clone, Copy)]
pub(crate) struct F<T: Copy> {
    pub f: T,
    pub name: &'static str,
}

/// # Safety
/// `T` must match the C signature of `name`.
pub(crate) unsafe fn req<T: Copy>(lib: &Lib, name: &'static str) -> Result<F<T>, AccelError> {
    Ok(F {
        f: lib.req(name)?,
        name,
    })
}

/// # Safety
/// `T` must match the C signature of `name`.
pub(crate) unsafe fn opt<T: Copy>(lib: &Lib, name: &'static str) -> Option<F<T>> {
    lib.opt(name).map(|f| F { f, name })
}

/// The NVML-shaped function table (NVML itself, or HGML).
pub(crate) struct Table {
    pub init: F<unsafe extern "C" fn() -> Ret>,
    pub shutdown: F<unsafe extern "C" fn() -> Ret>,
    pub error_string: F<unsafe extern "C" fn(Ret) -> *const c_char>,
    pub count: F<unsafe extern "C" fn(*mut c_uint) -> Ret>,
    pub handle: F<unsafe extern "C" fn(c_uint, *mut Dev) -> Ret>,
    pub uuid: F<unsafe extern "C" fn(Dev, *mut c_char, c_uint) -> Ret>,
    pub pci: Option<F<unsafe extern "C" fn(Dev, *mut PciInfo) -> Ret>>,
    pub compute: F<ProcessesFn>,
    pub graphics: Option<F<ProcessesFn>>,
    pub minor: Option<F<DevUintFn>>,
    pub numa: Option<F<DevUintFn>>,
    pub utilization: Option<F<unsafe extern "C" fn(Dev, *mut Utilization) -> Ret>>,
    pub memory: Option<F<unsafe extern "C" fn(Dev, *mut Memory) -> Ret>>,
}

/// How a flavour names its device nodes.
pub(crate) enum Nodes {
    /// `/dev/nvidia<minor>` plus NVIDIA's control and UVM nodes.
    Nvidia,
    /// `/dev/alixpu_ppu<index>` (which must exist) plus `/dev/alixpu` and `/dev/alixpu_ctl`.
    Ppu,
}

/// A backend over an NVML-shaped library.
pub(crate) struct NvmlLike {
    vendor: Vendor,
    api: &'static str,
    lib: Lib,
    t: Table,
    nodes: Nodes,
    sysfs_root: PathBuf,
    dev_root: PathBuf,
    lock: Mutex<()>,
}

/// The library's text for `status`, with the number.
fn message(t: &Table, status: Ret) -> String {
    // SAFETY: the error string function returns a static string (or null).
    let text = unsafe { c_string((t.error_string.f)(status)) };
    if text.is_empty() {
        format!("error {status}")
    } else {
        format!("{text} ({status})")
    }
}

/// A failed call: the status and the error.
struct Failure {
    status: Ret,
    error: QueryError,
}

pub(crate) type Nvml = NvmlLike;

impl NvmlLike {
    /// NVML proper.
    pub fn new(lib: Lib, config: &AccelConfig) -> Result<Self, AccelError> {
        // SAFETY: the types below are the nvml.h signatures listed in the module docs.
        let t = unsafe {
            Table {
                init: req(&lib, "nvmlInit_v2")?,
                shutdown: req(&lib, "nvmlShutdown")?,
                error_string: req(&lib, "nvmlErrorString")?,
                count: req(&lib, "nvmlDeviceGetCount_v2")?,
                handle: req(&lib, "nvmlDeviceGetHandleByIndex_v2")?,
                uuid: req(&lib, "nvmlDeviceGetUUID")?,
                pci: Some(req(&lib, "nvmlDeviceGetPciInfo_v3")?),
                compute: req(&lib, "nvmlDeviceGetComputeRunningProcesses_v3")?,
                graphics: opt(&lib, "nvmlDeviceGetGraphicsRunningProcesses_v3"),
                minor: Some(req(&lib, "nvmlDeviceGetMinorNumber")?),
                numa: opt(&lib, "nvmlDeviceGetNumaNodeId"),
                utilization: opt(&lib, "nvmlDeviceGetUtilizationRates"),
                memory: opt(&lib, "nvmlDeviceGetMemoryInfo"),
            }
        };
        Self::start(Vendor::Nv, "NVML", lib, t, Nodes::Nvidia, config)
    }

    /// Wraps a loaded table and initialises the library.
    pub(crate) fn start(
        vendor: Vendor,
        api: &'static str,
        lib: Lib,
        t: Table,
        nodes: Nodes,
        config: &AccelConfig,
    ) -> Result<Self, AccelError> {
        // SAFETY: init takes no arguments.
        let status = unsafe { (t.init.f)() };
        if status != SUCCESS {
            // No shutdown after a failed init: the table is dropped without a backend.
            let error = QueryError::new(t.init.name, message(&t, status));
            return Err(AccelError::query(vendor, error));
        }
        Ok(NvmlLike {
            vendor,
            api,
            lib,
            t,
            nodes,
            sysfs_root: config.sysfs_root.clone(),
            dev_root: config.dev_root.clone(),
            lock: Mutex::new(()),
        })
    }

    fn message(&self, status: Ret) -> String {
        message(&self.t, status)
    }

    fn fail(&self, name: &str, index: u32, status: Ret) -> Failure {
        Failure {
            status,
            error: QueryError::new(format!("{name}({index})"), self.message(status)),
        }
    }

    fn count(&self) -> Result<u32, QueryError> {
        let mut n: c_uint = 0;
        // SAFETY: count writes one unsigned int.
        let status = unsafe { (self.t.count.f)(&mut n) };
        if status != SUCCESS {
            return Err(QueryError::new(self.t.count.name, self.message(status)));
        }
        Ok(n)
    }

    fn handle(&self, index: u32) -> Result<Dev, Failure> {
        let mut dev: Dev = std::ptr::null_mut();
        // SAFETY: writes one handle.
        let status = unsafe { (self.t.handle.f)(index, &mut dev) };
        if status != SUCCESS {
            return Err(self.fail(self.t.handle.name, index, status));
        }
        Ok(dev)
    }

    fn uuid(&self, dev: Dev, index: u32) -> Result<String, Failure> {
        let mut buf = [0 as c_char; UUID_BUFFER];
        // SAFETY: the buffer is UUID_BUFFER long and its length is passed.
        let status = unsafe { (self.t.uuid.f)(dev, buf.as_mut_ptr(), UUID_BUFFER as c_uint) };
        if status != SUCCESS {
            return Err(self.fail(self.t.uuid.name, index, status));
        }
        let uuid = buf_string(&buf);
        if uuid.trim().is_empty() {
            return Err(Failure {
                status,
                error: QueryError::new(format!("{}({index})", self.t.uuid.name), "empty UUID"),
            });
        }
        Ok(uuid)
    }

    fn uint(&self, f: &F<DevUintFn>, dev: Dev, index: u32) -> Result<u32, Failure> {
        let mut value: c_uint = 0;
        // SAFETY: writes one unsigned int.
        let status = unsafe { (f.f)(dev, &mut value) };
        if status != SUCCESS {
            return Err(self.fail(f.name, index, status));
        }
        Ok(value)
    }

    fn bdf(&self, dev: Dev, index: u32) -> Result<Option<String>, Failure> {
        let Some(pci) = &self.t.pci else {
            return Ok(None);
        };
        let mut info = PciInfo {
            bus_id_legacy: [0; 16],
            domain: 0,
            bus: 0,
            device: 0,
            pci_device_id: 0,
            pci_sub_system_id: 0,
            bus_id: [0; 32],
        };
        // SAFETY: writes one PciInfo.
        let status = unsafe { (pci.f)(dev, &mut info) };
        if status != SUCCESS {
            return Err(self.fail(pci.name, index, status));
        }
        Ok(Some(
            normalize_bdf(&buf_string(&info.bus_id))
                .unwrap_or_else(|| format_bdf(info.domain, info.bus, info.device, 0)),
        ))
    }

    fn processes(&self, dev: Dev, index: u32) -> Result<Vec<u32>, Failure> {
        let mut pids = Vec::new();
        for f in std::iter::once(&self.t.compute).chain(self.t.graphics.as_ref()) {
            let list = fill_list(NO_PROCESS, INSUFFICIENT_SIZE, |count, buf| {
                // SAFETY: `buf` holds `*count` entries, as the API requires.
                unsafe { (f.f)(dev, count, buf) }
            })
            .map_err(|status| self.fail(f.name, index, status))?;
            pids.extend(list.iter().map(|p| p.pid));
        }
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }

    /// The device's load; a part the library lacks or fails is left out.
    fn load(&self, dev: Dev) -> Load {
        let mut load = Load::default();
        if let Some(f) = &self.t.utilization {
            let mut u = Utilization::default();
            // SAFETY: writes one nvmlUtilization_t.
            if unsafe { (f.f)(dev, &mut u) } == SUCCESS {
                load.util_pct = Some(Load::pct(u.gpu));
            }
        }
        if let Some(f) = &self.t.memory {
            let mut m = Memory::default();
            // SAFETY: writes one nvmlMemory_t (version 1).
            if unsafe { (f.f)(dev, &mut m) } == SUCCESS && m.total > 0 {
                load.mem_used = Some(m.used.min(m.total));
                load.mem_total = Some(m.total);
            }
        }
        load
    }

    fn device_nodes(&self, dev: Dev, index: u32) -> Result<Vec<PathBuf>, AccelError> {
        Ok(match self.nodes {
            Nodes::Nvidia => {
                let minor = self
                    .t
                    .minor
                    .as_ref()
                    .expect("NVML loads its minor function");
                let minor = self
                    .uint(minor, dev, index)
                    .map_err(|f| AccelError::query(self.vendor, f.error))?;
                vec![
                    PathBuf::from(format!("/dev/nvidia{minor}")),
                    PathBuf::from("/dev/nvidiactl"),
                    PathBuf::from("/dev/nvidia-uvm"),
                    PathBuf::from("/dev/nvidia-uvm-tools"),
                ]
            }
            Nodes::Ppu => {
                // HGML names no device node and no PCI-to-node mapping is documented,
                // so the node follows the index; it must exist (see the module docs).
                let own = PathBuf::from(format!("/dev/alixpu_ppu{index}"));
                require_node(self.vendor, &self.dev_root, &own, index)?;
                vec![
                    own,
                    PathBuf::from("/dev/alixpu"),
                    PathBuf::from("/dev/alixpu_ctl"),
                ]
            }
        })
    }

    fn discover_one(&self, index: u32) -> Result<DiscoveredDevice, AccelError> {
        let q = |f: Failure| AccelError::query(self.vendor, f.error);
        let dev = self.handle(index).map_err(q)?;
        let uuid = self.uuid(dev, index).map_err(q)?;
        let pci_bdf = self.bdf(dev, index).map_err(q)?;
        let numa_node = self
            .t
            .numa
            .as_ref()
            .and_then(|f| self.uint(f, dev, index).ok())
            .or_else(|| {
                pci_bdf
                    .as_deref()
                    .and_then(|b| sysfs_numa_node(&self.sysfs_root, b))
            });
        let device_nodes = self.device_nodes(dev, index)?;
        Ok(DiscoveredDevice {
            vendor: self.vendor,
            index,
            uuid,
            pci_bdf,
            numa_node,
            device_nodes,
        })
    }

    fn poll_one(&self, index: u32) -> DevicePoll {
        let mut lost = None;
        let mut note = |f: Failure| {
            if f.status == GPU_IS_LOST && lost.is_none() {
                lost = Some(f.error.to_string());
            }
            f.error
        };
        let (uuid, processes, load) = match self.handle(index) {
            Err(f) => {
                let e = note(f);
                (Err(e.clone()), Err(e), Load::default())
            }
            Ok(dev) => (
                self.uuid(dev, index).map_err(&mut note),
                self.processes(dev, index).map_err(&mut note),
                self.load(dev),
            ),
        };
        let condition = Ok(match lost {
            Some(why) => Condition::Unhealthy(why),
            None => Condition::Healthy,
        });
        DevicePoll {
            index,
            uuid,
            processes,
            condition,
            load,
        }
    }
}

impl Backend for NvmlLike {
    fn vendor(&self) -> Vendor {
        self.vendor
    }

    fn library(&self) -> &Path {
        &self.lib.path
    }

    fn api(&self) -> &'static str {
        self.api
    }

    fn discover(&self) -> Result<Vec<DiscoveredDevice>, AccelError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let n = self
            .count()
            .map_err(|e| AccelError::query(self.vendor, e))?;
        (0..n).map(|i| self.discover_one(i)).collect()
    }

    fn poll(&self, devices: &[DiscoveredDevice]) -> Result<Vec<DevicePoll>, QueryError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.count()?;
        Ok(devices.iter().map(|d| self.poll_one(d.index)).collect())
    }
}

impl Drop for NvmlLike {
    fn drop(&mut self) {
        // SAFETY: the library was initialised (construction fails otherwise).
        unsafe {
            (self.t.shutdown.f)();
        }
    }
}

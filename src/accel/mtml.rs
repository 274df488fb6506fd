//! Moore Threads through MTML (`libmtml.so`). xlurm does not run `mthreads-gmi`.
//!
//! MTML functions used (from `mtml.h`; `MtmlReturn` is a C enum, 0 = `MTML_SUCCESS`):
//!
//! ```c
//! MtmlReturn mtmlLibraryInit(MtmlLibrary **lib);
//! MtmlReturn mtmlLibraryShutDown(MtmlLibrary *lib);
//! MtmlReturn mtmlLibraryCountDevice(const MtmlLibrary *lib, unsigned int *count);
//! MtmlReturn mtmlLibraryInitDeviceByIndex(const MtmlLibrary *lib, unsigned int index,
//!                                         MtmlDevice **dev);
//! MtmlReturn mtmlLibraryFreeDevice(MtmlDevice *dev);
//! MtmlReturn mtmlDeviceGetUUID(const MtmlDevice *dev, char *uuid, unsigned int length);
//! MtmlReturn mtmlDeviceGetPciInfo(const MtmlDevice *dev, MtmlPciInfo *pci);
//! const char *mtmlErrorString(MtmlReturn result);
//! /* optional (MTML_DEVICE_PATH_BUFFER_SIZE = 64): */
//! MtmlReturn mtmlDeviceGetGpuPath(const MtmlDevice *dev, char *path, unsigned int length);
//! /* optional (load): the GPU and memory sub-objects of a device */
//! MtmlReturn mtmlDeviceInitGpu(const MtmlDevice *dev, MtmlGpu **gpu);
//! MtmlReturn mtmlDeviceFreeGpu(MtmlGpu *gpu);
//! MtmlReturn mtmlGpuGetUtilization(const MtmlGpu *gpu, unsigned int *utilization);
//! MtmlReturn mtmlDeviceInitMemory(const MtmlDevice *dev, MtmlMemory **mem);
//! MtmlReturn mtmlDeviceFreeMemory(MtmlMemory *mem);
//! MtmlReturn mtmlMemoryGetTotal(const MtmlMemory *mem, unsigned long long *total);
//! MtmlReturn mtmlMemoryGetUsed(const MtmlMemory *mem, unsigned long long *used);
//!
//! typedef struct { char sbdf[32]; unsigned int segment, bus, device, pciDeviceId,
//!                  pciSubsystemId, busWidth; float pciMaxSpeed, pciCurSpeed;
//!                  unsigned int pciMaxWidth, pciCurWidth, pciMaxGen, pciCurGen;
//!                  int rsvd[6]; } MtmlPciInfo;
//! ```
//!
//! What the public `mtml.h` does not have, and what xlurm does instead:
//!
//! * **No per-device process query.** The only PIDs MTML reports are those of video
//!   codec sessions (`mtmlVpuGetEncoderSessionMetrics`), not compute users. So the
//!   processes using a Moore Threads device are those holding one of its device nodes
//!   open (`/proc/<pid>/fd`, which the root daemon can read). A process whose
//!   descriptors cannot be listed is skipped (see [`processes_holding`]).
//! * **No "GPU is lost" status and no health query.** `MtmlReturn` stops at
//!   `MTML_ERROR_RESOURCE_IS_BUSY` (12) and `MTML_ERROR_UNKNOWN` (999); a lost device
//!   shows up as failing queries, which make it unknown (allocation paused), never
//!   healthy. Some third-party Python bindings list a `MTML_ERROR_GPU_IS_LOST` (669),
//!   but their other codes contradict the header, so xlurm does not rely on it.
//!
//! Device nodes: the one `mtmlDeviceGetGpuPath` names when the library exports it
//! (it must be an absolute `/dev/...` path), else `/dev/mtgpu.<index>`; either must
//! exist (under `AccelConfig::dev_root`) or discovery fails naming it. Plus the device's
//! own DRM nodes (`/dev/dri/renderD*` and `/dev/dri/card*`, from sysfs by PCI address).
//!
//! Load: the busy percent is the GPU sub-object's utilization (percent), memory the
//! memory sub-object's total and used (bytes). Each sub-object is opened for the query
//! and freed after it; it is used only when the library exports all three of its
//! functions (init, free, query). A part the library lacks or fails is `None`.

use super::loader::{buf_string, c_string, Lib};
use super::nodes::{
    normalize_bdf, processes_holding, require_node, required_drm_nodes, sysfs_numa_node,
};
use super::nvml::{opt, req, F};
use super::{
    AccelConfig, AccelError, Backend, Condition, DevicePoll, DiscoveredDevice, Load, QueryError,
};
use crate::core::Vendor;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

type R = c_int;
type LibPtr = *mut c_void;
type DevPtr = *mut c_void;
type GpuPtr = *mut c_void;
type MemPtr = *mut c_void;

const UUID_BUFFER: usize = 48;
/// `MTML_ERROR_NOT_SUPPORTED` (mtml.h).
const MTML_ERROR_NOT_SUPPORTED: R = 4;
/// `MTML_DEVICE_PATH_BUFFER_SIZE`.
const PATH_BUFFER: usize = 64;

#[repr(C)]
#[derive(Clone, Copy)]
struct PciInfo {
    sbdf: [c_char; 32],
    segment: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_subsystem_id: c_uint,
    bus_width: c_uint,
    pci_max_speed: f32,
    pci_cur_speed: f32,
    pci_max_width: c_uint,
    pci_cur_width: c_uint,
    pci_max_gen: c_uint,
    pci_cur_gen: c_uint,
    rsvd: [c_int; 6],
}

struct Api {
    init: F<unsafe extern "C" fn(*mut LibPtr) -> R>,
    shutdown: F<unsafe extern "C" fn(LibPtr) -> R>,
    count: F<unsafe extern "C" fn(LibPtr, *mut c_uint) -> R>,
    device: F<unsafe extern "C" fn(LibPtr, c_uint, *mut DevPtr) -> R>,
    free: F<unsafe extern "C" fn(DevPtr) -> R>,
    uuid: F<unsafe extern "C" fn(DevPtr, *mut c_char, c_uint) -> R>,
    pci: F<unsafe extern "C" fn(DevPtr, *mut PciInfo) -> R>,
    gpu_path: Option<F<unsafe extern "C" fn(DevPtr, *mut c_char, c_uint) -> R>>,
    error_string: F<unsafe extern "C" fn(R) -> *const c_char>,
    gpu: Option<GpuApi>,
    memory: Option<MemoryApi>,
}

/// The GPU sub-object's functions (all exported, or not used).
struct GpuApi {
    init: F<unsafe extern "C" fn(DevPtr, *mut GpuPtr) -> R>,
    free: F<unsafe extern "C" fn(GpuPtr) -> R>,
    utilization: F<unsafe extern "C" fn(GpuPtr, *mut c_uint) -> R>,
}

/// The memory sub-object's functions (all exported, or not used).
struct MemoryApi {
    init: F<unsafe extern "C" fn(DevPtr, *mut MemPtr) -> R>,
    free: F<unsafe extern "C" fn(MemPtr) -> R>,
    total: F<unsafe extern "C" fn(MemPtr, *mut c_ulonglong) -> R>,
    used: F<unsafe extern "C" fn(MemPtr, *mut c_ulonglong) -> R>,
}

pub(crate) struct Mtml {
    lib: Lib,
    api: Api,
    /// The `MtmlLibrary *` from `mtmlLibraryInit`; the mutex serialises all calls.
    handle: Mutex<usize>,
    sysfs_root: PathBuf,
    proc_root: PathBuf,
    dev_root: PathBuf,
}

/// A device opened with `mtmlLibraryInitDeviceByIndex`, freed on drop.
struct Opened<'a> {
    api: &'a Api,
    dev: DevPtr,
}

impl Drop for Opened<'_> {
    fn drop(&mut self) {
        // SAFETY: `dev` came from mtmlLibraryInitDeviceByIndex.
        unsafe {
            (self.api.free.f)(self.dev);
        }
    }
}

impl Mtml {
    pub fn new(lib: Lib, config: &AccelConfig) -> Result<Self, AccelError> {
        // SAFETY: the signatures are mtml.h's (module docs).
        let api = unsafe {
            Api {
                init: req(&lib, "mtmlLibraryInit")?,
                shutdown: req(&lib, "mtmlLibraryShutDown")?,
                count: req(&lib, "mtmlLibraryCountDevice")?,
                device: req(&lib, "mtmlLibraryInitDeviceByIndex")?,
                free: req(&lib, "mtmlLibraryFreeDevice")?,
                uuid: req(&lib, "mtmlDeviceGetUUID")?,
                pci: req(&lib, "mtmlDeviceGetPciInfo")?,
                gpu_path: opt(&lib, "mtmlDeviceGetGpuPath"),
                error_string: req(&lib, "mtmlErrorString")?,
                gpu: (|| {
                    Some(GpuApi {
                        init: opt(&lib, "mtmlDeviceInitGpu")?,
                        free: opt(&lib, "mtmlDeviceFreeGpu")?,
                        utilization: opt(&lib, "mtmlGpuGetUtilization")?,
                    })
                })(),
                memory: (|| {
                    Some(MemoryApi {
                        init: opt(&lib, "mtmlDeviceInitMemory")?,
                        free: opt(&lib, "mtmlDeviceFreeMemory")?,
                        total: opt(&lib, "mtmlMemoryGetTotal")?,
                        used: opt(&lib, "mtmlMemoryGetUsed")?,
                    })
                })(),
            }
        };
        let mut handle: LibPtr = std::ptr::null_mut();
        // SAFETY: writes the library pointer.
        let status = unsafe { (api.init.f)(&mut handle) };
        if status != 0 || handle.is_null() {
            let error = QueryError::new(api.init.name, message(&api, status));
            return Err(AccelError::query(Vendor::Mtt, error));
        }
        Ok(Mtml {
            lib,
            api,
            handle: Mutex::new(handle as usize),
            sysfs_root: config.sysfs_root.clone(),
            proc_root: config.proc_root.clone(),
            dev_root: config.dev_root.clone(),
        })
    }

    fn fail(&self, name: &str, index: u32, status: R) -> QueryError {
        QueryError::new(format!("{name}({index})"), message(&self.api, status))
    }

    fn count(&self, lib: LibPtr) -> Result<u32, QueryError> {
        let mut n: c_uint = 0;
        // SAFETY: writes one unsigned int.
        let status = unsafe { (self.api.count.f)(lib, &mut n) };
        if status != 0 {
            return Err(QueryError::new(
                self.api.count.name,
                message(&self.api, status),
            ));
        }
        Ok(n)
    }

    fn open(&self, lib: LibPtr, index: u32) -> Result<Opened<'_>, QueryError> {
        let mut dev: DevPtr = std::ptr::null_mut();
        // SAFETY: writes one device pointer.
        let status = unsafe { (self.api.device.f)(lib, index, &mut dev) };
        if status != 0 || dev.is_null() {
            return Err(self.fail(self.api.device.name, index, status));
        }
        Ok(Opened {
            api: &self.api,
            dev,
        })
    }

    fn uuid(&self, dev: &Opened, index: u32) -> Result<String, QueryError> {
        let mut buf = [0 as c_char; UUID_BUFFER];
        // SAFETY: the buffer's length is passed.
        let status = unsafe { (self.api.uuid.f)(dev.dev, buf.as_mut_ptr(), UUID_BUFFER as c_uint) };
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

    fn bdf(&self, dev: &Opened, index: u32) -> Result<String, QueryError> {
        // SAFETY: PciInfo is plain data; all-zero is a valid value.
        let mut info: PciInfo = unsafe { std::mem::zeroed() };
        // SAFETY: writes one MtmlPciInfo.
        let status = unsafe { (self.api.pci.f)(dev.dev, &mut info) };
        if status != 0 {
            return Err(self.fail(self.api.pci.name, index, status));
        }
        let sbdf = buf_string(&info.sbdf);
        normalize_bdf(&sbdf).ok_or_else(|| {
            QueryError::new(
                format!("{}({index})", self.api.pci.name),
                format!("invalid PCI address {sbdf:?}"),
            )
        })
    }

    /// The device's load; a part the library lacks or fails is left out.
    fn load(&self, dev: &Opened) -> Load {
        let mut load = Load::default();
        if let Some(g) = &self.api.gpu {
            let mut gpu: GpuPtr = std::ptr::null_mut();
            // SAFETY: writes one MtmlGpu pointer.
            if unsafe { (g.init.f)(dev.dev, &mut gpu) } == 0 && !gpu.is_null() {
                let mut pct: c_uint = 0;
                // SAFETY: writes one unsigned int; `gpu` is then freed once.
                unsafe {
                    if (g.utilization.f)(gpu, &mut pct) == 0 {
                        load.util_pct = Some(Load::pct(pct));
                    }
                    (g.free.f)(gpu);
                }
            }
        }
        if let Some(m) = &self.api.memory {
            let mut mem: MemPtr = std::ptr::null_mut();
            // SAFETY: writes one MtmlMemory pointer.
            if unsafe { (m.init.f)(dev.dev, &mut mem) } == 0 && !mem.is_null() {
                let (mut total, mut used): (c_ulonglong, c_ulonglong) = (0, 0);
                // SAFETY: each writes one unsigned long long; `mem` is then freed once.
                unsafe {
                    if (m.total.f)(mem, &mut total) == 0
                        && (m.used.f)(mem, &mut used) == 0
                        && total > 0
                    {
                        load.mem_total = Some(total);
                        load.mem_used = Some(used.min(total));
                    }
                    (m.free.f)(mem);
                }
            }
        }
        load
    }

    /// The device's own node: what `mtmlDeviceGetGpuPath` says, else (not
    /// exported, or `MTML_ERROR_NOT_SUPPORTED` for this device)
    /// `/dev/mtgpu.<index>`.
    fn gpu_node(&self, dev: &Opened, index: u32) -> Result<PathBuf, AccelError> {
        let fallback = || PathBuf::from(format!("/dev/mtgpu.{index}"));
        let Some(f) = &self.api.gpu_path else {
            return Ok(fallback());
        };
        let mut buf = [0 as c_char; PATH_BUFFER];
        // SAFETY: the buffer's length is passed.
        let status = unsafe { (f.f)(dev.dev, buf.as_mut_ptr(), PATH_BUFFER as c_uint) };
        if status == MTML_ERROR_NOT_SUPPORTED {
            return Ok(fallback());
        }
        if status != 0 {
            return Err(AccelError::query(
                Vendor::Mtt,
                self.fail(f.name, index, status),
            ));
        }
        let path = PathBuf::from(buf_string(&buf));
        if !path.starts_with("/dev") || path == Path::new("/dev") {
            return Err(AccelError::invalid(
                Vendor::Mtt,
                format!(
                    "{}({index}) gave {:?}, not a device node under /dev; the library does \
                     not match this xlurm (report it with the MTML version)",
                    f.name,
                    path.display()
                ),
            ));
        }
        Ok(path)
    }

    fn discover_one(&self, lib: LibPtr, index: u32) -> Result<DiscoveredDevice, AccelError> {
        let q = |e| AccelError::query(Vendor::Mtt, e);
        let dev = self.open(lib, index).map_err(q)?;
        let uuid = self.uuid(&dev, index).map_err(q)?;
        let bdf = self.bdf(&dev, index).map_err(q)?;
        let node = self.gpu_node(&dev, index)?;
        require_node(Vendor::Mtt, &self.dev_root, &node, index)?;
        let mut device_nodes = vec![node];
        device_nodes.extend(required_drm_nodes(
            Vendor::Mtt,
            &self.sysfs_root,
            Some(&bdf),
            index,
            true,
        )?);
        Ok(DiscoveredDevice {
            vendor: Vendor::Mtt,
            index,
            uuid,
            numa_node: sysfs_numa_node(&self.sysfs_root, &bdf),
            pci_bdf: Some(bdf),
            device_nodes,
        })
    }
}

fn message(api: &Api, status: R) -> String {
    // SAFETY: returns a static string or null.
    let text = unsafe { c_string((api.error_string.f)(status)) };
    if text.is_empty() {
        format!("error {status}")
    } else {
        format!("{text} ({status})")
    }
}

impl Backend for Mtml {
    fn vendor(&self) -> Vendor {
        Vendor::Mtt
    }

    fn library(&self) -> &Path {
        &self.lib.path
    }

    fn api(&self) -> &'static str {
        "MTML"
    }

    fn discover(&self) -> Result<Vec<DiscoveredDevice>, AccelError> {
        let handle = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        let lib = *handle as LibPtr;
        let n = self
            .count(lib)
            .map_err(|e| AccelError::query(Vendor::Mtt, e))?;
        (0..n).map(|i| self.discover_one(lib, i)).collect()
    }

    fn poll(&self, devices: &[DiscoveredDevice]) -> Result<Vec<DevicePoll>, QueryError> {
        let handle = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        let lib = *handle as LibPtr;
        self.count(lib)?;
        Ok(devices
            .iter()
            .map(|d| {
                let (uuid, load) = match self.open(lib, d.index) {
                    Err(e) => (Err(e), Load::default()),
                    Ok(dev) => (self.uuid(&dev, d.index), self.load(&dev)),
                };
                let processes = processes_holding(&self.proc_root, &d.device_nodes).map_err(|e| {
                    QueryError::new(format!("open handles of mtt device {}", d.index), e)
                });
                DevicePoll {
                    index: d.index,
                    uuid,
                    processes,
                    condition: Ok(Condition::Healthy),
                    load,
                }
            })
            .collect())
    }
}

impl Drop for Mtml {
    fn drop(&mut self) {
        let handle = *self.handle.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the pointer came from a successful mtmlLibraryInit.
        unsafe {
            (self.api.shutdown.f)(handle as LibPtr);
        }
    }
}

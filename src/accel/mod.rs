//! Accelerator backends: finding devices through each vendor's management library,
//! polling them, and turning what they say into the core's [`Health`].
//!
//! Every vendor library is loaded at run time with `libloading` through a hand-written
//! table of the few C functions xlurm needs (see each vendor's file and
//! `docs/accelerators.md` for the exact signatures assumed). Nothing links against a
//! vendor library, so the daemon starts on machines without any driver.
//!
//! The daemon's side, in order:
//!
//! 1. [`AccelConfig::from_env`] with the daemon's own environment (never a job's), then
//!    [`select`]: the backends to use and their devices, plus warnings for skipped vendors.
//! 2. Every couple of seconds, a monitoring [`round`] per backend: [`Poller::poll`] (a
//!    blocking driver call on a blocking thread, bounded by a timeout), then [`judge`]
//!    with who held each device while the poll ran and whose processes are whose
//!    ([`ProcCgroups`]) to get each device's [`Health`].
//! 3. When starting a job: [`visibility_env`] for its environment and [`device_allow`]
//!    for its unit's `DeviceAllow=`.

mod dcmi;
mod env;
mod hcu;
mod health;
mod hgml;
mod loader;
mod monitor;
mod mtml;
mod mxsml;
mod nodes;
mod nvml;

use crate::core::{Device, DeviceRef, Health, Vendor};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use crate::core::Load;
pub use env::{
    visibility_env, VisibilityError, CUDA_DEVICE_ORDER, NONE_VISIBLE, VISIBILITY_VARIABLES,
};
pub use health::{assess, assess_all, ProcCgroups};
pub use loader::LibrarySearch;
pub use monitor::{judge, round, Hold, Holders};
pub use nodes::{
    device_allow, drm_nodes, normalize_bdf, processes_holding, sysfs_numa_node, UnknownDevice,
};

/// One device as discovery found it: everything the daemon needs to schedule it, fence
/// a job in with it, and recognise it again when polling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredDevice {
    pub vendor: Vendor,
    /// The vendor's logical index: what users pass to `-i` and what the index-based
    /// visibility variables carry (for Ascend, the DCMI logical id of one chip).
    pub index: u32,
    /// The identity polling checks; also what the UUID-based visibility variables carry.
    pub uuid: String,
    /// PCI address, normalised to `dddd:bb:dd.f` (lower case), when the library gave one.
    pub pci_bdf: Option<String>,
    /// From the library when it knows, else `/sys/bus/pci/devices/<bdf>/numa_node`.
    pub numa_node: Option<u32>,
    /// Every device node a job holding this device must be allowed (`DeviceAllow=... rw`),
    /// the vendor's shared control nodes included.
    pub device_nodes: Vec<PathBuf>,
}

impl DiscoveredDevice {
    /// The core's view of this device (healthy and enabled until told otherwise).
    pub fn to_device(&self) -> Device {
        Device::new(self.vendor, self.index, self.uuid.clone(), self.numa_node)
    }

    pub fn device_ref(&self) -> DeviceRef {
        DeviceRef {
            vendor: self.vendor,
            index: self.index,
            uuid: self.uuid.clone(),
        }
    }
}

/// A failed or invalid library query: which call, and what the library said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError {
    /// The C function (with its arguments, where that helps), e.g. `nvmlDeviceGetUUID(0)`.
    pub call: String,
    /// The library's own error string and code, or why the answer was rejected.
    pub message: String,
}

impl QueryError {
    pub fn new(call: impl Into<String>, message: impl Into<String>) -> Self {
        QueryError {
            call: call.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.call, self.message)
    }
}

impl std::error::Error for QueryError {}

/// What the library says about a device's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    Healthy,
    /// The library reports the device broken; the text says why.
    Unhealthy(String),
}

/// One device's answers from one poll. Each part can fail on its own, so that a device
/// whose health is known bad is reported unhealthy even when its process query fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePoll {
    pub index: u32,
    /// The UUID the library reports now (compared with the one discovery saw).
    pub uuid: Result<String, QueryError>,
    /// Every process the library says uses the device (compute and graphics).
    pub processes: Result<Vec<u32>, QueryError>,
    pub condition: Result<Condition, QueryError>,
    /// How hard the device works, where its library tells it.
    pub load: Load,
}

/// One vendor's management library, loaded and initialised.
///
/// Both methods block in driver calls; run [`Backend::poll`] through [`Poller`] (or on
/// a blocking thread with a timeout of your own). Implementations serialise their own
/// library calls, so a backend may be shared between threads.
pub trait Backend: Send + Sync {
    fn vendor(&self) -> Vendor;
    /// The library file (or loader name) that was loaded.
    fn library(&self) -> &Path;
    /// Which API is in use, e.g. "NVML" or "DCMI v1 (dcmi_*)".
    fn api(&self) -> &'static str;
    /// Every device, in index order. An error means this vendor cannot be used.
    fn discover(&self) -> Result<Vec<DiscoveredDevice>, AccelError>;
    /// Current state of the given (previously discovered) devices: one [`DevicePoll`]
    /// per device, in the same order. `Err` means nothing could be learned about any of
    /// them (the device count itself failed, say).
    fn poll(&self, devices: &[DiscoveredDevice]) -> Result<Vec<DevicePoll>, QueryError>;
}

/// Why a vendor could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccelError {
    /// No library found on the search path (no override was set). Normal on machines
    /// without that vendor; `auto` reports it as a warning.
    #[error("{vendor}: {library} not found (tried {tried}); install the vendor's driver and management library, or name the library with {var}")]
    NotInstalled {
        vendor: Vendor,
        library: String,
        tried: String,
        /// The override variable that names the library explicitly.
        var: &'static str,
    },
    /// A library was found (or named by an override) but could not be loaded.
    #[error("{vendor}: cannot load {path}{origin}: {reason}")]
    Load {
        vendor: Vendor,
        path: PathBuf,
        /// " (from XLURM_..._LIBRARY; search disabled)" for overrides, else empty.
        origin: String,
        reason: String,
    },
    #[error("{var} must be an absolute path to the library, not {value:?}")]
    RelativeOverride { var: &'static str, value: PathBuf },
    /// The library lacks a function xlurm needs.
    #[error("{vendor}: {path} does not export {symbol}{detail}")]
    MissingSymbol {
        vendor: Vendor,
        path: PathBuf,
        symbol: String,
        /// Extra context, e.g. which API versions were tried.
        detail: String,
    },
    /// A library call failed during initialisation or discovery.
    #[error("{vendor}: {error}")]
    Query { vendor: Vendor, error: QueryError },
    /// Discovery found something unusable (no devices, an empty UUID, a missing node).
    #[error("{vendor}: {message}")]
    Invalid { vendor: Vendor, message: String },
}

impl AccelError {
    pub fn vendor(&self) -> Option<Vendor> {
        match self {
            AccelError::NotInstalled { vendor, .. }
            | AccelError::Load { vendor, .. }
            | AccelError::MissingSymbol { vendor, .. }
            | AccelError::Query { vendor, .. }
            | AccelError::Invalid { vendor, .. } => Some(*vendor),
            AccelError::RelativeOverride { .. } => None,
        }
    }

    /// The vendor's library simply is not on this machine (worth a debug line, not a
    /// warning, in `auto` mode).
    pub fn is_not_installed(&self) -> bool {
        matches!(self, AccelError::NotInstalled { .. })
    }

    pub(crate) fn query(vendor: Vendor, error: QueryError) -> Self {
        AccelError::Query { vendor, error }
    }

    pub(crate) fn invalid(vendor: Vendor, message: impl Into<String>) -> Self {
        AccelError::Invalid {
            vendor,
            message: message.into(),
        }
    }
}

/// `--backend`: which vendors the daemon manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// Every vendor whose library loads, initialises and finds devices.
    #[default]
    Auto,
    /// Exactly this vendor; any failure is an error.
    Only(Vendor),
    /// CPU only: no library is touched.
    None,
}

impl FromStr for BackendChoice {
    type Err = crate::core::device::UnknownVendor;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("auto") {
            Ok(BackendChoice::Auto)
        } else if s.eq_ignore_ascii_case("none") {
            Ok(BackendChoice::None)
        } else {
            s.parse().map(BackendChoice::Only)
        }
    }
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendChoice::Auto => f.write_str("auto"),
            BackendChoice::Only(v) => write!(f, "{v}"),
            BackendChoice::None => f.write_str("none"),
        }
    }
}

/// Everything backend selection needs, built once by the daemon from its own
/// environment and command line. Jobs' environments never reach this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccelConfig {
    pub backend: BackendChoice,
    /// Explicit library per vendor (from `XLURM_*_LIBRARY`); disables that vendor's search.
    pub libraries: BTreeMap<Vendor, PathBuf>,
    /// Where each vendor's library is searched for when `libraries` has no override
    /// (every vendor's documented search, [`LibrarySearch::default_for`]; tests replace it).
    pub library_search: BTreeMap<Vendor, LibrarySearch>,
    /// Explicit `hy-smi` (from `XLURM_HCU_HEALTH_TOOL`); disables its search.
    pub hcu_health_tool: Option<PathBuf>,
    /// The daemon's `PATH`, searched for `hy-smi` after its fixed locations.
    pub path_var: Option<OsString>,
    /// Root of sysfs (`/sys`); tests point it at a fake tree.
    pub sysfs_root: PathBuf,
    /// Root of procfs (`/proc`); tests point it at a fake tree.
    pub proc_root: PathBuf,
    /// Where device nodes are (`/dev`): discovery checks that the per-device nodes it
    /// names for PPU and Moore Threads exist there; tests point it at a fake tree.
    pub dev_root: PathBuf,
    /// How long an external probe (`hy-smi --healthcheck`) may run.
    pub tool_timeout: Duration,
}

/// The environment variable naming each vendor's library.
pub fn library_override_var(vendor: Vendor) -> &'static str {
    match vendor {
        Vendor::Nv => "XLURM_NVML_LIBRARY",
        Vendor::Asc => "XLURM_DCMI_LIBRARY",
        Vendor::Mtt => "XLURM_MTML_LIBRARY",
        Vendor::Mx => "XLURM_MXSML_LIBRARY",
        Vendor::Ppu => "XLURM_HGML_LIBRARY",
        Vendor::Hcu => "XLURM_HCU_SMI_LIBRARY",
    }
}

/// The environment variable naming the HCU health tool.
pub const HCU_HEALTH_TOOL_VAR: &str = "XLURM_HCU_HEALTH_TOOL";

impl AccelConfig {
    /// No overrides, the real `/sys`, `/proc` and `/dev`, a 3 s tool timeout.
    pub fn new(backend: BackendChoice) -> Self {
        AccelConfig {
            backend,
            libraries: BTreeMap::new(),
            library_search: Vendor::ALL
                .into_iter()
                .map(|v| (v, LibrarySearch::default_for(v)))
                .collect(),
            hcu_health_tool: None,
            path_var: None,
            sysfs_root: PathBuf::from("/sys"),
            proc_root: PathBuf::from("/proc"),
            dev_root: PathBuf::from("/dev"),
            tool_timeout: Duration::from_secs(3),
        }
    }

    /// Reads `XLURM_*_LIBRARY`, `XLURM_HCU_HEALTH_TOOL` and `PATH` through `lookup`,
    /// which the daemon backs with its own environment (`|k| std::env::var_os(k)`).
    /// Empty values count as unset.
    pub fn from_env(backend: BackendChoice, lookup: impl Fn(&str) -> Option<OsString>) -> Self {
        let get = |k: &str| lookup(k).filter(|v| !v.is_empty());
        let mut config = AccelConfig::new(backend);
        for vendor in Vendor::ALL {
            if let Some(path) = get(library_override_var(vendor)) {
                config.libraries.insert(vendor, PathBuf::from(path));
            }
        }
        config.hcu_health_tool = get(HCU_HEALTH_TOOL_VAR).map(PathBuf::from);
        config.path_var = get("PATH");
        config
    }
}

/// A backend in use and the devices it found.
pub struct Active {
    pub backend: Arc<dyn Backend>,
    pub devices: Vec<DiscoveredDevice>,
}

impl fmt::Debug for Active {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Active")
            .field("vendor", &self.backend.vendor())
            .field("library", &self.backend.library())
            .field("api", &self.backend.api())
            .field("devices", &self.devices)
            .finish()
    }
}

/// What [`select`] decided.
#[derive(Debug, Default)]
pub struct Selection {
    /// In `auto` order (NVIDIA, Ascend, Moore Threads, MetaX, PPU, HCU).
    pub active: Vec<Active>,
    /// Vendors `auto` skipped, and why (see [`AccelError::is_not_installed`]).
    pub warnings: Vec<AccelError>,
}

impl Selection {
    /// Every discovered device, in `auto` order.
    pub fn devices(&self) -> impl Iterator<Item = &DiscoveredDevice> {
        self.active.iter().flat_map(|a| a.devices.iter())
    }
}

/// Loads and initialises one vendor's library (override or search), without discovery.
pub fn open_backend(vendor: Vendor, config: &AccelConfig) -> Result<Arc<dyn Backend>, AccelError> {
    let search = config
        .library_search
        .get(&vendor)
        .cloned()
        .unwrap_or_else(|| LibrarySearch::default_for(vendor));
    let library = loader::open(
        vendor,
        config.libraries.get(&vendor).map(PathBuf::as_path),
        &search,
    )?;
    Ok(match vendor {
        Vendor::Nv => Arc::new(nvml::Nvml::new(library, config)?),
        Vendor::Asc => Arc::new(dcmi::Dcmi::new(library, config)?),
        Vendor::Mtt => Arc::new(mtml::Mtml::new(library, config)?),
        Vendor::Mx => Arc::new(mxsml::Mxsml::new(library, config)?),
        Vendor::Ppu => Arc::new(hgml::Hgml::hgml(library, config)?),
        Vendor::Hcu => Arc::new(hcu::Hcu::new(library, config)?),
    })
}

fn open_and_discover(vendor: Vendor, config: &AccelConfig) -> Result<Active, AccelError> {
    let backend = open_backend(vendor, config)?;
    let devices = backend.discover()?;
    if devices.is_empty() {
        return Err(AccelError::invalid(
            vendor,
            format!(
                "{} ({}) reports no devices",
                backend.library().display(),
                backend.api()
            ),
        ));
    }
    Ok(Active { backend, devices })
}

/// Backend selection: `auto` keeps every vendor whose library loads, initialises and
/// finds at least one device, and returns the others' errors as warnings; a named
/// vendor must succeed (its error is the error); `none` touches no library.
pub fn select(config: &AccelConfig) -> Result<Selection, AccelError> {
    let mut selection = Selection::default();
    match config.backend {
        BackendChoice::None => {}
        BackendChoice::Only(vendor) => selection.active.push(open_and_discover(vendor, config)?),
        BackendChoice::Auto => {
            for vendor in Vendor::ALL {
                match open_and_discover(vendor, config) {
                    Ok(active) => selection.active.push(active),
                    Err(e) => selection.warnings.push(e),
                }
            }
        }
    }
    Ok(selection)
}

/// Runs one backend's blocking [`Backend::poll`] on tokio's blocking pool with a
/// deadline, so a hung driver never stalls the daemon. A poll that outlives its
/// deadline keeps its thread until the driver returns; until then further polls of that
/// backend fail at once instead of piling up threads.
#[derive(Clone)]
pub struct Poller {
    backend: Arc<dyn Backend>,
    devices: Arc<Vec<DiscoveredDevice>>,
    in_flight: Arc<AtomicBool>,
}

struct InFlight(Arc<AtomicBool>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Poller {
    pub fn new(backend: Arc<dyn Backend>, devices: Vec<DiscoveredDevice>) -> Self {
        Poller {
            backend,
            devices: Arc::new(devices),
            in_flight: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn devices(&self) -> &[DiscoveredDevice] {
        &self.devices
    }

    /// Polls within `timeout`; a timeout, a stuck earlier poll or a panic in the
    /// backend come back as a [`QueryError`] (so every device becomes Unknown).
    pub async fn poll(&self, timeout: Duration) -> Result<Vec<DevicePoll>, QueryError> {
        let call = format!("{} poll", self.backend.vendor());
        if self.in_flight.swap(true, Ordering::AcqRel) {
            return Err(QueryError::new(
                call,
                "the previous poll has not returned yet (driver call hung)",
            ));
        }
        let guard = InFlight(self.in_flight.clone());
        let backend = self.backend.clone();
        let devices = self.devices.clone();
        let task = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            backend.poll(&devices)
        });
        match tokio::time::timeout(timeout, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(QueryError::new(call, format!("poll panicked: {join}"))),
            Err(_) => Err(QueryError::new(
                call,
                format!("no answer within {} ms", timeout.as_millis()),
            )),
        }
    }

    /// Polls and assesses in one go: each device's [`Health`], in [`Poller::devices`]
    /// order. See [`assess_all`] for `holder_of` and `job_of_pid`.
    pub async fn poll_health(
        &self,
        timeout: Duration,
        holder_of: impl Fn(&DiscoveredDevice) -> Option<crate::core::JobId>,
        job_of_pid: impl Fn(u32) -> Option<crate::core::JobId>,
    ) -> Vec<Health> {
        let result = self.poll(timeout).await;
        assess_all(&self.devices, &result, holder_of, job_of_pid)
    }
}

//! Hygon HCU through the driver's ROCm SMI (`librocm_smi64.so`, from hyhal), with
//! health from `hy-smi --healthcheck`.
//!
//! ROCm SMI functions used (`rsmi_status_t` is a C enum, 0 = `RSMI_STATUS_SUCCESS`,
//! 11 = `RSMI_STATUS_INSUFFICIENT_SIZE`, 10 = `RSMI_STATUS_NOT_FOUND`):
//!
//! ```c
//! rsmi_status_t rsmi_init(uint64_t init_flags);
//! rsmi_status_t rsmi_shut_down(void);
//! rsmi_status_t rsmi_num_monitor_devices(uint32_t *num_devices);
//! rsmi_status_t rsmi_dev_unique_id_get(uint32_t dv_ind, uint64_t *id);
//! rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv_ind, uint64_t *bdfid);
//! rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t *procs,
//!                                             uint32_t *num_items);
//! rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t *dv_indices,
//!                                             uint32_t *num_devices);
//! rsmi_status_t rsmi_status_string(rsmi_status_t status, const char **status_string);
//! /* optional: */
//! rsmi_status_t rsmi_topo_get_numa_node_number(uint32_t dv_ind, uint32_t *numa_node);
//! /* optional (load; RSMI_MEM_TYPE_VRAM = 0 of the C enum rsmi_memory_type_t): */
//! rsmi_status_t rsmi_dev_busy_percent_get(uint32_t dv_ind, uint32_t *busy_percent);
//! rsmi_status_t rsmi_dev_memory_total_get(uint32_t dv_ind, rsmi_memory_type_t mem_type,
//!                                         uint64_t *total);   /* bytes */
//! rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dv_ind, rsmi_memory_type_t mem_type,
//!                                         uint64_t *used);    /* bytes */
//!
//! typedef struct { uint32_t process_id; uint32_t pasid; uint64_t vram_usage;
//!                  uint64_t sdma_usage; uint32_t cu_occupancy; } rsmi_process_info_t;
//! ```
//!
//! `bdfid` is `domain << 32 | bus << 8 | device << 3 | function`. The UUID is the unique
//! id in hex (`0x...`). Processes: every compute process, then which devices each uses.
//! Health: `hy-smi --healthcheck` (from `XLURM_HCU_HEALTH_TOOL`, else
//! `/opt/dtk/.hyhal/bin/hy-smi`, `/opt/hyhal/bin/hy-smi`, then the daemon's `PATH`), run
//! once per poll with a timeout; a line `HCU[<index>] ... : Healthy` is healthy, any
//! other status unhealthy, and a tool that fails, times out or omits a device leaves
//! that device unknown. Device nodes: `/dev/kfd`, `/dev/mkfd` and the device's
//! `/dev/dri/renderD*` (from sysfs by PCI address).
//!
//! Load: the busy percent from `rsmi_dev_busy_percent_get`, memory the VRAM's total and
//! used; a function the library lacks, or a query that fails, leaves that part `None`.

use super::loader::{c_string, Lib};
use super::nodes::{format_bdf, required_drm_nodes, sysfs_numa_node};
use super::nvml::{opt, req, F};
use super::HCU_HEALTH_TOOL_VAR;
use super::{
    AccelConfig, AccelError, Backend, Condition, DevicePoll, DiscoveredDevice, Load, QueryError,
};
use crate::core::Vendor;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_uint};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

type Status = c_uint;

const INSUFFICIENT_SIZE: Status = 11;
const NOT_FOUND: Status = 10;
/// `RSMI_MEM_TYPE_VRAM` (`rsmi_memory_type_t`).
const MEM_TYPE_VRAM: c_uint = 0;

type MemoryFn = unsafe extern "C" fn(u32, c_uint, *mut u64) -> Status;

/// Where `hy-smi` is looked for before `PATH`.
const HEALTH_TOOL_CANDIDATES: [&str; 2] = ["/opt/dtk/.hyhal/bin/hy-smi", "/opt/hyhal/bin/hy-smi"];

#[repr(C)]
#[derive(Clone, Copy)]
struct ProcessInfo {
    process_id: u32,
    pasid: u32,
    vram_usage: u64,
    sdma_usage: u64,
    cu_occupancy: u32,
}

struct Api {
    init: F<unsafe extern "C" fn(u64) -> Status>,
    shutdown: F<unsafe extern "C" fn() -> Status>,
    count: F<unsafe extern "C" fn(*mut u32) -> Status>,
    unique_id: F<unsafe extern "C" fn(u32, *mut u64) -> Status>,
    pci_id: F<unsafe extern "C" fn(u32, *mut u64) -> Status>,
    procs: F<unsafe extern "C" fn(*mut ProcessInfo, *mut u32) -> Status>,
    gpus: F<unsafe extern "C" fn(u32, *mut u32, *mut u32) -> Status>,
    status_string: F<unsafe extern "C" fn(Status, *mut *const c_char) -> Status>,
    numa: Option<F<unsafe extern "C" fn(u32, *mut u32) -> Status>>,
    busy: Option<F<unsafe extern "C" fn(u32, *mut u32) -> Status>>,
    memory_total: Option<F<MemoryFn>>,
    memory_usage: Option<F<MemoryFn>>,
}

/// How to run the health tool.
#[derive(Debug, Clone)]
enum Tool {
    Found(PathBuf),
    Missing(String),
}

pub(crate) struct Hcu {
    lib: Lib,
    api: Api,
    tool: Tool,
    tool_timeout: Duration,
    sysfs_root: PathBuf,
    lock: Mutex<()>,
}

fn find_tool(config: &AccelConfig) -> Result<Tool, AccelError> {
    if let Some(path) = &config.hcu_health_tool {
        if !path.is_absolute() {
            return Err(AccelError::RelativeOverride {
                var: HCU_HEALTH_TOOL_VAR,
                value: path.clone(),
            });
        }
        return Ok(Tool::Found(path.clone()));
    }
    let mut tried: Vec<String> = Vec::new();
    for candidate in HEALTH_TOOL_CANDIDATES {
        if Path::new(candidate).is_file() {
            return Ok(Tool::Found(PathBuf::from(candidate)));
        }
        tried.push(candidate.to_string());
    }
    let path_var = config.path_var.clone().unwrap_or_default();
    for dir in std::env::split_paths(&path_var) {
        let candidate = dir.join("hy-smi");
        if candidate.is_file() {
            return Ok(Tool::Found(candidate));
        }
    }
    tried.push("hy-smi on PATH".to_string());
    Ok(Tool::Missing(format!(
        "hy-smi not found (tried {}; set {HCU_HEALTH_TOOL_VAR})",
        tried.join(", ")
    )))
}

/// Parses `hy-smi --healthcheck` output: `HCU[<index>] ... : <status>` lines, the last
/// `:`-separated field being the status (`Healthy` or anything else).
pub(crate) fn parse_healthcheck(output: &str) -> Result<BTreeMap<u32, Condition>, String> {
    let mut health = BTreeMap::new();
    for line in output.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("HCU[") else {
            continue;
        };
        let Some((index, rest)) = rest.split_once(']') else {
            return Err(format!("cannot parse {line:?}"));
        };
        let index: u32 = index
            .trim()
            .parse()
            .map_err(|_| format!("cannot parse {line:?}"))?;
        let status = rest.rsplit(':').next().unwrap_or("").trim();
        if status.is_empty() || !rest.contains(':') {
            return Err(format!("no status in {line:?}"));
        }
        let condition = if status.eq_ignore_ascii_case("healthy") {
            Condition::Healthy
        } else {
            Condition::Unhealthy(format!("hy-smi --healthcheck: HCU[{index}]: {status}"))
        };
        health.insert(index, condition);
    }
    if health.is_empty() {
        return Err("no HCU[<index>] lines in its output".into());
    }
    Ok(health)
}

/// Runs `tool args` with no stdin, capturing stdout, killing its process group after
/// `timeout`. Returns stdout, or why it failed.
pub(crate) fn run_tool(tool: &Path, args: &[&str], timeout: Duration) -> Result<String, String> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", tool.display()))?;
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .map(|pipe| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    })
    .collect();
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("waiting for {}: {e}", tool.display())),
        }
    };
    // Whatever happened, leave nothing of the tool behind.
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    let mut outputs = readers.into_iter().map(|r| r.join().unwrap_or_default());
    let stdout = String::from_utf8_lossy(&outputs.next().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&outputs.next().unwrap_or_default()).into_owned();
    match status {
        None => Err(format!("no answer within {} ms", timeout.as_millis())),
        Some(s) if !s.success() => Err(format!("{s}: {}", stderr.trim())),
        Some(_) => Ok(stdout),
    }
}

impl Hcu {
    pub fn new(lib: Lib, config: &AccelConfig) -> Result<Self, AccelError> {
        let tool = find_tool(config)?;
        // SAFETY: the signatures are rocm_smi.h's (module docs).
        let api = unsafe {
            Api {
                init: req(&lib, "rsmi_init")?,
                shutdown: req(&lib, "rsmi_shut_down")?,
                count: req(&lib, "rsmi_num_monitor_devices")?,
                unique_id: req(&lib, "rsmi_dev_unique_id_get")?,
                pci_id: req(&lib, "rsmi_dev_pci_id_get")?,
                procs: req(&lib, "rsmi_compute_process_info_get")?,
                gpus: req(&lib, "rsmi_compute_process_gpus_get")?,
                status_string: req(&lib, "rsmi_status_string")?,
                numa: opt(&lib, "rsmi_topo_get_numa_node_number"),
                busy: opt(&lib, "rsmi_dev_busy_percent_get"),
                memory_total: opt(&lib, "rsmi_dev_memory_total_get"),
                memory_usage: opt(&lib, "rsmi_dev_memory_usage_get"),
            }
        };
        // SAFETY: flags 0 (default initialisation).
        let status = unsafe { (api.init.f)(0) };
        if status != 0 {
            let e = QueryError::new(api.init.name, message(&api, status));
            return Err(AccelError::query(Vendor::Hcu, e));
        }
        Ok(Hcu {
            lib,
            api,
            tool,
            tool_timeout: config.tool_timeout,
            sysfs_root: config.sysfs_root.clone(),
            lock: Mutex::new(()),
        })
    }

    fn fail(&self, name: &str, arg: u32, status: Status) -> QueryError {
        QueryError::new(format!("{name}({arg})"), message(&self.api, status))
    }

    fn count(&self) -> Result<u32, QueryError> {
        let mut n = 0u32;
        // SAFETY: writes one u32.
        let status = unsafe { (self.api.count.f)(&mut n) };
        if status != 0 {
            return Err(QueryError::new(
                self.api.count.name,
                message(&self.api, status),
            ));
        }
        Ok(n)
    }

    fn u64_query(
        &self,
        f: &F<unsafe extern "C" fn(u32, *mut u64) -> Status>,
        index: u32,
    ) -> Result<u64, QueryError> {
        let mut value = 0u64;
        // SAFETY: writes one u64.
        let status = unsafe { (f.f)(index, &mut value) };
        if status != 0 {
            return Err(self.fail(f.name, index, status));
        }
        Ok(value)
    }

    fn uuid(&self, index: u32) -> Result<String, QueryError> {
        let id = self.u64_query(&self.api.unique_id, index)?;
        if id == 0 {
            return Err(QueryError::new(
                format!("{}({index})", self.api.unique_id.name),
                "unique id is 0",
            ));
        }
        Ok(format!("{id:#x}"))
    }

    /// The device's load; a part the library lacks or fails is left out.
    fn load(&self, index: u32) -> Load {
        let mut load = Load::default();
        if let Some(f) = &self.api.busy {
            let mut pct = 0u32;
            // SAFETY: writes one u32.
            if unsafe { (f.f)(index, &mut pct) } == 0 {
                load.util_pct = Some(Load::pct(pct));
            }
        }
        let vram = |f: &Option<F<MemoryFn>>| {
            let f = f.as_ref()?;
            let mut bytes = 0u64;
            // SAFETY: writes one u64.
            (unsafe { (f.f)(index, MEM_TYPE_VRAM, &mut bytes) } == 0).then_some(bytes)
        };
        if let Some(total) = vram(&self.api.memory_total).filter(|&t| t > 0) {
            if let Some(used) = vram(&self.api.memory_usage) {
                load.mem_total = Some(total);
                load.mem_used = Some(used.min(total));
            }
        }
        load
    }

    /// Device index -> PIDs, for every device with compute processes.
    fn processes(&self) -> Result<BTreeMap<u32, Vec<u32>>, QueryError> {
        let zero = ProcessInfo {
            process_id: 0,
            pasid: 0,
            vram_usage: 0,
            sdma_usage: 0,
            cu_occupancy: 0,
        };
        let name = self.api.procs.name;
        let mut n = 0u32;
        // SAFETY: a null buffer asks for the count.
        let status = unsafe { (self.api.procs.f)(std::ptr::null_mut(), &mut n) };
        if status != 0 {
            return Err(QueryError::new(name, message(&self.api, status)));
        }
        let mut procs = Vec::new();
        for _ in 0..8 {
            let capacity = n as usize + 16;
            procs = vec![zero; capacity];
            let mut got = capacity as u32;
            // SAFETY: the buffer holds `got` entries.
            let status = unsafe { (self.api.procs.f)(procs.as_mut_ptr(), &mut got) };
            if status == 0 {
                procs.truncate((got as usize).min(capacity));
                break;
            }
            if status != INSUFFICIENT_SIZE {
                return Err(QueryError::new(name, message(&self.api, status)));
            }
            n = got.max(capacity as u32 * 2);
            procs.clear();
        }
        let mut by_device: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for p in &procs {
            let pid = p.process_id;
            let mut count = 0u32;
            // SAFETY: a null list asks for the count.
            let status = unsafe { (self.api.gpus.f)(pid, std::ptr::null_mut(), &mut count) };
            if status == NOT_FOUND {
                continue; // exited since the list was taken
            }
            if status != 0 {
                return Err(self.fail(self.api.gpus.name, pid, status));
            }
            let mut indices = vec![0u32; count as usize + 8];
            let mut got = indices.len() as u32;
            // SAFETY: the list holds `got` entries.
            let status = unsafe { (self.api.gpus.f)(pid, indices.as_mut_ptr(), &mut got) };
            if status == NOT_FOUND {
                continue;
            }
            if status != 0 {
                return Err(self.fail(self.api.gpus.name, pid, status));
            }
            for &d in indices.iter().take((got as usize).min(indices.len())) {
                by_device.entry(d).or_default().push(pid);
            }
        }
        for pids in by_device.values_mut() {
            pids.sort_unstable();
            pids.dedup();
        }
        Ok(by_device)
    }

    fn health(&self) -> Result<BTreeMap<u32, Condition>, QueryError> {
        let call = "hy-smi --healthcheck";
        match &self.tool {
            Tool::Missing(why) => Err(QueryError::new(call, why.clone())),
            Tool::Found(path) => {
                let output = run_tool(path, &["--healthcheck"], self.tool_timeout)
                    .map_err(|e| QueryError::new(format!("{} --healthcheck", path.display()), e))?;
                parse_healthcheck(&output)
                    .map_err(|e| QueryError::new(format!("{} --healthcheck", path.display()), e))
            }
        }
    }

    fn discover_one(&self, index: u32) -> Result<DiscoveredDevice, AccelError> {
        let q = |e| AccelError::query(Vendor::Hcu, e);
        let uuid = self.uuid(index).map_err(q)?;
        let id = self.u64_query(&self.api.pci_id, index).map_err(q)?;
        let bdf = format_bdf(
            (id >> 32) as u32,
            ((id >> 8) & 0xff) as u32,
            ((id >> 3) & 0x1f) as u32,
            (id & 0x7) as u32,
        );
        let numa_node = self
            .api
            .numa
            .as_ref()
            .and_then(|f| {
                let mut node = 0u32;
                // SAFETY: writes one u32.
                (unsafe { (f.f)(index, &mut node) } == 0).then_some(node)
            })
            .or_else(|| sysfs_numa_node(&self.sysfs_root, &bdf));
        let mut device_nodes = vec![PathBuf::from("/dev/kfd"), PathBuf::from("/dev/mkfd")];
        device_nodes.extend(required_drm_nodes(
            Vendor::Hcu,
            &self.sysfs_root,
            Some(&bdf),
            index,
            false,
        )?);
        Ok(DiscoveredDevice {
            vendor: Vendor::Hcu,
            index,
            uuid,
            pci_bdf: Some(bdf),
            numa_node,
            device_nodes,
        })
    }
}

fn message(api: &Api, status: Status) -> String {
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: writes a pointer to a static string.
    let ok = unsafe { (api.status_string.f)(status, &mut text) } == 0;
    // SAFETY: null or a static NUL-terminated string.
    let text = if ok {
        unsafe { c_string(text) }
    } else {
        String::new()
    };
    if text.is_empty() {
        format!("error {status}")
    } else {
        format!("{text} ({status})")
    }
}

impl Backend for Hcu {
    fn vendor(&self) -> Vendor {
        Vendor::Hcu
    }

    fn library(&self) -> &Path {
        &self.lib.path
    }

    fn api(&self) -> &'static str {
        "ROCm SMI + hy-smi --healthcheck"
    }

    fn discover(&self) -> Result<Vec<DiscoveredDevice>, AccelError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let n = self
            .count()
            .map_err(|e| AccelError::query(Vendor::Hcu, e))?;
        (0..n).map(|i| self.discover_one(i)).collect()
    }

    fn poll(&self, devices: &[DiscoveredDevice]) -> Result<Vec<DevicePoll>, QueryError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.count()?;
        let processes = self.processes();
        let health = self.health();
        Ok(devices
            .iter()
            .map(|d| DevicePoll {
                index: d.index,
                uuid: self.uuid(d.index),
                processes: processes
                    .as_ref()
                    .map(|m| m.get(&d.index).cloned().unwrap_or_default())
                    .map_err(Clone::clone),
                condition: match &health {
                    Err(e) => Err(e.clone()),
                    Ok(m) => m.get(&d.index).cloned().ok_or_else(|| {
                        QueryError::new(
                            "hy-smi --healthcheck",
                            format!("no line for HCU[{}]", d.index),
                        )
                    }),
                },
                load: self.load(d.index),
            })
            .collect())
    }
}

impl Drop for Hcu {
    fn drop(&mut self) {
        // SAFETY: rsmi_init succeeded.
        unsafe {
            (self.api.shutdown.f)();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthcheck_output_parses() {
        let out = "=== System Management Interface ===\n\
                   HCU[0]\t\t: Health Status : Healthy\n\
                   HCU[1] : Health Status : Unhealthy\n\
                   ===\n";
        let h = parse_healthcheck(out).unwrap();
        assert_eq!(h[&0], Condition::Healthy);
        assert!(matches!(&h[&1], Condition::Unhealthy(m) if m.contains("HCU[1]: Unhealthy")));
        assert!(parse_healthcheck("nothing here\n").is_err());
        assert!(parse_healthcheck("HCU[x] : Healthy\n").is_err());
        assert!(parse_healthcheck("HCU[0] no status\n").is_err());
    }

    #[test]
    fn tools_time_out_and_fail_clearly() {
        let sh = Path::new("/bin/sh");
        assert_eq!(
            run_tool(sh, &["-c", "echo hi"], Duration::from_secs(5)).unwrap(),
            "hi\n"
        );
        let e = run_tool(sh, &["-c", "echo bad >&2; exit 3"], Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("bad") && e.contains('3'), "{e}");
        let start = Instant::now();
        let e = run_tool(sh, &["-c", "sleep 5"], Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("no answer"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(3));
        let e = run_tool(
            Path::new("/nonexistent/hy-smi"),
            &[],
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(e.contains("cannot run"), "{e}");
    }
}

//! Huawei Ascend through DCMI (`libdcmi.so`): the v2 API (`dcmiv2_*`, addressed by
//! logical id) when the library exports every v2 function used, else the v1 API
//! (`dcmi_*`, addressed by card and chip) from `dcmi_interface_api.h`. Never `npu-smi`.
//!
//! DCMI v2 functions used:
//!
//! ```c
//! int dcmiv2_init(void);
//! int dcmiv2_get_device_list(int *device_list, int *device_num, int list_len);
//! int dcmiv2_get_device_health(int dev_id, unsigned int *health);
//! int dcmiv2_get_device_proc_mem_info(int dev_id, struct dcmi_proc_mem_info *proc_info,
//!                                     int *proc_num);
//! int dcmiv2_get_device_pcie_info(int dev_id, struct dcmi_pcie_info_all *pcie_info);
//! int dcmiv2_get_device_die_id(int dev_id, enum dcmi_die_type input_type,
//!                              struct dcmi_die_id *die_id);
//! int dcmiv2_get_chip_phy_id_by_dev_id(unsigned int dev_id, unsigned int *phyid);
//! /* optional (load): */
//! int dcmiv2_get_device_utilization_rate(int dev_id, int input_type,
//!                                        unsigned int *utilization_rate);
//! int dcmiv2_get_device_hbm_info(int dev_id, struct dcmi_hbm_info *hbm_info);
//! ```
//!
//! DCMI v1 functions used (the fallback):
//!
//! ```c
//! int dcmi_init(void);
//! int dcmi_get_card_num_list(int *card_num, int *card_list, int list_len);
//! int dcmi_get_device_num_in_card(int card_id, int *device_num);
//! int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id);
//! int dcmi_get_device_health(int card_id, int device_id, unsigned int *health);
//! int dcmi_get_device_resource_info(int card_id, int device_id,
//!                                   struct dcmi_proc_mem_info *proc_info, int *proc_num);
//! int dcmi_get_device_pcie_info_v2(int card_id, int device_id,
//!                                  struct dcmi_pcie_info_all *pcie_info);
//! int dcmi_get_device_die_v2(int card_id, int device_id, enum dcmi_die_type input_type,
//!                            struct dcmi_die_id *die_id);
//! int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid);
//! /* optional (load): */
//! int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type,
//!                                      unsigned int *utilization_rate);
//! int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info);
//! ```
//!
//! Structures: `dcmi_proc_mem_info { int proc_id; unsigned long proc_mem_usage; }`,
//! `dcmi_pcie_info_all { unsigned venderid, subvenderid, deviceid, subdeviceid; int domain;
//! unsigned bdf_busid, bdf_deviceid, bdf_funcid; unsigned char reserve[32]; }`,
//! `dcmi_die_id { unsigned soc_die[5]; }`, `enum dcmi_die_type { NDIE, VDIE }`,
//! `dcmi_hbm_info { unsigned long long memory_size; unsigned int freq;
//! unsigned long long memory_usage; int temp; unsigned int bandwith_util_rate; }`
//! (sizes in MB, which the driver computes as KB / 1024, so MiB).
//! Every call returns 0 on success or a negative DCMI error code; DCMI has no error
//! string function, so messages carry the code.
//!
//! Devices are chips: one per logical id (multi-chip cards give several). The UUID is
//! the chip's VDIE die id as five hex words (`XXXXXXXX-...`); health 0 is healthy,
//! anything else unhealthy. Device nodes: `/dev/davinci<physical id>`,
//! `/dev/davinci_manager`, `/dev/devmm_svm`, `/dev/hisi_hdc`.
//!
//! Load: the busy percent is the AI Core utilization (`input_type`
//! `DCMI_UTILIZATION_RATE_AICORE` = 2); memory is the on-chip memory (HBM) from
//! `*_get_device_hbm_info`, converted from MiB to bytes. Either function may be missing
//! (older drivers) or fail (a chip without HBM, such as a DDR-only inference card, or a
//! virtual machine): that part of the load is then `None`, and the device stays known.
//! The load functions never decide between the v2 and v1 APIs.

use super::loader::Lib;
use super::nodes::{format_bdf, sysfs_numa_node};
use super::nvml::{opt, req, F};
use super::{
    AccelConfig, AccelError, Backend, Condition, DevicePoll, DiscoveredDevice, Load, QueryError,
};
use crate::core::Vendor;
use std::ffi::{c_int, c_uint, c_ulong, c_ulonglong};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[repr(C)]
#[derive(Clone, Copy)]
struct ProcMemInfo {
    proc_id: c_int,
    proc_mem_usage: c_ulong,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct PcieInfoAll {
    venderid: c_uint,
    subvenderid: c_uint,
    deviceid: c_uint,
    subdeviceid: c_uint,
    domain: c_int,
    bdf_busid: c_uint,
    bdf_deviceid: c_uint,
    bdf_funcid: c_uint,
    reserve: [u8; 32],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DieId {
    soc_die: [c_uint; 5],
}

/// `struct dcmi_hbm_info`: sizes in MiB.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct HbmInfo {
    memory_size: c_ulonglong,
    freq: c_uint,
    memory_usage: c_ulonglong,
    temp: c_int,
    bandwith_util_rate: c_uint,
}

/// `enum dcmi_die_type` value VDIE.
const VDIE: c_int = 1;
/// `DCMI_UTILIZATION_RATE_AICORE`: the `input_type` of the AI Core busy percent.
const UTILIZATION_AICORE: c_int = 2;
/// DCMI's "MB" (the driver divides KB by 1024).
const MIB: u64 = 1 << 20;
/// Room for every process the driver may list (it writes at most 32 or 64).
const MAX_PROCS: usize = 256;
const MAX_DEVICES: usize = 1024;
const MAX_CARDS: usize = 64;

struct V2 {
    init: F<unsafe extern "C" fn() -> c_int>,
    list: F<unsafe extern "C" fn(*mut c_int, *mut c_int, c_int) -> c_int>,
    health: F<unsafe extern "C" fn(c_int, *mut c_uint) -> c_int>,
    procs: F<unsafe extern "C" fn(c_int, *mut ProcMemInfo, *mut c_int) -> c_int>,
    pcie: F<unsafe extern "C" fn(c_int, *mut PcieInfoAll) -> c_int>,
    die: F<unsafe extern "C" fn(c_int, c_int, *mut DieId) -> c_int>,
    phy: F<unsafe extern "C" fn(c_uint, *mut c_uint) -> c_int>,
    util: Option<F<unsafe extern "C" fn(c_int, c_int, *mut c_uint) -> c_int>>,
    hbm: Option<F<unsafe extern "C" fn(c_int, *mut HbmInfo) -> c_int>>,
}

struct V1 {
    init: F<unsafe extern "C" fn() -> c_int>,
    cards: F<unsafe extern "C" fn(*mut c_int, *mut c_int, c_int) -> c_int>,
    chips: F<unsafe extern "C" fn(c_int, *mut c_int) -> c_int>,
    logic: F<unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int>,
    health: F<unsafe extern "C" fn(c_int, c_int, *mut c_uint) -> c_int>,
    procs: F<unsafe extern "C" fn(c_int, c_int, *mut ProcMemInfo, *mut c_int) -> c_int>,
    pcie: F<unsafe extern "C" fn(c_int, c_int, *mut PcieInfoAll) -> c_int>,
    die: F<unsafe extern "C" fn(c_int, c_int, c_int, *mut DieId) -> c_int>,
    phy: F<unsafe extern "C" fn(c_uint, *mut c_uint) -> c_int>,
    util: Option<F<unsafe extern "C" fn(c_int, c_int, c_int, *mut c_uint) -> c_int>>,
    hbm: Option<F<unsafe extern "C" fn(c_int, c_int, *mut HbmInfo) -> c_int>>,
}

enum Api {
    V2(V2),
    V1(V1),
}

/// Where a chip is: its logical id, and for v1 its card and chip number.
#[derive(Clone, Copy)]
struct Chip {
    logic: c_int,
    card: c_int,
    chip: c_int,
}

pub(crate) struct Dcmi {
    lib: Lib,
    api: Api,
    sysfs_root: PathBuf,
    lock: Mutex<()>,
}

fn dcmi_message(code: c_int) -> String {
    let name = match code {
        -8001 => "invalid parameter",
        -8002 => "operation not permitted",
        -8005 => "inner error",
        -8007 => "invalid device id",
        -8008 => "device does not exist",
        -8255 => "not supported",
        _ => "",
    };
    if name.is_empty() {
        format!("DCMI error {code}")
    } else {
        format!("DCMI error {code} ({name})")
    }
}

fn check(code: c_int, call: impl FnOnce() -> String) -> Result<(), QueryError> {
    if code == 0 {
        Ok(())
    } else {
        Err(QueryError::new(call(), dcmi_message(code)))
    }
}

/// # Safety
/// Signatures as in the module docs.
unsafe fn load_v2(lib: &Lib) -> Result<V2, AccelError> {
    Ok(V2 {
        init: req(lib, "dcmiv2_init")?,
        list: req(lib, "dcmiv2_get_device_list")?,
        health: req(lib, "dcmiv2_get_device_health")?,
        procs: req(lib, "dcmiv2_get_device_proc_mem_info")?,
        pcie: req(lib, "dcmiv2_get_device_pcie_info")?,
        die: req(lib, "dcmiv2_get_device_die_id")?,
        phy: req(lib, "dcmiv2_get_chip_phy_id_by_dev_id")?,
        util: opt(lib, "dcmiv2_get_device_utilization_rate"),
        hbm: opt(lib, "dcmiv2_get_device_hbm_info"),
    })
}

/// # Safety
/// Signatures as in the module docs.
unsafe fn load_v1(lib: &Lib) -> Result<V1, AccelError> {
    Ok(V1 {
        init: req(lib, "dcmi_init")?,
        cards: req(lib, "dcmi_get_card_num_list")?,
        chips: req(lib, "dcmi_get_device_num_in_card")?,
        logic: req(lib, "dcmi_get_device_logic_id")?,
        health: req(lib, "dcmi_get_device_health")?,
        procs: req(lib, "dcmi_get_device_resource_info")?,
        pcie: req(lib, "dcmi_get_device_pcie_info_v2")?,
        die: req(lib, "dcmi_get_device_die_v2")?,
        phy: req(lib, "dcmi_get_device_phyid_from_logicid")?,
        util: opt(lib, "dcmi_get_device_utilization_rate"),
        hbm: opt(lib, "dcmi_get_device_hbm_info"),
    })
}

fn missing_symbol(e: &AccelError) -> String {
    match e {
        AccelError::MissingSymbol { symbol, .. } => symbol.clone(),
        other => other.to_string(),
    }
}

impl Dcmi {
    pub fn new(lib: Lib, config: &AccelConfig) -> Result<Self, AccelError> {
        // SAFETY: the signatures are those of dcmi_interface_api.h (module docs).
        let api = match unsafe { load_v2(&lib) } {
            Ok(v2) => Api::V2(v2),
            Err(e2) => match unsafe { load_v1(&lib) } {
                Ok(v1) => Api::V1(v1),
                Err(e1) => {
                    let detail = format!(
                        " (needed for DCMI v2), and the DCMI v1 fallback lacks {}",
                        missing_symbol(&e1)
                    );
                    return Err(lib.missing(&missing_symbol(&e2), &detail));
                }
            },
        };
        let (code, init) = match &api {
            // SAFETY: no arguments.
            Api::V2(v) => (unsafe { (v.init.f)() }, v.init.name),
            Api::V1(v) => (unsafe { (v.init.f)() }, v.init.name),
        };
        check(code, || init.to_string()).map_err(|e| AccelError::query(Vendor::Asc, e))?;
        Ok(Dcmi {
            lib,
            api,
            sysfs_root: config.sysfs_root.clone(),
            lock: Mutex::new(()),
        })
    }

    /// Every chip, in logical id order.
    fn chips(&self) -> Result<Vec<Chip>, QueryError> {
        let mut chips = Vec::new();
        match &self.api {
            Api::V2(v) => {
                let mut list = vec![0 as c_int; MAX_DEVICES];
                let mut n: c_int = 0;
                // SAFETY: the list holds MAX_DEVICES ints and its length is passed.
                let code = unsafe { (v.list.f)(list.as_mut_ptr(), &mut n, MAX_DEVICES as c_int) };
                check(code, || v.list.name.to_string())?;
                for &logic in list.iter().take((n.max(0) as usize).min(MAX_DEVICES)) {
                    chips.push(Chip {
                        logic,
                        card: -1,
                        chip: -1,
                    });
                }
            }
            Api::V1(v) => {
                let mut cards = vec![0 as c_int; MAX_CARDS];
                let mut n: c_int = 0;
                // SAFETY: the list holds MAX_CARDS ints and its length is passed.
                let code = unsafe { (v.cards.f)(&mut n, cards.as_mut_ptr(), MAX_CARDS as c_int) };
                check(code, || v.cards.name.to_string())?;
                for &card in cards.iter().take((n.max(0) as usize).min(MAX_CARDS)) {
                    let mut per_card: c_int = 0;
                    // SAFETY: writes one int.
                    let code = unsafe { (v.chips.f)(card, &mut per_card) };
                    check(code, || format!("{}({card})", v.chips.name))?;
                    for chip in 0..per_card {
                        let mut logic: c_int = 0;
                        // SAFETY: writes one int.
                        let code = unsafe { (v.logic.f)(&mut logic, card, chip) };
                        check(code, || format!("{}({card}, {chip})", v.logic.name))?;
                        chips.push(Chip { logic, card, chip });
                    }
                }
            }
        }
        chips.sort_by_key(|c| c.logic);
        Ok(chips)
    }

    fn at(&self, c: &Chip, name: &str) -> String {
        match self.api {
            Api::V2(_) => format!("{name}({})", c.logic),
            Api::V1(_) => format!("{name}({}, {})", c.card, c.chip),
        }
    }

    fn uuid(&self, c: &Chip) -> Result<String, QueryError> {
        let mut die = DieId { soc_die: [0; 5] };
        let (code, name) = match &self.api {
            // SAFETY: writes one dcmi_die_id.
            Api::V2(v) => (unsafe { (v.die.f)(c.logic, VDIE, &mut die) }, v.die.name),
            Api::V1(v) => (
                unsafe { (v.die.f)(c.card, c.chip, VDIE, &mut die) },
                v.die.name,
            ),
        };
        check(code, || self.at(c, name))?;
        if die.soc_die.iter().all(|&w| w == 0) {
            return Err(QueryError::new(self.at(c, name), "the die id is all zero"));
        }
        Ok(die
            .soc_die
            .iter()
            .map(|w| format!("{w:08X}"))
            .collect::<Vec<_>>()
            .join("-"))
    }

    fn processes(&self, c: &Chip) -> Result<Vec<u32>, QueryError> {
        let mut procs = vec![
            ProcMemInfo {
                proc_id: 0,
                proc_mem_usage: 0,
            };
            MAX_PROCS
        ];
        let mut n: c_int = 0;
        let (code, name) = match &self.api {
            // SAFETY: the buffer has room for more entries than the driver writes.
            Api::V2(v) => (
                unsafe { (v.procs.f)(c.logic, procs.as_mut_ptr(), &mut n) },
                v.procs.name,
            ),
            Api::V1(v) => (
                unsafe { (v.procs.f)(c.card, c.chip, procs.as_mut_ptr(), &mut n) },
                v.procs.name,
            ),
        };
        check(code, || self.at(c, name))?;
        if n < 0 || n as usize > MAX_PROCS {
            return Err(QueryError::new(
                self.at(c, name),
                format!("invalid process count {n}"),
            ));
        }
        let mut pids = Vec::new();
        for p in &procs[..n as usize] {
            let pid = u32::try_from(p.proc_id).map_err(|_| {
                QueryError::new(
                    self.at(c, name),
                    format!("invalid process id {}", p.proc_id),
                )
            })?;
            pids.push(pid);
        }
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }

    fn condition(&self, c: &Chip) -> Result<Condition, QueryError> {
        let mut health: c_uint = 0;
        let (code, name) = match &self.api {
            // SAFETY: writes one unsigned int.
            Api::V2(v) => (unsafe { (v.health.f)(c.logic, &mut health) }, v.health.name),
            Api::V1(v) => (
                unsafe { (v.health.f)(c.card, c.chip, &mut health) },
                v.health.name,
            ),
        };
        check(code, || self.at(c, name))?;
        Ok(if health == 0 {
            Condition::Healthy
        } else {
            Condition::Unhealthy(format!("{}: health code {health}", self.at(c, name)))
        })
    }

    fn bdf(&self, c: &Chip) -> Result<String, QueryError> {
        let mut info = PcieInfoAll {
            venderid: 0,
            subvenderid: 0,
            deviceid: 0,
            subdeviceid: 0,
            domain: 0,
            bdf_busid: 0,
            bdf_deviceid: 0,
            bdf_funcid: 0,
            reserve: [0; 32],
        };
        let (code, name) = match &self.api {
            // SAFETY: writes one dcmi_pcie_info_all.
            Api::V2(v) => (unsafe { (v.pcie.f)(c.logic, &mut info) }, v.pcie.name),
            Api::V1(v) => (
                unsafe { (v.pcie.f)(c.card, c.chip, &mut info) },
                v.pcie.name,
            ),
        };
        check(code, || self.at(c, name))?;
        Ok(format_bdf(
            info.domain as u32,
            info.bdf_busid,
            info.bdf_deviceid,
            info.bdf_funcid,
        ))
    }

    fn physical_id(&self, c: &Chip) -> Result<u32, QueryError> {
        let mut phy: c_uint = 0;
        let f = match &self.api {
            Api::V2(v) => &v.phy,
            Api::V1(v) => &v.phy,
        };
        // SAFETY: writes one unsigned int.
        let code = unsafe { (f.f)(c.logic as c_uint, &mut phy) };
        check(code, || format!("{}({})", f.name, c.logic))?;
        Ok(phy)
    }

    /// The chip's load; a part the library lacks or fails is left out.
    fn load(&self, c: &Chip) -> Load {
        let mut load = Load::default();
        let mut rate: c_uint = 0;
        // SAFETY: writes one unsigned int.
        let code = match &self.api {
            Api::V2(v) => v
                .util
                .map(|f| unsafe { (f.f)(c.logic, UTILIZATION_AICORE, &mut rate) }),
            Api::V1(v) => v
                .util
                .map(|f| unsafe { (f.f)(c.card, c.chip, UTILIZATION_AICORE, &mut rate) }),
        };
        if code == Some(0) {
            load.util_pct = Some(Load::pct(rate));
        }
        let mut hbm = HbmInfo::default();
        // SAFETY: writes one dcmi_hbm_info.
        let code = match &self.api {
            Api::V2(v) => v.hbm.map(|f| unsafe { (f.f)(c.logic, &mut hbm) }),
            Api::V1(v) => v.hbm.map(|f| unsafe { (f.f)(c.card, c.chip, &mut hbm) }),
        };
        if code == Some(0) && hbm.memory_size > 0 {
            let total = hbm.memory_size.saturating_mul(MIB);
            load.mem_total = Some(total);
            load.mem_used = Some(hbm.memory_usage.saturating_mul(MIB).min(total));
        }
        load
    }

    fn discover_one(&self, c: &Chip) -> Result<DiscoveredDevice, QueryError> {
        let index = u32::try_from(c.logic).map_err(|_| {
            QueryError::new("device list", format!("invalid logical id {}", c.logic))
        })?;
        let uuid = self.uuid(c)?;
        let bdf = self.bdf(c)?;
        let phy = self.physical_id(c)?;
        Ok(DiscoveredDevice {
            vendor: Vendor::Asc,
            index,
            uuid,
            numa_node: sysfs_numa_node(&self.sysfs_root, &bdf),
            pci_bdf: Some(bdf),
            device_nodes: vec![
                PathBuf::from(format!("/dev/davinci{phy}")),
                PathBuf::from("/dev/davinci_manager"),
                PathBuf::from("/dev/devmm_svm"),
                PathBuf::from("/dev/hisi_hdc"),
            ],
        })
    }
}

impl Backend for Dcmi {
    fn vendor(&self) -> Vendor {
        Vendor::Asc
    }

    fn library(&self) -> &Path {
        &self.lib.path
    }

    fn api(&self) -> &'static str {
        match self.api {
            Api::V2(_) => "DCMI v2 (dcmiv2_*)",
            Api::V1(_) => "DCMI v1 (dcmi_*)",
        }
    }

    fn discover(&self) -> Result<Vec<DiscoveredDevice>, AccelError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let q = |e| AccelError::query(Vendor::Asc, e);
        let chips = self.chips().map_err(q)?;
        chips
            .iter()
            .map(|c| self.discover_one(c).map_err(q))
            .collect()
    }

    fn poll(&self, devices: &[DiscoveredDevice]) -> Result<Vec<DevicePoll>, QueryError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let chips = self.chips()?;
        Ok(devices
            .iter()
            .map(
                |d| match chips.iter().find(|c| c.logic as i64 == d.index as i64) {
                    None => {
                        let e = QueryError::new(
                            "device list",
                            format!("logical id {} is no longer listed", d.index),
                        );
                        DevicePoll {
                            index: d.index,
                            uuid: Err(e.clone()),
                            processes: Err(e.clone()),
                            condition: Err(e),
                            load: Default::default(),
                        }
                    }
                    Some(c) => DevicePoll {
                        index: d.index,
                        uuid: self.uuid(c),
                        processes: self.processes(c),
                        condition: self.condition(c),
                        load: self.load(c),
                    },
                },
            )
            .collect())
    }
}

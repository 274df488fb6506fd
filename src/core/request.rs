//! What a user asks for, and the checks that reject what this machine can never give.
//!
//! A request is checked once, at submission, against the machine as it is
//! (`validate`). What passes is a [`Demand`]: the same request with its memory
//! budget and, for exact device IDs, its vendor settled. Everything the
//! scheduler later does works on demands only.

use super::device::Vendor;
use super::machine::Machine;
use serde::{Deserialize, Serialize};

/// Which devices a job wants.
#[derive(Debug, Clone, Default, Eq, Serialize, Deserialize)]
pub struct DeviceRequest {
    /// How many devices; 0 makes a CPU job. Must equal `ids.len()` when IDs are given.
    pub count: u32,
    /// `None` is `auto`: the first vendor, in [`Vendor::ALL`] order, that fits.
    pub vendor: Option<Vendor>,
    /// Exact logical IDs (`-i`).
    pub ids: Vec<u32>,
    /// IDs never to use (`-x`); not combinable with `ids`.
    pub exclude: Vec<u32>,
}

/// As derived, but two empty ID lists (most jobs) compare without a call
/// to `memcmp`: listing 100,000 pending jobs compares each one's demand with
/// the one before, and the derived comparison was a quarter of its time.
impl PartialEq for DeviceRequest {
    fn eq(&self, other: &DeviceRequest) -> bool {
        fn same(a: &[u32], b: &[u32]) -> bool {
            a.len() == b.len() && (a.is_empty() || a == b)
        }
        self.count == other.count
            && self.vendor == other.vendor
            && same(&self.ids, &other.ids)
            && same(&self.exclude, &other.exclude)
    }
}

/// The same fields as `eq` compares, as derived.
impl std::hash::Hash for DeviceRequest {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.count.hash(h);
        self.vendor.hash(h);
        self.ids.hash(h);
        self.exclude.hash(h);
    }
}

/// A job's resource request as submitted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Request {
    pub cpus: u32,
    /// Memory budget in bytes; `None` asks for the default budget.
    pub mem_bytes: Option<u64>,
    pub devices: DeviceRequest,
    pub exclusive: bool,
    pub numa_local: bool,
    /// Seconds; `None` means the admin's maximum lifetime.
    pub time_limit_secs: Option<u64>,
}

impl Default for Request {
    fn default() -> Self {
        Request {
            cpus: 1,
            mem_bytes: None,
            devices: DeviceRequest::default(),
            exclusive: false,
            numa_local: false,
            time_limit_secs: None,
        }
    }
}

/// Admin limits that shape requests and passes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Most jobs running at once.
    pub max_running: u32,
    /// Upper bound of every job's run time, in seconds; also the time limit of jobs
    /// that give none.
    pub max_lifetime_secs: u64,
    /// Floor of the default memory budget, in bytes.
    pub min_job_mem: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_running: 32,
            max_lifetime_secs: 7 * 24 * 3600,
            min_job_mem: 256 << 20,
        }
    }
}

/// A request that fits this machine, with everything the scheduler needs settled.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Demand {
    pub cpus: u32,
    pub mem_bytes: u64,
    /// Whether `mem_bytes` is the default budget rather than one the user gave.
    pub mem_default: bool,
    pub devices: DeviceRequest,
    pub exclusive: bool,
    pub numa_local: bool,
    /// Seconds, never above the admin's maximum lifetime.
    pub time_limit_secs: u64,
}

/// Why a request can never run here. Each message says what exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("a job needs at least 1 CPU")]
    ZeroCpus,
    #[error("asks for {asked} CPUs, but jobs here can use at most {available} ({nodes})")]
    TooManyCpus {
        asked: u32,
        available: u32,
        nodes: String,
    },
    #[error(
        "asks for {asked} CPUs on one NUMA node (--numa-local), but the largest node has {largest}"
    )]
    TooManyCpusForNode { asked: u32, largest: u32 },
    #[error("a memory budget of 0 bytes is not possible; give at least 1M")]
    ZeroMemory,
    #[error("asks for {asked} of memory, but jobs here can use at most {available}")]
    TooMuchMemory { asked: String, available: String },
    #[error("asks for {asked} of memory on one NUMA node (--numa-local), but the largest node has {largest}")]
    TooMuchMemoryForNode { asked: String, largest: String },
    #[error("a time limit of 0 seconds is not possible")]
    ZeroTimeLimit,
    #[error("time limit {asked}s is longer than the admin's maximum job lifetime {max}s")]
    TimeLimitTooLong { asked: u64, max: u64 },
    #[error("--device-ids and --exclude-device-ids cannot be combined")]
    IdsWithExclude,
    #[error("asks for {count} devices but names {ids} device IDs; the count must match the IDs")]
    CountMismatch { count: u32, ids: usize },
    #[error("device ID {0} is named twice")]
    DuplicateId(u32),
    #[error("asks for devices, but this machine has no accelerators (use -g 0 for a CPU job)")]
    NoDevices,
    #[error("asks for {vendor} devices, but this machine has none (it has: {have})")]
    NoSuchVendor { vendor: Vendor, have: String },
    #[error("unknown {vendor} device ID {id} (this machine has {vendor} IDs {have})")]
    UnknownId {
        vendor: Vendor,
        id: u32,
        have: String,
    },
    #[error("unknown device ID {id} to exclude: no vendor here has it (IDs: {have})")]
    UnknownExcludedId { id: u32, have: String },
    #[error("no single vendor has all of the device IDs {ids} (this machine has: {have}); pass --device to choose one")]
    IdsSpanVendors { ids: String, have: String },
    #[error(
        "device IDs {ids} exist on several vendors here ({vendors}): pass --device to choose one"
    )]
    IdsOnSeveralVendors { ids: String, vendors: String },
    #[error("{vendor} device {id} is disabled by the admin")]
    DisabledId { vendor: Vendor, id: u32 },
    #[error(
        "asks for {count} devices, but no vendor here has that many enabled (enabled: {have})"
    )]
    TooManyDevices { count: u32, have: String },
    #[error("a device count without devices: -x needs -g N with N > 0")]
    ExcludeWithoutCount,
}

/// Formats bytes the way users type them (`64G`, `512M`, `1536K`).
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (size, unit) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    for (size, unit) in UNITS {
        if bytes >= size {
            return format!("{:.1}{unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes}B")
}

fn check_unique(ids: &[u32]) -> Result<(), RequestError> {
    let mut seen = std::collections::HashSet::new();
    for id in ids {
        if !seen.insert(*id) {
            return Err(RequestError::DuplicateId(*id));
        }
    }
    Ok(())
}

/// The default memory budget for `cpus` CPUs: their share of their node's
/// memory (4 of 32 CPUs on a 256 GiB node: 32 GiB), floored at
/// `min_job_mem` and capped at what exists. The budget is settled at
/// submission (it is reported then, and the policies reserve by it), before
/// the job's node is known: where nodes differ in memory per CPU, it is the
/// share on the node with the least per CPU among those with enough CPUs (and
/// memory of their own: a CPU-only node's CPUs use other nodes' memory), so
/// that a default budget is never more than the job's share of the node it
/// lands on. A job wider than every node (spread) gets its CPUs' share of
/// the whole machine.
pub fn default_budget(machine: &Machine, cpus: u32, limits: &Limits) -> u64 {
    let topo = &machine.topology;
    let total = topo.total_mem();
    let share = |mem: u64, of: u32| (mem as u128 * cpus as u128 / of.max(1) as u128) as u64;
    let node_share = topo
        .nodes
        .iter()
        .filter(|n| n.cpus.len() >= cpus && n.mem_bytes > 0)
        .map(|n| share(n.mem_bytes, n.cpus.len()))
        .min();
    node_share
        .unwrap_or_else(|| share(total, topo.total_cpus()))
        .max(limits.min_job_mem)
        .min(total)
}

/// Checks `req` against what this machine can ever give and settles its budget.
pub fn validate(req: &Request, machine: &Machine, limits: &Limits) -> Result<Demand, RequestError> {
    let topo = &machine.topology;
    if req.cpus == 0 {
        return Err(RequestError::ZeroCpus);
    }
    let total_cpus = topo.total_cpus();
    if req.cpus > total_cpus {
        let nodes = topo
            .nodes
            .iter()
            .map(|n| format!("node{}: {} CPUs", n.id, n.cpus.len()))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(RequestError::TooManyCpus {
            asked: req.cpus,
            available: total_cpus,
            nodes,
        });
    }
    let numa_local = req.numa_local && !req.exclusive;
    // Under --numa-local only nodes with enough CPUs can hold the job.
    let local_mem = topo
        .nodes
        .iter()
        .filter(|n| n.cpus.len() >= req.cpus)
        .map(|n| n.mem_bytes)
        .max();
    let (mem_bytes, mem_default) = match req.mem_bytes {
        Some(0) => return Err(RequestError::ZeroMemory),
        Some(m) => (m, false),
        None if req.exclusive => (topo.total_mem(), true),
        // A default budget never asks for more than one node can give.
        None if numa_local => {
            let budget = default_budget(machine, req.cpus, limits);
            (budget.min(local_mem.unwrap_or(budget)), true)
        }
        None => (default_budget(machine, req.cpus, limits), true),
    };
    if mem_bytes > topo.total_mem() {
        return Err(RequestError::TooMuchMemory {
            asked: format_bytes(mem_bytes),
            available: format_bytes(topo.total_mem()),
        });
    }
    if numa_local {
        let Some(largest_mem) = local_mem else {
            let largest_cpus = topo.nodes.iter().map(|n| n.cpus.len()).max().unwrap_or(0);
            return Err(RequestError::TooManyCpusForNode {
                asked: req.cpus,
                largest: largest_cpus,
            });
        };
        // One node must have both the CPUs and the memory: on a machine with
        // uneven (or memory-only) nodes, "largest" is the most memory on a node
        // with enough CPUs.
        if mem_bytes > largest_mem || mem_bytes == 0 {
            return Err(RequestError::TooMuchMemoryForNode {
                asked: format_bytes(mem_bytes),
                largest: format_bytes(largest_mem),
            });
        }
    }
    let time_limit_secs = match req.time_limit_secs {
        Some(0) => return Err(RequestError::ZeroTimeLimit),
        Some(t) if t > limits.max_lifetime_secs => {
            return Err(RequestError::TimeLimitTooLong {
                asked: t,
                max: limits.max_lifetime_secs,
            })
        }
        Some(t) => t,
        None => limits.max_lifetime_secs,
    };
    let devices = validate_devices(&req.devices, machine)?;
    Ok(Demand {
        cpus: req.cpus,
        mem_bytes,
        mem_default,
        devices,
        exclusive: req.exclusive,
        numa_local: req.numa_local,
        time_limit_secs,
    })
}

fn id_list(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn validate_devices(d: &DeviceRequest, machine: &Machine) -> Result<DeviceRequest, RequestError> {
    if !d.ids.is_empty() && !d.exclude.is_empty() {
        return Err(RequestError::IdsWithExclude);
    }
    if !d.ids.is_empty() && d.count as usize != d.ids.len() {
        return Err(RequestError::CountMismatch {
            count: d.count,
            ids: d.ids.len(),
        });
    }
    check_unique(&d.ids)?;
    check_unique(&d.exclude)?;
    if d.count == 0 {
        if !d.exclude.is_empty() {
            return Err(RequestError::ExcludeWithoutCount);
        }
        // A CPU job: a vendor named with -g 0 changes nothing.
        return Ok(DeviceRequest::default());
    }
    if machine.devices.is_empty() {
        return Err(RequestError::NoDevices);
    }
    let have = machine.vendor_summary();
    let vendors: Vec<Vendor> = match d.vendor {
        Some(v) if machine.vendor_count(v) == 0 => {
            return Err(RequestError::NoSuchVendor { vendor: v, have })
        }
        Some(v) => vec![v],
        None => Vendor::ALL
            .into_iter()
            .filter(|v| machine.vendor_count(*v) > 0)
            .collect(),
    };
    if !d.ids.is_empty() {
        // Exact IDs settle the vendor now: the one that has every ID. Where
        // several have them all, the user must say which (as the xlurm seed
        // did): "the first" would give them a vendor they may not expect.
        let holders: Vec<Vendor> = vendors
            .iter()
            .copied()
            .filter(|v| d.ids.iter().all(|id| machine.slot(*v, *id).is_some()))
            .collect();
        if holders.len() > 1 {
            return Err(RequestError::IdsOnSeveralVendors {
                ids: id_list(&d.ids),
                vendors: holders
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let Some(vendor) = holders.first().copied() else {
            if let [v] = vendors[..] {
                let id = d
                    .ids
                    .iter()
                    .copied()
                    .find(|id| machine.slot(v, *id).is_none());
                return Err(RequestError::UnknownId {
                    vendor: v,
                    id: id.unwrap_or_default(),
                    have: machine.vendor_ids(v),
                });
            }
            let ids = id_list(&d.ids);
            return Err(RequestError::IdsSpanVendors { ids, have });
        };
        for id in &d.ids {
            if machine
                .slot(vendor, *id)
                .is_some_and(|s| machine.devices[s].disabled)
            {
                return Err(RequestError::DisabledId { vendor, id: *id });
            }
        }
        return Ok(DeviceRequest {
            count: d.count,
            vendor: Some(vendor),
            ids: d.ids.clone(),
            exclude: Vec::new(),
        });
    }
    // An excluded ID must be a device of the vendor, or of one the job may get.
    if let Some(id) = d
        .exclude
        .iter()
        .find(|id| vendors.iter().all(|v| machine.slot(*v, **id).is_none()))
    {
        return Err(match vendors[..] {
            [v] => RequestError::UnknownId {
                vendor: v,
                id: *id,
                have: machine.vendor_ids(v),
            },
            _ => RequestError::UnknownExcludedId {
                id: *id,
                have: vendors
                    .iter()
                    .map(|v| format!("{v} {}", machine.vendor_ids(*v)))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
        });
    }
    let fits = vendors.iter().any(|v| {
        let usable = machine
            .devices
            .iter()
            .filter(|dev| dev.vendor == *v && !dev.disabled && !d.exclude.contains(&dev.index))
            .count();
        usable >= d.count as usize
    });
    if !fits {
        return Err(RequestError::TooManyDevices {
            count: d.count,
            have: machine.enabled_summary(),
        });
    }
    Ok(d.clone())
}

/// Parses a size as users type it: `64G`, `512M`, `1.5G`, `1024K`, `100` (bytes);
/// binary units (K = 1024). Refuses zero, overflow and junk.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'B' => 1,
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => {
                    return Err(format!(
                        "invalid size {text:?}: use a number with K, M, G or T (e.g. 64G, 512M)"
                    ))
                }
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let value: f64 = num.parse().map_err(|_| {
        format!("invalid size {text:?}: use a number with K, M, G or T (e.g. 64G, 512M)")
    })?;
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!(
            "invalid size {text:?}: must be at least 1 byte and below 16E"
        ));
    }
    Ok(bytes as u64)
}

/// Parses a duration: plain seconds, or `45m`, `2h`, `1h30m`, `7d`. Refuses zero.
pub fn parse_duration_secs(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let secs = match t.parse::<u64>() {
        Ok(s) => s,
        Err(_) => humantime::parse_duration(t)
            .map_err(|e| {
                format!("invalid duration {text:?} ({e}): use seconds or e.g. 45m, 2h, 1h30m")
            })?
            .as_secs(),
    };
    if secs == 0 {
        return Err(format!(
            "invalid duration {text:?}: must be at least 1 second"
        ));
    }
    Ok(secs)
}

#[cfg(test)]
mod vendor_tests {
    use super::*;
    use crate::core::{Device, Topology};

    #[test]
    fn ids_several_vendors_have_are_refused_without_a_vendor_naming_them() {
        let m = Machine::new(
            Topology::single(4, 1 << 30),
            vec![
                Device::new(Vendor::Nv, 0, "GPU-0", None),
                Device::new(Vendor::Nv, 1, "GPU-1", None),
                Device::new(Vendor::Asc, 0, "asc-0", None),
            ],
        );
        let ids = |ids: &[u32], vendor| Request {
            devices: DeviceRequest {
                count: ids.len() as u32,
                vendor,
                ids: ids.to_vec(),
                exclude: vec![],
            },
            ..Request::default()
        };
        let limits = Limits::default();
        let err = validate(&ids(&[0], None), &m, &limits).unwrap_err();
        assert_eq!(
            err,
            RequestError::IdsOnSeveralVendors {
                ids: "0".into(),
                vendors: "nv, asc".into()
            }
        );
        assert!(err.to_string().contains("pass --device"), "{err}");
        // Named, it is that vendor's; an ID only one vendor has needs no name.
        for (req, want) in [
            (ids(&[0], Some(Vendor::Asc)), Vendor::Asc),
            (ids(&[0], Some(Vendor::Nv)), Vendor::Nv),
            (ids(&[0, 1], None), Vendor::Nv),
            (ids(&[1], None), Vendor::Nv),
        ] {
            let d = validate(&req, &m, &limits).unwrap();
            assert_eq!(d.devices.vendor, Some(want), "{req:?}");
        }
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse_as_users_type_them() {
        assert_eq!(parse_bytes("64G"), Ok(64 << 30));
        assert_eq!(parse_bytes("512m"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5G"), Ok(3 << 29));
        assert_eq!(parse_bytes("100"), Ok(100));
        for bad in ["", "0", "G", "12Q", "-1G", "99999999999T"] {
            assert!(parse_bytes(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(parse_duration_secs("90"), Ok(90));
        assert_eq!(parse_duration_secs("45m"), Ok(2700));
        assert_eq!(parse_duration_secs("1h30m"), Ok(5400));
        assert_eq!(parse_duration_secs("7d"), Ok(7 * 86400));
        for bad in ["0", "soon", "-5", ""] {
            assert!(parse_duration_secs(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(format_bytes(64 << 30), "64G");
        assert_eq!(format_bytes(1536 << 20), "1536M");
        assert_eq!(format_bytes((1 << 30) + 1), "1.0G");
    }
}

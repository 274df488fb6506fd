//! Device nodes, sysfs and procfs: `DeviceAllow=` lists, DRM nodes and NUMA nodes by
//! PCI address, and which processes hold a device node open.

use super::DiscoveredDevice;
use crate::core::{DeviceRef, Vendor};
use std::io;
use std::path::{Path, PathBuf};

/// `dddd:bb:dd.f` from its parts (the form sysfs uses).
pub(crate) fn format_bdf(domain: u32, bus: u32, device: u32, function: u32) -> String {
    format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}")
}

/// Normalises a PCI address as libraries print it (`00000000:3B:00.0`, `0000:3b:00.0`,
/// `3b:00.0`) to the sysfs form `0000:3b:00.0`. `None` if it is not one.
pub fn normalize_bdf(text: &str) -> Option<String> {
    let text = text.trim().trim_end_matches('\0');
    let (rest, function) = text.rsplit_once('.')?;
    let mut parts: Vec<&str> = rest.split(':').collect();
    if parts.len() == 2 {
        parts.insert(0, "0");
    }
    if parts.len() != 3 {
        return None;
    }
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    let (domain, bus, device, function) = (
        hex(parts[0])?,
        hex(parts[1])?,
        hex(parts[2])?,
        hex(function)?,
    );
    if bus > 0xff || device > 0x1f || function > 7 {
        return None;
    }
    Some(format_bdf(domain, bus, device, function))
}

fn pci_dir(sysfs_root: &Path, bdf: &str) -> PathBuf {
    sysfs_root.join("bus/pci/devices").join(bdf)
}

/// The NUMA node sysfs gives a PCI device (`-1`, unreadable or absent: unknown).
pub fn sysfs_numa_node(sysfs_root: &Path, bdf: &str) -> Option<u32> {
    let text = std::fs::read_to_string(pci_dir(sysfs_root, bdf).join("numa_node")).ok()?;
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// The DRM nodes of a PCI device, from `<sysfs>/bus/pci/devices/<bdf>/drm/`:
/// `(render nodes, card nodes)` as `/dev/dri/...` paths, each sorted.
pub fn drm_nodes(sysfs_root: &Path, bdf: &str) -> io::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let mut render = Vec::new();
    let mut card = Vec::new();
    for entry in std::fs::read_dir(pci_dir(sysfs_root, bdf).join("drm"))? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let node = Path::new("/dev/dri").join(name);
        if name.starts_with("renderD") {
            render.push(node);
        } else if name.starts_with("card") && name[4..].bytes().all(|b| b.is_ascii_digit()) {
            card.push(node);
        }
    }
    render.sort();
    card.sort();
    Ok((render, card))
}

/// The device's DRM nodes for `DeviceAllow`, failing clearly when sysfs has no render
/// node for it (the job could not use the device then).
pub(crate) fn required_drm_nodes(
    vendor: Vendor,
    sysfs_root: &Path,
    bdf: Option<&str>,
    index: u32,
    with_card: bool,
) -> Result<Vec<PathBuf>, super::AccelError> {
    let Some(bdf) = bdf else {
        return Err(super::AccelError::invalid(
            vendor,
            format!("device {index} has no PCI address, so its /dev/dri nodes cannot be found"),
        ));
    };
    let dir = pci_dir(sysfs_root, bdf).join("drm");
    let (render, card) = drm_nodes(sysfs_root, bdf).map_err(|e| {
        super::AccelError::invalid(
            vendor,
            format!("device {index}: cannot list {}: {e}", dir.display()),
        )
    })?;
    if render.is_empty() {
        return Err(super::AccelError::invalid(
            vendor,
            format!("device {index}: no renderD* node in {}", dir.display()),
        ));
    }
    let mut nodes = render;
    if with_card {
        nodes.extend(card);
    }
    Ok(nodes)
}

/// Fails discovery when a device's own node is missing: `node` is its `/dev/...` path,
/// looked up under `dev_root` (normally `/dev`; tests use a fake tree). A job given the
/// device could not be let at a node that does not exist, so it could not use it.
pub(crate) fn require_node(
    vendor: Vendor,
    dev_root: &Path,
    node: &Path,
    index: u32,
) -> Result<(), super::AccelError> {
    let on_disk = match node.strip_prefix("/dev") {
        Ok(rest) => dev_root.join(rest),
        Err(_) => node.to_path_buf(),
    };
    match std::fs::symlink_metadata(&on_disk) {
        Ok(_) => Ok(()),
        Err(e) => Err(super::AccelError::invalid(
            vendor,
            format!(
                "device {index}: its node {} cannot be found ({}: {e}); load the vendor's \
                 kernel driver (or check its udev rules) so that the node exists, or run \
                 without this vendor (--backends)",
                node.display(),
                on_disk.display()
            ),
        )),
    }
}

/// PIDs (from `<proc_root>/<pid>/fd/*`) holding any of `nodes` open, sorted.
///
/// Processes that vanish while being read, or whose descriptors cannot be listed (a
/// process in another PID namespace, a `hidepid` mount, a security module), are
/// skipped: one process xlurm cannot inspect must not make every device unknown for
/// as long as it runs. Failing to list `proc_root` itself is an error, and so is
/// failing for every process: then nothing was seen (a `hidepid` mount, a security
/// module), and "no process" would falsely say every device is free.
pub fn processes_holding(proc_root: &Path, nodes: &[PathBuf]) -> Result<Vec<u32>, String> {
    let mut pids = Vec::new();
    let (mut seen, mut unseen) = (0usize, None);
    let entries = std::fs::read_dir(proc_root)
        .map_err(|e| format!("cannot list {}: {e}", proc_root.display()))?;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let fds = match std::fs::read_dir(entry.path().join("fd")) {
            Ok(fds) => fds,
            Err(e) => {
                unseen.get_or_insert((entry.path().join("fd"), e));
                continue;
            }
        };
        seen += 1;
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                if nodes.contains(&target) {
                    pids.push(pid);
                    break;
                }
            }
        }
    }
    if let (0, Some((path, e))) = (seen, &unseen) {
        return Err(format!(
            "cannot list any process's descriptors (e.g. {}: {e}): is {} mounted with \
             hidepid, or is xlurmd confined?",
            path.display(),
            proc_root.display()
        ));
    }
    pids.sort_unstable();
    Ok(pids)
}

/// A job names a device discovery never saw (or whose UUID no longer matches).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no discovered {vendor} device {index} with UUID {uuid}")]
pub struct UnknownDevice {
    pub vendor: Vendor,
    pub index: u32,
    pub uuid: String,
}

/// The device nodes a job holding `held` must be allowed (`DeviceAllow=<path> rw` each):
/// every node of every held device, the vendors' shared control nodes included, sorted
/// and without duplicates. Empty for a CPU job.
pub fn device_allow(
    discovered: &[DiscoveredDevice],
    held: &[DeviceRef],
) -> Result<Vec<PathBuf>, UnknownDevice> {
    let mut nodes = Vec::new();
    for r in held {
        let device = discovered
            .iter()
            .find(|d| d.vendor == r.vendor && d.index == r.index && d.uuid == r.uuid)
            .ok_or_else(|| UnknownDevice {
                vendor: r.vendor,
                index: r.index,
                uuid: r.uuid.clone(),
            })?;
        nodes.extend(device.device_nodes.iter().cloned());
    }
    nodes.sort();
    nodes.dedup();
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdfs_normalise_to_the_sysfs_form() {
        assert_eq!(
            normalize_bdf("00000000:3B:00.0").as_deref(),
            Some("0000:3b:00.0")
        );
        assert_eq!(
            normalize_bdf("0000:3b:1f.7").as_deref(),
            Some("0000:3b:1f.7")
        );
        assert_eq!(normalize_bdf("3b:00.1").as_deref(), Some("0000:3b:00.1"));
        assert_eq!(
            normalize_bdf("0001:c1:00.0\0").as_deref(),
            Some("0001:c1:00.0")
        );
        assert_eq!(normalize_bdf("garbage"), None);
        assert_eq!(normalize_bdf("0000:3b:20.0"), None);
        assert_eq!(normalize_bdf(""), None);
    }

    #[test]
    fn sysfs_numa_and_drm_nodes() {
        let root = tempfile::tempdir().unwrap();
        let dev = root.path().join("bus/pci/devices/0000:3b:00.0");
        std::fs::create_dir_all(dev.join("drm/renderD129")).unwrap();
        std::fs::create_dir_all(dev.join("drm/card1")).unwrap();
        std::fs::create_dir_all(dev.join("drm/controlD65")).unwrap();
        std::fs::write(dev.join("numa_node"), "1\n").unwrap();
        let other = root.path().join("bus/pci/devices/0000:5e:00.0");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("numa_node"), "-1\n").unwrap();

        assert_eq!(sysfs_numa_node(root.path(), "0000:3b:00.0"), Some(1));
        assert_eq!(sysfs_numa_node(root.path(), "0000:5e:00.0"), None);
        assert_eq!(sysfs_numa_node(root.path(), "0000:99:00.0"), None);
        let (render, card) = drm_nodes(root.path(), "0000:3b:00.0").unwrap();
        assert_eq!(render, vec![PathBuf::from("/dev/dri/renderD129")]);
        assert_eq!(card, vec![PathBuf::from("/dev/dri/card1")]);
        let err = required_drm_nodes(Vendor::Hcu, root.path(), Some("0000:5e:00.0"), 2, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("device 2") && err.contains("0000:5e:00.0"),
            "{err}"
        );
    }

    #[test]
    fn holders_of_a_node_are_found_in_proc() {
        let proc = tempfile::tempdir().unwrap();
        let link = |pid: u32, fd: u32, target: &str| {
            let dir = proc.path().join(pid.to_string()).join("fd");
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(target, dir.join(fd.to_string())).unwrap();
        };
        link(10, 3, "/dev/mtgpu.0");
        link(11, 4, "/dev/null");
        link(12, 5, "/dev/dri/renderD128");
        link(12, 6, "/dev/mtgpu.0");
        std::fs::create_dir_all(proc.path().join("self")).unwrap();
        // A process whose descriptors cannot be listed is skipped, not an error.
        std::fs::create_dir_all(proc.path().join("13")).unwrap();
        std::fs::write(proc.path().join("13/fd"), "not a directory").unwrap();
        let nodes = [
            PathBuf::from("/dev/mtgpu.0"),
            PathBuf::from("/dev/dri/renderD128"),
        ];
        assert_eq!(
            processes_holding(proc.path(), &nodes).unwrap(),
            vec![10, 12]
        );
        assert!(processes_holding(&proc.path().join("missing"), &nodes).is_err());
        // Not one process could be inspected: nothing was seen, an error.
        let hidden = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(hidden.path().join("13")).unwrap();
        std::fs::write(hidden.path().join("13/fd"), "not a directory").unwrap();
        let err = processes_holding(hidden.path(), &nodes).unwrap_err();
        assert!(err.contains("13/fd") && err.contains("hidepid"), "{err}");
    }

    #[test]
    fn a_missing_device_node_fails_discovery_naming_it() {
        let dev = tempfile::tempdir().unwrap();
        std::fs::write(dev.path().join("mtgpu.0"), "").unwrap();
        require_node(Vendor::Mtt, dev.path(), Path::new("/dev/mtgpu.0"), 0).unwrap();
        let err = require_node(Vendor::Ppu, dev.path(), Path::new("/dev/alixpu_ppu1"), 1)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ppu")
                && err.contains("device 1")
                && err.contains("/dev/alixpu_ppu1")
                && err.contains("kernel driver"),
            "{err}"
        );
    }

    #[test]
    fn device_allow_unions_nodes_and_rejects_strangers() {
        let dev = |index: u32, nodes: &[&str]| DiscoveredDevice {
            vendor: Vendor::Nv,
            index,
            uuid: format!("GPU-{index}"),
            pci_bdf: None,
            numa_node: None,
            device_nodes: nodes.iter().map(PathBuf::from).collect(),
        };
        let all = [
            dev(0, &["/dev/nvidia0", "/dev/nvidiactl"]),
            dev(1, &["/dev/nvidia1", "/dev/nvidiactl"]),
        ];
        let held = [all[1].device_ref(), all[0].device_ref()];
        assert_eq!(
            device_allow(&all, &held).unwrap(),
            ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"]
                .iter()
                .map(PathBuf::from)
                .collect::<Vec<_>>()
        );
        assert!(device_allow(&all, &[]).unwrap().is_empty());
        let mut stale = all[0].device_ref();
        stale.uuid = "GPU-other".into();
        let err = device_allow(&all, &[stale]).unwrap_err();
        assert_eq!(err.index, 0);
    }
}

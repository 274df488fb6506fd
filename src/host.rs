//! Facts about the host read from sysfs and procfs: the edge the pure core
//! gets its topology from.

use crate::core::topology::{parse_node_meminfo, Node, Topology};
use crate::core::IdSet;
use anyhow::{Context, Result};
use std::path::Path;

/// Reads NUMA nodes under `root` (normally `/`): `sys/devices/system/node/node*/{cpulist,meminfo}`,
/// keeping online CPUs only. A machine without that tree is one node with all
/// online CPUs and `MemTotal` from `proc/meminfo`.
pub fn read_topology(root: &Path) -> Result<Topology> {
    let online = read_list(&root.join("sys/devices/system/cpu/online")).ok();
    let node_dir = root.join("sys/devices/system/node");
    let mut nodes = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&node_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(id) = name
                .strip_prefix("node")
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let mut cpus = read_list(&e.path().join("cpulist"))?;
            if let Some(on) = &online {
                cpus = cpus.intersection(on);
            }
            let meminfo = std::fs::read_to_string(e.path().join("meminfo"))
                .with_context(|| format!("reading {}/meminfo", e.path().display()))?;
            let mem_bytes = parse_node_meminfo(id, &meminfo)?;
            if cpus.is_empty() && mem_bytes == 0 {
                continue;
            }
            nodes.push(Node {
                id,
                cpus,
                mem_bytes,
            });
        }
    }
    if !nodes.is_empty() {
        return Ok(Topology::from_nodes(nodes));
    }
    let cpus = match online {
        Some(c) => c,
        None => IdSet::range(
            0,
            std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        ),
    };
    let meminfo =
        std::fs::read_to_string(root.join("proc/meminfo")).context("reading /proc/meminfo")?;
    let mem = parse_node_meminfo(0, &meminfo)?;
    Ok(Topology::from_nodes(vec![Node {
        id: 0,
        cpus,
        mem_bytes: mem,
    }]))
}

fn read_list(path: &Path) -> Result<IdSet> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(IdSet::parse_list(&text)?)
}

/// Whether the unified cgroup v2 hierarchy with the cpuset and memory
/// controllers is available: the controllers xlurm's isolation needs.
pub fn cgroup_v2_problem(root: &Path) -> Option<String> {
    let path = root.join("sys/fs/cgroup/cgroup.controllers");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Some("the unified cgroup v2 hierarchy is not mounted at /sys/fs/cgroup (boot with systemd.unified_cgroup_hierarchy=1)".into());
    };
    let have: Vec<&str> = text.split_whitespace().collect();
    let missing: Vec<&str> = ["cpuset", "memory"]
        .into_iter()
        .filter(|c| !have.contains(c))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "the cgroup v2 controllers {} are not available",
            missing.join(" and ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    #[test]
    fn reads_nodes_and_drops_offline_cpus() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "sys/devices/system/cpu/online", "0-2\n");
        write(d.path(), "sys/devices/system/node/node0/cpulist", "0-1\n");
        write(
            d.path(),
            "sys/devices/system/node/node0/meminfo",
            "Node 0 MemTotal: 1024 kB\n",
        );
        write(d.path(), "sys/devices/system/node/node1/cpulist", "2-3\n");
        write(
            d.path(),
            "sys/devices/system/node/node1/meminfo",
            "Node 1 MemTotal: 2048 kB\n",
        );
        write(d.path(), "sys/devices/system/node/possible", "0-1\n");
        let t = read_topology(d.path()).unwrap();
        assert_eq!(t.nodes.len(), 2);
        assert_eq!(t.nodes[1].cpus.to_list(), "2");
        assert_eq!(t.nodes[1].mem_bytes, 2048 * 1024);
    }

    #[test]
    fn without_numa_sysfs_the_machine_is_one_node() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "sys/devices/system/cpu/online", "0-3\n");
        write(
            d.path(),
            "proc/meminfo",
            "MemTotal:       16384 kB\nMemFree: 1 kB\n",
        );
        let t = read_topology(d.path()).unwrap();
        assert_eq!(t.nodes.len(), 1);
        assert_eq!(t.total_cpus(), 4);
        assert_eq!(t.total_mem(), 16384 * 1024);
    }

    #[test]
    fn cgroup_check_names_what_is_missing() {
        let d = tempfile::tempdir().unwrap();
        assert!(cgroup_v2_problem(d.path()).unwrap().contains("not mounted"));
        write(
            d.path(),
            "sys/fs/cgroup/cgroup.controllers",
            "cpu io memory pids\n",
        );
        assert!(cgroup_v2_problem(d.path()).unwrap().contains("cpuset"));
        write(
            d.path(),
            "sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory pids\n",
        );
        assert_eq!(cgroup_v2_problem(d.path()), None);
    }
}

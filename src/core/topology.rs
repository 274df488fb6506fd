//! The machine's NUMA topology: nodes, their CPUs and memory, minus the OS reserve.
//!
//! Parsing is pure (text in, values out); reading sysfs lives in `crate::host`.

use super::idset::{CpuSet, IdSet};
use serde::{Deserialize, Serialize};

/// One NUMA node as jobs may use it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub id: u32,
    /// CPUs jobs may use (online, not reserved).
    pub cpus: CpuSet,
    /// Bytes jobs may use (total minus the node's share of the reserve).
    pub mem_bytes: u64,
}

/// All nodes, ordered by ID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub nodes: Vec<Node>,
}

/// What the admin keeps back for the OS.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reserve {
    pub cpus: CpuSet,
    /// Bytes kept back, taken from the nodes in proportion to their size.
    pub mem_bytes: u64,
}

/// Why a topology could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("node{node}/meminfo has no MemTotal line")]
    NoMemTotal { node: u32 },
    #[error("node{node}/meminfo: cannot parse {line:?}")]
    BadMeminfo { node: u32, line: String },
    #[error("the reserve leaves no CPU for jobs")]
    NoCpusLeft,
    #[error("the memory reserve ({reserve} bytes) is not smaller than the machine's memory ({total} bytes)")]
    NoMemoryLeft { reserve: u64, total: u64 },
    #[error("reserved CPU {cpu} does not exist (online CPUs: {online})")]
    UnknownReservedCpu { cpu: u32, online: String },
}

/// Parses a node's `meminfo` (`Node 0 MemTotal:  1012345 kB`) into bytes.
pub fn parse_node_meminfo(node: u32, text: &str) -> Result<u64, TopologyError> {
    for line in text.lines() {
        if let Some(pos) = line.find("MemTotal:") {
            let rest = line[pos + "MemTotal:".len()..].trim();
            let kb = rest
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .map_err(|_| TopologyError::BadMeminfo {
                    node,
                    line: line.to_string(),
                })?;
            return kb.checked_mul(1024).ok_or(TopologyError::BadMeminfo {
                node,
                line: line.to_string(),
            });
        }
    }
    Err(TopologyError::NoMemTotal { node })
}

impl Topology {
    /// A topology from raw per-node facts (CPUs already restricted to online ones).
    pub fn from_nodes(mut nodes: Vec<Node>) -> Topology {
        nodes.sort_by_key(|n| n.id);
        Topology { nodes }
    }

    /// A machine with one node: what a machine without NUMA sysfs looks like.
    pub fn single(cpus: u32, mem_bytes: u64) -> Topology {
        Topology {
            nodes: vec![Node {
                id: 0,
                cpus: IdSet::range(0, cpus),
                mem_bytes,
            }],
        }
    }

    /// `n` equal nodes of `cpus_per_node` CPUs and `mem_per_node` bytes, CPUs numbered in order.
    pub fn uniform(n: u32, cpus_per_node: u32, mem_per_node: u64) -> Topology {
        Topology {
            nodes: (0..n)
                .map(|i| Node {
                    id: i,
                    cpus: IdSet::range(i * cpus_per_node, (i + 1) * cpus_per_node),
                    mem_bytes: mem_per_node,
                })
                .collect(),
        }
    }

    /// Removes the OS reserve. Memory comes off each node in proportion to its size.
    pub fn apply_reserve(mut self, reserve: &Reserve) -> Result<Topology, TopologyError> {
        let online = self.all_cpus();
        if let Some(cpu) = reserve.cpus.iter().find(|c| !online.contains(*c)) {
            return Err(TopologyError::UnknownReservedCpu {
                cpu,
                online: online.to_list(),
            });
        }
        let total = self.total_mem();
        if reserve.mem_bytes >= total && reserve.mem_bytes > 0 {
            return Err(TopologyError::NoMemoryLeft {
                reserve: reserve.mem_bytes,
                total,
            });
        }
        for node in &mut self.nodes {
            node.cpus.subtract(&reserve.cpus);
            let share = (reserve.mem_bytes as u128 * node.mem_bytes as u128)
                .div_ceil(total.max(1) as u128) as u64;
            node.mem_bytes = node.mem_bytes.saturating_sub(share);
        }
        if self.total_cpus() == 0 {
            return Err(TopologyError::NoCpusLeft);
        }
        Ok(self)
    }

    pub fn all_cpus(&self) -> CpuSet {
        let mut s = CpuSet::new();
        for n in &self.nodes {
            s.union_with(&n.cpus);
        }
        s
    }

    pub fn total_cpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.cpus.len()).sum()
    }

    pub fn total_mem(&self) -> u64 {
        self.nodes.iter().map(|n| n.mem_bytes).sum()
    }

    pub fn node_ids(&self) -> IdSet {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// The position of node `id` in [`Topology::nodes`].
    pub fn node_pos(&self, id: u32) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }

    /// The node a CPU belongs to.
    pub fn node_of_cpu(&self, cpu: u32) -> Option<u32> {
        self.nodes
            .iter()
            .find(|n| n.cpus.contains(cpu))
            .map(|n| n.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn meminfo_parses_kernel_format() {
        let text = "Node 0 MemTotal:        2030596 kB\nNode 0 MemFree:  1 kB\n";
        assert_eq!(parse_node_meminfo(0, text).unwrap(), 2030596 * 1024);
        assert_eq!(
            parse_node_meminfo(1, "Node 1 MemFree: 5 kB"),
            Err(TopologyError::NoMemTotal { node: 1 })
        );
        assert!(matches!(
            parse_node_meminfo(1, "Node 1 MemTotal: lots kB"),
            Err(TopologyError::BadMeminfo { node: 1, .. })
        ));
    }

    #[test]
    fn reserve_takes_cpus_and_proportional_memory() {
        let t = Topology::uniform(2, 4, 8 * GIB);
        let r = Reserve {
            cpus: IdSet::parse_list("0,4").unwrap(),
            mem_bytes: 2 * GIB,
        };
        let t = t.apply_reserve(&r).unwrap();
        assert_eq!(t.nodes[0].cpus.to_list(), "1-3");
        assert_eq!(t.nodes[1].cpus.to_list(), "5-7");
        assert_eq!(t.nodes[0].mem_bytes, 7 * GIB);
        assert_eq!(t.total_mem(), 14 * GIB);
    }

    #[test]
    fn impossible_reserves_are_refused() {
        let t = Topology::single(2, GIB);
        let all = Reserve {
            cpus: IdSet::range(0, 2),
            mem_bytes: 0,
        };
        assert_eq!(
            t.clone().apply_reserve(&all),
            Err(TopologyError::NoCpusLeft)
        );
        let mem = Reserve {
            cpus: IdSet::new(),
            mem_bytes: GIB,
        };
        assert!(matches!(
            t.clone().apply_reserve(&mem),
            Err(TopologyError::NoMemoryLeft { .. })
        ));
        let bogus = Reserve {
            cpus: IdSet::parse_list("7").unwrap(),
            mem_bytes: 0,
        };
        assert!(matches!(
            t.apply_reserve(&bogus),
            Err(TopologyError::UnknownReservedCpu { cpu: 7, .. })
        ));
    }
}

//! Which CPUs and memory nodes a job gets, and how a spread job's memory is
//! charged to its nodes.

use crate::core::books::Avail;
use crate::core::idset::CpuSet;
use crate::core::machine::Machine;
use crate::core::reason::{Reason, Shortage};
use crate::core::request::Demand;

/// CPUs and memory for `demand`, on node `pref` when it fits there.
/// The CPUs, the memory charge per node (node, bytes) and whether it spans
/// nodes.
type CpuPlacement = (CpuSet, Vec<(u32, u64)>, bool);

pub(super) fn place_cpus(
    demand: &Demand,
    machine: &Machine,
    avail: &Avail,
    pref: Option<u32>,
) -> Result<CpuPlacement, Reason> {
    let (c, m) = (demand.cpus, demand.mem_bytes);
    let nodes = &machine.topology.nodes;
    let free_cpus: Vec<u32> = nodes
        .iter()
        .map(|n| avail.cpus.intersection_len(&n.cpus))
        .collect();
    let fits = |i: usize| free_cpus[i] >= c && avail.mem[i] >= m;
    let single = |i: usize| -> CpuPlacement {
        let cpus = avail
            .cpus
            .intersection(&nodes[i].cpus)
            .take_lowest(c)
            .unwrap_or_default();
        (cpus, vec![(nodes[i].id, m)], false)
    };
    if let Some(i) = pref.and_then(|p| machine.topology.node_pos(p)) {
        if fits(i) {
            return Ok(single(i));
        }
    }
    let best = (0..nodes.len())
        .filter(|i| fits(*i))
        .min_by_key(|i| (free_cpus[*i], avail.mem[*i], nodes[*i].id));
    if let Some(i) = best {
        return Ok(single(i));
    }
    if demand.numa_local {
        let with_cpus = (0..nodes.len())
            .filter(|i| free_cpus[*i] >= c)
            .max_by_key(|i| (avail.mem[*i], std::cmp::Reverse(nodes[*i].id)));
        return Err(match with_cpus {
            None => Reason::Resources(Shortage::Cpus {
                need: c,
                free: free_cpus.iter().copied().max().unwrap_or(0),
            }),
            Some(i) => Reason::Resources(Shortage::Memory {
                node: Some(nodes[i].id),
                need: m,
                free: avail.mem[i],
            }),
        });
    }
    let total_cpus: u32 = free_cpus.iter().sum();
    let total_mem: u64 = avail.mem.iter().sum();
    if total_cpus < c {
        return Err(Reason::Resources(Shortage::Cpus {
            need: c,
            free: total_cpus,
        }));
    }
    if total_mem < m {
        return Err(Reason::Resources(Shortage::Memory {
            node: None,
            need: m,
            free: total_mem,
        }));
    }
    // Nodes with the most free memory first. A node whose memory is all
    // budgeted gives no CPUs: the job's pages would land there uncharged (a
    // node without memory at all, whose CPUs use other nodes' memory, may).
    let mut order: Vec<usize> = (0..nodes.len())
        .filter(|i| avail.mem[*i] > 0 || nodes[*i].mem_bytes == 0)
        .collect();
    order.sort_by_key(|i| (std::cmp::Reverse(avail.mem[*i]), nodes[*i].id));
    // The nodes that together have the CPUs and the memory, and the CPUs
    // taken on each.
    let mut used: Vec<(usize, u32)> = Vec::new();
    let mut cpus = CpuSet::new();
    let (mut cpus_left, mut room_left) = (c, m);
    for i in order {
        if cpus_left == 0 && room_left == 0 {
            break;
        }
        let take = cpus_left.min(free_cpus[i]);
        if take > 0 {
            let got = avail
                .cpus
                .intersection(&nodes[i].cpus)
                .take_lowest(take)
                .unwrap_or_default();
            cpus.union_with(&got);
            cpus_left -= take;
        }
        room_left = room_left.saturating_sub(avail.mem[i]);
        used.push((i, take));
    }
    if cpus_left > 0 {
        // The other free CPUs are on nodes with no memory left to budget.
        return Err(Reason::Resources(Shortage::Cpus {
            need: c,
            free: c - cpus_left,
        }));
    }
    Ok((cpus, spread_charge(m, c, &used, &avail.mem, nodes), true))
}

/// How a spread job's `m` bytes are charged to the `used` (node position,
/// CPUs taken) nodes: every node with memory that gives CPUs is in its
/// `AllowedMemoryNodes` (the kernel puts pages near the CPU that touches
/// them), so each gets its CPUs' share of `m`, at most what it has free; the
/// rest goes first to nodes not charged yet, then to those with room, in
/// order. A node with memory left without a charge (only when `m` is smaller
/// than the number of nodes) is still listed, with 0 bytes; a node without
/// memory is not (the kernel refuses it in a cpuset's mems).
pub(super) fn spread_charge(
    m: u64,
    c: u32,
    used: &[(usize, u32)],
    free_mem: &[u64],
    nodes: &[crate::core::topology::Node],
) -> Vec<(u32, u64)> {
    let mut charge: Vec<u64> = used
        .iter()
        .map(|&(i, take)| ((m as u128 * take as u128 / c.max(1) as u128) as u64).min(free_mem[i]))
        .collect();
    let mut left = m - charge.iter().sum::<u64>();
    for (k, &(i, _)) in used.iter().enumerate() {
        if left > 0 && charge[k] == 0 && free_mem[i] > 0 {
            charge[k] = 1;
            left -= 1;
        }
    }
    for (k, &(i, _)) in used.iter().enumerate() {
        let more = left.min(free_mem[i] - charge[k]);
        charge[k] += more;
        left -= more;
    }
    let mut out: Vec<(u32, u64)> = used
        .iter()
        .zip(charge)
        .filter(|((i, take), bytes)| *bytes > 0 || (*take > 0 && nodes[*i].mem_bytes > 0))
        .map(|((i, _), bytes)| (nodes[*i].id, bytes))
        .collect();
    out.sort_by_key(|(n, _)| *n);
    out
}

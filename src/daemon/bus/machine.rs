//! `GetMachine`'s reply: NUMA nodes with what is free, each device with its
//! health, load and holder, the policy and limits, the counts, and the
//! caller's standing against the per-user limits (documented in `dbus/`).

use crate::daemon::service::State;
use crate::wire::dict::Dict;
use crate::wire::keys::{device, machine, node, weights, Key};

/// What the reply tells besides the state's tables.
pub struct About {
    /// xlurmd's counters since it started (`Counters::read`).
    pub counters: [(Key<u64>, u64); 5],
    /// Whether the accelerator gate is on.
    pub gate: bool,
    /// The caller, for its per-user limits.
    pub owner: crate::core::Owner,
}

/// The machine as `GetMachine` gives it; `shown`: whether a device's
/// holder may be named to the caller.
pub fn machine_dict(st: &State, shown: impl Fn(u64) -> bool, about: &About) -> Dict {
    let m = st.sched.machine();
    let free = st.sched.free();
    let nodes: Vec<Dict> = m
        .topology
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut d = Dict::new();
            node::ID.put(&mut d, n.id);
            node::CPUS.put(&mut d, n.cpus.to_list());
            node::CPUS_FREE.put(&mut d, free.cpus.intersection(&n.cpus).to_list());
            node::MEM.put(&mut d, n.mem_bytes);
            node::MEM_FREE.put(&mut d, free.mem.get(i).copied().unwrap_or(0));
            d
        })
        .collect();
    let devices: Vec<Dict> = m
        .devices
        .iter()
        .enumerate()
        .map(|(slot, dev)| {
            let mut d = Dict::new();
            device::VENDOR.put(&mut d, dev.vendor.short().into());
            device::INDEX.put(&mut d, dev.index);
            device::UUID.put(&mut d, dev.uuid.clone());
            device::NUMA_NODE.put(&mut d, dev.numa_node.map_or(-1, |n| n as i32));
            device::DISABLED.put(&mut d, dev.disabled);
            let (health, err) = match &dev.health {
                crate::core::Health::Ok => ("ok".to_string(), String::new()),
                crate::core::Health::Busy { processes } => {
                    ("busy".to_string(), format!("{processes} outside processes"))
                }
                crate::core::Health::Unknown { error } => ("unknown".to_string(), error.clone()),
                crate::core::Health::Unhealthy { error } => {
                    ("unhealthy".to_string(), error.clone())
                }
            };
            device::HEALTH.put(&mut d, health);
            device::MONITORING_ERROR.put(&mut d, err);
            if let Some(u) = dev.load.util_pct {
                device::UTIL_PCT.put(&mut d, u32::from(u));
            }
            if let (Some(used), Some(total)) = (dev.load.mem_used, dev.load.mem_total) {
                device::MEM_USED.put(&mut d, used);
                device::MEM_TOTAL.put(&mut d, total);
            }
            device::JOB.put(
                &mut d,
                st.sched.holder(slot).filter(|id| shown(*id)).unwrap_or(0),
            );
            d
        })
        .collect();
    let mut out = Dict::new();
    machine::NODES.put(&mut out, nodes);
    machine::DEVICES.put(&mut out, devices);
    machine::POLICY.put(&mut out, st.sched.policy().name().into());
    machine::MAX_RUNNING.put(&mut out, st.sched.limits().max_running);
    machine::MAX_LIFETIME.put(&mut out, st.sched.limits().max_lifetime_secs);
    machine::MIN_JOB_MEM.put(&mut out, st.sched.limits().min_job_mem);
    for (key, n) in about.counters {
        key.put(&mut out, n);
    }
    let (pending, running) = st.counts();
    machine::PENDING.put(&mut out, pending as u32);
    machine::RUNNING.put(&mut out, running as u32);
    let w = st.sched.usage_weights();
    let mut weights = Dict::new();
    weights::CPU.put(&mut weights, w.cpu);
    weights::GPU.put(&mut weights, w.gpu);
    weights::MEM_GIB.put(&mut weights, w.mem_gib);
    machine::USAGE_WEIGHTS.put(&mut out, weights);
    machine::GATE.put(&mut out, about.gate);
    machine::LIMITS.put(
        &mut out,
        crate::daemon::fairness::standing(&st.sched.standing(about.owner)),
    );
    out
}

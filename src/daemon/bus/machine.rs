//! `GetMachine`'s reply: NUMA nodes with what is free, each device with its
//! health, load and holder, the policy and limits, the counts, and the
//! caller's standing against the per-user limits (documented in `dbus/`).

use crate::daemon::service::State;
use crate::wire::dict::{put, Dict};

/// What the reply tells besides the state's tables.
pub struct About {
    /// xlurmd's counters since it started (`Counters::read`).
    pub counters: [(&'static str, u64); 5],
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
            put(&mut d, "id", n.id);
            put(&mut d, "cpus", n.cpus.to_list());
            put(
                &mut d,
                "cpus_free",
                free.cpus.intersection(&n.cpus).to_list(),
            );
            put(&mut d, "mem", n.mem_bytes);
            put(&mut d, "mem_free", free.mem.get(i).copied().unwrap_or(0));
            d
        })
        .collect();
    let devices: Vec<Dict> = m
        .devices
        .iter()
        .enumerate()
        .map(|(slot, dev)| {
            let mut d = Dict::new();
            put(&mut d, "vendor", dev.vendor.short());
            put(&mut d, "index", dev.index);
            put(&mut d, "uuid", dev.uuid.clone());
            put(&mut d, "numa_node", dev.numa_node.map_or(-1, |n| n as i32));
            put(&mut d, "disabled", dev.disabled);
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
            put(&mut d, "health", health);
            put(&mut d, "monitoring_error", err);
            if let Some(u) = dev.load.util_pct {
                put(&mut d, "util_pct", u32::from(u));
            }
            if let (Some(used), Some(total)) = (dev.load.mem_used, dev.load.mem_total) {
                put(&mut d, "mem_used", used);
                put(&mut d, "mem_total", total);
            }
            put(
                &mut d,
                "job",
                st.sched.holder(slot).filter(|id| shown(*id)).unwrap_or(0),
            );
            d
        })
        .collect();
    let mut out = Dict::new();
    put(&mut out, "nodes", nodes);
    put(&mut out, "devices", devices);
    put(&mut out, "policy", st.sched.policy().name());
    put(&mut out, "max_running", st.sched.limits().max_running);
    put(
        &mut out,
        "max_lifetime",
        st.sched.limits().max_lifetime_secs,
    );
    put(&mut out, "min_job_mem", st.sched.limits().min_job_mem);
    for (key, n) in about.counters {
        put(&mut out, key, n);
    }
    let (pending, running) = st.counts();
    put(&mut out, "pending", pending as u32);
    put(&mut out, "running", running as u32);
    let w = st.sched.usage_weights();
    let mut weights = Dict::new();
    put(&mut weights, "cpu", w.cpu);
    put(&mut weights, "gpu", w.gpu);
    put(&mut weights, "mem_gib", w.mem_gib);
    put(&mut out, "usage_weights", weights);
    put(&mut out, "gate", about.gate);
    put(
        &mut out,
        "limits",
        crate::daemon::fairness::standing(&st.sched.standing(about.owner)),
    );
    out
}

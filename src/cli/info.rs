//! `xinfo`: the machine, its NUMA nodes and devices, the policy and counts.

use super::client::{connect, explain, Dict};
use super::format::{dict_to_json, emit, json_text};
use super::InfoArgs;
use crate::core::request::format_bytes;
use crate::wire::keys;
use anyhow::Result;

pub(super) async fn info(a: InfoArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let m = p.get_machine().await.map_err(|e| explain(e, user))?;
    if a.json {
        emit(&json_text(&dict_to_json(&m))?)?;
        return Ok(0);
    }
    emit(&machine_text(&m))?;
    Ok(0)
}

/// `xinfo`'s text: the policy and counts, the NUMA nodes, the devices.
fn machine_text(m: &Dict) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "policy {}, max running {}, {} pending, {} running",
        keys::machine::POLICY.text(m),
        keys::machine::MAX_RUNNING.get(m).unwrap_or(0),
        keys::machine::PENDING.get(m).unwrap_or(0),
        keys::machine::RUNNING.get(m).unwrap_or(0)
    );
    let nodes: Vec<Dict> = keys::machine::NODES.get(m).unwrap_or_default();
    let _ = writeln!(
        out,
        "{:<6} {:<16} {:<16} {:>10} {:>10}",
        "NODE", "CPUS", "FREE", "MEM", "MEM FREE"
    );
    for n in &nodes {
        let _ = writeln!(
            out,
            "{:<6} {:<16} {:<16} {:>10} {:>10}",
            format!("node{}", keys::node::ID.get(n).unwrap_or(0)),
            keys::node::CPUS.text(n),
            keys::node::CPUS_FREE.text(n),
            format_bytes(keys::node::MEM.get(n).unwrap_or(0)),
            format_bytes(keys::node::MEM_FREE.get(n).unwrap_or(0))
        );
    }
    let limits: Vec<Dict> = keys::machine::LIMITS.get(m).unwrap_or_default();
    let devices: Vec<Dict> = keys::machine::DEVICES.get(m).unwrap_or_default();
    if devices.is_empty() {
        let _ = writeln!(out, "no accelerators");
    }
    for d in &devices {
        let job = keys::device::JOB.get(d).unwrap_or(0);
        let mut state = if keys::device::DISABLED.get(d).unwrap_or(false) {
            "disabled".to_string()
        } else {
            keys::device::HEALTH.text(d)
        };
        if job > 0 {
            state = format!("{state}, job {job}");
        }
        let _ = writeln!(
            out,
            "{}:{} {} node {} {}",
            keys::device::VENDOR.text(d),
            keys::device::INDEX.get(d).unwrap_or(0),
            keys::device::UUID.text(d),
            keys::device::NUMA_NODE.get(d).unwrap_or(-1),
            state
        );
        let err = keys::device::MONITORING_ERROR.text(d);
        if !err.is_empty() {
            let _ = writeln!(out, "    {err}");
        }
    }
    if let Some(w) = keys::machine::USAGE_WEIGHTS.get(m) {
        let _ = writeln!(
            out,
            "fair-share usage per second: CPU {}, GPU {}, GiB of memory {}",
            keys::weights::CPU.get(&w).unwrap_or(0.0),
            keys::weights::GPU.get(&w).unwrap_or(0.0),
            keys::weights::MEM_GIB.get(&w).unwrap_or(0.0)
        );
    }
    if keys::machine::GATE.get(m) == Some(true) {
        let _ = writeln!(
            out,
            "accelerator gate: on (only xlurm jobs, root's sessions and accel.slice open the accelerators)"
        );
    }
    if limits.is_empty() {
        let _ = writeln!(out, "your limits: none");
    } else {
        let _ = writeln!(out, "your limits:");
        for l in &limits {
            let _ = writeln!(out, "    {}", keys::standing::TEXT.text(l));
        }
    }
    out
}

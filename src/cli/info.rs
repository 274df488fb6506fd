//! `xinfo`: the machine, its NUMA nodes and devices, the policy and counts.

use super::client::{connect, explain, get, get_str, Dict};
use super::format::{dict_to_json, emit, json_text};
use super::InfoArgs;
use crate::core::request::format_bytes;
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
        get_str(m, "policy"),
        get::<u32>(m, "max_running").unwrap_or(0),
        get::<u32>(m, "pending").unwrap_or(0),
        get::<u32>(m, "running").unwrap_or(0)
    );
    let nodes: Vec<Dict> = m
        .get("nodes")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Vec::<Dict>::try_from(v).ok())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{:<6} {:<16} {:<16} {:>10} {:>10}",
        "NODE", "CPUS", "FREE", "MEM", "MEM FREE"
    );
    for n in &nodes {
        let _ = writeln!(
            out,
            "{:<6} {:<16} {:<16} {:>10} {:>10}",
            format!("node{}", get::<u32>(n, "id").unwrap_or(0)),
            get_str(n, "cpus"),
            get_str(n, "cpus_free"),
            format_bytes(get::<u64>(n, "mem").unwrap_or(0)),
            format_bytes(get::<u64>(n, "mem_free").unwrap_or(0))
        );
    }
    let limits: Vec<Dict> = m
        .get("limits")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Vec::<Dict>::try_from(v).ok())
        .unwrap_or_default();
    let devices: Vec<Dict> = m
        .get("devices")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Vec::<Dict>::try_from(v).ok())
        .unwrap_or_default();
    if devices.is_empty() {
        let _ = writeln!(out, "no accelerators");
    }
    for d in &devices {
        let job = get::<u64>(d, "job").unwrap_or(0);
        let mut state = if get::<bool>(d, "disabled").unwrap_or(false) {
            "disabled".to_string()
        } else {
            get_str(d, "health")
        };
        if job > 0 {
            state = format!("{state}, job {job}");
        }
        let _ = writeln!(
            out,
            "{}:{} {} node {} {}",
            get_str(d, "vendor"),
            get::<u32>(d, "index").unwrap_or(0),
            get_str(d, "uuid"),
            get::<i32>(d, "numa_node").unwrap_or(-1),
            state
        );
        let err = get_str(d, "monitoring_error");
        if !err.is_empty() {
            let _ = writeln!(out, "    {err}");
        }
    }
    if let Some(w) = m
        .get("usage_weights")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Dict::try_from(v).ok())
    {
        let _ = writeln!(
            out,
            "fair-share usage per second: CPU {}, GPU {}, GiB of memory {}",
            get::<f64>(&w, "cpu").unwrap_or(0.0),
            get::<f64>(&w, "gpu").unwrap_or(0.0),
            get::<f64>(&w, "mem_gib").unwrap_or(0.0)
        );
    }
    if get::<bool>(m, "gate") == Some(true) {
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
            let _ = writeln!(out, "    {}", get_str(l, "text"));
        }
    }
    out
}

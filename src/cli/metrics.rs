//! `xlurm metrics`: the machine, its queue and xlurmd's own work as metrics
//! text, for node_exporter's textfile collector (units/xlurm-metrics.timer
//! writes it every 15 s; no HTTP listener in xlurmd).
//!
//! Two formats from one list of families: the Prometheus text format 0.0.4
//! (the default: what the textfile collector and `promtool check metrics`
//! read; a counter's `# TYPE` names its `_total` sample) and OpenMetrics 1.0
//! (`--openmetrics`: a counter's family drops `_total`, `# UNIT` lines, and
//! the text ends with `# EOF`). Values are in base units (seconds, bytes,
//! ratios 0 to 1). Built from `GetMachine` and one listing of the active
//! jobs, so a user sees what `xqueue -a` would show them.

use super::client::{connect, explain, get, Dict};
use crate::wire::keys;
use crate::wire::queue::Line;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// How a family is typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

/// One metric family and its samples (labels, value).
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// Its name without `_total` (added to a counter's sample).
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    /// OpenMetrics `# UNIT` (the name ends with it).
    pub unit: Option<&'static str>,
    pub samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    fn new(name: &'static str, kind: Kind, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind,
            unit: None,
            samples: Vec::new(),
        }
    }

    fn unit(mut self, unit: &'static str) -> Family {
        self.unit = Some(unit);
        self
    }

    fn add(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.samples.push((labels, value));
    }
}

/// A label value as the formats escape it (`\`, `"`, newline).
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The families as text: Prometheus 0.0.4, or OpenMetrics 1.0 (`open`).
pub fn render(families: &[Family], open: bool) -> String {
    let mut out = String::new();
    for f in families {
        let sample = match f.kind {
            Kind::Counter => format!("{}_total", f.name),
            Kind::Gauge => f.name.to_string(),
        };
        let family = if open { f.name } else { sample.as_str() };
        let kind = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(out, "# HELP {family} {}", f.help);
        let _ = writeln!(out, "# TYPE {family} {kind}");
        if let (true, Some(unit)) = (open, f.unit) {
            let _ = writeln!(out, "# UNIT {family} {unit}");
        }
        for (labels, value) in &f.samples {
            out.push_str(&sample);
            if !labels.is_empty() {
                let inner: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                let _ = write!(out, "{{{}}}", inner.join(","));
            }
            let _ = writeln!(out, " {}", number(*value));
        }
    }
    if open {
        out.push_str("# EOF\n");
    }
    out
}

/// The short name of a pending reason (`Resources (CPUs: ...)` → `Resources`).
fn reason_name(reason: &str) -> String {
    reason.split([' ', '(']).next().unwrap_or("").to_string()
}

/// The families for `machine` (`GetMachine`) and the active `jobs`.
pub fn families(machine: &Dict, jobs: &[Line<'_>]) -> Vec<Family> {
    let mut by_state: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    let mut flagged: BTreeMap<String, u64> = BTreeMap::new();
    let mut owner: BTreeMap<u64, String> = BTreeMap::new();
    for j in jobs {
        *by_state
            .entry((j.state.to_lowercase(), j.user.to_string()))
            .or_default() += 1;
        owner.insert(j.id, j.user.to_string());
        match &*j.state {
            "PENDING" => *reasons.entry(reason_name(&j.reason)).or_default() += 1,
            "RUNNING" if !j.reason.is_empty() => {
                *flagged.entry(reason_name(&j.reason)).or_default() += 1
            }
            _ => {}
        }
    }
    let mut jobs_f = Family::new("xlurm_jobs", Kind::Gauge, "Active jobs by state and user.");
    for ((state, user), n) in by_state {
        jobs_f.add(vec![("state", state), ("user", user)], n as f64);
    }
    let mut pending = Family::new(
        "xlurm_pending_jobs",
        Kind::Gauge,
        "Pending jobs by the reason they wait.",
    );
    for (reason, n) in reasons {
        pending.add(vec![("reason", reason)], n as f64);
    }
    let mut flags = Family::new(
        "xlurm_flagged_jobs",
        Kind::Gauge,
        "Running jobs with a flag (IdleGPU: an allocated accelerator stays idle).",
    );
    flags.add(
        vec![("flag", "IdleGPU".into())],
        flagged.get("IdleGPU").copied().unwrap_or(0) as f64,
    );

    let mut cpus = Family::new("xlurm_node_cpus", Kind::Gauge, "CPUs per NUMA node.");
    let mut cpus_free = Family::new(
        "xlurm_node_cpus_free",
        Kind::Gauge,
        "CPUs no job holds, per NUMA node.",
    );
    let mut mem = Family::new(
        "xlurm_node_memory_bytes",
        Kind::Gauge,
        "Memory budget per NUMA node.",
    )
    .unit("bytes");
    let mut mem_free = Family::new(
        "xlurm_node_memory_free_bytes",
        Kind::Gauge,
        "Memory budget no job holds, per NUMA node.",
    )
    .unit("bytes");
    for n in keys::machine::NODES.get(machine).unwrap_or_default() {
        let node = vec![("node", keys::node::ID.get(&n).unwrap_or(0).to_string())];
        let count = |key: keys::Key<String>| {
            crate::core::CpuSet::parse_list(&key.text(&n))
                .map(|s| f64::from(s.len()))
                .unwrap_or(0.0)
        };
        cpus.add(node.clone(), count(keys::node::CPUS));
        cpus_free.add(node.clone(), count(keys::node::CPUS_FREE));
        mem.add(node.clone(), keys::node::MEM.get(&n).unwrap_or(0) as f64);
        mem_free.add(node, keys::node::MEM_FREE.get(&n).unwrap_or(0) as f64);
    }

    let mut info = Family::new(
        "xlurm_device_info",
        Kind::Gauge,
        "Each accelerator: its health (ok, busy, unknown, unhealthy, disabled) and the job and user holding it.",
    );
    let mut util = Family::new(
        "xlurm_device_utilization_ratio",
        Kind::Gauge,
        "Share of the last sample period each accelerator was busy, as its library reports it.",
    )
    .unit("ratio");
    let mut used = Family::new(
        "xlurm_device_memory_used_bytes",
        Kind::Gauge,
        "Device memory in use.",
    )
    .unit("bytes");
    let mut total = Family::new(
        "xlurm_device_memory_total_bytes",
        Kind::Gauge,
        "Device memory in all.",
    )
    .unit("bytes");
    for d in keys::machine::DEVICES.get(machine).unwrap_or_default() {
        let device = format!(
            "{}:{}",
            keys::device::VENDOR.text(&d),
            keys::device::INDEX.get(&d).unwrap_or(0)
        );
        let at = || vec![("device", device.clone())];
        let job = keys::device::JOB.get(&d).unwrap_or(0);
        let health = if keys::device::DISABLED.get(&d).unwrap_or(false) {
            "disabled".to_string()
        } else {
            keys::device::HEALTH.text(&d)
        };
        info.add(
            vec![
                ("device", device.clone()),
                ("uuid", keys::device::UUID.text(&d)),
                ("health", health),
                (
                    "job",
                    if job > 0 {
                        job.to_string()
                    } else {
                        String::new()
                    },
                ),
                ("user", owner.get(&job).cloned().unwrap_or_default()),
            ],
            1.0,
        );
        if let Some(u) = keys::device::UTIL_PCT.get(&d) {
            util.add(at(), f64::from(u) / 100.0);
        }
        if let (Some(u), Some(t)) = (
            keys::device::MEM_USED.get(&d),
            keys::device::MEM_TOTAL.get(&d),
        ) {
            used.add(at(), u as f64);
            total.add(at(), t as f64);
        }
    }

    let counter = |key: &str| get::<u64>(machine, key).unwrap_or(0) as f64;
    let one = |name, kind, help, value: f64| {
        let mut f = Family::new(name, kind, help);
        f.add(vec![], value);
        f
    };
    let mut pass_total = one(
        "xlurm_scheduling_pass_seconds",
        Kind::Counter,
        "Time spent in scheduling passes since xlurmd started.",
        counter("sched_pass_nsec_total") / 1e9,
    );
    pass_total.unit = Some("seconds");
    let mut last = one(
        "xlurm_scheduling_last_pass_seconds",
        Kind::Gauge,
        "How long the last scheduling pass took.",
        counter("sched_last_pass_nsec") / 1e9,
    );
    last.unit = Some("seconds");
    vec![
        jobs_f,
        pending,
        flags,
        cpus,
        cpus_free,
        mem,
        mem_free,
        info,
        util,
        used,
        total,
        one(
            "xlurm_submitted_jobs",
            Kind::Counter,
            "Jobs submitted since xlurmd started (an array once).",
            counter("submitted_total"),
        ),
        one(
            "xlurm_started_jobs",
            Kind::Counter,
            "Jobs handed to systemd since xlurmd started.",
            counter("started_total"),
        ),
        one(
            "xlurm_scheduling_passes",
            Kind::Counter,
            "Scheduling passes since xlurmd started.",
            counter("sched_passes_total"),
        ),
        pass_total,
        last,
    ]
}

/// Writes `text` to `path` whole: a temporary file in the same directory,
/// renamed over it, so the collector never reads half a file.
pub fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .context("the output path names no file")?
        .to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| {
        let _ = std::fs::remove_file(&tmp);
        format!("renaming {} to {}", tmp.display(), path.display())
    })
}

/// `xlurm metrics [--openmetrics] [--output FILE]`.
pub(super) async fn metrics(open: bool, output: Option<&Path>, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let machine = p.get_machine().await.map_err(|e| explain(e, user))?;
    let listing = super::queue::active_jobs(&p, user).await?;
    let jobs = listing.lines()?;
    let text = render(&families(&machine, &jobs), open);
    match output {
        Some(path) => write_atomic(path, &text)?,
        None => super::format::emit(&text)?,
    }
    Ok(0)
}

#[cfg(test)]
mod tests;

//! Why a pending job has not started.

use super::device::Vendor;
use super::limits::LimitHit;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What ran short.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum Shortage {
    Cpus {
        need: u32,
        free: u32,
    },
    /// Memory on one node (`numa-local`, or the node the job's devices pin it to),
    /// or machine-wide when `node` is `None`.
    Memory {
        node: Option<u32>,
        need: u64,
        free: u64,
    },
    Devices {
        vendor: Option<Vendor>,
        need: u32,
        free: u32,
    },
}

/// The machine-readable pending reason, shown by `xqueue`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// Not enough free resources.
    Resources(Shortage),
    /// The policy holds it behind the job at the head of the queue.
    Priority,
    /// Enough devices exist, but outside processes use some of them.
    DevicesBusy,
    /// Monitoring of the needed devices failed (or reports them unhealthy).
    DevicesUnknown,
    /// The admin excluded devices the job needs.
    DevicesDisabled,
    /// The admin's limit of running jobs is reached.
    MaxRunning,
    /// An exclusive job runs, or this exclusive job waits for the machine to be idle.
    Exclusive,
    /// Starting it would take its owner past one of their limits.
    UserLimit(LimitHit),
    /// Held (`--hold`, `xlurm hold`): by its owner, or by an admin (then
    /// only an admin may release it).
    Held { by_admin: bool },
    /// Waits for the jobs it depends on (`--dependency`).
    Dependency,
    /// Its dependency can never be met (`afterok` on a job that failed):
    /// it waits until cancelled, as in Slurm.
    DependencyNeverSatisfied,
    /// Its array already runs as many tasks as its `%N` allows.
    ArrayTaskLimit { limit: u32 },
}

impl Reason {
    /// The short name shown in the REASON column (`Resources`, `Priority`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Reason::Resources(_) => "Resources",
            Reason::Priority => "Priority",
            Reason::DevicesBusy => "DevicesBusy",
            Reason::DevicesUnknown => "DevicesUnknown",
            Reason::DevicesDisabled => "DevicesDisabled",
            Reason::MaxRunning => "MaxRunning",
            Reason::Exclusive => "Exclusive",
            Reason::UserLimit(_) => "UserLimit",
            Reason::Held { by_admin: false } => "JobHeldUser",
            Reason::Held { by_admin: true } => "JobHeldAdmin",
            Reason::Dependency => "Dependency",
            Reason::DependencyNeverSatisfied => "DependencyNeverSatisfied",
            Reason::ArrayTaskLimit { .. } => "JobArrayTaskLimit",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use super::request::format_bytes;
        match self {
            Reason::Resources(Shortage::Cpus { need, free }) => {
                write!(f, "Resources (CPUs: needs {need}, {free} free)")
            }
            Reason::Resources(Shortage::Memory { node, need, free }) => {
                let place = node.map(|n| format!(" on node {n}")).unwrap_or_default();
                write!(
                    f,
                    "Resources (memory{place}: needs {}, {} free)",
                    format_bytes(*need),
                    format_bytes(*free)
                )
            }
            Reason::Resources(Shortage::Devices { vendor, need, free }) => {
                let v = vendor.map(|v| v.short()).unwrap_or("auto");
                write!(f, "Resources (devices {v}: needs {need}, {free} free)")
            }
            Reason::Priority => f.write_str("Priority (held for an earlier job)"),
            Reason::DevicesBusy => f.write_str("DevicesBusy (an outside process uses the devices)"),
            Reason::DevicesUnknown => {
                f.write_str("DevicesUnknown (device monitoring failed or reports unhealthy)")
            }
            Reason::DevicesDisabled => f.write_str("DevicesDisabled (excluded by the admin)"),
            Reason::MaxRunning => f.write_str("MaxRunning (the limit of running jobs is reached)"),
            Reason::Exclusive => f.write_str("Exclusive (waits for or holds the whole machine)"),
            Reason::UserLimit(hit) => write!(f, "UserLimit ({hit})"),
            Reason::Held { by_admin: false } => {
                f.write_str("JobHeldUser (held by its owner: xlurm release)")
            }
            Reason::Held { by_admin: true } => {
                f.write_str("JobHeldAdmin (held by an admin; only an admin may release it)")
            }
            Reason::Dependency => f.write_str("Dependency (waits for the jobs it depends on)"),
            Reason::DependencyNeverSatisfied => f.write_str(
                "DependencyNeverSatisfied (can never start: xcancel it, or xlurm update --dependency)",
            ),
            Reason::ArrayTaskLimit { limit } => {
                write!(f, "JobArrayTaskLimit ({limit} tasks of its array run at once)")
            }
        }
    }
}

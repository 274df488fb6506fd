//! The daemon's settings in one place: what its command line (`options.rs`)
//! resolves to ([`ServeConfig`], what `serve` starts from) and the part the
//! running service reads ([`Settings`], fixed while it runs).

use super::systemd::unit::{MemoryNodes, MemoryNodesChoice, UnitSettings};
use crate::core::{Limits, Machine, Policy};
use std::path::PathBuf;
use std::time::Duration;

/// Everything `serve` needs that does not come from the bus.
pub struct ServeConfig {
    /// The `xlurm` binary whose `__tee-output` runs jobs with `--output`.
    pub tee_path: String,
    /// How long a finished job's D-Bus object stays on the bus.
    pub object_linger: Duration,
    pub machine: Machine,
    pub accel: Vec<crate::accel::Active>,
    pub policy: Policy,
    pub limits: Limits,
    /// The order pending jobs are served in (`--priority`, `--fairshare-half-life`).
    pub priority: crate::core::PriorityConfig,
    /// Per-user limits (`--user-limits`); those set live and kept in the
    /// state directory win.
    pub user_limits: crate::core::UserLimits,
    /// `--gate`: the accelerator gate's setting unless one was set live.
    pub gate: bool,
    /// `--gate-exempt`: the services let through the gate.
    pub gate_exempt: Vec<String>,
    /// `--idle-gpu-below`, `--idle-gpu-after`.
    pub idle_gpu: crate::core::IdleRule,
    pub state_dir: PathBuf,
    pub settings_user_mode: bool,
    /// `--memory-nodes`, resolved against systemd's version in `serve`.
    pub memory_nodes: MemoryNodesChoice,
    pub slice: String,
    /// What each user's pending jobs may hold.
    pub budget: crate::core::Budget,
    pub retention_secs: u64,
    /// `--accounting-retention`.
    pub accounting_retention_secs: u64,
    /// Between SIGTERM and SIGKILL when a job is stopped (`--cancel-grace`).
    pub cancel_grace: Duration,
    pub list_is_public: bool,
    /// The `journalctl` to read job output and unit history with (tests use a double).
    pub journalctl: String,
    /// How often running jobs' units are checked besides their signals.
    pub recheck: Duration,
    /// The cgroup directory of the jobs' slice, to read running jobs' memory
    /// peak from (`Daemon::sample_memory_peaks`); `None`: systemd's figure only.
    pub job_cgroups: Option<PathBuf>,
}

/// Settings that do not change while the daemon runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub unit: UnitSettings,
    /// What each user's pending jobs may hold.
    pub budget: crate::core::Budget,
    pub retention_secs: u64,
    /// How long the accounting log keeps a month (`--accounting-retention`).
    pub accounting_retention_secs: u64,
    pub list_is_public: bool,
    /// How long a finished job's D-Bus object stays (see `job_object`).
    pub object_linger: std::time::Duration,
    /// The `journalctl` program (see `journal`).
    pub journalctl: String,
    /// When an allocated accelerator counts as idle (`--idle-gpu-below`,
    /// `--idle-gpu-after`).
    pub idle: crate::core::IdleRule,
}

impl Settings {
    /// The service's settings from `cfg`, with what `serve` found out:
    /// where scripts go, the slice of jobs without accelerators and how
    /// memory is kept on a job's nodes (both from systemd).
    pub fn of(
        cfg: &ServeConfig,
        script_dir: PathBuf,
        nodev_slice: Option<String>,
        memory_nodes: MemoryNodes,
    ) -> Settings {
        Settings {
            unit: UnitSettings {
                slice: cfg.slice.clone(),
                nodev_slice,
                user_mode: cfg.settings_user_mode,
                script_dir,
                stop_timeout_usec: u64::try_from(cfg.cancel_grace.as_micros()).unwrap_or(u64::MAX),
                tee_path: cfg.tee_path.clone(),
                memory_nodes,
            },
            budget: cfg.budget,
            retention_secs: cfg.retention_secs,
            accounting_retention_secs: cfg.accounting_retention_secs,
            list_is_public: cfg.list_is_public,
            journalctl: cfg.journalctl.clone(),
            idle: cfg.idle_gpu,
            object_linger: cfg.object_linger,
        }
    }
}

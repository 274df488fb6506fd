//! A daemon over the in-memory systemd double ([`MemoryUnits`]), no bus:
//! for benchmarks and tests of its handlers from outside the crate.

use super::memory_units::MemoryUnits;
use crate::core::{Limits, Machine, Policy, Scheduler, Topology};
use crate::daemon::service::{Daemon, Settings, State};
use crate::daemon::store::Store;
use crate::daemon::systemd::unit::UnitSettings;
use std::sync::Arc;

/// A daemon with its state in `dir` on a two-node, 16-CPU machine without
/// accelerators, under `policy`, that lets one user have `pending` jobs
/// waiting (no byte budget).
pub async fn in_memory(
    dir: &std::path::Path,
    policy: Policy,
    pending: usize,
) -> Arc<Daemon<MemoryUnits>> {
    let (store, loaded) = Store::open(dir).expect("a state directory");
    let machine = Machine::new(Topology::uniform(2, 8, 16 << 30), vec![]);
    let limits = Limits {
        max_running: 1000,
        max_lifetime_secs: 3600,
        min_job_mem: 64 << 20,
    };
    let sched = Scheduler::new(machine, policy, limits);
    let mut settings = settings(&store);
    settings.budget = crate::core::Budget {
        jobs: pending,
        bytes: u64::MAX,
        ..Default::default()
    };
    let state = State::new(sched, loaded, store);
    let (d, _changes) = Daemon::new(state, settings, MemoryUnits::default(), vec![]);
    d
}

/// The settings such a daemon runs with (default budgets; no journal, so a
/// vanished unit cannot be told apart from a lost start).
pub fn settings(store: &Store) -> Settings {
    Settings {
        unit: UnitSettings {
            slice: "xlurm.slice".into(),
            user_mode: false,
            script_dir: store.script_dir(),
            stop_timeout_usec: 10_000_000,
            tee_path: "/usr/bin/xlurm".into(),
            memory_nodes: crate::daemon::systemd::unit::MemoryNodes::Fence,
            nodev_slice: None,
        },
        budget: Default::default(),
        retention_secs: 3600,
        accounting_retention_secs: 365 * 86_400,
        list_is_public: true,
        object_linger: std::time::Duration::from_secs(600),
        journalctl: "/nonexistent/journalctl".into(),
        idle: Default::default(),
    }
}

//! An in-memory systemd manager for the daemon's handlers (see
//! [`crate::daemon::systemd::Units`]): units are a map of statuses, every call
//! is recorded, and a test ends, loses or refuses units at will. No bus.

use crate::daemon::systemd::outcome::{Collect, UnitStatus};
use crate::daemon::systemd::Units;
use anyhow::Result;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use zbus::Variant;

#[derive(Debug, Default)]
pub struct Manager {
    /// Loaded units by name.
    pub units: BTreeMap<String, UnitStatus>,
    /// Every call, as `"verb unit"` (`"start xlurm-job-1.service"`).
    pub calls: Vec<String>,
    /// The properties of each start, by unit.
    pub started: HashMap<String, Vec<String>>,
    /// The next start is refused with this message (not a transient error).
    pub refuse_next_start: Option<String>,
    /// Every status read fails (systemd busy or re-executing).
    pub unreadable: bool,
    /// Units a stop leaves deactivating (their processes take a while).
    pub slow_stop: std::collections::HashSet<String>,
    /// Starts so far (invocation IDs are numbered by them).
    starts: u32,
}

#[derive(Debug, Default)]
pub struct MemoryUnits {
    pub m: Mutex<Manager>,
    /// While set, starts and time-limit reloads wait for a permit of it
    /// (see `hold_starts`).
    held: Gate,
    /// While set, accounting reads wait for a permit of it (see `hold_accounting`).
    held_accounting: Gate,
}

/// Calls of one kind held by a test: while set, each waits for a permit.
type Gate = Mutex<Option<std::sync::Arc<tokio::sync::Semaphore>>>;

/// The CPU time every finished unit reports (ns).
pub const CPU_NSEC: u64 = 1_000_000;

impl MemoryUnits {
    fn with<T>(&self, f: impl FnOnce(&mut Manager) -> T) -> T {
        let mut m = self.m.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut m)
    }

    /// From now on each start and each time-limit reload waits (systemd
    /// busy) until the test adds a permit to the semaphore returned.
    pub fn hold_starts(&self) -> std::sync::Arc<tokio::sync::Semaphore> {
        Self::hold(&self.held)
    }

    /// From now on each accounting read of an ended unit waits (systemd
    /// busy) until the test adds a permit to the semaphore returned.
    pub fn hold_accounting(&self) -> std::sync::Arc<tokio::sync::Semaphore> {
        Self::hold(&self.held_accounting)
    }

    fn hold(gate: &Gate) -> std::sync::Arc<tokio::sync::Semaphore> {
        let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        *gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(permits.clone());
        permits
    }

    /// Waits for a permit while calls are held (see `hold_starts`); the
    /// permit is taken for good: one call per permit.
    async fn wait_if_held(&self) {
        Self::wait_for(&self.held).await
    }

    async fn wait_for(gate: &Gate) {
        let permits = gate.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(permits) = permits {
            if let Ok(p) = permits.acquire().await {
                p.forget();
            }
        }
    }

    /// A stop of `unit` leaves it deactivating until the test ends it.
    pub fn slow_stop(&self, unit: &str) {
        self.with(|m| m.slow_stop.insert(unit.to_string()));
    }

    fn call(&self, verb: &str, unit: &str) {
        self.with(|m| m.calls.push(format!("{verb} {unit}")));
    }

    /// How many calls were `verb` (`"start"`, `"stop"`, ...) for `unit`.
    pub fn calls(&self, verb: &str, unit: &str) -> usize {
        let want = format!("{verb} {unit}");
        self.with(|m| m.calls.iter().filter(|c| **c == want).count())
    }

    /// Unit `unit` as it is now (`None`: not loaded).
    pub fn unit(&self, unit: &str) -> Option<UnitStatus> {
        self.with(|m| m.units.get(unit).cloned())
    }

    /// Sets what systemd says of `unit` (loads it if it was not).
    pub fn set(&self, unit: &str, status: UnitStatus) {
        self.with(|m| m.units.insert(unit.to_string(), status));
    }

    /// Unloads `unit` without a trace (a reboot, a garbage-collected unit).
    pub fn vanish(&self, unit: &str) {
        self.with(|m| m.units.remove(unit));
    }

    /// Ends running `unit` the way systemd reports such an end: `result`
    /// (`success`, `exit-code`, `signal`, `timeout`, `oom-kill`, ...),
    /// `ExecMainCode` (1 exited, 2 killed) and `ExecMainStatus`.
    pub fn end(&self, unit: &str, result: &str, code: i32, status: i32) {
        self.with(|m| {
            if let Some(u) = m.units.get_mut(unit) {
                let clean = result == "success";
                u.active_state = if clean { "active" } else { "failed" }.into();
                u.sub_state = if clean { "exited" } else { "failed" }.into();
                u.result = result.into();
                u.exec_main_code = code;
                u.exec_main_status = status;
                u.memory_peak = Some(1 << 20);
            }
        });
    }
}

impl Units for MemoryUnits {
    /// Recorded as `"time-limit unit secs"`; refused while `refuse_next_start` is set.
    async fn set_time_limit(&self, unit: &str, secs: u64) -> Result<()> {
        self.call(&format!("time-limit {secs}"), unit);
        self.wait_if_held().await;
        self.with(|m| match m.refuse_next_start.take() {
            Some(why) => Err(anyhow::anyhow!(why)),
            None => Ok(()),
        })
    }

    /// Recorded as `"forget-time-limit unit"`, for units given one only.
    fn forget_time_limit(&self, unit: &str) {
        let set = self.with(|m| {
            m.calls
                .iter()
                .any(|c| c.starts_with("time-limit ") && c.ends_with(&format!(" {unit}")))
        });
        if set {
            self.call("forget-time-limit", unit);
        }
    }

    async fn start(&self, unit: &str, props: &[(&str, Variant<'_>)]) -> zbus::Result<()> {
        self.call("start", unit);
        self.wait_if_held().await;
        self.with(|m| {
            if let Some(why) = m.refuse_next_start.take() {
                return Err(zbus::Error::Failure(why));
            }
            if m.units.contains_key(unit) {
                return Err(zbus::Error::Failure(format!(
                    "Unit {unit} was already loaded or has a fragment file."
                )));
            }
            m.starts += 1;
            m.started.insert(
                unit.to_string(),
                props.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            );
            let memory_max = props
                .iter()
                .find(|(k, _)| *k == "MemoryMax")
                .and_then(|(_, v)| u64::try_from(v).ok());
            m.units.insert(
                unit.to_string(),
                UnitStatus {
                    memory_max,
                    active_state: "active".into(),
                    sub_state: "running".into(),
                    result: "success".into(),
                    invocation_id: format!("{:032x}", m.starts),
                    ..Default::default()
                },
            );
            Ok(())
        })
    }

    async fn start_loaded(&self, unit: &str) -> zbus::Result<()> {
        self.call("start_loaded", unit);
        self.with(|m| match m.units.get_mut(unit) {
            Some(u) => {
                m.starts += 1;
                u.active_state = "active".into();
                u.sub_state = "running".into();
                u.invocation_id = format!("{:032x}", m.starts);
                Ok(())
            }
            None => Err(zbus::Error::Failure(format!("Unit {unit} not loaded."))),
        })
    }

    async fn stop(&self, unit: &str) -> zbus::Result<()> {
        self.call("stop", unit);
        self.with(|m| {
            if m.slow_stop.contains(unit) {
                if let Some(u) = m.units.get_mut(unit) {
                    u.active_state = "deactivating".into();
                    u.sub_state = "stop-sigterm".into();
                    return Ok(());
                }
            }
            // A stopped transient unit is unloaded.
            match m.units.remove(unit) {
                Some(_) => Ok(()),
                None => Err(zbus::Error::Failure(format!("Unit {unit} not loaded."))),
            }
        })
    }

    /// Recorded as `"kill-leftovers unit"`.
    async fn kill_leftovers(&self, unit: &str) -> bool {
        self.call("kill-leftovers", unit);
        true
    }

    async fn reset_failed(&self, unit: &str) {
        self.call("reset_failed", unit);
        self.with(|m| {
            if m.units.get(unit).is_some_and(UnitStatus::failed) {
                m.units.remove(unit);
            }
        });
    }

    async fn collect(&self, unit: &str, how: Collect) {
        self.call("collect", unit);
        if how.stop || how.reset_failed {
            self.with(|m| m.units.remove(unit));
        }
    }

    fn memory_peak_now(&self, _unit: &str) -> Option<u64> {
        None
    }

    async fn accounting(&self, unit: &str, mut status: UnitStatus) -> UnitStatus {
        self.call("accounting", unit);
        Self::wait_for(&self.held_accounting).await;
        status.cpu_nsec = Some(CPU_NSEC);
        status.memory_peak = self.unit(unit).and_then(|u| u.memory_peak);
        status
    }

    async fn list(&self, _pattern: &str) -> Result<Vec<String>> {
        self.call("list", "*");
        Ok(self.with(|m| m.units.keys().cloned().collect()))
    }

    async fn states(&self, _pattern: &str) -> Result<HashMap<String, (String, String, bool)>> {
        self.call("states", "*");
        Ok(self.with(|m| {
            m.units
                .iter()
                .map(|(n, u)| {
                    (
                        n.clone(),
                        (u.active_state.clone(), u.sub_state.clone(), u.pending_job),
                    )
                })
                .collect()
        }))
    }

    async fn status(&self, unit: &str) -> Result<Option<UnitStatus>> {
        self.call("status", unit);
        if self.with(|m| m.unreadable) {
            anyhow::bail!("reading {unit}: systemd is re-executing");
        }
        let mut u = self.unit(unit);
        if let Some(u) = u.as_mut().filter(|u| u.finished()) {
            u.cpu_nsec = Some(CPU_NSEC);
        }
        Ok(u)
    }
}

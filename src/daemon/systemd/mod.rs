//! The systemd manager as xlurmd uses it, over D-Bus (org.freedesktop.systemd1(5)).
//!
//! Small explicit calls: start a transient unit, stop it, read its status,
//! list job units, and reset a failed one after its result was recorded.

pub mod memory_nodes;
pub mod nodev_slice;
pub mod outcome;
mod signals;
pub mod tracker;
pub mod unit;
pub mod watch;

use self::outcome::{Collect, UnitStatus};
pub use self::signals::{job_signal, unit_of_path, unit_path, SystemdSender, SYSTEMD_NAME};
use crate::wire::dict::get;
use anyhow::{Context, Result};
use std::collections::HashMap;
use zbus::{Connection, OwnedObjectPath, OwnedVariant, Variant};

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
pub trait Manager {
    fn subscribe(&self) -> zbus::Result<()>;

    fn reload(&self) -> zbus::Result<()>;

    #[allow(clippy::type_complexity)]
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &[(&str, Variant<'_>)],
        aux: &[(&str, Vec<(&str, Variant<'_>)>)],
    ) -> zbus::Result<OwnedObjectPath>;

    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    #[zbus(name = "StartUnit")]
    fn start_unit_by_name(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    fn reset_failed_unit(&self, name: &str) -> zbus::Result<()>;

    fn kill_unit(&self, name: &str, whom: &str, signal: i32) -> zbus::Result<()>;

    fn get_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;

    fn set_unit_properties(
        &self,
        name: &str,
        runtime: bool,
        properties: &[(&str, Variant<'_>)],
    ) -> zbus::Result<()>;

    #[allow(clippy::type_complexity)]
    fn list_units_by_patterns(
        &self,
        states: &[&str],
        patterns: &[&str],
    ) -> zbus::Result<
        Vec<(
            String,
            String,
            String,
            String,
            String,
            String,
            OwnedObjectPath,
            u32,
            String,
            OwnedObjectPath,
        )>,
    >;

    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
}

/// The systemd manager on one bus.
#[derive(Clone)]
pub struct Systemd {
    conn: Connection,
    manager: ManagerProxy<'static>,
    /// The cgroup directory of the slice jobs run in (see `memory_peak_now`).
    job_cgroups: Option<std::path::PathBuf>,
    /// The cgroup directory of the nodev slice below it (jobs without
    /// accelerators: `daemon::systemd::nodev_slice`).
    nodev_cgroups: Option<std::path::PathBuf>,
    /// Whether units have `MemoryPeak` (systemd 256 and later): if not, it
    /// is not asked for (one call fewer per job).
    has_memory_peak: bool,
    /// The manager's `Version`, read once at connect.
    version: String,
    /// The manager's runtime unit directory (`/run/systemd/system`), where
    /// a running job's new time limit goes as a drop-in (see `set_time_limit`).
    runtime_units: Option<std::path::PathBuf>,
}

/// The drop-in that holds a running job's changed time limit, under the
/// manager's runtime unit directory.
pub fn time_limit_dropin(runtime_units: &std::path::Path, unit: &str) -> std::path::PathBuf {
    runtime_units.join(format!("{unit}.d")).join(DROPIN_NAME)
}

const DROPIN_NAME: &str = "50-xlurm-time-limit.conf";

/// The major number of systemd's `Version` property (`252.39-1~deb12u1`:
/// 252, `256.7`: 256); `None` when it has none.
pub fn major_version(version: &str) -> Option<u32> {
    let major: String = version.chars().take_while(char::is_ascii_digit).collect();
    major.parse().ok()
}

/// Whether systemd `version` has `MemoryPeak`; true when it cannot tell.
pub fn has_memory_peak(version: &str) -> bool {
    major_version(version).is_none_or(|v| v >= 256)
}

/// A u64 property, `None` for systemd's "unset" value `u64::MAX`.
fn get_u64(map: &HashMap<String, OwnedVariant>, key: &str) -> Option<u64> {
    get::<u64>(map, key).filter(|v| *v != u64::MAX)
}

/// The cgroup directory (under the cgroup2 mount `root`) of `slice`: systemd
/// nests a slice in the slices its name's dashes make (`a-b.slice` is
/// `a.slice/a-b.slice`).
pub fn slice_cgroup(root: &std::path::Path, slice: &str) -> std::path::PathBuf {
    let mut dir = root.to_path_buf();
    let Some(name) = slice.strip_suffix(".slice") else {
        return dir.join(slice);
    };
    let mut prefix = String::new();
    for part in name.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        dir.push(format!("{prefix}.slice"));
    }
    dir
}

/// How long [`Units::kill_leftovers`] waits for a job's cgroup to empty
/// after SIGKILL (the kernel takes microseconds, unless a process is stuck
/// in an uninterruptible wait).
pub const LEFTOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

const SIGKILL: i32 = 9;

/// Whether the cgroup at `dir` holds a process (`cgroup.events`: `populated
/// 1`); a cgroup gone holds none.
fn populated(dir: &std::path::Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .is_ok_and(|e| e.lines().any(|l| l.trim() == "populated 1"))
}

/// The memory peak (bytes) of the cgroup at `dir` so far, as systemd 256+
/// reports it (`MemoryPeak`); `None` if it cannot be read.
pub fn read_memory_peak(dir: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("memory.peak"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
}

/// Whether systemd refused a start because the unit exists already (ours,
/// when an earlier start reached it before the reply was lost).
pub fn unit_exists(e: &zbus::Error) -> bool {
    matches!(e, zbus::Error::MethodError(name, _, _)
        if name.as_str() == "org.freedesktop.systemd1.UnitExists")
}

/// What the daemon asks of systemd's manager. [`Systemd`] asks it over the
/// bus; tests give the daemon an in-memory double
/// (`crate::testing::memory_units`), so its handlers run without a bus.
pub trait Units: Send + Sync + 'static {
    /// Starts a transient unit; fails if systemd refuses the properties or
    /// the unit exists.
    fn start(
        &self,
        unit: &str,
        props: &[(&str, Variant<'_>)],
    ) -> impl std::future::Future<Output = zbus::Result<()>> + Send;
    /// Starts a loaded unit that never ran (its start job was lost).
    fn start_loaded(
        &self,
        unit: &str,
    ) -> impl std::future::Future<Output = zbus::Result<()>> + Send;
    /// Stops a unit (SIGTERM to its whole cgroup, then SIGKILL).
    fn stop(&self, unit: &str) -> impl std::future::Future<Output = zbus::Result<()>> + Send;
    /// Lets systemd forget a failed unit.
    fn reset_failed(&self, unit: &str) -> impl std::future::Future<Output = ()> + Send;
    /// Lets systemd forget a finished unit (see [`Collect`]).
    fn collect(&self, unit: &str, how: Collect) -> impl std::future::Future<Output = ()> + Send;
    /// A running unit's memory peak so far, from its cgroup.
    fn memory_peak_now(&self, unit: &str) -> Option<u64>;
    /// Kills what the job of ended `unit` left in its cgroup (a `setsid` or
    /// `&` child) and waits, at most [`LEFTOVER_WAIT`], until the cgroup is
    /// empty: the job's CPUs, memory and devices go to the next job only
    /// then. Whether it is empty (or not known to be otherwise).
    fn kill_leftovers(&self, unit: &str) -> impl std::future::Future<Output = bool> + Send;
    /// A finished unit's status completed with its CPU time and memory peak.
    fn accounting(
        &self,
        unit: &str,
        status: UnitStatus,
    ) -> impl std::future::Future<Output = UnitStatus> + Send;
    /// Names of loaded units matching `pattern`.
    fn list(&self, pattern: &str) -> impl std::future::Future<Output = Result<Vec<String>>> + Send;
    /// ActiveState, SubState and whether a job is queued, of each loaded unit
    /// matching `pattern`.
    fn states(
        &self,
        pattern: &str,
    ) -> impl std::future::Future<Output = Result<HashMap<String, (String, String, bool)>>> + Send;
    /// The status of `unit`; `None` when systemd has no such unit loaded.
    fn status(
        &self,
        unit: &str,
    ) -> impl std::future::Future<Output = Result<Option<UnitStatus>>> + Send;
    /// Gives running `unit` a new time limit (`RuntimeMaxUSec`, counted from
    /// its start).
    fn set_time_limit(
        &self,
        unit: &str,
        secs: u64,
    ) -> impl std::future::Future<Output = Result<()>> + Send;
    /// Forgets what `set_time_limit` left for `unit` (once it ended).
    fn forget_time_limit(&self, unit: &str);
}

impl Systemd {
    /// Connects to the manager on `conn` and subscribes to its signals.
    pub async fn connect(conn: &Connection) -> Result<Systemd> {
        let manager = ManagerProxy::new(conn)
            .await
            .context("creating the systemd manager proxy")?;
        manager
            .subscribe()
            .await
            .context("systemd manager unreachable (Subscribe failed)")?;
        let version = manager.version().await.unwrap_or_default();
        Ok(Systemd {
            conn: conn.clone(),
            manager,
            job_cgroups: None,
            nodev_cgroups: None,
            has_memory_peak: has_memory_peak(&version),
            version,
            runtime_units: None,
        })
    }

    /// Where the manager reads runtime drop-ins (`/run/systemd/system`, or
    /// `$XDG_RUNTIME_DIR/systemd/user` for a user manager).
    pub fn with_runtime_units(mut self, dir: Option<std::path::PathBuf>) -> Systemd {
        self.runtime_units = dir;
        self
    }

    /// Reads running units' memory peak under `dir`, the cgroup directory
    /// of their slice (see `memory_peak_now`).
    pub fn with_job_cgroups(mut self, dir: Option<std::path::PathBuf>) -> Systemd {
        self.nodev_cgroups = dir.as_ref().and_then(|d| {
            let slice = d.file_name()?.to_string_lossy();
            Some(d.join(crate::daemon::systemd::nodev_slice::nodev_slice(&slice)?))
        });
        self.job_cgroups = dir;
        self
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The cgroup directory of job unit `unit`, where it exists (in the
    /// nodev slice or the job slice); `None` where xlurmd reads no cgroups
    /// (a user manager's).
    fn cgroup_of(&self, unit: &str) -> Option<std::path::PathBuf> {
        let dir = self.job_cgroups.as_ref()?;
        let nodev = self.nodev_cgroups.as_ref().map(|d| d.join(unit));
        Some(
            nodev
                .filter(|d| d.exists())
                .unwrap_or_else(|| dir.join(unit)),
        )
    }

    /// The manager's `Version` as read at connect (empty if it gave none).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The manager's runtime unit directory (`/run/systemd/system`), where
    /// runtime drop-ins go; `None` when it is not known.
    pub fn runtime_units(&self) -> Option<&std::path::Path> {
        self.runtime_units.as_deref()
    }

    /// The names of the loaded units that match `pattern` (`user-*.slice`).
    pub async fn unit_names(&self, pattern: &str) -> Result<Vec<String>> {
        let units = self
            .manager
            .list_units_by_patterns(&[], &[pattern])
            .await
            .with_context(|| format!("listing the units {pattern}"))?;
        Ok(units.into_iter().map(|u| u.0).collect())
    }

    /// Sets `props` on `unit` for this boot (`SetUnitProperties`, runtime).
    pub async fn set_runtime_properties(
        &self,
        unit: &str,
        props: &[(&str, Variant<'_>)],
    ) -> Result<()> {
        self.manager
            .set_unit_properties(unit, true, props)
            .await
            .with_context(|| format!("setting properties of {unit}"))
    }

    /// Property `name` of `interface` on `unit`'s object. systemd loads a
    /// unit that is asked for by its path, so this reads a slice with no
    /// units in it too.
    pub async fn property<T>(&self, unit: &str, interface: &str, name: &str) -> Result<T>
    where
        T: TryFrom<OwnedVariant>,
        T::Error: Into<zbus::Error>,
    {
        let reply = self
            .conn
            .call_method(
                Some("org.freedesktop.systemd1"),
                unit_path(unit).as_str(),
                Some("org.freedesktop.DBus.Properties"),
                "Get",
                &(interface, name),
            )
            .await
            .with_context(|| format!("reading {name} of {unit}"))?;
        let v: OwnedVariant = reply
            .body()
            .deserialize()
            .with_context(|| format!("reading {name} of {unit}"))?;
        T::try_from(v)
            .map_err(Into::into)
            .with_context(|| format!("reading {name} of {unit}: not the type systemd documents"))
    }

    /// Reloads the manager (`daemon-reload`): it reads drop-ins anew.
    pub async fn reload(&self) -> Result<()> {
        self.manager
            .reload()
            .await
            .context("reloading systemd's manager")
    }
}

impl Units for Systemd {
    /// systemd cannot change `RuntimeMaxUSec` of a live service over the bus
    /// (SetUnitProperties refuses it, systemd 252 to 257): a runtime drop-in
    /// and a reload of the manager do, which re-arms the unit's timer from
    /// its start (proven in VM scenario 15). A reload takes PID 1 about a
    /// second under emulation: this is for the rare `xlurm update`, never
    /// for each job.
    async fn set_time_limit(&self, unit: &str, secs: u64) -> Result<()> {
        let dir = self
            .runtime_units
            .as_ref()
            .context("the manager's runtime unit directory is not known")?;
        let path = time_limit_dropin(dir, unit);
        let parent = path.parent().unwrap_or(dir);
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
        let text = format!(
            "# xlurm update: the job's time limit, changed while it runs (removed when it ends)\n\
             [Service]\nRuntimeMaxSec={secs}\n"
        );
        crate::daemon::store::write_atomic(parent, DROPIN_NAME, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        self.manager
            .reload()
            .await
            .context("reloading systemd's manager")?;
        Ok(())
    }

    fn forget_time_limit(&self, unit: &str) {
        if let Some(dir) = &self.runtime_units {
            let path = time_limit_dropin(dir, unit);
            if std::fs::remove_file(&path).is_ok() {
                if let Some(parent) = path.parent() {
                    let _ = std::fs::remove_dir(parent);
                }
            }
        }
    }

    /// Starts `unit` with `props`; fails if systemd refuses the properties or
    /// the unit exists.
    async fn start(&self, unit: &str, props: &[(&str, Variant<'_>)]) -> zbus::Result<()> {
        self.manager
            .start_transient_unit(unit, "fail", props, &[])
            .await
            .map(|_| ())
    }

    /// Starts a loaded unit that has not run (a transient unit whose start job
    /// was lost when systemd re-executed).
    async fn start_loaded(&self, unit: &str) -> zbus::Result<()> {
        self.manager
            .start_unit_by_name(unit, "fail")
            .await
            .map(|_| ())
    }

    /// Asks systemd to stop `unit` (SIGTERM to its whole cgroup, then SIGKILL).
    async fn stop(&self, unit: &str) -> zbus::Result<()> {
        self.manager.stop_unit(unit, "replace").await.map(|_| ())
    }

    /// SIGKILL to every process left in the cgroup of ended `unit` (its
    /// main process is gone: what is left is not the job's to keep), read
    /// from the cgroup itself (`cgroup.events`): no call to systemd at all
    /// when nothing is left, the usual case. The unit stays as it is
    /// (`RemainAfterExit`): it still holds the job's end.
    async fn kill_leftovers(&self, unit: &str) -> bool {
        let Some(dir) = self.cgroup_of(unit) else {
            // A user manager's cgroups are not read here: ask systemd.
            let _ = self.manager.kill_unit(unit, "all", SIGKILL).await;
            return true;
        };
        if !populated(&dir) {
            return true;
        }
        if let Err(e) = self.manager.kill_unit(unit, "all", SIGKILL).await {
            tracing::warn!("killing what {unit} left behind: {e}");
        }
        let end = std::time::Instant::now() + LEFTOVER_WAIT;
        while populated(&dir) {
            if std::time::Instant::now() >= end {
                tracing::warn!(
                    "{unit}: processes left after SIGKILL for {} ms (in the kernel: D state?)",
                    LEFTOVER_WAIT.as_millis()
                );
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        true
    }

    /// Lets systemd forget a failed unit after its result was recorded.
    async fn reset_failed(&self, unit: &str) {
        let _ = self.manager.reset_failed_unit(unit).await;
    }

    /// Lets systemd forget a finished unit, after its result was recorded
    /// (see [`Collect`] for what that takes).
    async fn collect(&self, unit: &str, how: Collect) {
        if how.stop {
            let _ = self.manager.stop_unit(unit, "replace").await;
        }
        if how.reset_failed {
            self.reset_failed(unit).await;
        }
    }

    /// The memory peak of running `unit` so far, read from its cgroup
    /// (`memory.peak`; systemd removes the cgroup as soon as the job's
    /// processes are gone, and only systemd 256 and later keep the figure as
    /// `MemoryPeak`). `None` if it cannot be read.
    /// A job without accelerators runs in the nodev slice below the job
    /// slice (`daemon::systemd::nodev_slice`), the others in the job slice itself.
    fn memory_peak_now(&self, unit: &str) -> Option<u64> {
        let dir = self.job_cgroups.as_ref()?;
        self.nodev_cgroups
            .as_ref()
            .and_then(|d| read_memory_peak(&d.join(unit)))
            .or_else(|| read_memory_peak(&dir.join(unit)))
    }

    /// Completes a finished unit's status from signals with what systemd does
    /// not signal: CPU time and memory peak (small reads, not `GetAll`; the
    /// peak only where systemd has it). Either may stay unknown; the job's end
    /// is known already.
    async fn accounting(&self, unit: &str, mut status: UnitStatus) -> UnitStatus {
        let service = "org.freedesktop.systemd1.Service";
        let read = |name: &'static str| async move {
            self.property::<u64>(unit, service, name)
                .await
                .ok()
                .filter(|v| *v != u64::MAX)
        };
        let (cpu, peak) = tokio::join!(read("CPUUsageNSec"), async {
            if self.has_memory_peak {
                read("MemoryPeak").await
            } else {
                None
            }
        });
        status.cpu_nsec = cpu;
        status.memory_peak = peak;
        status
    }

    /// Names of loaded units matching `pattern`.
    async fn list(&self, pattern: &str) -> Result<Vec<String>> {
        let units = self
            .manager
            .list_units_by_patterns(&[], &[pattern])
            .await
            .context("listing job units")?;
        Ok(units.into_iter().map(|u| u.0).collect())
    }

    /// ActiveState, SubState and whether a job is queued, of each loaded
    /// unit matching `pattern`, by name: one call for all of them.
    async fn states(&self, pattern: &str) -> Result<HashMap<String, (String, String, bool)>> {
        let units = self
            .manager
            .list_units_by_patterns(&[], &[pattern])
            .await
            .context("listing job units")?;
        Ok(units
            .into_iter()
            .map(|u| (u.0, (u.3, u.4, u.7 != 0)))
            .collect())
    }

    /// The status of `unit`, or `None` when systemd has no such unit loaded.
    async fn status(&self, unit: &str) -> Result<Option<UnitStatus>> {
        // Only "no such unit" means gone; any other error (systemd re-executing,
        // the bus busy) is an error, so the job is looked at again later.
        match self.manager.get_unit(unit).await {
            Ok(_) => {}
            Err(zbus::Error::MethodError(name, _, _))
                if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit" =>
            {
                return Ok(None)
            }
            Err(e) => return Err(anyhow::anyhow!("GetUnit({unit}): {e}")),
        }
        let path = unit_path(unit);
        let props = zbus::fdo::PropertiesProxy::builder(&self.conn)
            .destination("org.freedesktop.systemd1")
            .path(path.as_str())
            .build()
            .await?;
        let unit_iface = zbus::names::InterfaceName::try_from("org.freedesktop.systemd1.Unit")?;
        let service_iface =
            zbus::names::InterfaceName::try_from("org.freedesktop.systemd1.Service")?;
        let u = match props.get_all(unit_iface).await {
            Ok(u) => u,
            Err(e) => return Err(anyhow::anyhow!("reading {unit}: {e}")),
        };
        let s = props
            .get_all(service_iface)
            .await
            .map_err(|e| anyhow::anyhow!("reading {unit}'s service properties: {e}"))?;
        let invocation: Vec<u8> = get(&u, "InvocationID").unwrap_or_default();
        Ok(Some(UnitStatus {
            active_state: get(&u, "ActiveState").unwrap_or_default(),
            sub_state: get(&u, "SubState").unwrap_or_default(),
            result: get(&s, "Result").unwrap_or_default(),
            exec_main_code: get(&s, "ExecMainCode").unwrap_or(0),
            exec_main_status: get(&s, "ExecMainStatus").unwrap_or(0),
            memory_peak: get_u64(&s, "MemoryPeak"),
            memory_max: get_u64(&s, "MemoryMax"),
            cpu_nsec: get_u64(&s, "CPUUsageNSec"),
            invocation_id: invocation.iter().map(|b| format!("{b:02x}")).collect(),
            pending_job: get::<(u32, OwnedObjectPath)>(&u, "Job").is_some_and(|(id, _)| id != 0),
        }))
    }
}

#[cfg(test)]
mod tests;

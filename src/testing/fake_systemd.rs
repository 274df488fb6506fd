//! A systemd manager double: `StartTransientUnit` and friends on a private bus.
//!
//! In `Mode::Run` a unit runs its `ExecStart` as a child process (no user
//! switch, no cgroups: nothing is enforced) and reports its exit through
//! `PropertiesChanged` as systemd does with `RemainAfterExit=yes`: at every
//! change one signal for the Service interface (`Result`, `ExecMain*`), then
//! one for the Unit interface (`ActiveState`, `SubState`, `InvocationID`,
//! `Job`), each with all of those properties. In
//! `Mode::Instant` a unit becomes active at once and runs until stopped
//! (for benchmarks of xlurmd's own cost), or, with `Shared::exit_at_once`,
//! exits 0 right after it started.

mod objects;

pub use objects::{ServiceObj, SliceObj, SliceUnitObj, UnitObj};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use zbus::{Connection, OwnedObjectPath, OwnedVariant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Run,
    Instant,
}

/// What the double saw of one unit.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub name: String,
    pub properties: HashMap<String, OwnedVariant>,
}

#[derive(Default)]
pub struct Shared {
    pub started: Vec<Recorded>,
    pub stopped: Vec<String>,
    units: BTreeMap<String, u32>,
    /// Timestamps (monotonic) of each StartTransientUnit call.
    pub start_times: Vec<std::time::Instant>,
    /// How many of the next StartTransientUnit calls succeed but leave no
    /// unit behind, as when systemd loses the start job of a new transient
    /// unit in a daemon-reexec and then garbage-collects the unit.
    pub lose_starts: usize,
    /// GetUnit calls per unit name: how often xlurmd read a unit whole.
    pub get_unit_calls: HashMap<String, usize>,
    /// How long StartTransientUnit takes before the unit exists (systemd
    /// busy, or re-executing).
    pub start_delay: std::time::Duration,
    /// Units exit 0 as soon as they have started (in `Mode::Instant`; for
    /// throughput benchmarks).
    pub exit_at_once: bool,
    /// Report no memory peak, as systemd before 256 (no `MemoryPeak`).
    pub no_memory_peak: bool,
    /// Every SetUnitProperties call: the unit, whether runtime, the properties.
    pub set_properties: Vec<(String, bool, HashMap<String, OwnedVariant>)>,
    /// SetUnitProperties fails (access denied), as a manager may.
    pub refuse_set_properties: bool,
    /// A drop-in of slices' device policy that wins over runtime
    /// properties (as one in `/etc/systemd/system.control` does): its path,
    /// DevicePolicy and DeviceAllow.
    pub slice_drop_in: Option<SliceDropIn>,
}

/// A drop-in of a slice's device policy (see `Shared::slice_drop_in`).
#[derive(Debug, Clone)]
pub struct SliceDropIn {
    pub path: String,
    pub policy: String,
    pub allow: Vec<(String, String)>,
}

impl Shared {
    /// Property `name` of `unit` as last set by SetUnitProperties.
    fn last_set(&self, unit: &str, name: &str) -> Option<OwnedVariant> {
        self.set_properties
            .iter()
            .rev()
            .filter(|(u, _, _)| u == unit)
            .find_map(|(_, _, p)| p.get(name)?.try_clone().ok())
    }
}

#[derive(Clone)]
pub struct FakeSystemd {
    pub shared: Arc<Mutex<Shared>>,
    mode: Mode,
    conn: Connection,
    /// Held while a unit's state changes and while its two signals are
    /// built and sent: systemd sends each pair from one consistent state. A
    /// start's signals (sent from a task after the reply) read half before
    /// and half after a test's `finish` otherwise: a "finished" Unit signal
    /// after a Service signal without the exit (seen as a flaky CANCELLED).
    emit: Arc<tokio::sync::Mutex<()>>,
}

struct Manager {
    fake: FakeSystemd,
}

/// systemd's own error names, as the real manager replies them.
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.systemd1")]
pub enum SdError {
    #[zbus(error)]
    ZBus(zbus::Error),
    NoSuchUnit(String),
    Failed(String),
}

/// The InvocationID the double gives the `serial`th unit it started.
pub fn invocation_of(serial: u32) -> Vec<u8> {
    let mut invocation = vec![0u8; 16];
    invocation[..4].copy_from_slice(&serial.to_le_bytes());
    invocation
}

fn no_such_unit(name: &str) -> SdError {
    SdError::NoSuchUnit(format!("Unit {name} not loaded."))
}

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl Manager {
    fn subscribe(&self) {}

    #[zbus(property)]
    fn version(&self) -> String {
        "fake".into()
    }

    async fn start_transient_unit(
        &self,
        name: String,
        _mode: String,
        properties: Vec<(String, OwnedVariant)>,
        _aux: Vec<(String, Vec<(String, OwnedVariant)>)>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        self.fake.start(name, properties).await
    }

    async fn stop_unit(&self, name: String, _mode: String) -> Result<OwnedObjectPath, SdError> {
        self.fake.stop(&name).await?;
        OwnedObjectPath::try_from("/org/freedesktop/systemd1/job/1")
            .map_err(|e| SdError::Failed(e.to_string()))
    }

    async fn set_unit_properties(
        &self,
        name: String,
        runtime: bool,
        properties: Vec<(String, OwnedVariant)>,
    ) -> zbus::fdo::Result<()> {
        {
            let mut shared = self
                .fake
                .shared
                .lock()
                .map_err(|_| zbus::fdo::Error::Failed("poisoned".into()))?;
            if shared.refuse_set_properties {
                return Err(zbus::fdo::Error::AccessDenied(
                    "Access denied (the double refuses SetUnitProperties)".into(),
                ));
            }
            // Later values of a name win, as systemd applies them in order.
            shared
                .set_properties
                .push((name.clone(), runtime, properties.into_iter().collect()));
        }
        // A slice is an object from then on, to read its policy back.
        if name.ends_with(".slice") {
            let path = crate::daemon::systemd::unit_path(&name);
            let server = self.fake.conn.object_server();
            let shared = self.fake.shared.clone();
            let slice = SliceObj {
                shared: shared.clone(),
                name,
            };
            // Already there after the first call: that is fine.
            let _ = server.at(path.as_str(), slice).await;
            let _ = server.at(path.as_str(), SliceUnitObj { shared }).await;
        }
        Ok(())
    }

    async fn reset_failed_unit(&self, name: String) -> zbus::fdo::Result<()> {
        self.fake.remove(&name).await;
        Ok(())
    }

    fn get_unit(&self, name: String) -> Result<OwnedObjectPath, SdError> {
        let mut shared = self
            .fake
            .shared
            .lock()
            .map_err(|_| SdError::Failed("poisoned".into()))?;
        *shared.get_unit_calls.entry(name.clone()).or_default() += 1;
        if shared.units.contains_key(&name) {
            OwnedObjectPath::try_from(crate::daemon::systemd::unit_path(&name))
                .map_err(|e| SdError::Failed(e.to_string()))
        } else {
            Err(no_such_unit(&name))
        }
    }

    #[allow(clippy::type_complexity)]
    async fn list_units_by_patterns(
        &self,
        _states: Vec<String>,
        _patterns: Vec<String>,
    ) -> Vec<(
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
    )> {
        let names: Vec<String> = match self.fake.shared.lock() {
            Ok(s) => s.units.keys().cloned().collect(),
            Err(_) => return Vec::new(),
        };
        let server = self.fake.conn.object_server();
        let mut out = Vec::new();
        for n in names {
            let path = crate::daemon::systemd::unit_path(&n);
            let (active, sub) = match server.interface::<_, UnitObj>(path.as_str()).await {
                Ok(iface) => {
                    let u = iface.get().await;
                    (u.active_state.clone(), u.sub_state.clone())
                }
                Err(_) => continue,
            };
            let (Ok(p), Ok(root)) = (
                OwnedObjectPath::try_from(path),
                OwnedObjectPath::try_from("/"),
            ) else {
                continue;
            };
            out.push((
                n,
                String::new(),
                "loaded".into(),
                active,
                sub,
                String::new(),
                p,
                0,
                String::new(),
                root,
            ));
        }
        out
    }
}

impl FakeSystemd {
    /// Serves the double on `conn` as `org.freedesktop.systemd1`.
    pub async fn serve(conn: &Connection, mode: Mode) -> anyhow::Result<FakeSystemd> {
        let fake = FakeSystemd {
            shared: Arc::default(),
            mode,
            conn: conn.clone(),
            emit: Arc::default(),
        };
        conn.object_server()
            .at("/org/freedesktop/systemd1", Manager { fake: fake.clone() })
            .await?;
        conn.request_name("org.freedesktop.systemd1").await?;
        Ok(fake)
    }

    async fn start(
        &self,
        name: String,
        properties: Vec<(String, OwnedVariant)>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        let fail = |e: String| zbus::fdo::Error::Failed(e);
        let delay = self
            .shared
            .lock()
            .map(|s| s.start_delay)
            .unwrap_or_default();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let props: HashMap<String, OwnedVariant> = properties.into_iter().collect();
        let serial = {
            let mut shared = self.shared.lock().map_err(|_| fail("poisoned".into()))?;
            if shared.units.contains_key(&name) {
                return Err(zbus::fdo::Error::Failed(format!(
                    "Unit {name} was already loaded or has a fragment file."
                )));
            }
            let serial = shared.started.len() as u32 + 1;
            shared.start_times.push(std::time::Instant::now());
            shared.started.push(Recorded {
                name: name.clone(),
                properties: props.clone(),
            });
            if shared.lose_starts > 0 {
                shared.lose_starts -= 1;
                return OwnedObjectPath::try_from("/org/freedesktop/systemd1/job/1")
                    .map_err(|e| fail(e.to_string()));
            }
            shared.units.insert(name.clone(), serial);
            serial
        };
        let path = crate::daemon::systemd::unit_path(&name);
        let memory_max = props
            .get("MemoryMax")
            .and_then(|v| u64::try_from(v).ok())
            .unwrap_or(u64::MAX);
        let server = self.conn.object_server();
        server
            .at(
                path.as_str(),
                UnitObj {
                    active_state: "active".into(),
                    sub_state: "running".into(),
                    invocation: invocation_of(serial),
                },
            )
            .await
            .map_err(|e| fail(e.to_string()))?;
        server
            .at(
                path.as_str(),
                ServiceObj {
                    result: "success".into(),
                    exec_main_code: 0,
                    exec_main_status: 0,
                    memory_max,
                    memory_peak: u64::MAX,
                    cpu_usage_nsec: u64::MAX,
                },
            )
            .await
            .map_err(|e| fail(e.to_string()))?;
        // Sent after the reply, as systemd does (it runs queued jobs after
        // answering calls).
        let me = self.clone();
        let unit = name.clone();
        let exit = self.shared.lock().is_ok_and(|s| s.exit_at_once);
        tokio::spawn(async move {
            me.signal(&unit).await;
            if exit {
                me.finish(&unit, 0).await;
            }
        });
        if self.mode == Mode::Run {
            // systemd turns `$$` into `$` when it runs the command.
            let argv: Vec<(String, Vec<String>, bool)> = props
                .get("ExecStart")
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| Vec::<(String, Vec<String>, bool)>::try_from(v).ok())
                .map(|v| {
                    v.into_iter()
                        .map(|(p, a, f)| (p, a.iter().map(|s| s.replace("$$", "$")).collect(), f))
                        .collect()
                })
                .unwrap_or_default();
            let env: Vec<String> = props
                .get("Environment")
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| Vec::<String>::try_from(v).ok())
                .unwrap_or_default();
            let runtime = props
                .get("RuntimeMaxUSec")
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or(u64::MAX);
            let me = self.clone();
            let unit = name.clone();
            tokio::spawn(async move { me.run(unit, argv, env, runtime).await });
        }
        OwnedObjectPath::try_from("/org/freedesktop/systemd1/job/1")
            .map_err(|e| fail(e.to_string()))
    }

    async fn run(
        &self,
        unit: String,
        argv: Vec<(String, Vec<String>, bool)>,
        env: Vec<String>,
        runtime_usec: u64,
    ) {
        let Some((path, args, _)) = argv.into_iter().next() else {
            return;
        };
        let mut cmd = tokio::process::Command::new(&path);
        cmd.args(args.iter().skip(1));
        cmd.env_clear();
        cmd.env("PATH", "/usr/local/bin:/usr/bin:/bin");
        for kv in env {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .stdin(std::process::Stdio::null());
        cmd.kill_on_drop(true);
        let (result, code, status) = match cmd.spawn() {
            Err(_) => ("exit-code", 1, 203),
            Ok(mut child) => {
                let limit = std::time::Duration::from_micros(
                    runtime_usec.min(10 * 365 * 86_400 * 1_000_000),
                );
                match tokio::time::timeout(limit, child.wait()).await {
                    Err(_) => {
                        let _ = child.kill().await;
                        ("timeout", 2, 15)
                    }
                    Ok(Ok(st)) => {
                        use std::os::unix::process::ExitStatusExt;
                        match (st.code(), st.signal()) {
                            (Some(0), _) => ("success", 1, 0),
                            (Some(c), _) => ("exit-code", 1, c),
                            (None, Some(sig)) => ("signal", 2, sig),
                            _ => ("exit-code", 1, 1),
                        }
                    }
                    Ok(Err(_)) => ("exit-code", 1, 1),
                }
            }
        };
        let (active, sub) = if result == "success" {
            ("active", "exited")
        } else {
            ("failed", "failed")
        };
        self.set_state(&unit, active, sub, Some((result, code, status)))
            .await;
    }

    async fn set_state(&self, unit: &str, active: &str, sub: &str, exit: Option<(&str, i32, i32)>) {
        let _one_state = self.emit.lock().await;
        let path = crate::daemon::systemd::unit_path(unit);
        let server = self.conn.object_server();
        if let Some((result, code, status)) = exit {
            if let Ok(iface) = server.interface::<_, ServiceObj>(path.as_str()).await {
                let mut s = iface.get_mut().await;
                s.result = result.into();
                s.exec_main_code = code;
                s.exec_main_status = status;
                // Fixed figures: the double measures nothing.
                if !self.shared.lock().is_ok_and(|sh| sh.no_memory_peak) {
                    s.memory_peak = 1 << 20;
                }
                s.cpu_usage_nsec = 1_000_000;
            }
        }
        if let Ok(iface) = server.interface::<_, UnitObj>(path.as_str()).await {
            let mut u = iface.get_mut().await;
            u.active_state = active.into();
            u.sub_state = sub.into();
        }
        self.send_signals(unit).await;
    }

    /// Sends `unit`'s two PropertiesChanged signals, Service then Unit.
    async fn signal(&self, unit: &str) {
        let _one_state = self.emit.lock().await;
        self.send_signals(unit).await;
    }

    /// `signal`, with `emit` held by the caller.
    async fn send_signals(&self, unit: &str) {
        let path = crate::daemon::systemd::unit_path(unit);
        let server = self.conn.object_server();
        let service = match server.interface::<_, ServiceObj>(path.as_str()).await {
            Ok(iface) => {
                let s = iface.get().await;
                HashMap::from([
                    ("Result", zbus::Variant::from(s.result.clone())),
                    ("ExecMainCode", zbus::Variant::from(s.exec_main_code)),
                    ("ExecMainStatus", zbus::Variant::from(s.exec_main_status)),
                ])
            }
            Err(_) => return,
        };
        let unit_props = match server.interface::<_, UnitObj>(path.as_str()).await {
            Ok(iface) => {
                let u = iface.get().await;
                let root = zbus::ObjectPath::from_static_str_unchecked("/");
                HashMap::from([
                    ("ActiveState", zbus::Variant::from(u.active_state.clone())),
                    ("SubState", zbus::Variant::from(u.sub_state.clone())),
                    ("InvocationID", zbus::Variant::from(u.invocation.clone())),
                    ("Job", zbus::Variant::from((0u32, root))),
                ])
            }
            Err(_) => return,
        };
        for (iface, props) in [
            ("org.freedesktop.systemd1.Service", service),
            ("org.freedesktop.systemd1.Unit", unit_props),
        ] {
            let _ = self
                .conn
                .emit_signal(
                    None::<()>,
                    path.as_str(),
                    "org.freedesktop.DBus.Properties",
                    "PropertiesChanged",
                    &(iface, props, Vec::<&str>::new()),
                )
                .await;
        }
    }

    async fn stop(&self, name: &str) -> Result<(), SdError> {
        {
            let mut shared = self
                .shared
                .lock()
                .map_err(|_| SdError::Failed("poisoned".into()))?;
            if !shared.units.contains_key(name) {
                return Err(no_such_unit(name));
            }
            shared.stopped.push(name.to_string());
        }
        // Stopping a running unit ends it by SIGTERM; systemd then unloads it.
        self.remove(name).await;
        Ok(())
    }

    async fn remove(&self, name: &str) {
        let path = crate::daemon::systemd::unit_path(name);
        if let Ok(mut shared) = self.shared.lock() {
            shared.units.remove(name);
        }
        let server = self.conn.object_server();
        let _ = server.remove::<UnitObj, _>(path.as_str()).await;
        let _ = server.remove::<ServiceObj, _>(path.as_str()).await;
    }

    /// Ends a running unit as if its process exited with `status` (Instant mode).
    pub async fn finish(&self, name: &str, status: i32) {
        let (result, active, sub) = if status == 0 {
            ("success", "active", "exited")
        } else {
            ("exit-code", "failed", "failed")
        };
        self.set_state(name, active, sub, Some((result, 1, status)))
            .await;
    }

    /// Whether xlurmd asked the double to stop `unit`.
    pub fn was_stopped(&self, unit: &str) -> bool {
        self.shared
            .lock()
            .is_ok_and(|s| s.stopped.iter().any(|u| u == unit))
    }

    /// Whether systemd (the double) still has `unit` loaded.
    pub fn is_loaded(&self, unit: &str) -> bool {
        self.shared.lock().is_ok_and(|s| s.units.contains_key(unit))
    }

    /// Forgets a unit without a trace, as a reboot would.
    pub async fn vanish(&self, name: &str) {
        self.remove(name).await;
    }
}

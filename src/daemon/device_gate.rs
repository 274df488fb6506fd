//! The accelerator gate: with it on, processes outside xlurm jobs (login
//! sessions and user services in `user.slice`; services, cron jobs and
//! containers in `system.slice`) cannot open the machine's accelerators,
//! while each job still opens exactly its own (its unit's
//! `DevicePolicy=closed` + `DeviceAllow`, in `xlurm.slice`; a job without
//! accelerators none, closed by `xlurm-nodev.slice`).
//!
//! systemd's own means: a runtime drop-in for every user slice
//! (`user-.slice.d/`, which covers each `user-UID.slice`) and for
//! `system.slice`, with `DevicePolicy=closed` and an allow-list of every
//! device driver the kernel has registered (`/proc/devices`) except the
//! accelerators' majors. The device cgroup has no deny rule (systemd #19222),
//! so the list names what stays allowed: terminals (`pts`, `tty`), `/dev/null`
//! and friends (`mem`), `fuse` and the rest of `misc`, block devices... A
//! same-named drop-in in `user-0.slice.d/` puts root's sessions back to
//! `DevicePolicy=auto` (all devices), so `nvidia-smi` as root keeps working.
//!
//! A slice's device policy binds everything below it, so what must reach the
//! accelerators outside jobs runs in [`SLICE`] (`accel.slice`, beside
//! `system.slice`): xlurmd itself (its unit says so; it polls the devices) and
//! the vendors' daemons named by `--gate-exempt` (nvidia-persistenced,
//! DCGM...), moved there by a drop-in from their next start.
//!
//! The drop-ins live in `/run` and are written again by xlurmd at every start
//! from the setting it keeps in its state directory; a driver loaded later is
//! allowed from the next `xlurm gate on` or xlurmd start.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The drop-ins' file name.
pub const DROPIN: &str = "50-xlurm-gate.conf";
/// The slice outside the gate: xlurmd and the services of `--gate-exempt`.
pub const SLICE: &str = "accel.slice";
/// The slices the gate closes (`user-.slice` stands for every user's).
pub const CLOSED: [&str; 2] = ["user-.slice", "system.slice"];
/// The setting's file in the state directory: `on` or `off`.
pub const STATE_FILE: &str = "gate";

/// A character or block driver of `/proc/devices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Driver {
    pub block: bool,
    pub major: u32,
    pub name: String,
}

/// The drivers listed in `/proc/devices` (`text`).
pub fn parse_proc_devices(text: &str) -> Vec<Driver> {
    let mut block = false;
    let mut out = Vec::new();
    for line in text.lines() {
        match line.trim() {
            "Character devices:" => block = false,
            "Block devices:" => block = true,
            l => {
                let mut parts = l.split_whitespace();
                if let (Some(major), Some(name), None) = (parts.next(), parts.next(), parts.next())
                {
                    if let Ok(major) = major.parse() {
                        out.push(Driver {
                            block,
                            major,
                            name: name.to_string(),
                        });
                    }
                }
            }
        }
    }
    out
}

/// `DeviceAllow=` entries for every driver of `drivers` except the
/// character majors in `accel`: `char-NAME rwm` (a name shared with an
/// accelerator's major is left out whole: systemd resolves a name to all of
/// its majors) and `block-NAME rwm`. Names systemd would read as a pattern are
/// left out too.
pub fn allow_list(drivers: &[Driver], accel: &BTreeSet<u32>) -> Vec<String> {
    let tainted: BTreeSet<&str> = drivers
        .iter()
        .filter(|d| !d.block && accel.contains(&d.major))
        .map(|d| d.name.as_str())
        .collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for d in drivers {
        let kind = if d.block { "block" } else { "char" };
        let plain = !d.name.contains(['*', '?', '[', ']', '\\']);
        if (!d.block && tainted.contains(d.name.as_str())) || !plain {
            continue;
        }
        if seen.insert((d.block, d.name.clone())) {
            out.push(format!("{kind}-{} rwm", d.name));
        }
    }
    out
}

/// The drop-in for every closed slice while the gate is on.
pub fn closed_dropin(allow: &[String]) -> String {
    let mut text = String::from(
        "# Written by xlurmd: the accelerator gate is on (xlurm gate off removes it).\n\
         # Every device driver but the accelerators' (see docs/gate.md).\n\
         [Slice]\nDevicePolicy=closed\nDeviceAllow=\n",
    );
    for a in allow {
        text.push_str("DeviceAllow=");
        text.push_str(a);
        text.push('\n');
    }
    text
}

/// root's sessions: every device, as without the gate.
pub const ROOT_DROPIN: &str = "# Written by xlurmd: root passes the accelerator gate.\n\
    [Slice]\nDevicePolicy=auto\nDeviceAllow=\n";

/// A service of `--gate-exempt`: moved out of `system.slice`.
pub fn exempt_dropin() -> String {
    format!(
        "# Written by xlurmd: this service passes the accelerator gate (--gate-exempt).\n\
         [Service]\nSlice={SLICE}\n"
    )
}

/// The gate's drop-ins while it is on, under the manager's runtime unit
/// directory: the closed slices (`system.slice` only when `system`), root's
/// slice, and each service of `exempt`.
pub fn dropins(
    runtime_units: &Path,
    allow: &[String],
    system: bool,
    exempt: &[String],
) -> Vec<(PathBuf, String)> {
    let at = |unit: &str| runtime_units.join(format!("{unit}.d")).join(DROPIN);
    let closed = closed_dropin(allow);
    let mut out = vec![(at("user-.slice"), closed.clone())];
    if system {
        out.push((at("system.slice"), closed));
    }
    out.push((at("user-0.slice"), ROOT_DROPIN.to_string()));
    for unit in exempt {
        out.push((at(unit), exempt_dropin()));
    }
    out
}

/// The gate's drop-ins there are under `runtime_units` (`*.d/DROPIN`).
pub fn existing_dropins(runtime_units: &Path) -> Vec<PathBuf> {
    let Ok(dirs) = std::fs::read_dir(runtime_units) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = dirs
        .flatten()
        .map(|d| d.path().join(DROPIN))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

/// Whether the drop-ins at `paths` are exactly `wanted`, text and all.
fn same_dropins(paths: &[PathBuf], wanted: &[(PathBuf, String)]) -> bool {
    paths.len() == wanted.len()
        && wanted.iter().all(|(p, text)| {
            paths.contains(p) && std::fs::read_to_string(p).is_ok_and(|t| &t == text)
        })
}

/// Checks `--gate-exempt`: service names, comma-separated (empty: none).
pub fn parse_exempt(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let stem = name.strip_suffix(".service").unwrap_or("");
        let ok = !stem.is_empty()
            && name.len() <= 255
            && stem
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ":_.-@\\".contains(c));
        if !ok {
            return Err(format!(
                "{name:?} is not a service's name (give NAME.service, comma-separated)"
            ));
        }
        if name == "xlurmd.service" {
            return Err("xlurmd.service is outside the gate already (Slice=accel.slice)".into());
        }
        out.push(name.to_string());
    }
    Ok(out)
}

/// Whether a process in `cgroup` (the `0::` line of `/proc/PID/cgroup`) is
/// inside `system.slice`, which the gate closes.
pub fn in_system_slice(cgroup: &str) -> bool {
    cgroup
        .lines()
        .filter_map(|l| l.strip_prefix("0::"))
        .any(|p| p.starts_with("/system.slice/"))
}

/// Every node of `accel`'s devices: each device's own and the control
/// nodes its jobs share.
fn accel_nodes(accel: &[crate::accel::Active]) -> Vec<PathBuf> {
    let found: Vec<crate::accel::DiscoveredDevice> = accel
        .iter()
        .flat_map(|a| a.devices.iter().cloned())
        .collect();
    let refs: Vec<crate::core::DeviceRef> = found.iter().map(|d| d.device_ref()).collect();
    crate::accel::device_allow(&found, &refs).unwrap_or_default()
}

/// The character majors of every node of `accel`'s devices: each device's
/// own and the control nodes its jobs share (`/dev/nvidiactl`...).
pub fn accel_majors(accel: &[crate::accel::Active]) -> BTreeSet<u32> {
    accel_nodes(accel)
        .iter()
        .filter_map(|p| nix::sys::stat::stat(p).ok())
        .filter(|s| s.st_mode & libc::S_IFMT == libc::S_IFCHR)
        .map(|s| libc::major(s.st_rdev))
        .collect()
}

/// What the user slices that exist are given when the gate goes off: every
/// device (`char-*`, `block-*`, and the accelerators' nodes by path, as a
/// node whose driver is not registered matches no name). systemd leaves a
/// device program in place when a slice's policy goes back to `auto` without
/// a list (it stops applying the device controller), so the program is
/// replaced by one that allows everything instead.
pub fn open_list(accel: &[crate::accel::Active]) -> Vec<String> {
    let mut out = vec!["char-* rwm".to_string(), "block-* rwm".to_string()];
    for p in accel_nodes(accel) {
        out.push(format!("{} rwm", p.display()));
    }
    out
}

/// The allow-list for the machine now (`/proc/devices` minus `accel`'s).
pub fn allow_list_now(accel: &[crate::accel::Active]) -> anyhow::Result<Vec<String>> {
    use anyhow::Context;
    let text = std::fs::read_to_string("/proc/devices").context("reading /proc/devices")?;
    Ok(allow_list(&parse_proc_devices(&text), &accel_majors(accel)))
}

/// The setting kept in `state_dir`, if one was set live.
pub fn load(state_dir: &Path) -> Option<bool> {
    std::fs::read_to_string(state_dir.join(STATE_FILE))
        .ok()
        .and_then(|t| parse_setting(&t))
}

/// Keeps the setting in `state_dir`.
pub fn save(state_dir: &Path, on: bool) -> anyhow::Result<()> {
    let text: &[u8] = if on { b"on\n" } else { b"off\n" };
    super::store::write_atomic(state_dir, STATE_FILE, text)
}

/// Parses the kept setting (`on`/`off`).
pub fn parse_setting(text: &str) -> Option<bool> {
    match text.trim() {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

/// The gate as xlurmd holds it: whether it is on, and the services it lets
/// through (`--gate-exempt`).
#[derive(Debug, Default)]
pub struct Gate {
    on: AtomicBool,
    exempt: std::sync::Mutex<Vec<String>>,
}

/// Why the gate could not be set.
#[derive(Debug)]
pub enum GateError {
    /// xlurmd itself runs in `system.slice`, which the gate would close.
    InSystemSlice,
    Failed(anyhow::Error),
}

impl std::fmt::Display for GateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateError::InSystemSlice => write!(
                f,
                "xlurmd runs in system.slice, which the gate closes: it would lose the \
                 accelerators it polls. Its unit must say Slice={SLICE} (units/xlurmd.service \
                 of this version): sudo systemctl daemon-reload && sudo systemctl restart xlurmd"
            ),
            GateError::Failed(e) => write!(f, "{e:#}"),
        }
    }
}

impl Gate {
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// The services let through (`--gate-exempt`), set once at start.
    pub fn set_exempt(&self, exempt: Vec<String>) {
        if let Ok(mut e) = self.exempt.lock() {
            *e = exempt;
        }
    }

    fn exempt(&self) -> Vec<String> {
        self.exempt.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Turns the gate on or off for the machine's `accel` devices. With
    /// `partial` (at start), xlurmd in `system.slice` gates the user slices
    /// only and says why; otherwise that is an error.
    pub async fn turn(
        &self,
        systemd: &crate::daemon::systemd::Systemd,
        accel: &[crate::accel::Active],
        on: bool,
        partial: bool,
    ) -> Result<(), GateError> {
        let inside = std::fs::read_to_string("/proc/self/cgroup")
            .map(|c| in_system_slice(&c))
            .unwrap_or(false);
        if on && inside && !partial {
            return Err(GateError::InSystemSlice);
        }
        if on && inside {
            tracing::error!(
                "the accelerator gate closes the user slices only: {}",
                GateError::InSystemSlice
            );
        }
        let closed = match on {
            true => allow_list_now(accel).map_err(GateError::Failed)?,
            false => Vec::new(),
        };
        let lists = Lists {
            closed,
            open: open_list(accel),
        };
        apply(systemd, on, &lists, !inside, &self.exempt())
            .await
            .map_err(GateError::Failed)?;
        self.on.store(on, Ordering::Relaxed);
        Ok(())
    }
}

/// The device lists a slice is given: `closed` while the gate is on,
/// `open` (allow everything, see [`open_list`]) when it goes off.
struct Lists {
    closed: Vec<String>,
    open: Vec<String>,
}

/// `DeviceAllow=` entries as the bus takes them.
fn pairs(list: &[String]) -> Vec<(String, String)> {
    list.iter()
        .filter_map(|a| a.rsplit_once(' '))
        .map(|(d, p)| (d.to_string(), p.to_string()))
        .collect()
}

/// Writes (`on`) or removes the gate's drop-ins, sets the device policy on
/// each closed slice there is (a reload alone does not change a live slice's
/// device program), and reloads the manager, which gives the drop-ins to
/// slices made later. A slice that opens gets the `open` list.
async fn apply(
    systemd: &crate::daemon::systemd::Systemd,
    on: bool,
    lists: &Lists,
    system: bool,
    exempt: &[String],
) -> anyhow::Result<()> {
    use anyhow::Context;
    use zbus::Variant;
    let dir = systemd
        .runtime_units()
        .context("the manager's runtime unit directory is not known")?
        .to_path_buf();
    let before = existing_dropins(&dir);
    let wanted = if on {
        dropins(&dir, &lists.closed, system, exempt)
    } else {
        Vec::new()
    };
    if !on && before.is_empty() {
        return Ok(());
    }
    // Already in place, as at an xlurmd restart within a boot: the slices
    // there are got the policy when the drop-ins were written, and later
    // ones get it from the drop-ins. No property to set, no reload.
    if on && same_dropins(&before, &wanted) {
        return Ok(());
    }
    let system_was = before
        .iter()
        .any(|p| p.starts_with(dir.join("system.slice.d")));
    for (path, text) in &wanted {
        let parent = path.parent().unwrap_or(&dir);
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
        crate::daemon::store::write_atomic(parent, DROPIN, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        // Readable, as unit files are (systemd warns otherwise).
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644));
    }
    for path in before.iter().filter(|p| !wanted.iter().any(|w| &w.0 == *p)) {
        match std::fs::remove_file(path) {
            Ok(()) => {
                if let Some(parent) = path.parent() {
                    let _ = std::fs::remove_dir(parent);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
        }
    }
    // Each closed slice there is, now: root's is never closed.
    let mut slices: Vec<String> = systemd
        .unit_names("user-*.slice")
        .await?
        .into_iter()
        .filter(|s| s != "user-0.slice")
        .collect();
    if (on && system) || system_was {
        slices.push("system.slice".into());
    }
    let control = dir.with_file_name("system.control");
    for name in &slices {
        // system.slice opens when xlurmd itself came to run in it.
        let closing = on && (system || name != "system.slice");
        let given = pairs(if closing { &lists.closed } else { &lists.open });
        let props: Vec<(&str, Variant<'_>)> = vec![
            ("DeviceAllow", Variant::from(Vec::<(String, String)>::new())),
            ("DeviceAllow", Variant::from(given)),
            (
                "DevicePolicy",
                Variant::from(if closing { "closed" } else { "auto" }),
            ),
        ];
        if let Err(e) = systemd.set_runtime_properties(name, &props).await {
            tracing::warn!("the accelerator gate on {name}: {e:#}");
        }
        // The control drop-ins that leaves would outrank the gate's next time.
        let d = control.join(format!("{name}.d"));
        for f in ["50-DeviceAllow.conf", "50-DevicePolicy.conf"] {
            let _ = std::fs::remove_file(d.join(f));
        }
        let _ = std::fs::remove_dir(&d);
    }
    systemd.reload().await
}

#[cfg(test)]
mod tests;

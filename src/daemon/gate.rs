//! The accelerator gate: with it on, processes outside xlurm jobs (login
//! sessions, cron jobs and user services in `user.slice`) cannot open the
//! machine's accelerators, while each job still opens exactly its own (its
//! unit's `DevicePolicy=closed` + `DeviceAllow`, in `xlurm.slice`).
//!
//! systemd's own means: a runtime drop-in for every user slice
//! (`user-.slice.d/`, which covers each `user-UID.slice`), with
//! `DevicePolicy=closed` and an allow-list of every device driver the kernel
//! has registered (`/proc/devices`) except the accelerators' majors. The
//! device cgroup has no deny rule (systemd #19222), so the list names what
//! stays allowed: terminals (`pts`, `tty`), `/dev/null` and friends (`mem`),
//! `fuse` and the rest of `misc`, block devices... A same-named drop-in in
//! `user-0.slice.d/` puts root's sessions back to `DevicePolicy=auto` (all
//! devices), so `nvidia-smi` as root keeps working. The drop-ins live in
//! `/run` and are written again by xlurmd at every start from the setting it
//! keeps in its state directory; a driver loaded later is allowed from the
//! next `xlurm gate on` or xlurmd start.
//!
//! Services in `system.slice` are not gated: xlurmd itself polls the devices
//! from there, as do the vendors' daemons (nvidia-persistenced, DCGM), and a
//! slice's device policy binds everything below it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The drop-ins' file name.
pub const DROPIN: &str = "50-xlurm-gate.conf";
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

/// The drop-in for every user slice while the gate is on.
pub fn user_dropin(allow: &[String]) -> String {
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

/// The two drop-ins' paths under the manager's runtime unit directory.
pub fn dropin_paths(runtime_units: &Path) -> [PathBuf; 2] {
    [
        runtime_units.join("user-.slice.d").join(DROPIN),
        runtime_units.join("user-0.slice.d").join(DROPIN),
    ]
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

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_DEVICES: &str = "Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  5 /dev/tty
 10 misc
136 pts
137 pts
195 nvidia-frontend
226 drm
235 nvidia-uvm
240 weird[0]

Block devices:
  8 sd
259 blkext
";

    #[test]
    fn everything_but_the_accelerators_majors_is_allowed() {
        let drivers = parse_proc_devices(PROC_DEVICES);
        assert_eq!(drivers.len(), 13);
        assert!(drivers.iter().any(|d| d.block && d.major == 259));
        let accel = BTreeSet::from([195, 235]);
        let allow = allow_list(&drivers, &accel);
        assert_eq!(
            allow,
            [
                "char-mem rwm",
                "char-/dev/vc/0 rwm",
                "char-tty rwm",
                "char-/dev/tty rwm",
                "char-misc rwm",
                "char-pts rwm",
                "char-drm rwm",
                "block-sd rwm",
                "block-blkext rwm",
            ]
        );
        // A name shared by an accelerator's major is left out whole.
        let allow = allow_list(&drivers, &BTreeSet::from([137]));
        assert!(
            !allow.iter().any(|a| a.starts_with("char-pts")),
            "{allow:?}"
        );
        assert!(allow.contains(&"char-nvidia-frontend rwm".to_string()));
        let text = user_dropin(&allow);
        assert!(
            text.contains("[Slice]\nDevicePolicy=closed\nDeviceAllow=\nDeviceAllow=char-mem rwm\n")
        );
        assert_eq!(parse_setting("on\n"), Some(true));
        assert_eq!(parse_setting("off"), Some(false));
        assert_eq!(parse_setting("maybe"), None);
    }
}

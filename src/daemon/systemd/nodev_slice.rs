//! The slice of jobs that use no accelerator, closed to devices once for
//! all of them (see [`nodev_slice`]).

use crate::daemon::service::Daemon;
use crate::daemon::systemd::Systemd;
use std::sync::atomic::Ordering;
use zbus::Variant;

/// The child slice of `slice` for jobs that use no accelerator
/// (`xlurm.slice`: `xlurm-nodev.slice`, whose cgroup is
/// `xlurm.slice/xlurm-nodev.slice`); `None` for the root slice or a name
/// that is not a slice's.
///
/// Why: a unit's own `DevicePolicy=closed` makes systemd compile and attach a
/// BPF device program for that unit alone. VM probe `94-isolation-cost`
/// measured that at about 170 ms and 100 ms of PID 1's CPU per unit under
/// emulation in one boot, and within the noise of bare units in others. The
/// kernel runs the device programs of every ancestor cgroup too
/// (`BPF_F_ALLOW_MULTI`) and a unit is allowed only what all of them allow,
/// so the slice's one program closes every job in it. systemd builds the
/// slice's program again whenever the controllers its children need change
/// (when it empties or fills): under load, xlurm's units stay in it until
/// they are collected. Jobs with accelerators keep a unit program of their
/// own, `closed` plus their devices, in `slice`.
pub fn nodev_slice(slice: &str) -> Option<String> {
    let stem = slice.strip_suffix(".slice")?;
    (!stem.is_empty() && stem != "-").then(|| format!("{stem}-nodev.slice"))
}

/// What xlurmd sets on the [`nodev_slice`] at every start
/// (`SetUnitProperties`, runtime: systemd keeps it in a drop-in under
/// `/run/systemd/system.control` until reboot, so the slice is closed again
/// when it is stopped and started or systemd reloads): the policy of a job
/// unit that uses no accelerator, and no allow-list of its own. Terminals,
/// `/dev/null` and the other pseudo devices stay open, as `closed` always
/// allows them.
pub fn nodev_slice_properties() -> Vec<(&'static str, Variant<'static>)> {
    vec![
        ("DevicePolicy", Variant::from("closed")),
        ("DeviceAllow", Variant::from(Vec::<(String, String)>::new())),
    ]
}

/// Closes the slice of jobs that use no accelerator ([`nodev_slice`]) to
/// every device but the pseudo ones, as each of their units was closed
/// before; `None` when systemd refuses, and each such unit then closes
/// itself (a device program per start).
pub async fn close(systemd: &Systemd, slice: &str) -> Option<String> {
    let nodev = nodev_slice(slice)?;
    match systemd
        .set_runtime_properties(&nodev, &nodev_slice_properties())
        .await
    {
        Ok(()) => Some(nodev),
        Err(e) => {
            tracing::warn!("{e:#}: each job without accelerators closes its own devices");
            None
        }
    }
}

/// Whether a slice's device policy, as systemd reports it, is what
/// [`nodev_slice_properties`] sets: `closed` and nothing allowed.
pub fn is_closed(policy: &str, allow: &[(String, String)]) -> bool {
    policy == "closed" && allow.is_empty()
}

/// What a read of the slice's device policy found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// Closed, as set.
    Closed,
    /// Found open (what was found), and closed again.
    ClosedAgain(String),
    /// Found open and still open after xlurmd set it again (what was found,
    /// and the drop-ins systemd read for it, the likely cause).
    Open(String),
}

/// systemd's interface of a slice's cgroup settings.
const SLICE: &str = "org.freedesktop.systemd1.Slice";

/// The device policy `systemd` applies to `slice` now, as text for a
/// message; `Ok(None)` when it is closed.
async fn opening(systemd: &Systemd, slice: &str) -> anyhow::Result<Option<String>> {
    let policy: String = systemd.property(slice, SLICE, "DevicePolicy").await?;
    let allow: Vec<(String, String)> = systemd.property(slice, SLICE, "DeviceAllow").await?;
    if is_closed(&policy, &allow) {
        return Ok(None);
    }
    let allow: Vec<String> = allow.iter().map(|(d, a)| format!("{d} {a}")).collect();
    Ok(Some(format!(
        "DevicePolicy={policy}, DeviceAllow=[{}]",
        allow.join(", ")
    )))
}

/// Reads `slice`'s device policy back from systemd; when something opened it
/// (`systemctl set-property`, a drop-in that wins over xlurmd's runtime one),
/// sets it closed again and reads it once more. `Err` when systemd could not
/// be asked (nothing is known then).
pub async fn check(systemd: &Systemd, slice: &str) -> anyhow::Result<Fence> {
    let Some(policy) = opening(systemd, slice).await? else {
        return Ok(Fence::Closed);
    };
    // The likely cause: a drop-in of higher priority than xlurmd's (it wins
    // again at systemd's next reload), or none (`systemctl set-property`).
    let drop_ins: Vec<String> = systemd
        .property(slice, "org.freedesktop.systemd1.Unit", "DropInPaths")
        .await
        .unwrap_or_default();
    let found = format!(
        "{policy}; drop-ins: {}",
        if drop_ins.is_empty() {
            "none".to_string()
        } else {
            drop_ins.join(", ")
        }
    );
    if let Err(e) = systemd
        .set_runtime_properties(slice, &nodev_slice_properties())
        .await
    {
        tracing::debug!("{e:#}");
    }
    match opening(systemd, slice).await? {
        None => Ok(Fence::ClosedAgain(found)),
        Some(_) => Ok(Fence::Open(found)),
    }
}

/// Keeps the slice of jobs without accelerators closed (at start and every
/// recheck, `ServeConfig::recheck`): a slice found open is closed again;
/// one that stays open sends the next such jobs' units out of it with
/// their own policy, as when systemd refused the slice's, and closes each
/// one already running in it, until the slice is found closed again.
/// (A device a job opened while the slice was open stays open to it: the
/// kernel checks devices when they are opened.)
pub async fn keep_closed(d: &Daemon) {
    let Some(slice) = d.settings.unit.nodev_slice.as_deref() else {
        return;
    };
    let fence = match check(&d.systemd, slice).await {
        Ok(f) => f,
        Err(e) => {
            tracing::debug!("{e:#}: the device policy of {slice} is looked at again later");
            return;
        }
    };
    let was_open = d.nodev_open.load(Ordering::Acquire);
    match &fence {
        Fence::Closed if !was_open => return,
        Fence::Closed => tracing::warn!(
            "{slice} is closed to devices again: jobs without accelerators run in it again"
        ),
        Fence::ClosedAgain(found) => tracing::error!(
            "{slice} was open to devices ({found}); xlurmd closed it again. \
             Do not change its device policy (a drop-in named above opens it again at \
             every reload): it fences every job without accelerators"
        ),
        Fence::Open(found) if !was_open => tracing::error!(
            "{slice} is open to devices and stays open when xlurmd closes it ({found}): \
             remove what opens it (systemctl revert {slice}, or the drop-in named). \
             Until then each job without accelerators closes its own unit, \
             and those running in it are closed now"
        ),
        Fence::Open(_) => return,
    }
    let open = matches!(fence, Fence::Open(_));
    d.nodev_open.store(open, Ordering::Release);
    if open {
        close_running(d).await;
    }
}

/// Closes the unit of every running job without accelerators to every
/// device but the pseudo ones, each by its own policy.
async fn close_running(d: &Daemon) {
    let units: Vec<String> = {
        let st = d.state.lock().await;
        st.jobs
            .values()
            .filter(|j| j.state() == crate::daemon::job::JobState::Running)
            .filter(|j| j.alloc().is_none_or(|a| a.devices.is_empty()))
            .map(|j| j.unit())
            .collect()
    };
    for unit in units {
        if let Err(e) = d
            .systemd
            .set_runtime_properties(&unit, &nodev_slice_properties())
            .await
        {
            tracing::warn!("closing {unit} to devices: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodev_slice_is_a_child_of_the_job_slice_and_closed() {
        fn get<'a>(p: &'a [(&str, Variant<'static>)], name: &str) -> Option<&'a Variant<'static>> {
            p.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
        }
        assert_eq!(
            nodev_slice("xlurm.slice").as_deref(),
            Some("xlurm-nodev.slice")
        );
        assert_eq!(
            nodev_slice("batch-a.slice").as_deref(),
            Some("batch-a-nodev.slice")
        );
        for none in ["-.slice", ".slice", "xlurm", "xlurm.service"] {
            assert_eq!(nodev_slice(none), None, "{none}");
        }
        let closed = nodev_slice_properties();
        assert_eq!(get(&closed, "DevicePolicy"), Some(&Variant::from("closed")));
        assert_eq!(
            get(&closed, "DeviceAllow"),
            Some(&Variant::from(Vec::<(String, String)>::new()))
        );
    }
}

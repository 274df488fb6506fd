//! The slice of jobs that use no accelerator, closed to devices once for
//! all of them (see [`nodev_slice`]).

use super::systemd::Systemd;
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

//! Turning poll answers into the core's [`Health`] (pure), and finding which xlurm job a
//! process belongs to from its cgroup.

use super::{Condition, DevicePoll, DiscoveredDevice, QueryError};
use crate::core::{Health, JobId};
use std::path::{Path, PathBuf};

/// One device's health from one poll.
///
/// * the library says the device is broken: `Unhealthy` (this wins, so a broken device
///   whose other queries also fail still says why);
/// * its UUID query failed, or it reports a UUID other than `expected_uuid`: `Unknown`
///   naming the failed call, or the old and new UUIDs;
/// * its health or process query failed: `Unknown` with the library's error;
/// * processes use it that do not belong to `holder` (the job the books say holds it;
///   `None`: nobody, so every process counts): `Busy` with their number;
/// * otherwise `Ok`.
///
/// `job_of_pid` says which xlurm job a process belongs to (see [`ProcCgroups::job_of`]);
/// it is only asked when there is a holder. A caller that knows the holder's PIDs
/// instead can pass `|pid| pids.contains(&pid).then_some(holder_job)`.
pub fn assess(
    expected_uuid: &str,
    poll: &DevicePoll,
    holder: Option<JobId>,
    job_of_pid: &dyn Fn(u32) -> Option<JobId>,
) -> Health {
    if let Ok(Condition::Unhealthy(why)) = &poll.condition {
        return Health::Unhealthy { error: why.clone() };
    }
    match &poll.uuid {
        Err(e) => return unknown(e),
        Ok(uuid) if uuid != expected_uuid => {
            return Health::Unknown {
                error: format!("UUID changed from {expected_uuid} to {uuid}"),
            }
        }
        Ok(_) => {}
    }
    if let Err(e) = &poll.condition {
        return unknown(e);
    }
    let processes = match &poll.processes {
        Err(e) => return unknown(e),
        Ok(p) => p,
    };
    let mut foreign: Vec<u32> = processes
        .iter()
        .copied()
        .filter(|&pid| holder.is_none() || job_of_pid(pid) != holder)
        .collect();
    foreign.sort_unstable();
    foreign.dedup();
    if foreign.is_empty() {
        Health::Ok
    } else {
        Health::Busy {
            processes: foreign.len() as u32,
        }
    }
}

fn unknown(e: &QueryError) -> Health {
    Health::Unknown {
        error: e.to_string(),
    }
}

/// Every device's health from one backend poll, in `devices` order. A failed poll makes
/// every device `Unknown`; a device the poll left out is `Unknown` too.
pub fn assess_all(
    devices: &[DiscoveredDevice],
    poll: &Result<Vec<DevicePoll>, QueryError>,
    holder_of: impl Fn(&DiscoveredDevice) -> Option<JobId>,
    job_of_pid: impl Fn(u32) -> Option<JobId>,
) -> Vec<Health> {
    devices
        .iter()
        .map(|device| match poll {
            Err(e) => unknown(e),
            Ok(polls) => match polls.iter().find(|p| p.index == device.index) {
                Some(p) => assess(&device.uuid, p, holder_of(device), &job_of_pid),
                None => Health::Unknown {
                    error: format!(
                        "{} device {} missing from the poll",
                        device.vendor, device.index
                    ),
                },
            },
        })
        .collect()
}

/// Reads processes' cgroups from procfs to tell which xlurm job they belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcCgroups {
    root: PathBuf,
}

impl Default for ProcCgroups {
    fn default() -> Self {
        ProcCgroups::new("/proc")
    }
}

impl ProcCgroups {
    /// `root` is normally `/proc` (tests use a fake tree).
    pub fn new(root: impl AsRef<Path>) -> Self {
        ProcCgroups {
            root: root.as_ref().to_path_buf(),
        }
    }

    /// The job `pid` runs in. A process that cannot be read (gone, another PID
    /// namespace) belongs to no job, so it counts against the holder.
    pub fn job_of(&self, pid: u32) -> Option<JobId> {
        let text = std::fs::read_to_string(self.root.join(pid.to_string()).join("cgroup")).ok()?;
        crate::unit_name::job_of_cgroup(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Vendor;

    fn poll(uuid: &str, procs: &[u32]) -> DevicePoll {
        DevicePoll {
            index: 0,
            uuid: Ok(uuid.into()),
            processes: Ok(procs.to_vec()),
            condition: Ok(Condition::Healthy),
            load: Default::default(),
        }
    }

    fn jobs(pid: u32) -> Option<JobId> {
        match pid {
            100 | 101 => Some(7),
            200 => Some(8),
            _ => None,
        }
    }

    #[test]
    fn idle_and_busy() {
        assert_eq!(assess("U", &poll("U", &[]), None, &jobs), Health::Ok);
        assert_eq!(
            assess("U", &poll("U", &[5, 5, 6]), None, &jobs),
            Health::Busy { processes: 2 }
        );
    }

    #[test]
    fn the_holders_processes_do_not_count() {
        assert_eq!(
            assess("U", &poll("U", &[100, 101]), Some(7), &jobs),
            Health::Ok
        );
        // Another job's process on our device, and an outsider: both count.
        assert_eq!(
            assess("U", &poll("U", &[100, 200, 9]), Some(7), &jobs),
            Health::Busy { processes: 2 }
        );
        // Unheld device: even an xlurm job's process makes it busy.
        assert_eq!(
            assess("U", &poll("U", &[100]), None, &jobs),
            Health::Busy { processes: 1 }
        );
    }

    #[test]
    fn errors_uuid_changes_and_unhealthy() {
        let mut p = poll("V", &[]);
        let Health::Unknown { error } = assess("U", &p, None, &jobs) else {
            panic!()
        };
        assert!(error.contains("from U to V"), "{error}");

        p = poll("U", &[]);
        p.processes = Err(QueryError::new("q(0)", "GPU is lost (15)"));
        assert_eq!(
            assess("U", &p, None, &jobs),
            Health::Unknown {
                error: "q(0): GPU is lost (15)".into()
            }
        );

        p.condition = Ok(Condition::Unhealthy("ECC storm".into()));
        assert_eq!(
            assess("U", &p, None, &jobs),
            Health::Unhealthy {
                error: "ECC storm".into()
            }
        );

        p = poll("U", &[]);
        p.uuid = Err(QueryError::new("uuid(0)", "boom"));
        assert!(matches!(
            assess("U", &p, None, &jobs),
            Health::Unknown { .. }
        ));
        p = poll("U", &[]);
        p.condition = Err(QueryError::new("health(0)", "boom"));
        assert!(matches!(
            assess("U", &p, None, &jobs),
            Health::Unknown { .. }
        ));
    }

    #[test]
    fn assess_all_handles_failed_and_partial_polls() {
        let dev = |index: u32| DiscoveredDevice {
            vendor: Vendor::Nv,
            index,
            uuid: "U".into(),
            pci_bdf: None,
            numa_node: None,
            device_nodes: vec![],
        };
        let devices = [dev(0), dev(1)];
        let all = assess_all(&devices, &Ok(vec![poll("U", &[1])]), |_| None, jobs);
        assert_eq!(all[0], Health::Busy { processes: 1 });
        assert!(matches!(&all[1], Health::Unknown { error } if error.contains("missing")));
        let all = assess_all(
            &devices,
            &Err(QueryError::new("count", "no")),
            |_| None,
            jobs,
        );
        assert!(all.iter().all(|h| matches!(h, Health::Unknown { .. })));
    }

    #[test]
    fn cgroups_name_the_job() {
        let proc = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(proc.path().join("55")).unwrap();
        std::fs::write(
            proc.path().join("55/cgroup"),
            "0::/xlurm.slice/xlurm-job-3.service\n",
        )
        .unwrap();
        let cg = ProcCgroups::new(proc.path());
        assert_eq!(cg.job_of(55), Some(3));
        assert_eq!(cg.job_of(56), None);
    }
}

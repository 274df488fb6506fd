//! How xlurm names a job's systemd unit: `xlurm-job-<id>.service`. The only
//! place the name is built and read back (from a unit name, a cgroup path or
//! systemd's escaped D-Bus object path).

use crate::core::JobId;

const PREFIX: &str = "xlurm-job-";
const SUFFIX: &str = ".service";

/// Every job unit, as a `ListUnitsByPatterns` glob.
pub const ALL_JOBS: &str = "xlurm-job-*.service";

/// The unit of job `id`.
pub fn of_job(id: JobId) -> String {
    format!("{PREFIX}{id}{SUFFIX}")
}

/// The identifier (`SyslogIdentifier=`, journald's `SYSLOG_IDENTIFIER`) of
/// job `id`'s output under a user manager (`xlurmd --user`): journald takes
/// it from the output stream itself, so it is on every line, also on those
/// of a process that exited before journald could look up its unit.
pub fn log_identifier(id: JobId) -> String {
    format!("{PREFIX}{id}")
}

/// The job whose unit is `unit`; `None` for any other unit.
pub fn job_of(unit: &str) -> Option<JobId> {
    let id = unit.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    // Only plain decimal: "+5" or " 5" parse as numbers but name no unit of ours.
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}

/// The job whose unit contains the cgroup described by `/proc/<pid>/cgroup`
/// contents (`0::/xlurm.slice/xlurm-job-42.service/...`); `None` for a process
/// outside every job.
pub fn job_of_cgroup(contents: &str) -> Option<JobId> {
    contents.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        path.split('/').find_map(job_of)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_unit_name_is_built_and_read_back() {
        assert_eq!(of_job(42), "xlurm-job-42.service");
        assert_eq!(job_of(&of_job(42)), Some(42));
        assert_eq!(job_of(&of_job(u64::MAX)), Some(u64::MAX));
        for other in [
            "xlurm-job-x.service",
            "xlurm-job-.service",
            "xlurm-job-+5.service",
            "xlurm-job-5.services",
            "xlurm-job-5.scope",
            "xlurmd.service",
            "xlurm-job-99999999999999999999999.service",
        ] {
            assert_eq!(job_of(other), None, "{other}");
        }
    }

    #[test]
    fn a_process_belongs_to_the_job_whose_unit_holds_its_cgroup() {
        assert_eq!(
            job_of_cgroup("0::/xlurm.slice/xlurm-job-42.service\n"),
            Some(42)
        );
        assert_eq!(
            job_of_cgroup("0::/xlurm.slice/xlurm-job-42.service/sub/leaf\n"),
            Some(42)
        );
        assert_eq!(job_of_cgroup("0::/xlurm.slice/xlurm-job-x.service\n"), None);
        assert_eq!(job_of_cgroup("0::/xlurm-job-42.services\n"), None);
        assert_eq!(job_of_cgroup("0::/user.slice/session-1.scope\n"), None);
    }
}

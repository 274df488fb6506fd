//! The service's own errors, typed: each names its cause, and each verb
//! turns what it met into a D-Bus error (`wire::error::ApiError`) once, where
//! it answers. A change of the job table that was not made is
//! [`super::CommitError`].

use crate::core::JobId;

/// A submitter's account could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountError {
    /// The account databases know no such uid (it was removed).
    #[error("uid {0} no longer exists")]
    NoSuchUid(u32),
    /// The lookup itself failed (NSS: LDAP or sssd away, a thread lost).
    #[error("looking up uid {uid}: {why}")]
    Lookup { uid: u32, why: String },
}

/// A dependency that may not be set as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DependencyError {
    /// It names a job that does not exist, or that its owner may not see.
    #[error(
        "dependency on job {0}: no job {0} (finished jobs are kept for a while, then cleaned)"
    )]
    NoJob(JobId),
    /// It names a task its array does not have.
    #[error("dependency on {0}_{1}: array {0} has no task {1}")]
    NoTask(JobId, u32),
    /// Job `target` waits for job `id`: a dependency of `id` on it would be
    /// a cycle.
    #[error("dependency on job {target}: job {target} waits for job {id} (directly or not), so neither could start")]
    Cycle { target: JobId, id: JobId },
}

/// The devices a job holds could not be given to its unit.
#[derive(Debug, thiserror::Error)]
pub enum DeviceSetupError {
    #[error(transparent)]
    Visibility(#[from] crate::accel::VisibilityError),
    #[error(transparent)]
    Unknown(#[from] crate::accel::UnknownDevice),
}

/// Why a job's unit could not be started: the job ends LAUNCH_FAILED saying so.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot resolve the submitter: {0}")]
    Account(#[from] AccountError),
    #[error("cannot write the script snapshot: {0:#}")]
    Script(anyhow::Error),
    #[error("cannot set up its devices: {0}")]
    Devices(#[from] DeviceSetupError),
    #[error(
        "its terminal was lost when xlurmd restarted while the job was pending \
         (systemctl restart empties systemd's descriptor store): run xrun --pty again"
    )]
    TerminalLost,
    #[error("systemd refused the unit: {0}")]
    Refused(zbus::Error),
    /// systemd lost the unit's start (`daemon-reexec`) more often than it is
    /// started again.
    #[error("systemd lost the start of {unit} {times} times in a row")]
    LostAgain { unit: String, times: u8 },
    #[error("systemd lost the start of {unit}, and recording a relaunch failed: {why}")]
    Relaunch {
        unit: String,
        why: super::CommitError,
    },
}

//! The D-Bus errors of org.xlurm.Scheduler1, one conversion for every method
//! of the daemon; the CLI knows them by [`PREFIX`].

/// What the name of every error below starts with.
pub const PREFIX: &str = "org.xlurm.Scheduler1.Error.";

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.xlurm.Scheduler1.Error")]
pub enum ApiError {
    #[zbus(error)]
    ZBus(zbus::Error),
    /// A spec or argument is malformed (wrong type, unknown key, bad value).
    InvalidArgs(String),
    /// The request can never run on this machine.
    InvalidRequest(String),
    /// No such job (or it was cleaned away).
    NoSuchJob(String),
    /// The caller may not do this to this job, or lacks the polkit authorization.
    PermissionDenied(String),
    /// The job is in a state where this makes no sense.
    WrongState(String),
    /// A per-user limit is reached.
    LimitExceeded(String),
    /// The daemon failed (disk full, systemd gone); the message says what.
    Failed(String),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        ApiError::Failed(format!("{e:#}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::DBusError;

    #[test]
    fn every_error_name_starts_with_the_prefix() {
        let e = ApiError::NoSuchJob(String::new());
        assert_eq!(e.name().as_str(), format!("{PREFIX}NoSuchJob"));
    }
}

//! `--output PATH`: copying a job's output into a file the *client* opened.
//!
//! The client opens the file with the user's own rights and passes the
//! descriptor over D-Bus, so no root process ever opens a user-chosen path.
//! While the job is pending the daemon keeps the descriptor, also in systemd's
//! file descriptor store (`FDSTORE=1`, `FDNAME=xlurm-out-<id>`, with
//! `FileDescriptorStoreMax=` in the unit) so it survives a crash of the daemon.
//! When the job starts, the descriptor becomes the standard input of the job's
//! `xlurm __tee-output` wrapper (`cli/tee.rs`), which copies the output into it
//! as the user, inside the job's unit: daemon restarts no longer matter.
//! A `systemctl restart xlurmd` while the job is still pending flushes systemd's
//! store; such a job runs without the copy and says so.

use crate::core::JobId;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

/// The fd store name of job `id`'s output descriptor.
pub fn fd_name(id: JobId) -> String {
    format!("xlurm-out-{id}")
}

/// Checks that `fd` is a regular file open for writing.
pub fn check_fd(fd: &OwnedFd) -> Result<(), String> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let stat = nix::sys::stat::fstat(fd.as_fd())
        .map_err(|e| format!("cannot inspect the output descriptor: {e}"))?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err("the output descriptor is not a regular file".into());
    }
    let flags = fcntl(fd.as_fd(), FcntlArg::F_GETFL)
        .map_err(|e| format!("cannot inspect the output descriptor: {e}"))?;
    let mode = OFlag::from_bits_truncate(flags) & OFlag::O_ACCMODE;
    if mode != OFlag::O_WRONLY && mode != OFlag::O_RDWR {
        return Err("the output descriptor is not open for writing".into());
    }
    Ok(())
}

/// Parks `fd` in systemd's descriptor store (a no-op outside systemd).
pub fn store(id: JobId, fd: &OwnedFd) {
    let name = fd_name(id);
    if let Err(e) = sd_notify::notify_with_fds(
        &[
            sd_notify::NotifyState::FdStore,
            sd_notify::NotifyState::FdName(&name),
        ],
        &[fd.as_fd()],
    ) {
        tracing::warn!(
            job = id,
            "could not keep the output descriptor in systemd's store: {e}"
        );
    }
}

pub fn unstore(id: JobId) {
    let name = fd_name(id);
    let _ = sd_notify::notify(&[
        sd_notify::NotifyState::FdStoreRemove,
        sd_notify::NotifyState::FdName(&name),
    ]);
}

/// Descriptors systemd handed back at start, by job ID.
pub fn from_listen_fds() -> HashMap<JobId, OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut out = HashMap::new();
    if let Ok(fds) = sd_notify::listen_fds_with_names() {
        for (raw, name) in fds {
            if let Some(id) = name
                .strip_prefix("xlurm-out-")
                .and_then(|n| n.parse::<JobId>().ok())
            {
                // SAFETY: systemd passed this descriptor to us and nothing else owns it.
                out.insert(id, unsafe { OwnedFd::from_raw_fd(raw) });
            }
        }
    }
    out
}

//! The terminal of an interactive job (`xrun --pty`), as both sides of the
//! bus see it: the spec key that carries it, and how a client opens one.

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

/// The spec key of `Submit` that carries the terminal (type h).
pub const SPEC_KEY: &str = "pty_fd";

/// Opens a new pseudo-terminal as the calling process: its master, and its
/// peer (`/dev/pts/N`, owned by the caller), neither becoming the caller's
/// controlling terminal.
pub fn open() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::OFlag;
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    // (glibc passes O_CLOEXEC on to open: a process started meanwhile must
    // not keep the master open, or the job's terminal would never hang up.)
    nix::pty::grantpt(&master)?;
    nix::pty::unlockpt(&master)?;
    let name = nix::pty::ptsname_r(&master)?;
    let peer = nix::fcntl::open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    // SAFETY: `into_raw_fd` gives up the PtyMaster's ownership of it.
    let master = unsafe { OwnedFd::from_raw_fd(master.into_raw_fd()) };
    Ok((master, peer))
}

//! `xrun --pty`: the terminal an interactive job runs on.
//!
//! The user's own `xrun` allocates the pseudo-terminal and passes its peer
//! (the `/dev/pts/N` side) as a descriptor in the spec (`pty_fd`, type h).
//! xlurmd never opens a terminal by path for anyone: it checks that the
//! descriptor is a pseudo-terminal peer that belongs to the caller, holds it
//! while the job waits (as it holds an `--output` descriptor, also in
//! systemd's descriptor store), and hands that same descriptor to systemd as
//! the job's standard input, output and error. A path would let a freed
//! `/dev/pts/N`, taken by another user's login in the meantime, be swapped in
//! between the check and the open. See `docs/pty.md`.

use std::os::fd::{AsFd, OwnedFd};

/// Unix98 pseudo-terminal peers: majors 136 to 143 (`UNIX98_PTY_SLAVE_MAJOR`
/// and the next `UNIX98_PTY_MAJOR_COUNT - 1`), as `devices.txt` assigns them.
const PTS_MAJORS: std::ops::RangeInclusive<u64> = 136..=143;

/// Checks that `fd` is a pseudo-terminal peer owned by `uid` (devpts makes
/// the peer the property of whoever opened its master).
pub fn check(fd: &OwnedFd, uid: u32) -> Result<(), String> {
    let st = nix::sys::stat::fstat(fd.as_fd())
        .map_err(|e| format!("cannot inspect the terminal descriptor: {e}"))?;
    let major = libc::major(st.st_rdev) as u64;
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR || !PTS_MAJORS.contains(&major) {
        return Err(
            "the terminal descriptor (pty_fd) is not a pseudo-terminal (/dev/pts/N): pass the peer of a pty your process opened"
                .into(),
        );
    }
    if st.st_uid != uid {
        return Err(format!(
            "the terminal descriptor (pty_fd) is a pseudo-terminal of UID {}, not yours ({uid}): a job runs only on its owner's terminal",
            st.st_uid
        ));
    }
    nix::sys::termios::tcgetattr(fd.as_fd())
        .map_err(|e| format!("the terminal descriptor (pty_fd) is not a terminal: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn only_the_callers_own_pty_peer_is_taken() {
        let me = nix::unistd::getuid().as_raw();
        let (master, peer) = crate::wire::pty::open().unwrap();
        assert_eq!(check(&peer, me), Ok(()));
        let e = check(&peer, me + 1).unwrap_err();
        assert!(e.contains(&format!("of UID {me}, not yours")), "{e}");
        // The master side, a regular file, /dev/null: not a peer.
        for fd in [
            master.try_clone().unwrap(),
            std::fs::File::open("Cargo.toml").unwrap().into(),
            std::fs::File::open("/dev/null").unwrap().into(),
        ] {
            let e = check(&fd, me).unwrap_err();
            assert!(
                e.contains("not a pseudo-terminal"),
                "{}: {e}",
                fd.as_raw_fd()
            );
        }
    }
}

//! `xlurm __pty -- CMD...`: the in-job half of `xrun --pty`.
//!
//! xlurmd starts an interactive job as this wrapper, with the pseudo-terminal
//! that the user's own `xrun` opened (passed over D-Bus, then to systemd) as
//! its standard input, output and error descriptors. systemd puts every
//! service in a session of its own (`setsid`), but before version 256 does
//! not make a terminal passed as a descriptor its controlling terminal, so
//! Ctrl-C, Ctrl-Z and job control would not reach the job. The wrapper makes
//! it so (`TIOCSCTTY`; the job's process group becomes the terminal's
//! foreground) and then `exec`s the command: the command is the unit's main
//! process, and its exit status the job's. A terminal that cannot be taken is
//! an error (exit 1) rather than a shell without job control.

use std::os::unix::process::CommandExt;

/// Runs the wrapper; returns only when the terminal or the command fails.
pub fn main(argv: &[String]) -> i32 {
    if argv.is_empty() {
        eprintln!("xlurm __pty: no command given");
        return 2;
    }
    // SAFETY: an ioctl on descriptor 0 with an integer argument.
    if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } != 0 {
        let e = std::io::Error::last_os_error();
        eprintln!("xlurm __pty: cannot make the job's terminal its controlling terminal: {e}");
        return 1;
    }
    let e = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
    eprintln!("xlurm __pty: cannot run {}: {e}", argv[0]);
    // As systemd reports a command it cannot execute.
    203
}

//! `xlurm __pty -- CMD...`: the in-job half of `xrun --pty`.
//!
//! xlurmd starts an interactive job as this wrapper, with the pseudo-terminal
//! that the user's own `xrun` opened (passed over D-Bus, then to systemd) as
//! its standard input, output and error descriptors. systemd puts every
//! service in a session of its own (`setsid`), but before version 256 does
//! not make a terminal passed as a descriptor its controlling terminal, so
//! Ctrl-C, Ctrl-Z and job control would not reach the job. The wrapper makes
//! it so (`TIOCSCTTY`) and stays the session's leader: it starts the command
//! in a process group of its own, made the terminal's foreground, and waits.
//!
//! Staying makes a hang-up certain to be seen. When the terminal goes away
//! (xrun killed, the connection dropped), the kernel wakes the terminal's
//! readers with end-of-file *before* it sends SIGHUP to the session, so a
//! shell that was the session leader itself could read EOF and exit 0, and
//! the job would end COMPLETED. The wrapper forwards SIGHUP to the command's
//! process group, and after the command ends it also asks the terminal
//! whether its other side is gone (`POLLHUP`); either way it ends by SIGHUP,
//! which xlurmd records as CANCELLED (its terminal hung up). Otherwise it ends
//! exactly as the command did: the same exit status, or the same signal.

use std::os::unix::process::{CommandExt, ExitStatusExt};

use nix::sys::signal::{self, SigHandler, SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;

/// The signals the wrapper waits for: the command's end, a hang-up, and a
/// stop from systemd (xcancel, time limit; the whole unit gets SIGTERM).
fn waited() -> SigSet {
    let mut set = SigSet::empty();
    for s in [Signal::SIGCHLD, Signal::SIGHUP, Signal::SIGTERM] {
        set.add(s);
    }
    set
}

/// Runs the wrapper; returns the exit code when it does not end by a signal.
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
    // Blocked before the command exists, so none of them is lost; taken one
    // at a time with sigwait below.
    let set = waited();
    if let Err(e) = signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None) {
        eprintln!("xlurm __pty: cannot block signals: {e}");
        return 1;
    }
    let mut command = std::process::Command::new(&argv[0]);
    command.args(&argv[1..]);
    // SAFETY: only async-signal-safe calls (setpgid, tcsetpgrp, sigprocmask)
    // between fork and exec.
    unsafe { command.pre_exec(foreground_itself) };
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("xlurm __pty: cannot run {}: {e}", argv[0]);
            // As systemd reports a command it cannot execute.
            return 203;
        }
    };
    let pgid = Pid::from_raw(child.id() as i32);
    // Both sides set the group, as shells do: whichever runs first.
    let _ = nix::unistd::setpgid(pgid, pgid);
    let mut stopped = false;
    let mut hung_up = false;
    let status = loop {
        match set.wait() {
            Ok(Signal::SIGHUP) => {
                hung_up = true;
                // The kernel sent it to the foreground group only; the shell
                // may be in another (a full-screen program in front).
                let _ = signal::killpg(pgid, Signal::SIGHUP);
                let _ = signal::killpg(pgid, Signal::SIGCONT);
            }
            Ok(Signal::SIGTERM) => {
                stopped = true;
                let _ = signal::killpg(pgid, Signal::SIGTERM);
            }
            _ => {}
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                eprintln!("xlurm __pty: cannot wait for the command: {e}");
                return 1;
            }
        }
    };
    if stopped {
        die_by(Signal::SIGTERM);
    }
    if hung_up || terminal_gone() {
        die_by(Signal::SIGHUP);
    }
    if let Some(code) = status.code() {
        return code;
    }
    let sig = status.signal().unwrap_or(libc::SIGKILL);
    if let Ok(s) = Signal::try_from(sig) {
        // The command's core, if any, was its own; the wrapper dumps none.
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: setrlimit with a valid struct.
        unsafe { libc::setrlimit(libc::RLIMIT_CORE, &none) };
        die_by(s);
    }
    128 + sig
}

/// In the command, between fork and exec: its own process group, made the
/// terminal's foreground, and every signal unblocked again.
fn foreground_itself() -> std::io::Result<()> {
    // SAFETY: plain system calls on this process and descriptor 0.
    unsafe {
        libc::setpgid(0, 0);
        // tcsetpgrp from a background group raises SIGTTOU unless blocked.
        let mut ttou: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut ttou);
        libc::sigaddset(&mut ttou, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &ttou, std::ptr::null_mut());
        if libc::tcsetpgrp(0, libc::getpgrp()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
    Ok(())
}

/// Whether the terminal's other side (xrun's master) is closed.
fn terminal_gone() -> bool {
    let mut fd = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, no wait.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n > 0 && fd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// Ends this process by `sig`, as the kernel would.
fn die_by(sig: Signal) -> ! {
    // SAFETY: resetting a disposition to its default.
    let _ = unsafe { signal::signal(sig, SigHandler::SigDfl) };
    let mut one = SigSet::empty();
    one.add(sig);
    let _ = signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&one), None);
    let _ = signal::raise(sig);
    std::process::exit(128 + sig as i32)
}

//! `xlurm __tee-output [--open PATH] -- CMD...`: the in-job half of `--output`.
//!
//! xlurmd starts a job that has an output file as this wrapper, with the file
//! (opened by the user's own client, passed over D-Bus and to systemd) as its
//! standard input descriptor. The wrapper runs the command with stdin
//! `/dev/null` and stdout+stderr on a pipe, and copies everything to both its
//! own stdout (the journal) and the file. It runs as the user, inside the
//! job's unit, so the copy needs no root process and outlives daemon restarts.
//! It exits as the command did (re-raising a fatal signal), and with 203 when
//! the command cannot be executed, like systemd itself.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};

/// The file to copy into: descriptor 0 as systemd passed it, or, with
/// `--open PATH` (an array's task, whose file is named only when it starts),
/// `PATH` opened here, as the job's user, relative to its directory.
fn output_file(open: Option<&str>) -> Option<std::fs::File> {
    let Some(path) = open else {
        // SAFETY: fd 0 was given to us by systemd (StandardInputFileDescriptor=)
        // and nothing else in this process uses it.
        return Some(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(0) }));
    };
    // Not through a symbolic link: the name is predictable (`%A_%a`) and
    // the directory may be another user's to write (second review, M4).
    // The mode is 0666 less the job's UMask=, the submitter's umask.
    match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!(
                "xlurm: cannot open the --output file {path}: {e}; the output is in the journal only"
            );
            None
        }
    }
}

/// Runs the wrapper (`open`: its `--open PATH`); returns only on setup errors.
pub fn main(open: Option<&str>, argv: &[String]) -> i32 {
    if argv.is_empty() {
        eprintln!("xlurm __tee-output: no command given");
        return 2;
    }
    let mut file = output_file(open);
    // The file starts empty when the job starts, as Slurm's `--output` does
    // (the client opened it without truncating, so a refused submission
    // leaves it as it was).
    if let Some(Err(e)) = file
        .as_ref()
        .filter(|_| open.is_none())
        .map(|f| f.set_len(0))
    {
        eprintln!("xlurm __tee-output: cannot truncate the output file: {e}");
    }
    let (reader, writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xlurm __tee-output: cannot create a pipe: {e}");
            return 1;
        }
    };
    let writer2 = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("xlurm __tee-output: {e}");
            return 1;
        }
    };
    // The command must not inherit the output file as its stdin.
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("xlurm: cannot execute {}: {e}", argv[0]);
            return 203;
        }
    };
    drop(cmd);
    // systemd's SIGTERM goes to the whole cgroup: let the command end and
    // keep copying until its output is drained.
    // SAFETY: changing this process's own signal disposition.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    let mut reader = reader;
    let mut stdout = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    let mut file_ok = true;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let _ = stdout.write_all(&buf[..n]);
                let _ = stdout.flush();
                if file_ok
                    && file
                        .as_mut()
                        .is_some_and(|f| f.write_all(&buf[..n]).is_err())
                {
                    file_ok = false;
                    eprintln!(
                        "xlurm: writing the --output file failed; output continues in the journal"
                    );
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    if let Some(f) = &file {
        let _ = f.sync_all();
    }
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("xlurm __tee-output: waiting for the command: {e}");
            return 1;
        }
    };
    if let Some(sig) = status.signal() {
        // Die the same way, so systemd records the signal.
        // SAFETY: resetting and raising a signal in this process.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    status.code().unwrap_or(1)
}

//! The in-job `xrun --pty` wrapper (`xlurm __pty`), run on a real
//! pseudo-terminal as systemd starts it: a session of its own, the terminal's
//! peer as its three standard streams, no controlling terminal yet.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Starts `xlurm __pty -- sh -c SCRIPT` on a new pty; returns the wrapper and
/// the master.
fn start(script: &str) -> (Child, std::fs::File) {
    let (master, peer) = xlurm::wire::pty::open().unwrap();
    let stdio = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xlurm"));
    cmd.args(["__pty", "--", "/bin/sh", "-c", script])
        .stdin(stdio(&peer))
        .stdout(stdio(&peer))
        .stderr(stdio(&peer));
    // SAFETY: setsid only, between fork and exec (systemd does the same).
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
            Ok(())
        })
    };
    let child = cmd.spawn().unwrap();
    drop(peer);
    (child, std::fs::File::from(master))
}

/// Reads from the master until `want` appears (the command is ready).
fn expect(master: &mut std::fs::File, want: &str) -> String {
    let mut seen = String::new();
    let mut buf = [0u8; 256];
    while !seen.contains(want) {
        let n = master.read(&mut buf).expect("the terminal closed early");
        assert!(n > 0, "the terminal closed before {want:?}: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    seen
}

fn wait(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the wrapper did not end in 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_hang_up_ends_it_by_sighup_even_when_the_command_exits_0_on_eof() {
    // The shell ignores SIGHUP and reads EOF: exec'd as the session leader it
    // would exit 0 and the job would look COMPLETED.
    let (mut child, mut master) = start("trap '' HUP; echo ready; read x; exit 0");
    expect(&mut master, "ready");
    drop(master);
    let status = wait(&mut child);
    assert_eq!(status.signal(), Some(libc::SIGHUP), "{status:?}");
}

#[test]
fn the_command_s_exit_status_is_its_own() {
    let (mut child, mut master) = start("echo ready; exit 5");
    expect(&mut master, "ready");
    assert_eq!(wait(&mut child).code(), Some(5));
}

#[test]
fn a_command_killed_by_a_signal_ends_it_by_the_same_signal() {
    let (mut child, mut master) = start("echo ready; kill -USR1 $$; sleep 5");
    expect(&mut master, "ready");
    assert_eq!(wait(&mut child).signal(), Some(libc::SIGUSR1));
}

#[test]
fn the_command_is_the_terminal_s_foreground_group_and_ctrl_c_reaches_it_only() {
    // /proc/PID/stat: field 5 is the process group, 8 the terminal's
    // foreground group.
    let (mut child, mut master) = start(
        "set -- $(cat /proc/$$/stat); echo pgrp=$5 fg=$8; \
         trap 'echo got-int; exit 9' INT; echo ready; \
         while :; do sleep 0.1; done",
    );
    let seen = expect(&mut master, "ready");
    let line = seen.lines().find(|l| l.contains("pgrp=")).unwrap();
    let mut parts = line.split_whitespace();
    let pgrp = parts.next().unwrap().trim_start_matches("pgrp=");
    let fg = parts.next().unwrap().trim_start_matches("fg=");
    assert_eq!(pgrp, fg, "{seen:?}");
    assert_ne!(pgrp, child.id().to_string(), "the wrapper's own group");
    master.write_all(b"\x03").unwrap();
    expect(&mut master, "got-int");
    assert_eq!(wait(&mut child).code(), Some(9));
}

#[test]
fn sigterm_from_systemd_is_passed_on_and_ends_it_by_sigterm() {
    let (mut child, mut master) =
        start("trap 'exit 0' TERM; echo ready; while :; do sleep 0.1; done");
    expect(&mut master, "ready");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(wait(&mut child).signal(), Some(libc::SIGTERM));
}

#[test]
fn a_command_that_does_not_exist_is_203_as_systemd_says() {
    let (master, peer) = xlurm::wire::pty::open().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xlurm"));
    cmd.args(["__pty", "--", "/nonexistent/cmd"])
        .stdin(Stdio::from(peer.try_clone().unwrap()))
        .stdout(Stdio::from(peer.try_clone().unwrap()))
        .stderr(Stdio::from(peer));
    // SAFETY: setsid only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
            Ok(())
        })
    };
    let mut child = cmd.spawn().unwrap();
    let mut master = std::fs::File::from(master);
    expect(&mut master, "cannot run /nonexistent/cmd");
    assert_eq!(wait(&mut child).code(), Some(203));
}

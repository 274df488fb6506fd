//! `xrun --pty`: an interactive job on a terminal of its own, like
//! `srun --pty bash` or `systemd-run --pty`.
//!
//! xrun (the user's own process) opens a pseudo-terminal, passes its peer to
//! xlurmd in the spec (`pty_fd`; xlurmd checks it is the caller's and hands
//! the same descriptor to systemd, see `daemon::pty` and `docs/pty.md`), and
//! forwards between its own terminal and the pty's master: keys in, output
//! out, window size changes (SIGWINCH) across. While the job waits, xrun says
//! so and Ctrl-C withdraws it; once it runs, xrun's terminal is raw, so
//! Ctrl-C, Ctrl-Z and the rest reach the job's foreground processes through
//! its terminal. The job's exit code is xrun's. SIGHUP or SIGTERM to xrun
//! (its terminal or ssh connection gone) cancel the job.

use super::client::{connect, explain, Dict, SchedulerProxy};
use super::follow::{say, stamp, Stops};
use super::run::exit_code_of;
use super::submit::{spec_from, submit_with_output};
use super::SubmitArgs;
use crate::wire::keys;
use anyhow::{anyhow, Context, Result};
use nix::fcntl::OFlag;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;
use tokio::io::unix::AsyncFd;

/// A pseudo-terminal: the master xrun keeps, the peer the job gets.
struct Pty {
    master: OwnedFd,
    peer: OwnedFd,
}

impl Pty {
    fn open() -> Result<Pty> {
        let (master, peer) =
            crate::wire::pty::open().context("cannot open a pseudo-terminal (posix_openpt)")?;
        Ok(Pty { master, peer })
    }
}

/// Copies the window size of `from` (xrun's terminal) to `to` (the pty),
/// which signals SIGWINCH to the job's foreground processes.
fn copy_size(from: BorrowedFd<'_>, to: BorrowedFd<'_>) {
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ/TIOCSWINSZ read and write one winsize.
    unsafe {
        if libc::ioctl(from.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) == 0 {
            libc::ioctl(to.as_raw_fd(), libc::TIOCSWINSZ, &ws);
        }
    }
}

/// xrun's terminal in raw mode while the job runs; restored when dropped.
struct Raw {
    saved: nix::sys::termios::Termios,
}

impl Raw {
    fn enter() -> Option<Raw> {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let stdin = std::io::stdin();
        let saved = tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).ok()?;
        Some(Raw { saved })
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        use nix::sys::termios::{tcsetattr, SetArg};
        let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSADRAIN, &self.saved);
    }
}

/// The caller's login shell (`$SHELL` is not trusted to exist in the job).
fn login_shell() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.shell.display().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/bin/sh".into())
}

/// Writes all of `buf` to the non-blocking master.
async fn write_all(master: &AsyncFd<OwnedFd>, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        let mut guard = master.writable().await?;
        match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), buf).map_err(Into::into)) {
            Ok(Ok(n)) => buf = &buf[n..],
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
    Ok(())
}

/// Reads what the master has now; `None` at its end (EIO: no peer left).
fn read_now(master: &OwnedFd, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
    match nix::unistd::read(master, buf) {
        Ok(0) | Err(nix::errno::Errno::EIO) => Ok(None),
        Ok(n) => Ok(Some(n)),
        Err(e) => Err(e.into()),
    }
}

fn out(bytes: &[u8]) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(bytes);
    let _ = o.flush();
}

pub(super) async fn run_pty(mut a: SubmitArgs, user: bool) -> Result<i32> {
    if a.res.requeue || a.res.array.is_some() || a.res.output.is_some() {
        anyhow::bail!(
            "--pty runs one interactive job on your terminal: not with --requeue, --array or --output"
        );
    }
    if a.command.is_empty() {
        a.command = vec![login_shell()];
    }
    let pty = Pty::open()?;
    let p = connect(user).await?;
    let mut spec = spec_from(&a.res, a.command.clone(), None)?;
    let fd = zbus::Fd::from(&pty.peer);
    let v = zbus::OwnedVariant::try_from(zbus::Variant::Fd(fd))
        .map_err(|e| anyhow!("cannot pass the terminal: {e}"))?;
    spec.insert(crate::wire::pty::SPEC_KEY.into(), v);
    let mut changes = super::follow::Changes::subscribe(&p).await?;
    let (id, _) = submit_with_output(&p, spec, None, user).await?;
    // xlurmd holds it now (then systemd): the job's end closes the last one.
    drop(pty.peer);
    let stdin = std::io::stdin();
    let tty = nix::unistd::isatty(stdin.as_fd()).unwrap_or(false);
    if tty {
        copy_size(stdin.as_fd(), pty.master.as_fd());
    }
    let mut stops = Stops::new()?;
    let mut cancelled = false;
    let mut said_waiting = false;
    // Wait for the start (or an end without one).
    let job = loop {
        let job = p.get_job(id).await.map_err(|e| explain(e, user))?;
        let state = keys::job::STATE.text(&job);
        if state != "PENDING" {
            break job;
        }
        if !said_waiting {
            say!(
                "[{}] job {id}: Waiting for resources... {} (Ctrl-C withdraws it)",
                stamp(),
                keys::job::REASON.text(&job)
            );
            said_waiting = true;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(1000)) => {}
            _ = changes.wait_for(id) => {}
            _ = stops.next(), if !cancelled => {
                cancelled = true;
                say!("[{}] job {id}: withdrawing...", stamp());
                if let Err(e) = p.cancel(id).await {
                    say!("xrun: cancelling job {id}: {}", explain(e, user));
                }
            }
        }
    };
    let job = if keys::job::STATE.text(&job) == "RUNNING" {
        say!("[{}] job {id}: Task started (interactive).", stamp());
        forward(&p, id, pty.master, tty, &mut stops, &mut changes, user).await?
    } else {
        job
    };
    let state = keys::job::STATE.text(&job);
    let code = exit_code_of(&job);
    if state != "COMPLETED" && state != "FAILED" {
        say!(
            "[{}] job {id}: {state}: {}",
            stamp(),
            keys::job::DETAIL.text(&job)
        );
    }
    Ok(code)
}

/// Forwards between xrun's terminal and the job's until the job ends;
/// returns the ended job.
async fn forward(
    p: &SchedulerProxy<'_>,
    id: u64,
    master: OwnedFd,
    tty: bool,
    stops: &mut Stops,
    changes: &mut super::follow::Changes,
    user: bool,
) -> Result<Dict> {
    nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
        .context("the pty's master")?;
    // SAFETY: the AsyncFd owns `master`, which stays open as long as it does.
    let master =
        unsafe { AsyncFd::register(master) }.map_err(|e| anyhow!("the pty's master: {e}"))?;
    let raw = if tty { Raw::enter() } else { None };
    // Keys, read on a thread of their own (a blocking read of stdin).
    let (keys_tx, mut keys) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        let mut input = std::io::stdin().lock();
        while let Ok(n) = input.read(&mut buf) {
            if n == 0 || keys_tx.blocking_send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut cancelled = false;
    let mut check = tokio::time::interval(Duration::from_millis(500));
    let job = loop {
        tokio::select! {
            r = master.readable() => {
                let mut guard = r?;
                match guard.try_io(|fd| read_now(fd.get_ref(), &mut buf)) {
                    Ok(Ok(Some(n))) => out(&buf[..n]),
                    // No peer left: the job is ending; its state says how.
                    Ok(Ok(None)) | Ok(Err(_)) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(_would_block) => {}
                }
            }
            k = keys.recv() => {
                if let Some(k) = k {
                    write_all(&master, &k).await.ok();
                }
            }
            _ = winch.recv() => {
                if tty {
                    copy_size(std::io::stdin().as_fd(), master.get_ref().as_fd());
                }
            }
            _ = check.tick() => {
                let job = p.get_job(id).await.map_err(|e| explain(e, user))?;
                if keys::job::STATE.text(&job) != "RUNNING" {
                    break job;
                }
            }
            _ = changes.wait_for(id) => {
                let job = p.get_job(id).await.map_err(|e| explain(e, user))?;
                if keys::job::STATE.text(&job) != "RUNNING" {
                    break job;
                }
            }
            _ = stops.next(), if !cancelled => {
                // The terminal or the connection went away (SIGHUP), or xrun
                // was told to stop: the job goes too.
                cancelled = true;
                let _ = p.cancel(id).await;
            }
        }
    };
    // What the job printed last is in the pty already.
    while let Ok(Some(n)) = read_now(master.get_ref(), &mut buf) {
        out(&buf[..n]);
    }
    drop(raw);
    Ok(job)
}

//! `xrun`: submits a job, follows it to its end, prints its output, and
//! exits with its exit code.

use super::client::{connect, explain, Dict, SchedulerProxy};
use super::follow::{say, stamp, stdout_closed, LogStream, Stops};
use super::submit::{output_of, spec_from, submit_with_output};
use super::SubmitArgs;
use crate::wire::keys;
use anyhow::Result;
use std::time::{Duration, Instant};

/// Exit codes of `xrun` for jobs that did not exit on their own; see the README.
pub const EXIT_TIMEOUT: i32 = 124;
pub const EXIT_LAUNCH_FAILED: i32 = 125;
pub const EXIT_LOST: i32 = 126;
pub const EXIT_OOM: i32 = 137;

/// Exit code for a finished job as `xrun` reports it.
pub fn exit_code_of(job: &Dict) -> i32 {
    keys::job::EXIT_CODE.get(job).unwrap_or(1)
}

pub(super) async fn run(a: SubmitArgs, user: bool) -> Result<i32> {
    if a.res.requeue || a.res.array.is_some() {
        anyhow::bail!(
            "--requeue and --array are for batch jobs (xbatch), as in Slurm: xrun waits for its one run"
        );
    }
    let p = connect(user).await?;
    let spec = spec_from(&a.res, a.command.clone(), None)?;
    let output = output_of(&a.res)?;
    // Subscribe before submitting, so no state change is missed.
    let mut changes = super::follow::Changes::subscribe(&p).await?;
    // A closed stdout (`xrun ... | head`) must not kill xrun silently and
    // leave its job running unseen: writes then fail with EPIPE, and xrun
    // cancels the job like a shell pipeline's writer that dies of SIGPIPE.
    // SAFETY: changes only this signal's disposition, to ignore.
    unsafe {
        nix::libc::signal(nix::libc::SIGPIPE, nix::libc::SIG_IGN);
    }
    let (id, _) = submit_with_output(&p, spec, output, user).await?;
    // Created once, before the loop: a signal that arrives while xrun is busy
    // elsewhere is kept for the next select.
    let mut stops = Stops::new()?;
    let t0 = Instant::now();
    let (mut said_waiting, mut said_started, mut cancelled) = (false, false, false);
    // The answer said the job waits. The first look comes once it has
    // started (or ended), or after a second, to say why it waits: a look at
    // once would see it pending and cost xlurmd a call while it starts the
    // job (issue 21).
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        _ = changes.wait_past(id, "PENDING") => {}
        _ = stops.next() => { cancelled = true; cancel_for_exit(&p, id, user).await; }
    }
    let mut stream = LogStream::default();
    // It answered the submission.
    stream.outage.answered = true;
    loop {
        changes.forget_heard();
        // xlurmd restarting (an upgrade, an admin): wait for it, signals and all.
        let Some(job) = stream.outage.check(p.get_job(id).await, user)? else {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = stops.next(), if !cancelled => { cancelled = true; cancel_for_exit(&p, id, user).await; }
            }
            continue;
        };
        let state = keys::job::STATE.text(&job);
        if keys::job::START_TIME.get(&job).unwrap_or(0) > 0 && state == "RUNNING" {
            if !said_started {
                say!("[{}] job {id}: Task started.", stamp());
                said_started = true;
            }
            stream.pump(&p, id, user).await?;
        }
        // The reader may go away while the job prints nothing: then only
        // poll tells.
        if !cancelled && (stream.closed || stdout_closed()) {
            say!(
                "[{}] job {id}: xrun's output was closed (its reader went away); cancelling...",
                stamp()
            );
            if let Err(e) = p.cancel(id).await {
                say!("xrun: cancelling job {id}: {}", explain(e, user));
            }
            // What a shell reports for a writer killed by SIGPIPE.
            return Ok(128 + nix::libc::SIGPIPE);
        }
        match state.as_str() {
            "PENDING" => {
                if !said_waiting && t0.elapsed() > Duration::from_secs(1) {
                    say!(
                        "[{}] job {id}: Waiting for resources... {}",
                        stamp(),
                        keys::job::REASON.text(&job)
                    );
                    said_waiting = true;
                }
            }
            "RUNNING" => {
                if !said_started {
                    say!("[{}] job {id}: Task started.", stamp());
                    said_started = true;
                }
            }
            _ => {
                if !said_started && keys::job::START_TIME.get(&job).unwrap_or(0) > 0 {
                    say!("[{}] job {id}: Task started.", stamp());
                }
                if keys::job::START_TIME.get(&job).unwrap_or(0) > 0 {
                    stream.drain(&p, id, user).await?;
                }
                let code = exit_code_of(&job);
                let detail = keys::job::DETAIL.text(&job);
                if state != "COMPLETED" && state != "FAILED"
                    || !detail.is_empty() && state == "FAILED"
                {
                    say!("[{}] job {id}: {state}: {detail}", stamp());
                } else {
                    say!("[{}] job {id}: {state} (exit {code})", stamp());
                }
                // Worth a line for a job with accelerators, or a long one.
                let ran = keys::job::END_TIME
                    .get(&job)
                    .unwrap_or(0)
                    .saturating_sub(keys::job::START_TIME.get(&job).unwrap_or(0));
                let gpu = keys::job::GPU_UTIL_MEAN.get(&job).is_some();
                if gpu || ran >= 60_000_000 {
                    if let Some(e) = crate::cli::format::efficiency(&job) {
                        say!("[{}] job {id}: efficiency: {e}", stamp());
                    }
                }
                return Ok(code);
            }
        }
        // Output is polled while running; otherwise a state change wakes us
        // (with a slow poll as a safety net).
        let tick = if said_started { 200 } else { 1000 };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(tick)) => {}
            _ = changes.wait_for(id) => {}
            _ = stops.next(), if !cancelled => { cancelled = true; cancel_for_exit(&p, id, user).await; }
        }
    }
}

async fn cancel_for_exit(p: &SchedulerProxy<'_>, id: u64, user: bool) {
    say!("[{}] job {id}: cancelling...", stamp());
    if let Err(e) = p.cancel(id).await {
        say!("xrun: cancelling job {id}: {}", explain(e, user));
    }
}

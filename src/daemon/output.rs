//! `--output PATH`: copying a job's output into a file the *client* opened.
//!
//! The client opens the file with the user's own rights and passes the
//! descriptor over D-Bus, so no root process ever opens a user-chosen path.
//! The daemon parks the descriptor in systemd's file descriptor store
//! (`FDSTORE=1`, `FDNAME=xlurm-out-<id>`, needs `FileDescriptorStoreMax=` in the
//! unit) so it survives daemon restarts, and copies the job's journal lines
//! into it as they come, remembering the journal cursor in the job record so a
//! restart neither loses nor repeats lines. When the job has ended and the
//! journal has nothing more, the descriptor is closed and dropped from the store.

use super::job::JobState;
use super::service::Daemon;
use crate::core::JobId;
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

fn unstore(id: JobId) {
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

/// Copies job `id`'s output into its descriptor until the job has ended and
/// the journal is drained.
pub async fn pump(d: Arc<Daemon>, id: JobId) {
    let Some(fd) = d.outputs.lock().await.remove(&id) else {
        return;
    };
    let mut file = std::fs::File::from(fd);
    let mut ended_at: Option<Instant> = None;
    let mut empty_after_end = 0;
    loop {
        let (unit, cursor, state) = {
            let st = d.state.lock().await;
            match st.jobs.get(&id) {
                Some(j) => (
                    j.unit.clone(),
                    j.output
                        .as_ref()
                        .map(|o| o.cursor.clone())
                        .unwrap_or_default(),
                    j.state,
                ),
                None => return,
            }
        };
        if state == JobState::Pending {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        let page = match super::journal::read(id, &unit, &cursor, 20_000, d.settings.unit.user_mode)
            .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(job = id, "reading output for --output: {e:#}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let n = page.lines.len();
        if n > 0 {
            let mut buf = String::new();
            for l in &page.lines {
                buf.push_str(l);
                buf.push('\n');
            }
            let joined = tokio::task::spawn_blocking(move || {
                let r = file.write_all(buf.as_bytes());
                (r, file)
            })
            .await;
            let (res, f) = match joined {
                Ok(x) => x,
                Err(e) => {
                    finish(&d, id, Some(format!("the writer failed: {e}"))).await;
                    return;
                }
            };
            file = f;
            if let Err(e) = res {
                finish(&d, id, Some(format!("writing the output file failed: {e}"))).await;
                return;
            }
            let mut st = d.state.lock().await;
            if let Some(job) = st.jobs.get_mut(&id) {
                if let Some(o) = job.output.as_mut() {
                    o.cursor = page.cursor.clone();
                }
                let job = job.clone();
                let _ = st.store.save([&job]);
            }
        }
        if state.is_final() {
            let t = *ended_at.get_or_insert_with(Instant::now);
            empty_after_end = if n == 0 { empty_after_end + 1 } else { 0 };
            if empty_after_end >= 2 && t.elapsed() > Duration::from_millis(500)
                || t.elapsed() > Duration::from_secs(30)
            {
                let _ = file.sync_all();
                finish(&d, id, None).await;
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(if n > 0 { 50 } else { 200 })).await;
    }
}

async fn finish(d: &Arc<Daemon>, id: JobId, error: Option<String>) {
    unstore(id);
    let mut st = d.state.lock().await;
    if let Some(job) = st.jobs.get_mut(&id) {
        if let Some(o) = job.output.as_mut() {
            o.done = true;
            o.error = error.clone().unwrap_or_default();
        }
        let job = job.clone();
        let _ = st.store.save([&job]);
    }
    if let Some(e) = error {
        tracing::warn!(job = id, "--output copy stopped: {e}");
    }
}

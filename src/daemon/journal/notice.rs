//! Writing to the journal: xlurmd's notices to a job's owner, which show up
//! among the job's own lines, and waiting until journald has stored them.

use anyhow::{Context, Result};

use super::{blocking, JOURNALCTL};

/// The unit whose entries with a job's `XLURM_JOB_ID` are notices to that
/// job's owner: `_SYSTEMD_UNIT` is set by journald from the sender's cgroup,
/// so only xlurmd writes them.
pub const NOTICE_UNIT: &str = "xlurmd.service";

/// journald's socket for structured entries (`sd_journal_send`'s).
const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// The fields of a notice entry (journald's native protocol: `FIELD=value`
/// lines; `message` is made one line).
pub fn notice_fields(id: u64, kind: &str, message: &str) -> String {
    let line: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!(
        "MESSAGE=xlurm: {line}\nPRIORITY=4\nSYSLOG_IDENTIFIER=xlurmd\nXLURM_JOB_ID={id}\nXLURM_NOTICE={kind}\n"
    )
}

/// Tells job `id`'s owner something through the job's own log (`xlurm log`
/// shows it among the job's lines): an entry of xlurmd's with the job's
/// `XLURM_JOB_ID`. A journal that cannot be reached is logged, not an error.
pub fn notice(id: u64, kind: &str, message: &str) {
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot tell job {id}'s owner ({message}): {e}");
            return;
        }
    };
    if let Err(e) = sock.send_to(notice_fields(id, kind, message).as_bytes(), JOURNAL_SOCKET) {
        tracing::warn!("cannot tell job {id}'s owner through the journal ({message}): {e}");
    }
}

/// Asks journald to store everything sent to it so far and waits until it
/// has: `io.systemd.Journal.Synchronize` on its varlink socket, as
/// `journalctl --sync` does.
fn sync_varlink() -> Result<()> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect("/run/systemd/journal/io.systemd.journal")
        .context("connecting to journald's varlink socket")?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    s.write_all(b"{\"method\":\"io.systemd.Journal.Synchronize\",\"parameters\":{}}\0")?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 512];
    while !reply.contains(&0) {
        let n = s.read(&mut buf).context("reading journald's reply")?;
        if n == 0 {
            anyhow::bail!("journald closed the varlink connection");
        }
        reply.extend_from_slice(&buf[..n]);
    }
    let end = reply.iter().position(|b| *b == 0).unwrap_or(reply.len());
    let v: serde_json::Value =
        serde_json::from_slice(&reply[..end]).context("journald's varlink reply")?;
    if let Some(e) = v.get("error") {
        anyhow::bail!("journald refused to synchronize: {e}");
    }
    Ok(())
}

/// Waits until journald has stored everything sent to it so far (root only):
/// over varlink, else with `journalctl --sync`.
pub async fn sync(journalctl: &str) -> Result<()> {
    if journalctl == JOURNALCTL {
        match blocking(sync_varlink).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::debug!("journal sync over varlink: {e:#}; running journalctl --sync")
            }
        }
    }
    let out = tokio::process::Command::new(journalctl)
        .arg("--sync")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .output()
        .await
        .context("running journalctl --sync")?;
    if !out.status.success() {
        anyhow::bail!(
            "journalctl --sync failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

//! What the journal still holds: whether a user's old output was rotated
//! away, and whether a unit was seen starting.

use anyhow::{Context, Result};

use super::sd_journal::{self, Journal};
use super::{blocking, native};

/// When the oldest entry of user `uid` the journal still holds was written
/// (µs since the epoch), if entries before it were deleted; 0 if none is
/// known lost. journald files a user's output in that user's own journal
/// files (`SplitMode=uid`) and deletes the oldest files first when it reaches
/// its size limits, so that user's output older than this is gone. In-process,
/// the entries journald stored from `since_usec` (the job's start) up to it
/// tell whether anything was deleted (`nothing_lost_between`: a user's first
/// entry is not a loss); through journalctl this is not checked. (For root, whose entries share the system files with boot
/// messages, this finds rotation less often: it may under-report.)
pub async fn oldest_usec(
    journalctl: &str,
    uid: u32,
    user_mode: bool,
    since_usec: u64,
) -> Result<u64> {
    if native(journalctl, user_mode) {
        let found = blocking(move || {
            let mut j = Journal::open()?;
            j.add_match(&format!("_UID={uid}"))?;
            j.seek_head()?;
            if !j.step()? {
                return Ok(None);
            }
            let (oldest, cursor) = (j.realtime()?, j.cursor()?);
            // The user's oldest entry may simply be their first (a new user,
            // a fresh journal): nothing was lost if the entry journald stored
            // just before it, whoever wrote it, is still there. A file
            // journald deleted leaves a gap in the numbers instead.
            Ok(Some(
                if nothing_lost_between(&mut j, &cursor, since_usec)? {
                    0
                } else {
                    oldest
                },
            ))
        })
        .await;
        // In the VM this sometimes found nothing while journald was rotating
        // the files under it (CI, VM 28): then ask journalctl, which did not.
        match found {
            Ok(Some(t)) => return Ok(t),
            Ok(None) => {
                tracing::debug!("no entry of uid {uid} found in-process; asking journalctl")
            }
            Err(e) => {
                tracing::warn!("reading the journal's head in-process: {e:#}; asking journalctl")
            }
        }
    }
    let mut cmd = tokio::process::Command::new(journalctl);
    cmd.args(["--output=json", "--no-pager", "--quiet"]);
    if user_mode {
        cmd.arg("--user");
    }
    cmd.arg(format!("_UID={uid}"));
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    // journalctl starts at the head: its first entry is the oldest.
    let mut child = cmd.spawn().context("running journalctl")?;
    let stdout = child.stdout.take().context("journalctl's output")?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let first = lines
        .next_line()
        .await
        .context("reading journalctl's output")?;
    let _ = child.start_kill();
    let _ = child.wait().await;
    Ok(first.as_deref().map_or(0, realtime_usec))
}

/// How many entries `nothing_lost_between` looks at, at most.
const WALK_BACK: usize = 50_000;

/// Whether journal `j` still holds every entry journald stored from just
/// before `since_usec` up to the one at `cursor`. journald numbers every
/// entry it stores, across all its files, so a deleted file leaves a gap
/// in the numbers; a user's first entry is not a loss. The entries around
/// are other writers', interleaved: their files may outlive the user's, so
/// the whole stretch is checked, not only the entry just before. (A gap of
/// another user's deleted file counts too: by then the journal is rotating
/// that time away.) Drops `j`'s matches.
fn nothing_lost_between(j: &mut Journal, cursor: &str, since_usec: u64) -> Result<bool> {
    let Some((_, last)) = sd_journal::cursor_seqnum(cursor) else {
        return Ok(false);
    };
    j.flush_matches();
    if !j.seek_at(cursor)? {
        return Ok(false);
    }
    // Files of one boot merge by time, which may order two entries of the
    // same instant either way: the numbers seen must be whole, in any order.
    let mut seen = Vec::new();
    let mut reached = false;
    for _ in 0..WALK_BACK {
        if !j.back()? {
            break;
        }
        let Some((_, n)) = sd_journal::cursor_seqnum(&j.cursor()?) else {
            return Ok(false);
        };
        seen.push(n);
        if j.realtime()? < since_usec {
            reached = true;
            break;
        }
    }
    let first = seen.iter().copied().min().unwrap_or(last);
    if !reached && first > 1 && seen.len() < WALK_BACK {
        // The journal's start, yet numbers before it: deleted.
        return Ok(false);
    }
    Ok(contiguous(&mut seen, last))
}

/// Whether `seen` holds every number from its smallest up to `last - 1`.
fn contiguous(seen: &mut [u64], last: u64) -> bool {
    seen.sort_unstable();
    let Some(&first) = seen.first() else {
        return true;
    };
    let mut want = first;
    for &n in seen.iter() {
        if n > want {
            return false;
        }
        want = want.max(n + 1);
    }
    want >= last
}

/// The `__REALTIME_TIMESTAMP` of one `journalctl --output=json` entry (0 if none).
fn realtime_usec(line: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("__REALTIME_TIMESTAMP")?.as_str()?.parse::<u64>().ok())
        .unwrap_or(0)
}

/// systemd's "unit starting" message (`Starting xlurm-job-N.service...`).
const UNIT_STARTING: &str = "MESSAGE_ID=7d4958e842da4a758f6c1cdc7b36dcc5";

/// Whether the journal shows `unit` started (systemd's "Starting" message, or
/// output of the unit itself) at or after `since_usec`.
pub async fn unit_started(
    journalctl: &str,
    unit: &str,
    since_usec: u64,
    user_mode: bool,
) -> Result<bool> {
    if native(journalctl, user_mode) {
        let unit = unit.to_string();
        return blocking(move || {
            let mut j = Journal::open()?;
            j.add_match(&format!("UNIT={unit}"))?;
            j.add_match(UNIT_STARTING)?;
            j.or()?;
            j.add_match(&format!("_SYSTEMD_UNIT={unit}"))?;
            j.seek_realtime(since_usec.saturating_sub(1_000_000))?;
            j.step()
        })
        .await;
    }
    let mut cmd = tokio::process::Command::new(journalctl);
    cmd.args(["--output=json", "--no-pager", "--quiet", "--lines=1"]);
    if user_mode {
        cmd.arg("--user");
    }
    cmd.arg(format!(
        "--since=@{}",
        (since_usec / 1_000_000).saturating_sub(1)
    ));
    // journalctl: "A B + C" matches (A and B) or C.
    let (by_manager, by_itself) = if user_mode {
        ("USER_UNIT", "_SYSTEMD_USER_UNIT")
    } else {
        ("UNIT", "_SYSTEMD_UNIT")
    };
    cmd.args([
        format!("{by_manager}={unit}"),
        UNIT_STARTING.to_string(),
        "+".to_string(),
        format!("{by_itself}={unit}"),
    ]);
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("running journalctl")?;
    if !out.status.success() {
        anyhow::bail!(
            "journalctl failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout.iter().any(|b| !b.is_ascii_whitespace()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_in_the_journals_numbers_is_a_loss() {
        assert!(contiguous(&mut [], 9), "nothing before it");
        assert!(contiguous(&mut [8, 6, 7], 9), "any order");
        assert!(!contiguous(&mut [8, 6], 9), "7 was deleted");
        assert!(!contiguous(&mut [5, 6], 9), "7 and 8 were deleted");
        assert!(contiguous(&mut [6, 7, 7, 8], 9));
    }

    #[test]
    fn realtime_timestamps_are_read_as_journalctl_prints_them() {
        assert_eq!(
            realtime_usec(r#"{"__REALTIME_TIMESTAMP":"1764500000123456","MESSAGE":"x"}"#),
            1_764_500_000_123_456
        );
        assert_eq!(realtime_usec(r#"{"MESSAGE":"x"}"#), 0);
        assert_eq!(realtime_usec("not json"), 0);
    }
}

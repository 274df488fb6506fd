//! Reading a job's output back from the journal, for its owner.
//!
//! Job output goes to the journal (`StandardOutput=journal`) tagged with
//! `XLURM_JOB_ID=<id>` (`LogExtraFields`). Owners need no journal group: the
//! daemon (root) reads the entries and hands them over in pages, resuming from
//! the journal cursor the previous page ended at. It reads in-process through
//! libsystemd (`sd_journal`) when the configured program is the plain
//! `journalctl` and libsystemd loads; otherwise (the `--user` daemon, tests
//! with a double) it runs that program with `--output=json` (one JSON object
//! per entry: structured, not text scraping).

mod history;
mod notice;
pub mod sd_journal;

pub use history::{oldest_usec, unit_started};
pub use notice::{notice, notice_fields, sync, NOTICE_UNIT};

use anyhow::{Context, Result};
use sd_journal::Journal;

/// The program name that means "the system's journalctl" (and allows reading
/// in-process instead).
pub const JOURNALCTL: &str = "journalctl";

/// Whether to read in-process rather than run `journalctl`.
fn native(journalctl: &str, user_mode: bool) -> bool {
    journalctl == JOURNALCTL && !user_mode && sd_journal::available()
}

/// Runs `f` on a blocking thread (sd-journal calls block on file I/O).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .context("the journal reader thread failed")?
}

/// One page of a job's output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub lines: Vec<String>,
    /// Where the next page starts; empty if nothing was read yet.
    pub cursor: String,
    /// The bytes of `lines` so far (see [`PAGE_BYTES`]).
    bytes: usize,
}

/// The most bytes of output one page holds, whatever number of lines was
/// asked for: a reply must stay far below the bus's message limit (32 MiB on
/// the system bus; a bigger one makes dbus-daemon disconnect xlurmd). A page
/// stops at the first line that reaches it; a single line longer than it is
/// cut, saying so.
pub const PAGE_BYTES: usize = 4 << 20;

impl Page {
    fn new(cursor: &str) -> Page {
        Page {
            cursor: cursor.to_string(),
            ..Page::default()
        }
    }

    /// Whether the page has room for another line.
    fn has_room(&self, max_lines: u32) -> bool {
        self.lines.len() < max_lines as usize && self.bytes < PAGE_BYTES
    }

    /// Adds a line, cut to [`PAGE_BYTES`] if it alone is longer.
    fn push(&mut self, mut line: String) {
        if line.len() > PAGE_BYTES {
            let cut = line.len() - PAGE_BYTES;
            let mut end = PAGE_BYTES;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
            line.push_str(&format!(" [xlurm: line cut, {cut} more bytes]"));
        }
        self.bytes += line.len();
        self.lines.push(line);
    }
}

/// The `MESSAGE` of an entry: a string, or an array of bytes for non-UTF-8 text.
fn message(v: &serde_json::Value) -> Option<String> {
    match v.get("MESSAGE")? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(bytes) => {
            let raw: Vec<u8> = bytes
                .iter()
                .filter_map(|b| b.as_u64().map(|b| b as u8))
                .collect();
            Some(String::from_utf8_lossy(&raw).into_owned())
        }
        _ => None,
    }
}

/// Parses `journalctl --output=json` text into a page.
pub fn parse(text: &str, previous_cursor: &str) -> Page {
    let mut page = Page::new(previous_cursor);
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let Some(m) = message(&v) {
            page.push(m);
        }
        if let Some(c) = v.get("__CURSOR").and_then(|c| c.as_str()) {
            page.cursor = c.to_string();
        }
    }
    page
}

/// Where a job's output is in the journal.
#[derive(Debug, Clone, Default)]
pub struct Source {
    pub id: u64,
    /// The job's owner (its processes' `_UID`).
    pub uid: u32,
    pub unit: String,
    /// When the job started, microseconds since the epoch: older entries of a
    /// unit with the same name (job IDs restart after a purge) are not its own.
    pub start_usec: u64,
    /// Read the user's own journal (`--user` mode).
    pub user_mode: bool,
    /// The `journalctl` program.
    pub journalctl: String,
}

/// Reads up to `max` entries of a job's output after `cursor` (from the start if empty).
pub async fn read(src: &Source, cursor: &str, max: u32) -> Result<Page> {
    if native(&src.journalctl, src.user_mode) {
        let (owned, at) = (src.clone(), cursor.to_string());
        // journald may rotate or delete files while they are read (seen in
        // the VM, VM 28): a fresh look at the journal usually succeeds, and
        // journalctl is the last resort.
        match blocking(move || {
            read_native(&owned, &at, max).or_else(|first| {
                tracing::debug!("reading the journal in-process: {first:#}; once more");
                read_native(&owned, &at, max)
            })
        })
        .await
        {
            Ok(page) => return Ok(page),
            Err(e) => {
                tracing::warn!("reading the journal in-process: {e:#}; asking journalctl")
            }
        }
    }
    read_journalctl(src, cursor, max).await
}

/// `read`, through `journalctl`.
async fn read_journalctl(src: &Source, cursor: &str, max: u32) -> Result<Page> {
    let (id, unit, user_mode) = (src.id, src.unit.as_str(), src.user_mode);
    let mut cmd = tokio::process::Command::new(&src.journalctl);
    cmd.args(["--output=json", "--no-pager", "--quiet"]);
    // Not --system: journald files the output of a job running as alice in
    // user-1001.journal (SplitMode=uid), which --system would skip.
    if user_mode {
        cmd.arg("--user");
    }
    // LogExtraFields (XLURM_JOB_ID) reach journald only for the system
    // manager's units (it reads them from /run/systemd/units/): a user
    // manager's job is found by its unit or its output's identifier (see
    // `unit::properties`), within the user's own journal (--user), and its
    // start time.
    if user_mode {
        cmd.args([
            format!("_SYSTEMD_USER_UNIT={unit}"),
            "+".to_string(),
            format!("SYSLOG_IDENTIFIER={}", crate::unit_name::log_identifier(id)),
        ]);
    } else {
        cmd.arg(format!("_SYSTEMD_UNIT={unit}"));
        cmd.arg(format!("XLURM_JOB_ID={id}"));
        // And xlurmd's notices to the job's owner (see `notice`).
        cmd.args([
            "+".to_string(),
            format!("_SYSTEMD_UNIT={NOTICE_UNIT}"),
            format!("XLURM_JOB_ID={id}"),
        ]);
    }
    // Not _SYSTEMD_INVOCATION_ID: journald finds it through the writing
    // process's cgroup, so lines written just before the job exits often lack
    // it (VM 28 lost a job's last line so). The unit, the job ID (stream
    // metadata, on every line) and the start time identify the job.
    // journalctl takes either --since or --after-cursor.
    if src.start_usec > 0 && cursor.is_empty() {
        cmd.arg(format!(
            "--since=@{}",
            (src.start_usec / 1_000_000).saturating_sub(1)
        ));
    }
    if !cursor.is_empty() {
        cmd.arg(format!("--after-cursor={cursor}"));
    }
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    // Read only the first `max` entries (and PAGE_BYTES) and stop journalctl
    // there: a page costs what it holds, not the whole rest of the job's output.
    let mut child = cmd.spawn().context("running journalctl")?;
    let stdout = child.stdout.take().context("journalctl's output")?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let mut page = Page::new(cursor);
    while page.has_room(max) {
        match lines
            .next_line()
            .await
            .context("reading journalctl's output")?
        {
            Some(l) => {
                let entry = parse(&l, &page.cursor);
                page.cursor = entry.cursor;
                for m in entry.lines {
                    page.push(m);
                }
            }
            None => break,
        }
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    Ok(page)
}

/// `read`, in-process.
fn read_native(src: &Source, cursor: &str, max: u32) -> Result<Page> {
    let mut j = Journal::open()?;
    j.add_match(&format!("_SYSTEMD_UNIT={}", src.unit))?;
    j.add_match(&format!("XLURM_JOB_ID={}", src.id))?;
    // And xlurmd's notices to the job's owner (see `notice`).
    j.or()?;
    j.add_match(&format!("_SYSTEMD_UNIT={NOTICE_UNIT}"))?;
    j.add_match(&format!("XLURM_JOB_ID={}", src.id))?;
    if cursor.is_empty() {
        j.seek_realtime(src.start_usec.saturating_sub(1_000_000))?;
    } else {
        j.seek_after(cursor)?;
    }
    let mut page = Page::new(cursor);
    while page.has_room(max) && j.step()? {
        if let Some(m) = j.data("MESSAGE")? {
            page.push(String::from_utf8_lossy(&m).into_owned());
        }
        page.cursor = j.cursor()?;
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_stops_at_its_byte_budget_and_cuts_a_giant_line() {
        let mut page = Page::new("");
        let line = "x".repeat(3000);
        while page.has_room(100_000) {
            page.push(line.clone());
        }
        let bytes: usize = page.lines.iter().map(String::len).sum();
        assert!((PAGE_BYTES..PAGE_BYTES + 3000).contains(&bytes), "{bytes}");
        assert!(!page.has_room(100_000));
        // Lines, not bytes, when they come first.
        let mut page = Page::new("");
        while page.has_room(3) {
            page.push("a".into());
        }
        assert_eq!(page.lines.len(), 3);
        // One line longer than a page: cut, saying how much is missing.
        let mut page = Page::new("");
        page.push("é".repeat(PAGE_BYTES));
        assert!(page.lines[0].len() < PAGE_BYTES + 100);
        assert!(
            page.lines[0].ends_with(&format!("[xlurm: line cut, {} more bytes]", PAGE_BYTES)),
            "{}",
            &page.lines[0][page.lines[0].len() - 60..]
        );
    }

    /// A job that printed 12,000 lines of 3,000 bytes (36 MB, more than the
    /// system bus carries in one message): each page stays within its budget
    /// and the pages together give every line back.
    #[tokio::test]
    async fn a_user_managers_job_is_read_by_its_unit_or_its_identifier_the_systems_by_neither() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("journalctl");
        let args = dir.path().join("args");
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho \"$*\" >>'{}'\n", args.display()),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        for user_mode in [true, false] {
            let src = Source {
                id: 7,
                unit: "xlurm-job-7.service".into(),
                user_mode,
                journalctl: script.to_string_lossy().into_owned(),
                ..Default::default()
            };
            read(&src, "", 10).await.unwrap();
        }
        let calls = std::fs::read_to_string(&args).unwrap();
        let calls: Vec<&str> = calls.lines().collect();
        // journalctl: "A + B" is A or B. A line journald could not tie to
        // the user manager's unit (its process gone) still has the identifier.
        assert!(
            calls[0].contains(
                "--user _SYSTEMD_USER_UNIT=xlurm-job-7.service + SYSLOG_IDENTIFIER=xlurm-job-7"
            ),
            "{}",
            calls[0]
        );
        // The system manager names the unit in the stream itself: there the
        // identifier, which any process may set, is never taken.
        assert!(!calls[1].contains("SYSLOG_IDENTIFIER"), "{}", calls[1]);
        assert!(calls[1].contains("_SYSTEMD_UNIT=xlurm-job-7.service XLURM_JOB_ID=7"));
    }

    #[tokio::test]
    async fn long_lines_come_back_whole_in_pages_of_bounded_size() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("journalctl");
        // Entry i has cursor c<i>; --after-cursor=c<k> resumes after it.
        let body = "y".repeat(2990);
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nstart=0\nfor a; do case $a in --after-cursor=c*) start=${{a#--after-cursor=c}} ;; esac; done\n\
                 seq $((start + 1)) 12000 | sed 's/.*/{{\"__CURSOR\":\"c&\",\"MESSAGE\":\"&:{body}\"}}/'\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let src = Source {
            id: 1,
            unit: "xlurm-job-1.service".into(),
            journalctl: script.to_string_lossy().into_owned(),
            ..Default::default()
        };
        let (mut cursor, mut seen, mut pages) = (String::new(), 0u32, 0);
        loop {
            let page = read(&src, &cursor, 20_000).await.unwrap();
            if page.lines.is_empty() {
                break;
            }
            let bytes: usize = page.lines.iter().map(String::len).sum();
            assert!(bytes < PAGE_BYTES + 3100, "page of {bytes} bytes");
            for l in &page.lines {
                seen += 1;
                assert!(
                    l.starts_with(&format!("{seen}:")),
                    "line {seen} out of order"
                );
            }
            cursor = page.cursor;
            pages += 1;
        }
        assert_eq!(seen, 12_000);
        assert!(pages >= 9, "36 MB in pages of 4 MiB: {pages}");
    }

    #[test]
    fn parses_entries_text_and_bytes_and_keeps_the_last_cursor() {
        let text = concat!(
            r#"{"__CURSOR":"s=1;i=1","MESSAGE":"hello"}"#,
            "\n",
            r#"{"__CURSOR":"s=1;i=2","MESSAGE":[104,105,255]}"#,
            "\n",
            "not json\n",
            r#"{"__CURSOR":"s=1;i=3"}"#,
            "\n",
        );
        let page = parse(text, "start");
        assert_eq!(
            page.lines,
            vec!["hello".to_string(), "hi\u{fffd}".to_string()]
        );
        assert_eq!(page.cursor, "s=1;i=3");
        assert_eq!(parse("", "c0").cursor, "c0");
    }
}

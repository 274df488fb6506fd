//! Job state on disk: an append-only log of job records, one JSON line each.
//!
//! Each change appends the job's whole record and syncs it, so submitting the
//! 100,000th job costs what the first did; the last record of an ID wins. The
//! log is compacted (rewritten atomically: temp file, fsync, rename) at start
//! and when it grows past twice its live size, which is also when forwarded
//! environments of started jobs leave the disk. A line that cannot be read is
//! never overwritten: the file is kept aside as `jobs.log.corrupt-<time>` and
//! reported.

use super::job::Job;
use crate::core::JobId;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub struct Store {
    dir: PathBuf,
    log: File,
    /// Records in the log, live or superseded.
    lines: usize,
}

/// What was found on disk at start.
pub struct Loaded {
    pub jobs: BTreeMap<JobId, Job>,
    pub next_id: JobId,
    /// Set when a damaged log was kept aside.
    pub warning: Option<String>,
}

const LOG: &str = "jobs.log";
const NEXT: &str = "next-id";

impl Store {
    /// Opens (creating) the state directory, loads the jobs and compacts.
    pub fn open(dir: &Path) -> Result<(Store, Loaded)> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} root-only", dir.display()))?;
        let path = dir.join(LOG);
        let (jobs, warning) = match read_log(&path) {
            Ok(jobs) => (jobs, None),
            Err(e) => {
                let aside = dir.join(format!("{LOG}.corrupt-{}", now_secs()));
                std::fs::rename(&path, &aside)
                    .with_context(|| format!("keeping damaged {} aside", path.display()))?;
                let jobs = read_log_lenient(&aside);
                let msg = format!(
                    "{} was damaged ({e:#}); kept it as {} and recovered {} jobs from it",
                    path.display(),
                    aside.display(),
                    jobs.len()
                );
                (jobs, Some(msg))
            }
        };
        let stored_next = std::fs::read_to_string(dir.join(NEXT))
            .ok()
            .and_then(|s| s.trim().parse::<JobId>().ok())
            .unwrap_or(1);
        let next_id = stored_next.max(jobs.keys().next_back().map_or(1, |id| id + 1));
        write_atomic(dir, LOG, &render(jobs.values())?)?;
        let log = open_append(&path)?;
        let store = Store {
            dir: dir.to_path_buf(),
            log,
            lines: jobs.len(),
        };
        Ok((
            store,
            Loaded {
                jobs,
                next_id,
                warning,
            },
        ))
    }

    /// Appends records and syncs them to disk before returning.
    pub fn save<'a>(&mut self, jobs: impl IntoIterator<Item = &'a Job>) -> Result<()> {
        let mut buf = Vec::new();
        let mut n = 0;
        for job in jobs {
            serde_json::to_writer(&mut buf, &StoredJob::from(job))?;
            buf.push(b'\n');
            n += 1;
        }
        if n == 0 {
            return Ok(());
        }
        self.log
            .write_all(&buf)
            .context("appending to the job log")?;
        self.log.sync_data().context("syncing the job log")?;
        self.lines += n;
        Ok(())
    }

    /// Records the next job ID, so IDs are never reused even after all jobs
    /// are cleaned away.
    pub fn save_next_id(&self, next: JobId) -> Result<()> {
        write_atomic(&self.dir, NEXT, next.to_string().as_bytes())
    }

    /// Rewrites the log with only `live` when it has grown past twice its size.
    pub fn maybe_compact<'a>(
        &mut self,
        live: usize,
        jobs: impl Iterator<Item = &'a Job>,
    ) -> Result<bool> {
        if self.lines <= 2 * live.max(1000) {
            return Ok(false);
        }
        let data = render(jobs)?;
        write_atomic(&self.dir, LOG, &data)?;
        self.log = open_append(&self.dir.join(LOG))?;
        self.lines = live;
        Ok(true)
    }

    pub fn script_dir(&self) -> PathBuf {
        self.dir.join("scripts")
    }
}

/// A job as stored: its forwarded environment only until its unit started.
#[derive(serde::Serialize)]
struct StoredJob<'a> {
    #[serde(flatten)]
    job: std::borrow::Cow<'a, Job>,
}

impl<'a> From<&'a Job> for StoredJob<'a> {
    fn from(job: &'a Job) -> Self {
        if !job.keeps_env() && job.command.env.is_some() {
            let mut j = job.clone();
            j.command.env = None;
            StoredJob {
                job: std::borrow::Cow::Owned(j),
            }
        } else {
            StoredJob {
                job: std::borrow::Cow::Borrowed(job),
            }
        }
    }
}

fn render<'a>(jobs: impl Iterator<Item = &'a Job>) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    for job in jobs {
        serde_json::to_writer(&mut buf, &StoredJob::from(job))?;
        buf.push(b'\n');
    }
    Ok(buf)
}

fn open_append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// Reads the log. A torn last line (a crash mid-append) is dropped; any other
/// unreadable line is an error.
fn read_log(path: &Path) -> Result<BTreeMap<JobId, Job>> {
    let mut jobs = BTreeMap::new();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(jobs),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let lines: Vec<String> = BufReader::new(file)
        .lines()
        .collect::<std::io::Result<_>>()?;
    let last = lines.len().saturating_sub(1);
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Job>(line) {
            Ok(job) => {
                jobs.insert(job.id, job);
            }
            Err(_) if i == last => break,
            Err(e) => anyhow::bail!("line {}: {e}", i + 1),
        }
    }
    Ok(jobs)
}

fn read_log_lenient(path: &Path) -> BTreeMap<JobId, Job> {
    let mut jobs = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(path) {
        for line in text.lines() {
            if let Ok(job) = serde_json::from_str::<Job>(line) {
                jobs.insert(job.id, job);
            }
        }
    }
    jobs
}

/// Writes `name` in `dir` atomically: temp file, fsync, rename, fsync of the dir.
pub fn write_atomic(dir: &Path, name: &str, data: &[u8]) -> Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))
        .with_context(|| format!("renaming {} into place", tmp.display()))?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::job::{tests_support::job_with, JobState, Outcome};

    fn job(id: JobId, state: JobState) -> Job {
        let mut j = job_with(state, Outcome::default());
        j.id = id;
        j.command.env = Some(vec!["SECRET=1".into()]);
        j
    }

    #[test]
    fn jobs_survive_reopen_and_last_record_wins() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, loaded) = Store::open(dir.path()).unwrap();
        assert!(loaded.jobs.is_empty());
        assert_eq!(loaded.next_id, 1);
        s.save([&job(1, JobState::Pending), &job(2, JobState::Pending)])
            .unwrap();
        let mut started = job(1, JobState::Running);
        started.invocation_id = "0123456789abcdef0123456789abcdef".into();
        // Marked RUNNING, but systemd has not started its unit yet.
        let launching = job(3, JobState::Running);
        s.save([&started, &launching]).unwrap();
        s.save_next_id(4).unwrap();
        drop(s);
        let (_, loaded) = Store::open(dir.path()).unwrap();
        assert_eq!(loaded.jobs.len(), 3);
        assert_eq!(loaded.jobs[&1].state, JobState::Running);
        assert_eq!(loaded.next_id, 4);
        // A started job's environment never reaches the disk; one whose unit
        // has not run yet keeps it (a lost start is retried with it).
        assert_eq!(loaded.jobs[&1].command.env, None);
        assert!(loaded.jobs[&2].command.env.is_some());
        assert!(loaded.jobs[&3].command.env.is_some());
        let mode = std::fs::metadata(dir.path().join(LOG))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let dmode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(dmode & 0o777, 0o700);
    }

    #[test]
    fn a_torn_last_line_is_dropped_quietly() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Store::open(dir.path()).unwrap();
        s.save([&job(1, JobState::Pending)]).unwrap();
        drop(s);
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(LOG))
            .unwrap();
        f.write_all(b"{\"id\":2,\"na").unwrap();
        let (_, loaded) = Store::open(dir.path()).unwrap();
        assert_eq!(loaded.jobs.len(), 1);
        assert!(loaded.warning.is_none());
    }

    #[test]
    fn a_damaged_log_is_kept_aside_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Store::open(dir.path()).unwrap();
        s.save([&job(1, JobState::Pending)]).unwrap();
        drop(s);
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(LOG))
            .unwrap();
        f.write_all(b"garbage\n").unwrap();
        let ok = serde_json::to_string(&job(3, JobState::Pending)).unwrap();
        f.write_all(format!("{ok}\n").as_bytes()).unwrap();
        let (_, loaded) = Store::open(dir.path()).unwrap();
        let w = loaded.warning.expect("damage reported");
        assert!(w.contains("corrupt"), "{w}");
        assert_eq!(loaded.jobs.len(), 2);
        assert_eq!(loaded.next_id, 4);
        let aside: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("corrupt"))
            .collect();
        assert_eq!(aside.len(), 1);
        assert!(std::fs::read_to_string(aside[0].path())
            .unwrap()
            .contains("garbage"));
    }
}

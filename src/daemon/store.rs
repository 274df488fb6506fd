//! Job state on disk: an append-only log of job records, one JSON line each.
//!
//! Each change appends the job's whole record and syncs it, so submitting the
//! 100,000th job costs what the first did; the last record of an ID wins. The
//! store knows where each job's current record is, so jobs that ended live in
//! memory only in brief ([`Brief`]) and their whole record is read back from
//! here when asked for ([`Store::read`]). The log is compacted (the current
//! record of each job copied to a new file: temp file, fsync, rename) at start
//! and when it grows past twice its live size, which is also when forwarded
//! environments of started jobs leave the disk. A line that cannot be read is
//! never overwritten: the file is kept aside as `jobs.log.corrupt-<time>` and
//! reported.
//!
//! The log's first line names its format and version
//! (`{"format":"xlurm-jobs-log","version":1}`), written when the log is
//! created and at each compaction. A log without it (written before there
//! was one) is version 1 and gets it at its first compaction, at start. A log
//! of a newer version than this code knows is refused and left as it is
//! ([`NewerLog`]): it is not damaged, only written by a newer xlurmd. A change
//! to the record format raises [`LOG_VERSION`] and migrates older records
//! where they are loaded (`rewrite`), so the log of every earlier version
//! still loads (`tests/store_log_v1.rs`).

mod log_file;

use self::log_file::{
    create_private, header, is_damage, load_in_place, open_append, read_record, rewrite, scan,
    Rewritten,
};
pub use self::log_file::{write_atomic, Damaged, NewerLog, LOG_VERSION};
use super::job::{Briefs, Job, Strings};
use crate::core::JobId;
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Superseded bytes the log may hold besides twice its live records before
/// it is compacted.
pub const COMPACT_SLACK: u64 = 64 << 20;

fn live_bytes(at: &HashMap<JobId, (u64, u32)>) -> u64 {
    at.values().map(|&(_, n)| u64::from(n)).sum()
}

pub struct Store {
    dir: PathBuf,
    /// The log, for appending.
    log: File,
    /// The log, for reading records back.
    reader: File,
    /// Its length in bytes.
    len: u64,
    /// Records in the log, live or superseded.
    lines: usize,
    /// Where each job's current record is: offset and length (with its newline).
    at: HashMap<JobId, (u64, u32)>,
    /// The bytes of those current records.
    live: u64,
    /// Records were appended since the log was last synced ([`Store::append`]).
    unsynced: bool,
    /// Tests: the next writes fail as on a full disk, leaving the log as it is.
    #[cfg(test)]
    pub(crate) fail_writes: bool,
}

/// What was found on disk at start.
pub struct Loaded {
    /// Pending and running jobs.
    pub jobs: crate::daemon::job::Jobs,
    /// Jobs that ended, in brief.
    pub ended: Briefs,
    pub strings: Strings,
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
        // Damage keeps the file aside and recovers what it can; a newer format
        // or a failure to read it (I/O) refuses, changing nothing; a failure
        // to write the compacted copy (a full disk) serves from the log as it is.
        let (current, damaged) = match scan(&path, false) {
            Ok(current) => (current, None),
            Err(e) if is_damage(&e) => (scan(&path, true)?, Some(e)),
            Err(e) => return Err(e),
        };
        let aside = damaged
            .as_ref()
            .map(|_| dir.join(format!("{LOG}.corrupt-{}", now_secs())));
        let (loaded, mut warning) = match rewrite(dir, &path, &current, aside.as_deref()) {
            Ok(loaded) => (loaded, None),
            Err(e) if is_damage(&e) && damaged.is_none() => return Err(e),
            Err(e) => {
                let _ = std::fs::remove_file(dir.join(format!(".{LOG}.tmp")));
                let loaded = load_in_place(&path, &current)?;
                let msg = format!(
                    "could not compact {} ({e:#}); serving its {} jobs from it as it is, \
                     to be compacted at the next start",
                    path.display(),
                    current.len()
                );
                (loaded, Some(msg))
            }
        };
        if let (Some(e), Some(aside)) = (&damaged, &aside) {
            let kept = if aside.exists() {
                format!("kept it as {}", aside.display())
            } else {
                "left it in place until there is room to compact it".to_string()
            };
            let msg = format!(
                "{} was damaged ({e:#}); {kept} and recovered {} jobs from it",
                path.display(),
                current.len()
            );
            warning = Some(match warning {
                Some(w) => format!("{msg}; {w}"),
                None => msg,
            });
        }
        let Rewritten {
            jobs,
            ended,
            strings,
            at,
        } = loaded;
        let stored_next = std::fs::read_to_string(dir.join(NEXT))
            .ok()
            .and_then(|s| s.trim().parse::<JobId>().ok())
            .unwrap_or(1);
        let next_id = stored_next.max(current.keys().next_back().map_or(1, |id| id + 1));
        let log = open_append(&path)?;
        let len = log.metadata()?.len();
        let store = Store {
            dir: dir.to_path_buf(),
            reader: File::open(&path).with_context(|| format!("reading {}", path.display()))?,
            log,
            len,
            lines: at.len(),
            live: live_bytes(&at),
            at,
            unsynced: false,
            #[cfg(test)]
            fail_writes: false,
        };
        Ok((
            store,
            Loaded {
                jobs,
                ended,
                strings,
                next_id,
                warning,
            },
        ))
    }

    /// Appends records and syncs them (and any appended before) to disk
    /// before returning.
    pub fn save<'a>(&mut self, jobs: impl IntoIterator<Item = &'a Job>) -> Result<()> {
        self.write(jobs, true)
    }

    /// Appends records without waiting for the disk: they are durable after
    /// the next [`Store::save`] or [`Store::sync`]. For records that something
    /// else still backs until then (a job's end, kept by its uncollected unit).
    pub fn append<'a>(&mut self, jobs: impl IntoIterator<Item = &'a Job>) -> Result<()> {
        self.write(jobs, false)
    }

    /// Syncs what [`Store::append`] left unsynced.
    pub fn sync(&mut self) -> Result<()> {
        if self.unsynced {
            self.log.sync_data().context("syncing the job log")?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Whether every record appended is on disk.
    pub fn is_synced(&self) -> bool {
        !self.unsynced
    }

    fn write<'a>(&mut self, jobs: impl IntoIterator<Item = &'a Job>, sync: bool) -> Result<()> {
        #[cfg(test)]
        if self.fail_writes {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
                .context("appending to the job log");
        }
        let mut buf = Vec::new();
        let mut placed = Vec::new();
        for job in jobs {
            let start = buf.len();
            // What a detached job let go of is in its current record.
            let attached;
            let job = match job.detached() {
                Some(_) => {
                    let mut j = job.clone();
                    j.attach(self.read(job.id)?);
                    attached = j;
                    &attached
                }
                None => job,
            };
            serde_json::to_writer(&mut buf, job)?;
            buf.push(b'\n');
            let n = u32::try_from(buf.len() - start).context("a job record over 4 GiB")?;
            placed.push((job.id, self.len + start as u64, n));
        }
        if placed.is_empty() {
            return if sync { self.sync() } else { Ok(()) };
        }
        let written = self
            .log
            .write_all(&buf)
            .context("appending to the job log")
            .and_then(|()| {
                if sync {
                    self.log.sync_data().context("syncing the job log")
                } else {
                    Ok(())
                }
            });
        if let Err(e) = written {
            // A full disk can leave part of the records behind: cut the log
            // back, so it stays whole and the offsets of later records right.
            let _ = self.log.set_len(self.len);
            return Err(e);
        }
        self.unsynced = !sync;
        self.len += buf.len() as u64;
        self.lines += placed.len();
        for (id, off, n) in placed {
            if let Some((_, old)) = self.at.insert(id, (off, n)) {
                self.live -= u64::from(old);
            }
            self.live += u64::from(n);
        }
        Ok(())
    }

    /// Job `id`'s current record, read back from the log.
    pub fn read(&self, id: JobId) -> Result<Job> {
        let (off, n) = *self
            .at
            .get(&id)
            .with_context(|| format!("job {id} has no record in the job log"))?;
        let mut buf = Vec::new();
        read_record(&self.reader, off, n, &mut buf)?;
        serde_json::from_slice(&buf).with_context(|| format!("the record of job {id}"))
    }

    /// Forgets job `id` (cleaned away): the next compaction drops its record.
    /// Removes damaged logs kept aside (`jobs.log.corrupt-<time>`) before
    /// `cutoff` (seconds since the epoch): they hold environments and
    /// commands, and are kept for the retention period like the jobs they
    /// hold. Returns the names removed.
    pub fn remove_old_damaged_logs(&self, cutoff: u64) -> Vec<String> {
        let prefix = format!("{LOG}.corrupt-");
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let old = name
                .strip_prefix(&prefix)
                .and_then(|t| t.parse::<u64>().ok())
                .is_some_and(|t| t < cutoff);
            if old && std::fs::remove_file(e.path()).is_ok() {
                removed.push(name);
            }
        }
        removed
    }

    pub fn forget(&mut self, id: JobId) {
        if let Some((_, n)) = self.at.remove(&id) {
            self.live -= u64::from(n);
        }
    }

    /// Records the next job ID, so IDs are never reused even after all jobs
    /// are cleaned away.
    pub fn save_next_id(&self, next: JobId) -> Result<()> {
        write_atomic(&self.dir, NEXT, next.to_string().as_bytes())
    }

    /// Whether the log has grown past twice its live records, counted in
    /// records or in bytes (a few big records written again and again).
    fn wants_compaction(&self) -> bool {
        self.lines > 2 * self.at.len().max(1000) || self.len > 2 * self.live + COMPACT_SLACK
    }

    /// Rewrites the log with each job's current record only, once it has grown
    /// past twice that.
    pub fn maybe_compact(&mut self) -> Result<bool> {
        if !self.wants_compaction() {
            return Ok(false);
        }
        let path = self.dir.join(LOG);
        let tmp = self.dir.join(format!(".{LOG}.tmp"));
        let mut ids: Vec<JobId> = self.at.keys().copied().collect();
        ids.sort_unstable();
        let mut at = HashMap::with_capacity(ids.len());
        let mut len = 0;
        let written = (|| -> Result<()> {
            let mut out = BufWriter::new(create_private(&tmp)?);
            let head = header()?;
            out.write_all(&head)?;
            let mut buf = Vec::new();
            len = head.len() as u64;
            for id in ids {
                let (off, n) = self.at[&id];
                read_record(&self.reader, off, n, &mut buf)?;
                out.write_all(&buf)?;
                at.insert(id, (len, n));
                len += u64::from(n);
            }
            let f = out.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            Ok(())
        })();
        if let Err(e) = written {
            // A full disk: the partial copy would only take the room it lacks.
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("renaming {} into place", tmp.display()))?;
        // The new file is the log from here on: point at it before anything
        // else can fail, or later records would go to the replaced one.
        self.log = open_append(&path)?;
        self.reader = File::open(&path)?;
        self.len = len;
        self.lines = at.len();
        self.live = live_bytes(&at);
        self.at = at;
        self.unsynced = false;
        if let Err(e) = File::open(&self.dir).and_then(|d| d.sync_all()) {
            tracing::warn!(
                "syncing {} after compacting the job log: {e}",
                self.dir.display()
            );
        }
        Ok(true)
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn script_dir(&self) -> PathBuf {
        self.dir.join("scripts")
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;

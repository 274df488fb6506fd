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

use super::job::{Brief, Briefs, Job, Strings};
use crate::core::JobId;
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
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

/// The format the log's first line names.
const LOG_FORMAT: &str = "xlurm-jobs-log";
/// The version of the log's format this code writes, and the newest it reads.
pub const LOG_VERSION: u32 = 1;

/// The log's first line: its format and version.
#[derive(serde::Serialize, serde::Deserialize)]
struct Header {
    format: String,
    version: u32,
}

/// The log's first line as this code writes it, with its newline.
fn header() -> Result<Vec<u8>> {
    let mut line = serde_json::to_vec(&Header {
        format: LOG_FORMAT.into(),
        version: LOG_VERSION,
    })?;
    line.push(b'\n');
    Ok(line)
}

/// A log written by a newer xlurmd, in a format version this one does not
/// know. Refused at start, the file left untouched: not damage, a downgrade.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} is in job log format version {found}, but this xlurmd reads versions up \
     to {supported}: it was written by a newer xlurmd (left as it is; run that \
     version again)",
    path.display()
)]
pub struct NewerLog {
    pub path: PathBuf,
    pub found: u32,
    pub supported: u32,
}

/// A log that holds something other than job records where one should be:
/// damage (a disk error, an edit by hand), as opposed to a failure to read or
/// write the file (an I/O error, a full disk), which changes nothing on disk.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Damaged(pub String);

/// Whether `e` is damage in the log (not an I/O failure).
fn is_damage(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.is::<Damaged>() || c.is::<serde_json::Error>())
}

/// Just the ID of a record (the rest is skipped, not built).
#[derive(serde::Deserialize)]
struct IdOnly {
    id: JobId,
}

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

/// What `rewrite` built.
struct Rewritten {
    jobs: crate::daemon::job::Jobs,
    ended: Briefs,
    strings: Strings,
    at: HashMap<JobId, (u64, u32)>,
}

/// Copies each job's current record (`current`, found by `scan` in `source`)
/// into a fresh `jobs.log` in `dir`, after the header, building the jobs one
/// at a time (see [`load`]). `aside`: for a damaged log, where to keep
/// `source`; it moves there only once the new log is written, just before
/// the new one takes its name.
fn rewrite(
    dir: &Path,
    source: &Path,
    current: &BTreeMap<JobId, (u64, u32)>,
    aside: Option<&Path>,
) -> Result<Rewritten> {
    let tmp = dir.join(format!(".{LOG}.tmp"));
    let mut out = BufWriter::new(create_private(&tmp)?);
    let head = header()?;
    out.write_all(&head)?;
    let mut len = head.len() as u64;
    let r = load(source, current, |record, n| {
        out.write_all(record)?;
        let at = (len, n);
        len += u64::from(n);
        Ok(at)
    })?;
    let f = out.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    if let Some(aside) = aside {
        std::fs::rename(source, aside)
            .with_context(|| format!("keeping damaged {} aside", source.display()))?;
    }
    std::fs::rename(&tmp, dir.join(LOG))
        .with_context(|| format!("renaming {} into place", tmp.display()))?;
    File::open(dir)?.sync_all()?;
    Ok(r)
}

/// The jobs of the log at `path`, their records left where they are: there
/// is no room on the disk for a compacted copy.
fn load_in_place(path: &Path, current: &BTreeMap<JobId, (u64, u32)>) -> Result<Rewritten> {
    let mut at = current.values();
    load(path, current, |_, _| {
        at.next().copied().context("a record without a place")
    })
}

/// Builds the jobs from their current records (`current`, found by `scan`
/// in `source`), one at a time: ended ones are kept in brief only. `place`
/// gets each record (and its length) and says where it is kept. (Records of
/// an earlier format version, once there is one, are to be migrated here.)
fn load(
    source: &Path,
    current: &BTreeMap<JobId, (u64, u32)>,
    mut place: impl FnMut(&[u8], u32) -> Result<(u64, u32)>,
) -> Result<Rewritten> {
    let mut r = Rewritten {
        jobs: crate::daemon::job::Jobs::new(),
        ended: Briefs::default(),
        strings: Strings::default(),
        at: HashMap::with_capacity(current.len()),
    };
    if current.is_empty() {
        return Ok(r);
    }
    let old = File::open(source).with_context(|| format!("reading {}", source.display()))?;
    let mut buf = Vec::new();
    for (id, (off, n)) in current {
        read_record(&old, *off, *n, &mut buf)?;
        let job: Job =
            serde_json::from_slice(&buf).with_context(|| format!("the record of job {id}"))?;
        r.at.insert(*id, place(&buf, *n)?);
        if job.state().is_final() {
            let brief = Brief::of(&job, |s| r.strings.get(s));
            r.ended.insert(*id, brief);
        } else {
            r.jobs.insert(*id, job);
        }
    }
    Ok(r)
}

/// Where each job's last record is in the log at `path` (offset, length).
/// Strict: a torn last line (a crash mid-append) is dropped, any other
/// unreadable line is an error. Lenient (a damaged log): lines that are not
/// whole job records are skipped. Either way, a first line naming a newer
/// format version is a [`NewerLog`] error.
fn scan(path: &Path, lenient: bool) -> Result<BTreeMap<JobId, (u64, u32)>> {
    let mut current = BTreeMap::new();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(current),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut r = BufReader::new(file);
    let mut line = Vec::new();
    let (mut off, mut n) = (0u64, 0usize);
    loop {
        line.clear();
        let got = r.read_until(b'\n', &mut line)?;
        if got == 0 {
            break;
        }
        n += 1;
        let start = off;
        off += got as u64;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if n == 1 {
            if let Ok(h) = serde_json::from_slice::<Header>(&line) {
                check_header(path, &h, lenient)?;
                continue;
            }
        }
        let torn = line.last() != Some(&b'\n');
        let id = if lenient {
            serde_json::from_slice::<Job>(&line).ok().map(|j| j.id)
        } else {
            serde_json::from_slice::<IdOnly>(&line).ok().map(|j| j.id)
        };
        match id {
            Some(id) if !torn => {
                current.insert(
                    id,
                    (start, u32::try_from(got).context("a record over 4 GiB")?),
                );
            }
            _ if torn || lenient => {}
            _ => return Err(Damaged(format!("line {n}: not a job record")).into()),
        }
    }
    Ok(current)
}

/// Whether a log whose first line is `h` can be read (a damaged one, read
/// `lenient`ly, whatever format it names, unless a newer version).
fn check_header(path: &Path, h: &Header, lenient: bool) -> Result<()> {
    if h.format != LOG_FORMAT && !lenient {
        return Err(Damaged(format!("line 1: format {:?}, not {LOG_FORMAT:?}", h.format)).into());
    }
    if h.version > LOG_VERSION {
        return Err(NewerLog {
            path: path.to_path_buf(),
            found: h.version,
            supported: LOG_VERSION,
        }
        .into());
    }
    Ok(())
}

/// Reads the record at `off` (`n` bytes, with its newline) into `buf`.
fn read_record(f: &File, off: u64, n: u32, buf: &mut Vec<u8>) -> Result<()> {
    buf.resize(n as usize, 0);
    f.read_exact_at(buf, off)
        .with_context(|| format!("reading a job record at byte {off} of the job log"))
}

fn create_private(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))
}

fn open_append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// Writes `name` in `dir` atomically: temp file, fsync, rename, fsync of the dir.
pub fn write_atomic(dir: &Path, name: &str, data: &[u8]) -> Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = create_private(&tmp)?;
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
#[path = "store_tests.rs"]
mod tests;

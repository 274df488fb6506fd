//! The `jobs.log` file itself: its header line and version, finding each
//! job's current record (`scan`), building the jobs from them (`load`), and
//! writing a compacted copy (`rewrite`), with the file helpers they share.

use super::LOG;
use crate::core::JobId;
use crate::daemon::job::{Brief, Briefs, Job, Strings};
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The format the log's first line names.
pub(super) const LOG_FORMAT: &str = "xlurm-jobs-log";
/// The version of the log's format this code writes, and the newest it reads.
pub const LOG_VERSION: u32 = 1;

/// The log's first line: its format and version.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct Header {
    format: String,
    version: u32,
}

/// The log's first line as this code writes it, with its newline.
pub(super) fn header() -> Result<Vec<u8>> {
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
pub(super) fn is_damage(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.is::<Damaged>() || c.is::<serde_json::Error>())
}

/// Just the ID of a record (the rest is skipped, not built).
#[derive(serde::Deserialize)]
pub(super) struct IdOnly {
    pub(super) id: JobId,
}

/// What `rewrite` built.
pub(super) struct Rewritten {
    pub(super) jobs: crate::daemon::job::Jobs,
    pub(super) ended: Briefs,
    pub(super) strings: Strings,
    pub(super) at: HashMap<JobId, (u64, u32)>,
}

/// Copies each job's current record (`current`, found by `scan` in `source`)
/// into a fresh `jobs.log` in `dir`, after the header, building the jobs one
/// at a time (see [`load`]). `aside`: for a damaged log, where to keep
/// `source`; it moves there only once the new log is written, just before
/// the new one takes its name.
pub(super) fn rewrite(
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
pub(super) fn load_in_place(
    path: &Path,
    current: &BTreeMap<JobId, (u64, u32)>,
) -> Result<Rewritten> {
    let mut at = current.values();
    load(path, current, |_, _| {
        at.next().copied().context("a record without a place")
    })
}

/// Builds the jobs from their current records (`current`, found by `scan`
/// in `source`), one at a time: ended ones are kept in brief only. `place`
/// gets each record (and its length) and says where it is kept. (Records of
/// an earlier format version, once there is one, are to be migrated here.)
pub(super) fn load(
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
pub(super) fn scan(path: &Path, lenient: bool) -> Result<BTreeMap<JobId, (u64, u32)>> {
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
pub(super) fn check_header(path: &Path, h: &Header, lenient: bool) -> Result<()> {
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
pub(super) fn read_record(f: &File, off: u64, n: u32, buf: &mut Vec<u8>) -> Result<()> {
    buf.resize(n as usize, 0);
    f.read_exact_at(buf, off)
        .with_context(|| format!("reading a job record at byte {off} of the job log"))
}

pub(super) fn create_private(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))
}

pub(super) fn open_append(path: &Path) -> Result<File> {
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

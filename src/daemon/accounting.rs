//! The accounting log: one 48-byte record per ended job
//! (`core::accounting::Record`), appended to a file per month of the job's
//! end (`accounting/YYYY-MM.acct` in the state directory, root-only), kept
//! for `--accounting-retention` (a year by default) apart from the job log's
//! own retention. `xlurm usage` reports over it (`GetUsage`).

use crate::core::accounting::{civil, Record, RECORD_BYTES};
use crate::wire::keys;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::job::{Job, JobState};

/// The directory under the state directory.
pub const DIR: &str = "accounting";

/// The file of the month holding `end` (seconds since the epoch, UTC).
pub fn month_file(end: u64) -> String {
    let (y, m, _) = civil((end / 86_400) as i64);
    format!("{y:04}-{m:02}.acct")
}

/// The first second of the month after the one `name` (`YYYY-MM.acct`)
/// holds, or `None` for a name that is not a month file.
fn month_end(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".acct")?;
    let (y, m) = stem.split_once('-')?;
    let (y, m): (i64, u32) = (y.parse().ok()?, m.parse().ok()?);
    if !(1..=12).contains(&m) || !(1970..=9999).contains(&y) {
        return None;
    }
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let days = crate::core::accounting::days_from_civil(ny, nm, 1);
    u64::try_from(days).ok().map(|d| d * 86_400)
}

/// A job's record, once it ended.
pub fn record_of(job: &Job) -> Record {
    let (start, end) = (job.start_usec() / 1_000_000, job.end_usec() / 1_000_000);
    let started = start > 0;
    let outcome = job.outcome();
    let alloc = job.alloc();
    let gpu = job.gpu_use();
    let clamp32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    Record {
        id: job.id,
        end: clamp32(end),
        wait: if started {
            clamp32(start.saturating_sub(job.submit_usec / 1_000_000))
        } else {
            0
        },
        run: if started {
            clamp32(end.saturating_sub(start))
        } else {
            0
        },
        uid: job.uid,
        cpus: alloc.map_or(0, |a| u16::try_from(a.cpus.len()).unwrap_or(u16::MAX)),
        gpus: alloc.map_or(0, |a| u8::try_from(a.devices.len()).unwrap_or(u8::MAX)),
        state: state_index(job.state()),
        gpu_util: gpu
            .and_then(|g| g.util_mean())
            .map_or(255, |m| m.round().clamp(0.0, 100.0) as u8),
        mem_peak: outcome.and_then(|o| o.memory_peak).unwrap_or(0),
        cpu_secs: clamp32(outcome.and_then(|o| o.cpu_nsec).unwrap_or(0) / 1_000_000_000),
        gpu_mem_peak_mib: gpu
            .and_then(|g| g.mem_peak)
            .map_or(0, |b| clamp32(b.div_ceil(1 << 20))),
    }
}

/// A state's index in records.
pub fn state_index(s: JobState) -> u8 {
    JobState::ALL.iter().position(|x| *x == s).unwrap_or(0) as u8
}

/// The state a record's index names.
pub fn state_name(i: u8) -> &'static str {
    JobState::ALL
        .get(usize::from(i))
        .map_or("UNKNOWN", |s| s.name())
}

/// The accounting log of one state directory.
#[derive(Debug)]
pub struct Ledger {
    dir: PathBuf,
}

impl Ledger {
    /// The log under `state_dir` (made, root-only, when missing).
    pub fn open(state_dir: &Path) -> Result<Ledger> {
        let dir = state_dir.join(DIR);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        Ok(Ledger { dir })
    }

    /// The log in `dir` as [`Ledger::open`] made it (for reading).
    pub fn at(dir: PathBuf) -> Ledger {
        Ledger { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends `r` to its month's file (one write of the whole record).
    pub fn append(&self, r: &Record) -> Result<()> {
        let path = self.dir.join(month_file(u64::from(r.end)));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        f.write_all(&r.encode())
            .with_context(|| format!("appending to {}", path.display()))
    }

    /// Every record of jobs that ended in `[since, until)` (seconds), read
    /// from the month files that overlap it.
    pub fn read(&self, since: u64, until: u64) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        for (name, end) in self.months()? {
            // A month file ends at `end` and began at most 31 days before.
            if end <= since || end.saturating_sub(31 * 86_400) >= until {
                continue;
            }
            let bytes = std::fs::read(self.dir.join(&name))
                .with_context(|| format!("reading {}", self.dir.join(&name).display()))?;
            out.extend(Record::all(&bytes).filter(|r| (since..until).contains(&u64::from(r.end))));
        }
        Ok(out)
    }

    /// The month files there are, with the end of their month.
    fn months(&self) -> Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)
            .with_context(|| format!("listing {}", self.dir.display()))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(end) = month_end(&name) {
                out.push((name, end));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Removes the months that ended more than `retention` seconds before
    /// `now`; returns how many.
    pub fn prune(&self, now: u64, retention: u64) -> Result<usize> {
        let mut n = 0;
        for (name, end) in self.months()? {
            if end.saturating_add(retention) < now {
                std::fs::remove_file(self.dir.join(&name))
                    .with_context(|| format!("removing {name}"))?;
                n += 1;
            }
        }
        Ok(n)
    }
}

/// The option keys of `GetUsage`.
pub const USAGE_KEYS: &str = "period, since, until, all_users, utc_offset";

/// The most rows one report answers (a year by day of 1,000 users would be
/// 365,000: far past what one D-Bus message should carry).
pub const MAX_ROWS: usize = 50_000;

/// What `GetUsage` asks for: the query, and whether every user's jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageAsk {
    pub query: crate::core::accounting::Query,
    pub all_users: bool,
}

/// Parses `GetUsage`'s options (`now`: seconds since the epoch; defaults:
/// by day over the last 30 days, the caller's own jobs, UTC). Unknown keys,
/// wrong types and an empty or reversed window are refused.
pub fn parse_usage(
    d: &std::collections::HashMap<String, zbus::OwnedVariant>,
    uid: u32,
    now: u64,
) -> Result<UsageAsk, crate::wire::error::ApiError> {
    use crate::wire::error::ApiError;
    for k in d.keys() {
        if !USAGE_KEYS.split(", ").any(|known| known == k) {
            return Err(ApiError::InvalidArgs(format!(
                "unknown option {k:?} (valid: {USAGE_KEYS})"
            )));
        }
    }
    let wrong =
        |k: &str, t: &str| ApiError::InvalidArgs(format!("option {k:?} must have type {t}"));
    let period = match d.get("period") {
        None => crate::core::accounting::Period::Day,
        Some(v) => <&str>::try_from(v)
            .map_err(|_| wrong("period", "s"))?
            .parse()
            .map_err(|e: String| ApiError::InvalidArgs(format!("period: {e}")))?,
    };
    let time = |k: &str, default: u64| match d.get(k) {
        None => Ok(default),
        Some(v) => u64::try_from(v).map_err(|_| wrong(k, "t (seconds since the epoch)")),
    };
    let since = time("since", now.saturating_sub(30 * 86_400))?;
    let until = time("until", now.saturating_add(1))?;
    if since >= until {
        return Err(ApiError::InvalidArgs(format!(
            "since ({since}) must be before until ({until})"
        )));
    }
    let utc_offset = match d.get("utc_offset") {
        None => 0,
        Some(v) => i32::try_from(v).map_err(|_| wrong("utc_offset", "i"))?,
    };
    if utc_offset.abs() > 14 * 3600 {
        return Err(ApiError::InvalidArgs(format!(
            "utc_offset {utc_offset}: at most 14 hours either way"
        )));
    }
    let all_users = match d.get("all_users") {
        None => false,
        Some(v) => bool::try_from(v).map_err(|_| wrong("all_users", "b"))?,
    };
    Ok(UsageAsk {
        query: crate::core::accounting::Query {
            period,
            since,
            until,
            uid: (!all_users).then_some(uid),
            utc_offset,
        },
        all_users,
    })
}

/// A report's rows as `GetUsage` answers them (user names from `name`).
pub fn usage_rows(
    rows: &[crate::core::accounting::Row],
    period: crate::core::accounting::Period,
    name: impl Fn(u32) -> String,
) -> Vec<crate::wire::dict::Dict> {
    rows.iter()
        .map(|r| {
            let mut m = crate::wire::dict::Dict::new();
            keys::usage::PERIOD.put(&mut m, crate::core::accounting::label(period, r.day));
            keys::usage::UID.put(&mut m, r.uid);
            keys::usage::USER.put(&mut m, name(r.uid));
            keys::usage::JOBS.put(&mut m, r.jobs());
            let states: std::collections::HashMap<String, u64> = r
                .states
                .iter()
                .map(|(s, n)| (state_name(*s).to_string(), *n))
                .collect();
            keys::usage::STATES.put(&mut m, states);
            keys::usage::CPU_HOURS.put(&mut m, r.cpu_hours);
            keys::usage::CPU_USED_HOURS.put(&mut m, r.cpu_used_hours);
            keys::usage::GPU_HOURS.put(&mut m, r.gpu_hours);
            if let Some(w) = r.wait_median {
                keys::usage::WAIT_MEDIAN.put(&mut m, w);
            }
            if let (Some(p50), Some(p90), Some(max)) = (r.mem_p50, r.mem_p90, r.mem_max) {
                keys::usage::MEM_PEAK_P50.put(&mut m, p50);
                keys::usage::MEM_PEAK_P90.put(&mut m, p90);
                keys::usage::MEM_PEAK_MAX.put(&mut m, max);
            }
            if let Some(u) = r.gpu_util {
                keys::usage::GPU_UTIL.put(&mut m, u);
            }
            m
        })
        .collect()
}

/// The report `ask` asks of the log in `dir`, as `GetUsage` answers it
/// (blocking: file reads and NSS lookups).
pub fn usage_report(
    dir: PathBuf,
    ask: &UsageAsk,
) -> Result<Vec<crate::wire::dict::Dict>, crate::wire::error::ApiError> {
    use crate::wire::error::ApiError;
    let records = Ledger::at(dir)
        .read(ask.query.since, ask.query.until)
        .map_err(|e| ApiError::Failed(format!("reading the accounting log: {e:#}")))?;
    let rows = crate::core::accounting::report(records, &ask.query);
    if rows.len() > MAX_ROWS {
        return Err(ApiError::InvalidRequest(format!(
            "the report has {} rows, more than {MAX_ROWS}: use a coarser period or a shorter window",
            rows.len()
        )));
    }
    let mut names: std::collections::HashMap<u32, String> = std::collections::HashMap::new();
    for r in &rows {
        names.entry(r.uid).or_insert_with(|| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(r.uid))
                .ok()
                .flatten()
                .map_or_else(|| r.uid.to_string(), |x| x.name)
        });
    }
    Ok(usage_rows(&rows, ask.query.period, |u| {
        names.get(&u).cloned().unwrap_or_default()
    }))
}

/// Bytes one record costs on disk.
pub const BYTES_PER_JOB: usize = RECORD_BYTES;

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, end: u32) -> Record {
        Record {
            id,
            end,
            uid: 1000,
            ..Default::default()
        }
    }

    #[test]
    fn records_go_to_their_months_file_and_read_back_by_window() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::open(dir.path()).unwrap();
        let nov = crate::core::accounting::days_from_civil(2026, 11, 30) as u32 * 86_400;
        let dec = crate::core::accounting::days_from_civil(2026, 12, 1) as u32 * 86_400;
        l.append(&rec(1, nov + 100)).unwrap();
        l.append(&rec(2, dec + 5)).unwrap();
        l.append(&rec(3, dec + 50)).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(l.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["2026-11.acct", "2026-12.acct"]);
        assert_eq!(
            std::fs::metadata(l.dir().join("2026-12.acct"))
                .unwrap()
                .len(),
            2 * BYTES_PER_JOB as u64
        );
        let ids = |v: Vec<Record>| v.iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(ids(l.read(0, u64::MAX).unwrap()), [1, 2, 3]);
        assert_eq!(
            ids(l.read(u64::from(dec), u64::from(dec) + 10).unwrap()),
            [2]
        );
        assert_eq!(ids(l.read(0, u64::from(dec)).unwrap()), [1]);
        // Other files in the directory are not months.
        std::fs::write(l.dir().join("notes.txt"), "x").unwrap();
        std::fs::write(l.dir().join("2026-13.acct"), "x").unwrap();
        assert_eq!(ids(l.read(0, u64::MAX).unwrap()), [1, 2, 3]);
    }

    #[test]
    fn months_past_the_retention_are_removed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::open(dir.path()).unwrap();
        let day = |y, m, d| crate::core::accounting::days_from_civil(y, m, d) as u64 * 86_400;
        l.append(&rec(1, day(2025, 10, 15) as u32)).unwrap();
        l.append(&rec(2, day(2025, 12, 31) as u32)).unwrap();
        l.append(&rec(3, day(2026, 12, 1) as u32)).unwrap();
        // A year before 2026-12-02: October 2025 ended before it, December 2025 not.
        let removed = l.prune(day(2026, 12, 2), 365 * 86_400).unwrap();
        assert_eq!(removed, 1);
        let ids: Vec<u64> = l.read(0, u64::MAX).unwrap().iter().map(|r| r.id).collect();
        assert_eq!(ids, [2, 3]);
    }

    #[test]
    fn state_indexes_name_the_states() {
        for s in JobState::ALL {
            assert_eq!(state_name(state_index(s)), s.name());
        }
        assert_eq!(state_name(200), "UNKNOWN");
    }
}

#[cfg(test)]
mod usage_option_tests {
    use super::*;
    use crate::wire::error::ApiError;
    use crate::wire::spec::entry;

    fn ask(pairs: Vec<(String, zbus::OwnedVariant)>) -> Result<UsageAsk, ApiError> {
        parse_usage(&pairs.into_iter().collect(), 1000, 10_000_000)
    }

    #[test]
    fn get_usage_options_default_to_the_callers_last_30_days_and_refuse_bad_ones() {
        let a = ask(vec![]).unwrap();
        assert_eq!(a.query.uid, Some(1000));
        assert_eq!(a.query.since, 10_000_000 - 30 * 86_400);
        assert!(!a.all_users);
        assert!(ask(vec![entry("all_users", true)])
            .unwrap()
            .query
            .uid
            .is_none());
        let refused = [
            vec![entry("bogus", 1u32)],
            vec![entry("period", "year")],
            vec![entry("period", 3u32)],
            vec![entry("since", 5u64), entry("until", 5u64)],
            vec![entry("since", "yesterday")],
            vec![entry("utc_offset", 15 * 3600)],
            vec![entry("all_users", "yes")],
        ];
        for opts in refused {
            let text = format!("{opts:?}");
            assert!(matches!(ask(opts), Err(ApiError::InvalidArgs(_))), "{text}");
        }
    }
}

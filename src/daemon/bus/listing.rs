//! Listing jobs: the filter, the summary lines, and the two ways a listing
//! leaves the daemon.
//!
//! `ListJobs` returns a D-Bus array, at most [`PAGE_BYTES`] of it: the system
//! bus refuses a message over 32 MiB and disconnects its *sender*, so one
//! unbounded reply about a busy week could knock xlurmd off the bus. A client
//! pages with the `before` filter key while `more` is true.
//! `ListJobsByFileDescriptor` (like systemd's `DumpByFileDescriptor`) writes
//! any number of lines, in the same D-Bus encoding, to a sealed memfd: the bus
//! relays one descriptor instead of megabytes, and lines are encoded straight
//! from the daemon's records and decoded into borrowed [`Line`]s, so listing
//! 100,000 jobs takes tens of milliseconds, not hundreds.

use crate::core::{Demand, JobId};
use crate::daemon::job::{Admission, Brief, Job, JobState};
use crate::daemon::service::{Found, State};
use crate::wire::error::ApiError;
use crate::wire::queue::{JobSummary, Line};
use std::borrow::Cow;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use zbus::OwnedVariant;

/// The most one `ListJobs` reply carries, in (estimated) bytes on the wire:
/// a quarter of the system bus's 32 MiB message limit.
pub const PAGE_BYTES: usize = 8 << 20;

/// The filter keys of `ListJobs`.
pub const FILTER_KEYS: &str = "all_users, states, limit, finished, before";

/// What a listing asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Every user's jobs, not only the caller's.
    pub all_users: bool,
    /// Finished jobs too (when `states` is not given).
    pub finished: bool,
    /// Only jobs in these states (finished or not).
    pub states: Option<Vec<JobState>>,
    /// At most this many: the newest.
    pub limit: usize,
    /// Only jobs with smaller IDs (the next page).
    pub before: Option<JobId>,
}

impl Filter {
    /// Parses an `a{sv}` filter; unknown keys and wrong types are refused.
    pub fn parse(d: &HashMap<String, OwnedVariant>) -> Result<Filter, ApiError> {
        for k in d.keys() {
            if !FILTER_KEYS.split(", ").any(|known| known == k) {
                return Err(ApiError::InvalidArgs(format!(
                    "unknown filter key {k:?} (valid: {FILTER_KEYS})"
                )));
            }
        }
        let wrong = |k: &str, t: &str| {
            ApiError::InvalidArgs(format!("filter key {k:?} must have type {t}"))
        };
        let flag = |k: &str| match d.get(k) {
            None => Ok(false),
            Some(v) => bool::try_from(v).map_err(|_| wrong(k, "b")),
        };
        let limit = match d.get("limit") {
            None => usize::MAX,
            Some(v) => u32::try_from(v).map_err(|_| wrong("limit", "u"))? as usize,
        };
        let before = match d.get("before") {
            None => None,
            Some(v) => Some(u64::try_from(v).map_err(|_| wrong("before", "t"))?),
        };
        let states = match d.get("states") {
            None => None,
            Some(v) => {
                let names: Vec<String> = v
                    .try_clone()
                    .ok()
                    .and_then(|v| Vec::<String>::try_from(v).ok())
                    .ok_or_else(|| wrong("states", "as"))?;
                let mut out = Vec::new();
                for n in names {
                    out.push(
                        JobState::parse(&n)
                            .ok_or_else(|| ApiError::InvalidArgs(format!("unknown state {n:?}")))?,
                    );
                }
                Some(out)
            }
        };
        Ok(Filter {
            all_users: flag("all_users")?,
            finished: flag("finished")?,
            states,
            limit,
            before,
        })
    }

    fn keeps(&self, uid: u32, id: JobId, j: &Found<'_>) -> bool {
        self.before.is_none_or(|b| id < b)
            && (self.all_users || j.uid() == uid)
            && match &self.states {
                Some(s) => s.contains(&j.state()),
                None => self.finished || !j.state().is_final(),
            }
    }
}

fn brief_line(id: JobId, b: &Brief) -> Line<'_> {
    Line {
        id,
        name: Cow::Borrowed(&b.name),
        uid: b.uid,
        user: Cow::Borrowed(&b.user),
        state: Cow::Borrowed(b.state.name()),
        reason: Cow::Borrowed(""),
        submit_time: b.submit_usec,
        start_time: b.start_usec,
        end_time: b.end_usec,
        time_limit: b.time_limit_secs,
        cpus: b.cpus,
        mem: b.mem_bytes,
        spread: b.spread,
        devices: Cow::Borrowed(&b.devices),
        exit_code: b.exit_code,
        detail: Cow::Borrowed(&b.detail),
        array: match b.task() {
            Some((array, index)) => Cow::Owned(crate::core::array::task_label(array, index)),
            None => Cow::Borrowed(""),
        },
    }
}

/// A whole job's line; `requested` is its `devices_requested()`.
fn job_line<'a>(job: &'a Job, reason: &'a str, requested: &'a str) -> Line<'a> {
    Line {
        id: job.id,
        name: Cow::Borrowed(&job.name),
        uid: job.uid,
        user: Cow::Borrowed(&job.user),
        state: Cow::Borrowed(job.state().name()),
        reason: Cow::Borrowed(reason),
        submit_time: job.submit_usec,
        start_time: job.start_usec(),
        end_time: job.end_usec(),
        time_limit: job.demand.time_limit_secs,
        cpus: job.demand.cpus,
        mem: job.demand.mem_bytes,
        spread: job.alloc().is_some_and(|a| a.spread),
        devices: job
            .devices_allocated()
            .map_or(Cow::Borrowed(requested), Cow::Owned),
        exit_code: job.exit_code().unwrap_or(-1),
        detail: Cow::Borrowed(job.outcome().map_or("", |o| o.detail.as_str())),
        array: match &job.array {
            Some(_) => Cow::Owned(job.listed_label()),
            None => Cow::Borrowed(""),
        },
    }
}

/// The jobs `uid` may list with `f`, newest first, in full or in brief.
fn newest<'a>(st: &'a State, uid: u32, f: &'a Filter) -> impl Iterator<Item = (JobId, Found<'a>)> {
    let only_active = !f.finished && f.states.is_none();
    let jobs: Box<dyn Iterator<Item = (JobId, Found<'_>)>> = if only_active {
        // Ended jobs in brief are never active: skip them.
        Box::new(st.jobs.iter().rev().map(|(id, j)| (*id, Found::Full(j))))
    } else {
        Box::new(st.newest_first())
    };
    jobs.filter(move |(id, j)| f.keeps(uid, *id, j))
}

/// Builds the lines of `jobs` on the fly, borrowing from the records, and
/// gives each to `emit` until it says stop. A pending job's reason and
/// requested devices depend only on its demand, its owner (their limits)
/// and whether it is the head, so consecutive pending jobs of one owner with
/// the same demand (an array, a batch) share the last ones worked out.
fn lines<'a>(
    st: &'a State,
    jobs: impl Iterator<Item = (JobId, Found<'a>)>,
    mut emit: impl FnMut(&Line<'_>) -> bool,
) {
    let head = st.sched.head();
    let mut memo: Option<(&Demand, bool, u32, String, String)> = None;
    for (id, j) in jobs {
        let scratch: String;
        let reqs: String;
        let line = match j {
            Found::Full(job) => {
                let is_head = head == Some(id);
                if job.admission() != Admission::Queued {
                    // Kept out of the queue: its own reason.
                    scratch = st.reason(id).map(|r| r.to_string()).unwrap_or_default();
                    reqs = job.devices_requested();
                    job_line(job, &scratch, &reqs)
                } else if job.state() == JobState::Pending {
                    let known = matches!(&memo, Some((d, h, u, _, _))
                        if *d == &job.demand && *h == is_head && *u == job.uid);
                    if !known {
                        let reason = st.sched.reason(id).map(|r| r.to_string());
                        let requested = job.devices_requested();
                        let key = (&job.demand, is_head, job.uid);
                        memo = Some((key.0, key.1, key.2, reason.unwrap_or_default(), requested));
                    }
                    let (_, _, _, reason, requested) = memo.as_ref().expect("just set");
                    job_line(job, reason, requested)
                } else {
                    scratch = job.devices_requested();
                    job_line(job, job.flag().unwrap_or(""), &scratch)
                }
            }
            Found::Brief(b) => brief_line(id, b),
        };
        if !emit(&line) {
            return;
        }
    }
}

/// `ListJobs`: the lines `uid` asked for with `f`, oldest first, at most
/// `max_bytes` of them on the wire, and whether older matching jobs were left
/// out (by the limit or the size).
pub fn collect(st: &State, uid: u32, f: &Filter, max_bytes: usize) -> (Vec<JobSummary>, bool) {
    let mut out = Vec::new();
    let (mut bytes, mut more) = (0, false);
    lines(st, newest(st, uid, f), |l| {
        let size = l.wire_bytes();
        if out.len() >= f.limit || (bytes + size > max_bytes && !out.is_empty()) {
            more = true;
            return false;
        }
        bytes += size;
        out.push(JobSummary::from(l.clone()));
        true
    });
    out.reverse();
    (out, more)
}

/// `ListJobsByFileDescriptor`: every line `uid` asked for with `f`, encoded
/// as `a(tsusssttttutbsiss)`, oldest first, written to `out` (at its start) in
/// pieces, not built whole in memory first.
pub fn encode(st: &State, uid: u32, f: &Filter, out: &std::fs::File) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    const PIECE: usize = 256 << 10;
    // The oldest job to list: without a limit, the first; with one, a pass
    // that only filters finds it. Then one pass in order.
    let oldest = match f.limit {
        usize::MAX => Some(0),
        n => newest(st, uid, f).take(n).last().map(|(id, _)| id),
    };
    let mut piece = Vec::with_capacity(PIECE + 4096);
    piece.extend_from_slice(&[0; 8]);
    let (mut written, mut failed) = (0usize, None);
    let mut w = out;
    if let Some(oldest) = oldest {
        let jobs = st
            .oldest_first(oldest)
            .filter(|(id, j)| f.keeps(uid, *id, j));
        lines(st, jobs, |l| {
            // Pieces end 8-aligned, so alignment within one is alignment in the file.
            l.write(&mut piece);
            if piece.len() >= PIECE {
                let end = piece.len().next_multiple_of(8);
                piece.resize(end, 0);
                if let Err(e) = w.write_all(&piece) {
                    failed = Some(e);
                    return false;
                }
                written += piece.len();
                piece.clear();
            }
            true
        });
    }
    if let Some(e) = failed {
        return Err(e);
    }
    // Trailing padding is not part of the array.
    let end = piece.len();
    w.write_all(&piece)?;
    let len = (written + end - 8) as u32;
    out.write_all_at(&len.to_le_bytes(), 0)
}

/// A sealed memfd holding what `write` writes, to be read from offset 0.
pub fn to_memfd(
    write: impl FnOnce(&std::fs::File) -> std::io::Result<()>,
) -> anyhow::Result<OwnedFd> {
    use anyhow::Context as _;
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    use std::io::Seek;
    let fd = memfd_create(
        c"xlurm-jobs",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .context("creating a memfd for the job list")?;
    let mut file = std::fs::File::from(fd);
    write(&file).context("writing the job list")?;
    file.rewind().context("rewinding the job list")?;
    let size = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW;
    // F_SEAL_WRITE fails with EBUSY while the kernel holds a transient
    // reference to one of the pages (memory compaction, DAMON sampling: seen
    // in the daemon benchmark). The list is then sealed against resizing
    // only: xlurmd writes nothing more into it either way.
    let all = size | SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_SEAL;
    match fcntl(&file, FcntlArg::F_ADD_SEALS(all)) {
        Err(nix::errno::Errno::EBUSY) => {
            fcntl(&file, FcntlArg::F_ADD_SEALS(size | SealFlag::F_SEAL_SEAL))
                .context("sealing the job list")?;
        }
        r => {
            r.context("sealing the job list")?;
        }
    }
    Ok(file.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Limits, Machine, Policy, Scheduler, Topology};
    use crate::daemon::store::Store;
    use crate::wire::queue::{read_fd, LINE_FIXED_BYTES};

    /// A state holding `n` ended jobs in brief: odd IDs alice's, even bob's.
    fn state(dir: &std::path::Path, n: u64) -> State {
        let (store, loaded) = Store::open(dir).unwrap();
        let limits = Limits {
            max_running: 1,
            max_lifetime_secs: 60,
            min_job_mem: 1,
        };
        let sched = Scheduler::new(
            Machine::new(Topology::single(1, 1 << 30), vec![]),
            Policy::FifoStrict,
            limits,
        );
        let mut st = State::new(sched, loaded, store);
        for id in 1..=n {
            let (uid, user) = if id % 2 == 1 {
                (1001, "alice")
            } else {
                (1002, "bob")
            };
            let brief = Brief {
                submit_usec: id,
                start_usec: id + 1,
                end_usec: id + 2,
                mem_bytes: 1 << 20,
                time_limit_secs: 60,
                uid,
                cpus: 1,
                exit_code: (id % 3) as i32,
                state: if id % 3 == 0 {
                    JobState::Completed
                } else {
                    JobState::Failed
                },
                spread: false,
                task_array: if id.is_multiple_of(5) { id - 1 } else { 0 },
                task_index: 3,
                name: format!("job-{id}").into(),
                user: user.into(),
                devices: "cpu".into(),
                detail: "exited".into(),
            };
            st.ended.insert(id, brief);
        }
        st
    }

    fn all() -> Filter {
        Filter {
            all_users: true,
            finished: true,
            limit: usize::MAX,
            ..Filter::default()
        }
    }

    #[test]
    fn pages_cover_every_job_once_in_order_and_say_when_more_remain() {
        let dir = tempfile::tempdir().unwrap();
        let st = state(dir.path(), 1000);
        let (whole, more) = collect(&st, 0, &all(), usize::MAX);
        assert!(!more);
        assert_eq!(
            whole.iter().map(|j| j.id).collect::<Vec<_>>(),
            (1..=1000).collect::<Vec<_>>()
        );
        // Pages of about 7 lines, newest first, each oldest first.
        let page = 7 * (LINE_FIXED_BYTES + 30);
        let mut f = all();
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let (jobs, more) = collect(&st, 0, &f, page);
            pages += 1;
            assert!(
                !jobs.is_empty() && jobs.len() <= 7,
                "page of {}",
                jobs.len()
            );
            assert!(jobs.windows(2).all(|w| w[0].id < w[1].id));
            let first = jobs[0].id;
            seen.splice(0..0, jobs);
            if !more {
                break;
            }
            f.before = Some(first);
        }
        assert!(pages > 100);
        assert_eq!(seen, whole, "the pages put together are the whole list");
    }

    #[test]
    fn one_line_longer_than_a_page_still_comes_alone() {
        let dir = tempfile::tempdir().unwrap();
        let st = state(dir.path(), 3);
        let (jobs, more) = collect(&st, 0, &all(), 1);
        assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![3]);
        assert!(more);
    }

    #[test]
    fn limit_users_and_states_filter_and_more_means_more_match() {
        let dir = tempfile::tempdir().unwrap();
        let st = state(dir.path(), 10);
        let mut f = all();
        f.limit = 3;
        let (jobs, more) = collect(&st, 0, &f, usize::MAX);
        assert_eq!(
            jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
            vec![8, 9, 10]
        );
        assert!(more);
        // Only alice's (the caller's) jobs without all_users.
        f = Filter {
            all_users: false,
            ..all()
        };
        let (jobs, more) = collect(&st, 1001, &f, usize::MAX);
        assert!(jobs.iter().all(|j| &*j.user == "alice") && jobs.len() == 5);
        assert!(!more);
        // Exactly as many as match: nothing more.
        f = Filter { limit: 5, ..f };
        assert!(!collect(&st, 1001, &f, usize::MAX).1);
        f = Filter {
            states: Some(vec![JobState::Completed]),
            ..all()
        };
        let (jobs, _) = collect(&st, 0, &f, usize::MAX);
        assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![3, 6, 9]);
        assert!(jobs.iter().all(|j| &*j.state == "COMPLETED"));
        // Finished jobs are left out unless asked for.
        f = Filter {
            finished: false,
            ..all()
        };
        assert!(collect(&st, 0, &f, usize::MAX).0.is_empty());
    }

    #[test]
    fn the_descriptor_holds_the_same_lines_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let st = state(dir.path(), 50);
        let (jobs, _) = collect(&st, 0, &all(), usize::MAX);
        let fd = to_memfd(|file| encode(&st, 0, &all(), file)).unwrap();
        let copy = fd.try_clone().unwrap();
        let listing = read_fd(fd).unwrap();
        assert!(listing.is_mapped(), "sealed against shrinking: mapped");
        let lines: Vec<JobSummary> = listing
            .lines()
            .unwrap()
            .into_iter()
            .map(JobSummary::from)
            .collect();
        assert_eq!(lines, jobs);
        use std::io::Write;
        let mut f = std::fs::File::from(copy);
        assert!(
            f.write_all(b"x").is_err(),
            "a reader cannot change the list"
        );
    }

    #[test]
    fn bad_filters_are_refused_by_name() {
        use zbus::Variant as Value;
        let d = |k: &str, v: Value<'_>| {
            HashMap::from([(k.to_string(), OwnedVariant::try_from(v).unwrap())])
        };
        let msg = |r: Result<Filter, ApiError>| match r {
            Err(ApiError::InvalidArgs(m)) => m,
            other => panic!("not refused: {other:?}"),
        };
        assert!(msg(Filter::parse(&d("colour", Value::from(true))))
            .contains("unknown filter key \"colour\""));
        assert!(msg(Filter::parse(&d("before", Value::from(3u32))))
            .contains("\"before\" must have type t"));
        assert!(msg(Filter::parse(&d("limit", Value::from("x"))))
            .contains("\"limit\" must have type u"));
        let states = Value::from(vec!["SLEEPING".to_string()]);
        assert!(msg(Filter::parse(&d("states", states))).contains("unknown state \"SLEEPING\""));
        let ok = Filter::parse(&d("before", Value::from(9u64))).unwrap();
        assert_eq!(ok.before, Some(9));
        assert_eq!(ok.limit, usize::MAX);
    }
}

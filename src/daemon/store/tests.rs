//! Tests of the job log (`store.rs`).

use super::*;
use crate::daemon::job::{tests_support::job_with, JobState, Outcome};
use std::fs::OpenOptions;

fn job(id: JobId, state: JobState) -> Job {
    let mut j = job_with(state, Outcome::default());
    j.id = id;
    j.command.env = Some(vec!["SECRET=1".into()]);
    j
}

#[test]
fn appended_records_are_synced_by_the_next_save_or_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _) = Store::open(dir.path()).unwrap();
    s.save([&job(1, JobState::Running)]).unwrap();
    assert!(s.is_synced());
    s.append([&job(1, JobState::Completed)]).unwrap();
    assert!(!s.is_synced());
    assert_eq!(s.read(1).unwrap().state(), JobState::Completed);
    s.save([&job(2, JobState::Running)]).unwrap();
    assert!(s.is_synced(), "a save syncs what was appended before it");
    s.append([&job(2, JobState::Failed)]).unwrap();
    s.sync().unwrap();
    assert!(s.is_synced());
    drop(s);
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert!(loaded.jobs.is_empty());
    assert!(loaded.ended.contains(1) && loaded.ended.contains(2));
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
    started.invocation_known("0123456789abcdef0123456789abcdef".into());
    // Marked RUNNING, but systemd has not started its unit yet.
    let launching = job(3, JobState::Running);
    s.save([&started, &launching]).unwrap();
    s.save_next_id(4).unwrap();
    drop(s);
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert_eq!(loaded.jobs.len(), 3);
    assert_eq!(loaded.jobs[&1].state(), JobState::Running);
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
fn ended_jobs_load_in_brief_and_read_back_whole_across_compactions() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _) = Store::open(dir.path()).unwrap();
    s.save([
        &job(1, JobState::Pending),
        &job(2, JobState::Pending),
        &job(3, JobState::Pending),
    ])
    .unwrap();
    let mut done = job_with(
        JobState::Failed,
        Outcome {
            result: "exit-code".into(),
            exit_status: Some(3),
            detail: "exited 3".into(),
            ..Default::default()
        },
    );
    done.id = 1;
    done.command.argv = vec!["/bin/sh".into(), "-c".into(), "exit 3".into()];
    s.save([&done]).unwrap();
    drop(s);
    let (mut s, loaded) = Store::open(dir.path()).unwrap();
    assert_eq!(loaded.jobs.keys().copied().collect::<Vec<_>>(), vec![2, 3]);
    let brief = loaded.ended.get(1).unwrap();
    assert_eq!((brief.state, brief.exit_code), (JobState::Failed, 3));
    assert_eq!(&*brief.detail, "exited 3");
    assert_eq!(&*brief.user, "u");
    assert_eq!(s.read(1).unwrap(), done, "the whole record, read back");
    // Enough records to compact: everything still reads back.
    let mut two = job(2, JobState::Pending);
    for i in 0..2001 {
        two.name = format!("n{i}");
        s.save([&two]).unwrap();
    }
    assert!(s.maybe_compact().unwrap());
    assert_eq!(s.read(1).unwrap(), done);
    assert_eq!(s.read(2).unwrap().name, "n2000");
    assert_eq!(s.read(3).unwrap().id, 3);
    // A forgotten (cleaned) job leaves at the next compaction.
    s.forget(3);
    assert!(s.read(3).is_err());
    for _ in 0..2001 {
        s.save([&two]).unwrap();
    }
    assert!(s.maybe_compact().unwrap());
    drop(s);
    let (s, loaded) = Store::open(dir.path()).unwrap();
    assert_eq!(loaded.jobs.keys().copied().collect::<Vec<_>>(), vec![2]);
    assert_eq!(loaded.ended.ids().collect::<Vec<_>>(), vec![1]);
    assert_eq!(s.read(1).unwrap(), done);
    let log = std::fs::read(dir.path().join(LOG)).unwrap();
    let records = log.strip_prefix(&header().unwrap()[..]).expect("header");
    let lines = records.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    assert_eq!(
        lines.count(),
        2,
        "one record per live job after a compaction"
    );
}

const VERSION_1: &[u8] = b"{\"format\":\"xlurm-jobs-log\",\"version\":1}\n";

#[test]
fn a_new_log_starts_with_its_format_and_version() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _) = Store::open(dir.path()).unwrap();
    let log = || std::fs::read(dir.path().join(LOG)).unwrap();
    assert_eq!(log(), VERSION_1, "written on creation");
    s.save([&job(1, JobState::Pending)]).unwrap();
    assert!(log().starts_with(VERSION_1));
    assert_eq!(s.read(1).unwrap().id, 1);
    drop(s);
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert_eq!(loaded.jobs.len(), 1);
    assert!(loaded.warning.is_none());
    assert!(log().starts_with(VERSION_1), "and at each compaction");
}

/// Writes `lines` as the log in `dir`.
fn write_log(dir: &Path, lines: &[Vec<u8>]) -> Vec<u8> {
    let bytes: Vec<u8> = lines
        .iter()
        .flat_map(|l| [&l[..], b"\n"].concat())
        .collect();
    std::fs::write(dir.join(LOG), &bytes).unwrap();
    bytes
}

#[test]
fn a_log_without_a_version_is_version_1_and_gets_it_when_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<Vec<u8>> = [job(1, JobState::Pending), job(2, JobState::Completed)]
        .iter()
        .map(|j| serde_json::to_vec(j).unwrap())
        .collect();
    let old = write_log(dir.path(), &records);
    let (mut s, loaded) = Store::open(dir.path()).unwrap();
    assert!(loaded.warning.is_none());
    assert_eq!(loaded.jobs.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert!(loaded.ended.contains(2));
    assert_eq!(s.read(2).unwrap().state(), JobState::Completed);
    let log = std::fs::read(dir.path().join(LOG)).unwrap();
    assert_eq!(log, [VERSION_1, &old].concat(), "the records, as they were");
    // And at a compaction while running.
    for _ in 0..2001 {
        s.save([&job(1, JobState::Pending)]).unwrap();
    }
    assert!(s.maybe_compact().unwrap());
    let log = std::fs::read(dir.path().join(LOG)).unwrap();
    assert!(log.starts_with(VERSION_1));
    assert_eq!(s.read(2).unwrap().state(), JobState::Completed);
}

#[test]
fn a_log_of_a_newer_version_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let newer = br#"{"format":"xlurm-jobs-log","version":2,"more":"to come"}"#;
    let record = serde_json::to_vec(&job(1, JobState::Pending)).unwrap();
    let bytes = write_log(dir.path(), &[newer.to_vec(), record]);
    let path = dir.path().join(LOG);
    let Err(e) = Store::open(dir.path()) else {
        panic!("a newer log was opened");
    };
    let msg = format!("{e:#}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(
        msg.contains("version 2") && msg.contains("up to 1"),
        "{msg}"
    );
    let newer = e.downcast_ref::<NewerLog>().expect("a NewerLog");
    assert_eq!((newer.found, newer.supported), (2, LOG_VERSION));
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "byte for byte");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![LOG], "nothing kept aside or left behind");
}

/// A log in `dir` holding pending job 1, open for appending more.
fn log_of_one_pending_job(dir: &std::path::Path) -> std::fs::File {
    let (mut s, _) = Store::open(dir).unwrap();
    s.save([&job(1, JobState::Pending)]).unwrap();
    drop(s);
    OpenOptions::new().append(true).open(dir.join(LOG)).unwrap()
}

#[test]
fn a_torn_last_line_is_dropped_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = log_of_one_pending_job(dir.path());
    f.write_all(b"{\"id\":2,\"na").unwrap();
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert_eq!(loaded.jobs.len(), 1);
    assert!(loaded.warning.is_none());
}

#[test]
fn a_damaged_log_is_kept_aside_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = log_of_one_pending_job(dir.path());
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

/// A log that cannot be compacted at start (no room for the copy: here the
/// temp file's name is taken by a directory, an I/O error like ENOSPC) is
/// served as it is: every job is there, nothing is kept aside, and records
/// appended later land in it.
#[test]
fn a_log_that_cannot_be_compacted_at_start_is_served_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _) = Store::open(dir.path()).unwrap();
    s.save([&job(1, JobState::Pending), &job(2, JobState::Running)])
        .unwrap();
    s.save([&job(3, JobState::Completed)]).unwrap();
    drop(s);
    let before = std::fs::read(dir.path().join(LOG)).unwrap();
    std::fs::create_dir(dir.path().join(format!(".{LOG}.tmp"))).unwrap();
    let (mut s, loaded) = Store::open(dir.path()).unwrap();
    let w = loaded.warning.expect("the failed compaction is reported");
    assert!(w.contains("could not compact"), "{w}");
    assert_eq!(loaded.jobs.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(
        loaded.ended.get(3).map(|b| b.state),
        Some(JobState::Completed)
    );
    assert_eq!(std::fs::read(dir.path().join(LOG)).unwrap(), before);
    assert_eq!(s.read(1).unwrap().id, 1, "records are read where they are");
    s.save([&job(4, JobState::Pending)]).unwrap();
    drop(s);
    std::fs::remove_dir(dir.path().join(format!(".{LOG}.tmp"))).unwrap();
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert!(loaded.warning.is_none(), "{:?}", loaded.warning);
    assert_eq!(
        loaded.jobs.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 4]
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("corrupt"))
        .collect();
    assert!(names.is_empty(), "nothing kept aside: {names:?}");
}

/// Damage still keeps the file aside, and when there is no room for the
/// recovered copy, the damaged log is served in place (its good records)
/// rather than moved away and lost.
#[test]
fn a_damaged_log_without_room_for_a_copy_stays_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = log_of_one_pending_job(dir.path());
    f.write_all(b"garbage\n").unwrap();
    drop(f);
    std::fs::create_dir(dir.path().join(format!(".{LOG}.tmp"))).unwrap();
    let (_, loaded) = Store::open(dir.path()).unwrap();
    let w = loaded.warning.expect("reported");
    assert!(
        w.contains("damaged") && w.contains("left it in place"),
        "{w}"
    );
    assert_eq!(loaded.jobs.len(), 1);
    assert!(dir.path().join(LOG).exists());
    std::fs::remove_dir(dir.path().join(format!(".{LOG}.tmp"))).unwrap();
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert!(loaded.warning.expect("reported").contains("kept it as"));
    assert_eq!(loaded.jobs.len(), 1);
}

/// Damaged logs kept aside hold environments and commands: they go once
/// older than the retention period, and nothing else in the directory does.
#[test]
fn damaged_logs_kept_aside_go_after_the_retention_period() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = Store::open(dir.path()).unwrap();
    for name in [
        "jobs.log.corrupt-100",
        "jobs.log.corrupt-5000",
        "jobs.log.corrupt-x",
        "other-100",
    ] {
        std::fs::write(dir.path().join(name), "SECRET=1\n").unwrap();
    }
    assert_eq!(
        s.remove_old_damaged_logs(1000),
        vec!["jobs.log.corrupt-100"]
    );
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with(LOG) || n.contains("corrupt"))
        .filter(|n| n != "scripts")
        .collect();
    left.sort();
    assert_eq!(
        left,
        vec!["jobs.log.corrupt-5000", "jobs.log.corrupt-x", "other-100"]
    );
}

#[test]
fn a_log_of_few_big_records_written_again_and_again_is_compacted_by_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _) = Store::open(dir.path()).unwrap();
    let mut big: Vec<Job> = (1..=3).map(|id| job(id, JobState::Pending)).collect();
    for j in &mut big {
        j.command.script = Some("x".repeat(1 << 20));
    }
    // 3 live records of 1 MiB; superseded ones pile up (a pending job's
    // record is written again at each cancel request, start, ...).
    let mut writes = 0;
    while s.len <= 2 * s.live + COMPACT_SLACK {
        assert!(!s.maybe_compact().unwrap(), "compacted too early");
        s.save(big.iter()).unwrap();
        writes += 3;
    }
    assert!(
        writes < 2000,
        "counted in lines this would wait for 2,000 records"
    );
    assert!(s.maybe_compact().unwrap(), "past twice its live bytes");
    let size = std::fs::metadata(dir.path().join(LOG)).unwrap().len();
    assert!(
        size < 4 << 20,
        "compacted to its live records: {size} bytes"
    );
    assert_eq!(s.live, size - header().unwrap().len() as u64);
    assert_eq!(s.read(2).unwrap().command.script.unwrap().len(), 1 << 20);
    s.forget(2);
    assert!(s.live < 3 << 20);
}

//! Each kind of change of the job table: a state made here in, the new
//! state and the effects out. No bus, no systemd, no polling.

use super::*;
use crate::core::{Limits, Machine, Policy, Request, Topology};
use crate::daemon::job::{Admission, After, Hold};
use crate::daemon::systemd::outcome::Collect;

const UID: u32 = 1000;

/// An empty state over the store in `dir`: two nodes of two CPUs.
fn state_in(dir: &std::path::Path) -> State {
    let (store, loaded) = Store::open(dir).unwrap();
    let machine = Machine::new(Topology::uniform(2, 2, 1 << 30), vec![]);
    let limits = Limits {
        max_running: 8,
        max_lifetime_secs: 3600,
        min_job_mem: 64 << 20,
    };
    State::new(
        Scheduler::new(machine, Policy::FifoStrict, limits),
        loaded,
        store,
    )
}

/// A pending job of `UID` with the next ID free, asking for `cpus`.
fn pending(st: &State, cpus: u32) -> Job {
    let request = Request {
        cpus,
        ..Request::default()
    };
    let demand = st.sched.validate(&request).unwrap();
    let command = Command {
        argv: vec!["/bin/sleep".into(), "100".into()],
        script: None,
        cwd: "/".into(),
        env: Some(vec!["A=1".into()]),
        umask: None,
    };
    Job::pending(
        st.next_id,
        "t".into(),
        (UID, "u".into()),
        command,
        demand,
        1_000_000,
        None,
    )
}

/// `job` waiting for `dependency`, cancelled when it can never be met if `kill`.
fn after(job: Job, dependency: &str, kill: bool) -> Job {
    job.with_after(Some(After {
        dependency: crate::core::dependency::parse(dependency).unwrap(),
        kill_on_invalid: kill,
    }))
}

/// Submits the job `make` makes alone: its ID.
fn submit(st: &mut State, make: impl FnOnce(&State) -> Job) -> JobId {
    let job = make(st);
    let id = job.id;
    st.apply(Commit::Submitted {
        jobs: vec![job],
        held: None,
    })
    .unwrap();
    id
}

/// Starts what the scheduler places now: the effects.
fn start_placed(st: &mut State) -> Effects {
    let now = 2_000_000;
    let mut starts = Starts {
        now,
        ..Default::default()
    };
    for (id, alloc) in st.sched.schedule(now / 1_000_000) {
        let j = st.full(id).unwrap().unwrap().into_owned();
        match j.split_task(st.next_id + starts.split.len() as u64) {
            Some((task, rest)) => {
                starts.split.push((id, task.id));
                starts.jobs.push(task.started(alloc, now));
                starts.rests.push(rest);
            }
            None => starts.jobs.push(j.started(alloc, now)),
        }
    }
    st.apply(Commit::Started(starts)).unwrap()
}

/// A job submitted and started: its ID.
fn running(st: &mut State) -> JobId {
    let id = submit(st, |s| pending(s, 1));
    let fx = start_placed(st);
    assert_eq!(fx.launches.len(), 1);
    id
}

/// The states on disk, as a restart would load them.
fn on_disk(dir: &std::path::Path) -> HashMap<JobId, JobState> {
    let (_, loaded) = Store::open(dir).unwrap();
    let mut states: HashMap<JobId, JobState> =
        loaded.jobs.values().map(|j| (j.id, j.state())).collect();
    states.extend(loaded.ended.iter_from(0).map(|(id, b)| (id, b.state)));
    states
}

/// A pipe's read end, to stand for an `--output` descriptor.
fn a_descriptor() -> std::os::fd::OwnedFd {
    nix::unistd::pipe().unwrap().0
}

#[test]
fn submitted_jobs_are_recorded_indexed_queued_and_announced() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let a = pending(&st, 1);
    let mut b = pending(&st, 1);
    b.id += 1;
    let fx = st
        .apply(Commit::Submitted {
            jobs: vec![a, b],
            held: None,
        })
        .unwrap();
    assert_eq!(fx.changes, [(1, JobState::Pending), (2, JobState::Pending)]);
    assert!(fx.kick);
    assert_eq!(st.next_id, 3);
    assert_eq!(st.usage_of(UID).jobs, 2);
    assert!(st.sched.is_pending(1) && st.sched.is_pending(2));
    // Memory keeps what waiting needs; the record has the rest.
    assert!(st.jobs[&1].detached().is_some());
    assert_eq!(on_disk(dir.path())[&2], JobState::Pending);
}

#[test]
fn a_submission_that_cannot_be_recorded_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    st.store.fail_writes = true;
    let job = pending(&st, 1);
    let err = st
        .apply(Commit::Submitted {
            jobs: vec![job],
            held: None,
        })
        .err()
        .expect("refused");
    assert!(matches!(err, CommitError::Store(_)), "{err:?}");
    assert!(matches!(ApiError::from(err), ApiError::Failed(_)));
    assert_eq!(st.next_id, 1, "no ID taken");
    assert!(st.jobs.is_empty());
    assert_eq!(st.usage_of(UID).jobs, 0);
    assert_eq!(st.sched.pending_count(), 0);
}

#[test]
fn a_submission_whose_dependency_can_never_be_met_ends_at_once_after_its_pending() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let first = submit(&mut st, |s| pending(s, 1));
    let fx = st
        .apply(Commit::Withdrawn(
            st.jobs[&first].cancelled_pending(UID, 3_000_000),
        ))
        .unwrap();
    assert_eq!(fx.changes, [(first, JobState::Cancelled)]);
    let job = after(pending(&st, 1), &format!("afterok:{first}"), true);
    let id = job.id;
    let fx = st
        .apply(Commit::Submitted {
            jobs: vec![job],
            held: None,
        })
        .unwrap();
    assert_eq!(
        fx.changes,
        [(id, JobState::Pending), (id, JobState::Cancelled)]
    );
    assert_eq!(st.jobs[&id].state(), JobState::Cancelled);
    assert_eq!(st.usage_of(UID).jobs, 0);
    assert!(!st.sched.is_pending(id));
    assert_eq!(on_disk(dir.path())[&id], JobState::Cancelled);
}

#[test]
fn a_revised_pending_job_is_gated_anew_and_waits_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let target = running(&mut st);
    let id = submit(&mut st, |s| {
        after(pending(s, 1), &format!("afterok:{target}"), false)
    });
    assert_eq!(st.jobs[&id].admission(), Admission::Dependency);
    // Held, then released: out of the queue and back, each on disk.
    let fx = st
        .apply(Commit::Revised(st.jobs[&id].with_hold(Some(Hold::User))))
        .unwrap();
    assert!(fx.changes.is_empty() && fx.kick);
    assert_eq!(st.jobs[&id].admission(), Admission::Held(Hold::User));
    st.apply(Commit::Revised(st.jobs[&id].with_hold(None)))
        .unwrap();
    assert_eq!(st.jobs[&id].admission(), Admission::Dependency);
    // Revised twice, it waits on its target once: no waiter left behind.
    assert_eq!(st.waiters[&target].iter().collect::<Vec<_>>(), [&id]);
    assert_eq!(st.usage_of(UID).jobs, 1, "its owner's usage counted once");
    // Its dependency cleared: queued.
    st.apply(Commit::Revised(st.jobs[&id].with_after(None)))
        .unwrap();
    assert_eq!(st.jobs[&id].admission(), Admission::Queued);
    assert!(st.sched.is_pending(id));
    assert!(!st.waiters.contains_key(&target));
}

#[test]
fn a_revision_of_a_job_that_moved_on_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let stale = pending(&st, 1);
    let id = running(&mut st);
    let err = st.apply(Commit::Revised(stale)).err().expect("refused");
    assert!(
        matches!(
            err,
            CommitError::Moved {
                is: JobState::Running,
                want: JobState::Pending,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(st.jobs[&id].state(), JobState::Running);
    let err = st
        .apply(Commit::Withdrawn(Job {
            id: 99,
            ..st.jobs[&id].clone()
        }))
        .err()
        .expect("refused");
    assert!(matches!(err, CommitError::Missing(99)), "{err:?}");
}

#[test]
fn a_running_job_revised_keeps_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let id = running(&mut st);
    let fx = st
        .apply(Commit::Revised(st.jobs[&id].cancel_requested(0)))
        .unwrap();
    assert!(fx.changes.is_empty() && !fx.kick);
    assert_eq!(st.jobs[&id].cancel_requested_by(), Some(0));
    assert_eq!(st.sched.running_count(), 1);
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert_eq!(loaded.jobs[&id].cancel_requested_by(), Some(0));
}

#[test]
fn started_jobs_are_recorded_before_they_launch_and_leave_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let id = submit(&mut st, |s| pending(s, 1));
    let waiter = submit(&mut st, |s| {
        after(pending(s, 1), &format!("after:{id}"), false)
    });
    let fx = start_placed(&mut st);
    assert_eq!(fx.launches.len(), 1);
    let (job, fd) = &fx.launches[0];
    assert_eq!((job.id, job.state()), (id, JobState::Running));
    assert!(fd.is_none());
    // Its command is whole for the launch (the record had it).
    assert_eq!(job.command.argv, ["/bin/sleep", "100"]);
    assert!(fx.changes.is_empty(), "RUNNING is the launch's to announce");
    assert_eq!(on_disk(dir.path())[&id], JobState::Running);
    assert_eq!(st.usage_of(UID).jobs, 1, "only the waiter is pending");
    assert_eq!(st.sched.running_count(), 1);
    // `after:` waits for a start: it is queued now.
    assert_eq!(st.jobs[&waiter].admission(), Admission::Queued);
    assert!(fx.kick);
}

#[test]
fn starts_that_cannot_be_recorded_go_back_into_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let id = submit(&mut st, |s| pending(s, 1));
    st.store.fail_writes = true;
    let now = 2_000_000;
    let placed = st.sched.schedule(now / 1_000_000);
    assert_eq!(placed.len(), 1);
    let starts = Starts {
        jobs: placed
            .into_iter()
            .map(|(id, alloc)| st.full(id).unwrap().unwrap().started(alloc, now))
            .collect(),
        now,
        ..Default::default()
    };
    let err = st.apply(Commit::Started(starts)).err().expect("refused");
    assert!(matches!(err, CommitError::Store(_)), "{err:?}");
    assert_eq!(st.jobs[&id].state(), JobState::Pending);
    assert!(st.sched.is_pending(id), "back in the queue");
    assert_eq!(st.sched.running_count(), 0);
    st.store.fail_writes = false;
    assert_eq!(start_placed(&mut st).launches.len(), 1);
}

#[test]
fn an_arrays_next_task_splits_off_its_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let mut array = pending(&st, 1);
    let spec = crate::core::array::ArraySpec::parse("0-3%1").unwrap();
    array.array = Some(Box::new(crate::daemon::job::Task::whole(array.id, &spec)));
    let id = submit(&mut st, |_| array);
    let fx = start_placed(&mut st);
    let task = fx.launches[0].0.id;
    assert_eq!(task, id + 1);
    assert_eq!(st.next_id, id + 2, "the task's ID is taken");
    assert_eq!(st.tasks_running(id), 1);
    // Its %1: the rest waits for the task.
    assert_eq!(st.jobs[&id].admission(), Admission::ArrayLimit);
    assert_eq!(st.jobs[&id].array.as_ref().unwrap().rest.len(), 3);
    assert_eq!(on_disk(dir.path())[&task], JobState::Running);
    assert_eq!(st.usage_of(UID).jobs, 1, "the rest is pending still");
}

#[test]
fn a_withdrawn_job_ends_its_waiters_that_asked_for_it_and_lets_go_of_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let id = pending(&st, 1);
    let id = {
        let n = id.id;
        st.apply(Commit::Submitted {
            jobs: vec![id],
            held: Some(a_descriptor()),
        })
        .unwrap();
        n
    };
    assert!(st.jobs[&id].has_output_fd());
    let doomed = submit(&mut st, |s| {
        after(pending(s, 1), &format!("afterok:{id}"), true)
    });
    let then = submit(&mut st, |s| {
        after(pending(s, 1), &format!("afterany:{doomed}"), false)
    });
    assert_eq!(st.jobs[&then].admission(), Admission::Dependency);
    let cancelled = st
        .full(id)
        .unwrap()
        .unwrap()
        .cancelled_pending(UID, 3_000_000);
    let fx = st.apply(Commit::Withdrawn(cancelled)).unwrap();
    // Its own end first, then those it ended in turn.
    assert_eq!(
        fx.changes,
        [(id, JobState::Cancelled), (doomed, JobState::Cancelled)]
    );
    assert_eq!(fx.unstore, [id]);
    assert!(fx.kick);
    assert_eq!(st.usage_of(UID).jobs, 1);
    // `afterany` on the doomed one: met, so queued.
    assert_eq!(st.jobs[&then].admission(), Admission::Queued);
    assert!(st.sched.is_pending(then));
    let disk = on_disk(dir.path());
    assert_eq!(
        (disk[&id], disk[&doomed]),
        (JobState::Cancelled, JobState::Cancelled)
    );
}

#[test]
fn a_task_withdrawn_is_recorded_with_its_arrays_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let mut array = pending(&st, 1);
    let spec = crate::core::array::ArraySpec::parse("0-3").unwrap();
    array.array = Some(Box::new(crate::daemon::job::Task::whole(array.id, &spec)));
    let id = submit(&mut st, |_| array);
    let whole = st.full(id).unwrap().unwrap().into_owned();
    let (task, rest) = whole.take_task(2, st.next_id).unwrap();
    let task = task.cancelled_pending(UID, 3_000_000);
    let task_id = task.id;
    let fx = st.apply(Commit::TaskWithdrawn { task, rest }).unwrap();
    assert_eq!(fx.changes, [(task_id, JobState::Cancelled)]);
    assert_eq!(st.next_id, task_id + 1);
    assert!(!st.jobs[&id].array.as_ref().unwrap().rest.contains(2));
    assert_eq!(st.started_task(id, 2), Some(task_id));
    assert_eq!(on_disk(dir.path())[&task_id], JobState::Cancelled);
    assert!(st.jobs[&id].detached().is_some());
}

#[test]
fn an_end_frees_its_place_wakes_its_waiters_and_leaves_its_unit_to_collect() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let id = running(&mut st);
    let waiter = submit(&mut st, |s| {
        after(pending(s, 1), &format!("afterok:{id}"), false)
    });
    let how = Collect::for_state(Some("active"));
    let job = st.jobs[&id].ended(JobState::Completed, Outcome::default(), 5_000_000);
    let fx = st
        .apply(Commit::Ended {
            job,
            unit: Some(how),
        })
        .unwrap();
    assert_eq!(fx.changes, [(id, JobState::Completed)]);
    let unit = crate::unit_name::of_job(id);
    assert_eq!(fx.collect, [(unit.clone(), how)]);
    assert_eq!(fx.forget_limits, [unit]);
    assert!(fx.kick);
    assert_eq!(st.sched.running_count(), 0, "its place is free");
    assert_eq!(st.jobs[&waiter].admission(), Admission::Queued);
    // Appended: synced with the next start or before its unit goes.
    st.store.sync().unwrap();
    assert_eq!(on_disk(dir.path())[&id], JobState::Completed);
    // An end comes once.
    let again = st.jobs[&id].clone();
    let err = st
        .apply(Commit::Ended {
            job: again,
            unit: None,
        })
        .err()
        .expect("refused");
    assert!(matches!(err, CommitError::Moved { .. }), "{err:?}");
}

#[test]
fn an_end_that_cannot_be_recorded_stays_in_memory_and_keeps_its_unit() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let id = running(&mut st);
    st.store.fail_writes = true;
    let job = st.jobs[&id].ended(JobState::Failed, Outcome::default(), 5_000_000);
    let fx = st.apply(Commit::Ended { job, unit: None }).unwrap();
    assert_eq!(fx.changes, [(id, JobState::Failed)]);
    assert!(fx.collect.is_empty(), "its unit holds the end");
    assert_eq!(st.jobs[&id].state(), JobState::Failed);
    assert_eq!(st.sched.running_count(), 0);
    assert_eq!(on_disk(dir.path())[&id], JobState::Running);
}

#[test]
fn a_requeued_job_is_pending_again_with_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let id = running(&mut st);
    let other = running(&mut st);
    let fx = st.apply(Commit::Requeued(st.jobs[&id].requeued())).unwrap();
    assert_eq!(fx.changes, [(id, JobState::Pending)]);
    assert_eq!(fx.forget_limits, [crate::unit_name::of_job(id)]);
    assert!(fx.kick);
    assert_eq!(st.jobs[&id].restarts, 1);
    assert!(st.sched.is_pending(id));
    assert_eq!(st.sched.running_count(), 1, "its place is free");
    assert_eq!(st.usage_of(UID).jobs, 1);
    assert_eq!(on_disk(dir.path())[&id], JobState::Pending);

    // One that cannot be recorded stays running.
    st.store.fail_writes = true;
    let err = st
        .apply(Commit::Requeued(st.jobs[&other].requeued()))
        .err()
        .expect("refused");
    assert!(matches!(err, CommitError::Store(_)));
    assert_eq!(st.jobs[&other].state(), JobState::Running);
    assert_eq!(st.sched.running_count(), 1);
}

#[test]
fn ended_jobs_are_retired_to_brief_then_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let id = submit(&mut st, |s| pending(s, 1));
    let cancelled = st
        .full(id)
        .unwrap()
        .unwrap()
        .cancelled_pending(UID, 3_000_000);
    st.apply(Commit::Withdrawn(cancelled)).unwrap();
    // A pending one is not retired.
    let live = submit(&mut st, |s| pending(s, 1));
    st.apply(Commit::Retired(vec![id, live])).unwrap();
    assert!(!st.jobs.contains_key(&id) && st.ended.contains(id));
    assert!(st.jobs.contains_key(&live));
    let fx = st.apply(Commit::Forgotten { cutoff: u64::MAX }).unwrap();
    assert_eq!(fx.forgotten, 1);
    assert!(st.find(id).is_none());
    assert!(st.find(live).is_some());
}

/// The job table is written in one function, and starting and reconciling
/// do not call each other (issue 41): a read of the daemon's sources.
#[test]
fn the_job_table_is_written_only_by_apply() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/daemon");
    let mut files = vec![root];
    let mut writes = Vec::new();
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let name = p.to_string_lossy().into_owned();
        if !name.ends_with(".rs") || name.contains("tests") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for (n, line) in text.lines().enumerate() {
            let write = ["jobs.insert(", "jobs.remove(", "jobs.retain("]
                .iter()
                .any(|w| line.contains(w));
            if write && !name.ends_with("service/commit.rs") && !name.ends_with("store/log_file.rs")
            {
                writes.push(format!("{name}:{}: {line}", n + 1));
            }
            if line.contains("Box::pin(") {
                writes.push(format!("{name}:{}: {line}", n + 1));
            }
        }
    }
    assert!(writes.is_empty(), "outside State::apply: {writes:#?}");
}

#[path = "graph_tests.rs"]
mod graph;

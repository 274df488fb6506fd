//! The daemon's handlers against an in-memory systemd (`MemoryUnits`): no
//! bus, no systemd. What systemd itself does is proven in the VM scenarios.

use super::*;
use crate::core::{Limits, Machine, Policy, Topology};
use crate::testing::memory_units::{MemoryUnits, CPU_NSEC};
use crate::wire::spec::entry;
use std::time::Duration;

type Changes = tokio::sync::mpsc::UnboundedReceiver<(JobId, Change)>;

/// A daemon over the state in `dir` and `units`, as `serve` builds it (the
/// units are re-adopted first).
async fn daemon_on(
    dir: &std::path::Path,
    units: MemoryUnits,
) -> (Arc<Daemon<MemoryUnits>>, Changes) {
    daemon_with(dir, units, |_| {}).await
}

/// `daemon_on` with its settings changed by `tweak`.
async fn daemon_with(
    dir: &std::path::Path,
    units: MemoryUnits,
    tweak: impl FnOnce(&mut Settings),
) -> (Arc<Daemon<MemoryUnits>>, Changes) {
    let (store, loaded) = Store::open(dir).unwrap();
    let machine = Machine::new(Topology::uniform(2, 2, 1 << 30), vec![]);
    let limits = Limits {
        max_running: 8,
        max_lifetime_secs: 3600,
        min_job_mem: 64 << 20,
    };
    let sched = Scheduler::new(machine, Policy::FifoStrict, limits);
    let settings = Settings {
        unit: UnitSettings {
            slice: "xlurm.slice".into(),
            user_mode: false,
            script_dir: store.script_dir(),
            stop_timeout_usec: 10_000_000,
            tee_path: "/usr/bin/xlurm".into(),
        },
        budget: crate::core::Budget {
            jobs: 3,
            ..Default::default()
        },
        retention_secs: 3600,
        list_is_public: true,
        object_linger: Duration::from_secs(600),
        // No journal: a vanished unit cannot be told apart from a lost start.
        journalctl: "/nonexistent/journalctl".into(),
    };
    let mut settings = settings;
    tweak(&mut settings);
    let (d, changes) = Daemon::new(State::new(sched, loaded, store), settings, units, vec![]);
    d.readopt().await.unwrap();
    (d, changes)
}

fn spec(pairs: Vec<(String, zbus::OwnedVariant)>) -> Spec {
    crate::daemon::spec::parse(&pairs.into_iter().collect()).unwrap()
}

fn sleep_spec() -> Spec {
    spec(vec![
        entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
        entry("cwd", "/"),
    ])
}

/// Job `id` as the daemon has it now.
async fn job(d: &Daemon<MemoryUnits>, id: JobId) -> Job {
    d.state.lock().await.full(id).unwrap().unwrap().into_owned()
}

/// Waits (up to 10 s) until job `id` is in `want`.
async fn wait_state(d: &Daemon<MemoryUnits>, id: JobId, want: JobState) -> Job {
    for _ in 0..1000 {
        let j = job(d, id).await;
        if j.state == want {
            return j;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("job {id} is {:?}, not {want:?}", job(d, id).await.state);
}

/// Submits one `sleep 100` as root and runs the scheduling pass until its
/// unit runs; returns the job and its unit.
async fn running_job(d: &Arc<Daemon<MemoryUnits>>) -> (JobId, String) {
    let id = d.submit(0, vec![sleep_spec()]).await.unwrap()[0].id;
    d.schedule().await;
    wait_state(d, id, JobState::Running).await;
    let unit = crate::unit_name::of_job(id);
    for _ in 0..1000 {
        if d.systemd.unit(&unit).is_some() && !job(d, id).await.invocation_id.is_empty() {
            return (id, unit);
        }
        d.reconcile(id).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{unit} never ran");
}

/// The jobs a fresh load of the store in `dir` finds, by ID: what a restart sees.
fn on_disk(dir: &std::path::Path) -> BTreeMap<JobId, JobState> {
    let copy = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(dir).unwrap().flatten() {
        if f.path().is_file() {
            std::fs::copy(f.path(), copy.path().join(f.file_name())).unwrap();
        }
    }
    let (_, loaded) = Store::open(copy.path()).unwrap();
    let mut all: BTreeMap<JobId, JobState> =
        loaded.jobs.values().map(|j| (j.id, j.state)).collect();
    for id in 1..loaded.next_id {
        if let Some(b) = loaded.ended.get(id) {
            all.insert(id, b.state);
        }
    }
    all
}

#[tokio::test]
async fn a_submission_is_queued_and_saved_and_a_bad_one_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let calls = d.systemd.m.lock().unwrap().calls.len();
    let got = d.submit(0, vec![sleep_spec()]).await.unwrap();
    assert_eq!(got.len(), 1);
    let id = got[0].id;
    assert_eq!(job(&d, id).await.state, JobState::Pending);
    assert_eq!(
        on_disk(dir.path()),
        BTreeMap::from([(id, JobState::Pending)])
    );

    // Impossible (more CPUs than the machine has): refused, nothing changes.
    let mut huge = sleep_spec();
    huge.request.cpus = 99;
    let err = d.submit(0, vec![sleep_spec(), huge]).await.unwrap_err();
    assert!(matches!(err, ApiError::InvalidRequest(_)), "{err:?}");
    assert_eq!(d.state.lock().await.counts(), (1, 0));
    assert_eq!(
        on_disk(dir.path()),
        BTreeMap::from([(id, JobState::Pending)])
    );

    // The per-user pending limit (3): the fourth and fifth are refused together.
    let err = d
        .submit(0, vec![sleep_spec(), sleep_spec(), sleep_spec()])
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::LimitExceeded(_)), "{err:?}");
    assert_eq!(d.state.lock().await.counts(), (1, 0));
    assert_eq!(
        d.systemd.m.lock().unwrap().calls.len(),
        calls,
        "systemd untouched"
    );
}

#[tokio::test]
async fn a_scheduled_job_starts_as_its_unit_and_each_end_is_recorded_as_systemd_says() {
    // (result, ExecMainCode, ExecMainStatus) -> final state, exit code or signal.
    let ends: [(&str, i32, i32, JobState); 7] = [
        ("success", 1, 0, JobState::Completed),
        ("exit-code", 1, 7, JobState::Failed),
        ("signal", 2, 11, JobState::Failed),
        ("timeout", 2, 15, JobState::Timeout),
        ("oom-kill", 2, 9, JobState::OutOfMemory),
        // systemd's own launch failure (CHDIR): the job never ran.
        ("exit-code", 1, 200, JobState::LaunchFailed),
        ("resources", 0, 0, JobState::LaunchFailed),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    for (result, code, status, want) in ends {
        let (id, unit) = running_job(&d).await;
        let started = d.systemd.m.lock().unwrap().started[&unit].clone();
        assert!(started.iter().any(|p| p == "User=\"0\""), "{started:?}");
        assert!(
            started.iter().any(|p| p == "MemorySwapMax=uint64 0"),
            "{started:?}"
        );
        d.systemd.end(&unit, result, code, status);
        d.reconcile(id).await;
        let j = wait_state(&d, id, want).await;
        let o = j.outcome.expect("an outcome");
        assert_eq!(o.result, result);
        if code == 1 {
            assert_eq!(o.exit_status, Some(status), "{result}");
        }
        if code == 2 {
            assert_eq!(o.signal, Some(status), "{result}");
        }
        assert_eq!(o.cpu_nsec, Some(CPU_NSEC), "{result}: accounting kept");
        assert_eq!(on_disk(dir.path())[&id], want, "{result}: saved");
    }
    // Ended units are collected once no job waits.
    d.collect_ended().await;
    assert!(d.systemd.m.lock().unwrap().units.is_empty());
}

#[tokio::test]
async fn a_sigkill_at_the_memory_budget_is_an_oom_kill() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let (id, unit) = running_job(&d).await;
    let budget = job(&d, id).await.alloc.unwrap().mem_bytes;
    d.systemd.end(&unit, "signal", 2, 9);
    let mut u = d.systemd.unit(&unit).unwrap();
    u.memory_peak = Some(budget);
    d.systemd.set(&unit, u);
    d.reconcile(id).await;
    wait_state(&d, id, JobState::OutOfMemory).await;

    // The same SIGKILL well under the budget is a plain kill.
    let (id, unit) = running_job(&d).await;
    d.systemd.end(&unit, "signal", 2, 9);
    d.reconcile(id).await;
    let j = wait_state(&d, id, JobState::Failed).await;
    assert_eq!(j.outcome.unwrap().detail, "killed by signal 9");
}

#[tokio::test]
async fn a_start_systemd_refuses_ends_launch_failed_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    d.systemd.m.lock().unwrap().refuse_next_start = Some("Invalid property".into());
    let id = d.submit(0, vec![sleep_spec()]).await.unwrap()[0].id;
    d.schedule().await;
    let j = wait_state(&d, id, JobState::LaunchFailed).await;
    assert!(j.outcome.unwrap().detail.contains("Invalid property"));
    assert_eq!(
        d.state.lock().await.counts(),
        (0, 0),
        "its resources are free"
    );
    assert_eq!(on_disk(dir.path())[&id], JobState::LaunchFailed);
}

/// A daemon on `dir` with one job running (and its unit) and one pending
/// behind it: fifo-strict with the machine's 4 CPUs taken keeps it waiting.
async fn a_running_and_a_pending_job(
    dir: &std::path::Path,
) -> (Arc<Daemon<MemoryUnits>>, JobId, String, JobId) {
    let (d, _c) = daemon_on(dir, MemoryUnits::default()).await;
    let (running, unit) = running_job(&d).await;
    let mut wide = sleep_spec();
    wide.request.cpus = 4;
    let pending = d.submit(0, vec![wide]).await.unwrap()[0].id;
    d.schedule().await;
    assert_eq!(job(&d, pending).await.state, JobState::Pending);
    (d, running, unit, pending)
}

#[tokio::test]
async fn cancel_of_a_pending_running_and_ended_job() {
    let dir = tempfile::tempdir().unwrap();
    let (d, running, unit, pending) = a_running_and_a_pending_job(dir.path()).await;

    // Not the owner, not admin: refused, nothing changes.
    let err = d.cancel(1001, running, false).await.unwrap_err();
    assert!(matches!(err, ApiError::PermissionDenied(_)), "{err:?}");
    assert_eq!(d.systemd.calls("stop", &unit), 0);

    assert_eq!(
        d.cancel(0, pending, false).await.unwrap(),
        JobState::Pending
    );
    let j = job(&d, pending).await;
    assert_eq!(j.state, JobState::Cancelled);
    assert_eq!(j.cancel_requested_by, Some(0));
    assert_eq!(on_disk(dir.path())[&pending], JobState::Cancelled);

    assert_eq!(
        d.cancel(0, running, false).await.unwrap(),
        JobState::Running
    );
    assert_eq!(d.systemd.calls("stop", &unit), 1);
    let j = wait_state(&d, running, JobState::Cancelled).await;
    assert_eq!(j.cancel_requested_by, Some(0));
    assert_eq!(on_disk(dir.path())[&running], JobState::Cancelled);

    for ended in [pending, running] {
        let err = d.cancel(0, ended, false).await.unwrap_err();
        assert!(matches!(err, ApiError::WrongState(_)), "{err:?}");
    }
    assert!(matches!(
        d.cancel(0, 999, false).await.unwrap_err(),
        ApiError::NoSuchJob(_)
    ));
}

#[tokio::test]
async fn a_unit_that_vanished_while_running_ends_the_job_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let (id, unit) = running_job(&d).await;
    d.systemd.vanish(&unit);
    d.reconcile(id).await;
    let j = wait_state(&d, id, JobState::Cancelled).await;
    assert!(!j.outcome.unwrap().detail.is_empty(), "says why");
    assert_eq!(d.systemd.calls("start", &unit), 1, "not started again");
}

#[tokio::test]
async fn a_restart_readopts_a_running_unit_records_an_ended_one_and_marks_a_missing_one_lost() {
    let dir = tempfile::tempdir().unwrap();
    let units = {
        let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
        let mut ids = vec![];
        for _ in 0..3 {
            ids.push(running_job(&d).await);
        }
        let units = std::mem::take(&mut *d.systemd.m.lock().unwrap());
        (ids, units)
    };
    let (ids, manager) = units;
    let next = MemoryUnits::default();
    *next.m.lock().unwrap() = manager;
    // While the daemon was away: the second ended with 3, the third vanished.
    next.end(&ids[1].1, "exit-code", 1, 3);
    next.vanish(&ids[2].1);
    let (d, _c) = daemon_on(dir.path(), next).await;
    assert_eq!(job(&d, ids[0].0).await.state, JobState::Running);
    let j = job(&d, ids[1].0).await;
    assert_eq!(j.state, JobState::Failed);
    assert_eq!(j.outcome.unwrap().exit_status, Some(3));
    assert_eq!(job(&d, ids[2].0).await.state, JobState::Lost);
    assert_eq!(
        d.state.lock().await.counts(),
        (0, 1),
        "one still holds its CPUs"
    );
    let disk = on_disk(dir.path());
    assert_eq!(
        [disk[&ids[0].0], disk[&ids[1].0], disk[&ids[2].0]],
        [JobState::Running, JobState::Failed, JobState::Lost]
    );
    // New IDs continue after the old ones.
    let id = d.submit(0, vec![sleep_spec()]).await.unwrap()[0].id;
    assert_eq!(id, ids[2].0 + 1);
}

/// A failed save at each step leaves memory as the disk has it: a cancel that
/// could not be recorded cancels nothing, a start that could not be recorded
/// starts nothing (and the job starts once the disk takes records again).
#[tokio::test]
async fn a_failed_save_leaves_memory_and_disk_agreeing() {
    let dir = tempfile::tempdir().unwrap();
    let (d, running, unit, pending) = a_running_and_a_pending_job(dir.path()).await;
    let disk = on_disk(dir.path());
    d.state.lock().await.store.fail_writes = true;

    let err = d.cancel(0, pending, false).await.unwrap_err();
    assert!(matches!(err, ApiError::Failed(_)), "{err:?}");
    let err = d.cancel(0, running, false).await.unwrap_err();
    assert!(matches!(err, ApiError::Failed(_)), "{err:?}");
    assert_eq!(d.systemd.calls("stop", &unit), 0, "not stopped unrecorded");
    assert_eq!(job(&d, pending).await.state, JobState::Pending);
    assert_eq!(job(&d, running).await.cancel_requested_by, None);
    assert_eq!(d.state.lock().await.counts(), (1, 1));

    // The running job ends: it frees the CPUs, but RUNNING cannot be recorded
    // for the pending one, so it stays pending, in memory as on disk.
    d.systemd.end(&unit, "success", 1, 0);
    d.reconcile(running).await;
    wait_state(&d, running, JobState::Completed).await;
    d.schedule().await;
    assert_eq!(job(&d, pending).await.state, JobState::Pending);
    assert_eq!(job(&d, pending).await.alloc, None);
    assert_eq!(
        d.systemd.calls("start", &crate::unit_name::of_job(pending)),
        0
    );
    assert_eq!(on_disk(dir.path())[&pending], disk[&pending]);

    d.state.lock().await.store.fail_writes = false;
    d.schedule().await;
    wait_state(&d, pending, JobState::Running).await;
    assert_eq!(on_disk(dir.path())[&pending], JobState::Running);
}

#[tokio::test]
async fn a_private_queue_answers_about_someone_elses_job_as_about_none() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| {
        s.list_is_public = false
    })
    .await;
    let (running, unit) = running_job(&d).await;
    let id = d.submit(1000, vec![sleep_spec()]).await.unwrap()[0].id;
    let none = 999;
    let text = |e: ApiError| format!("{e:?}").replace(&none.to_string(), "N");
    for job in [running, id] {
        let same = |e: ApiError| format!("{e:?}").replace(&job.to_string(), "N");
        let cancel = d.cancel(1001, job, false).await.unwrap_err();
        assert_eq!(
            same(cancel),
            text(d.cancel(1001, none, false).await.unwrap_err())
        );
        let read = d.read_log(1001, job, "", 10).await.unwrap_err();
        assert_eq!(
            same(read),
            text(d.read_log(1001, none, "", 10).await.unwrap_err())
        );
        let st = d.state.lock().await;
        let seen = d.sight_of(&st, 1001, job, false).unwrap_err();
        assert!(matches!(seen, ApiError::NoSuchJob(_)), "{seen:?}");
    }
    assert_eq!(d.systemd.calls("stop", &unit), 0);
    assert_eq!(job(&d, id).await.state, JobState::Pending);
    // Its owner, root and an admin still reach it.
    let st = d.state.lock().await;
    assert_eq!(d.sight_of(&st, 1000, id, false).unwrap(), Sight::Own);
    assert_eq!(d.sight_of(&st, 0, id, false).unwrap(), Sight::Own);
    assert_eq!(d.sight_of(&st, 1001, id, true).unwrap(), Sight::Summary);
    drop(st);
    assert_eq!(d.cancel(1001, id, true).await.unwrap(), JobState::Pending);
}

#[tokio::test]
async fn a_public_queue_names_the_owner_when_it_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let id = d.submit(1000, vec![sleep_spec()]).await.unwrap()[0].id;
    let err = d.cancel(1001, id, false).await.unwrap_err();
    assert!(matches!(err, ApiError::PermissionDenied(_)), "{err:?}");
    let err = d.read_log(1001, id, "", 10).await.unwrap_err();
    assert!(matches!(err, ApiError::PermissionDenied(_)), "{err:?}");
}

/// A writable descriptor for `--output`, and its path.
fn output_file(dir: &std::path::Path, n: usize) -> (std::os::fd::OwnedFd, String) {
    let path = dir.join(format!("out-{n}.txt"));
    let f = std::fs::File::create(&path).unwrap();
    (f.into(), path.display().to_string())
}

#[tokio::test]
async fn each_budget_refuses_with_limit_exceeded_naming_it_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| {
        s.budget = crate::core::Budget {
            jobs: 100,
            bytes: 3 << 20,
            outputs: 2,
        };
    })
    .await;
    let fat = || {
        let mut s = sleep_spec();
        s.script = Some("#!/bin/sh\n".to_string() + &"# padding\n".repeat(100_000));
        s
    };
    // Each job holds about 1 MiB: two fit, a third does not.
    d.submit(1000, vec![fat(), fat()]).await.unwrap();
    let log = dir.path().join("jobs.log");
    let size = std::fs::metadata(&log).unwrap().len();
    let before = d.state.lock().await.usage_of(1000);
    assert_eq!(before.jobs, 2);
    assert!(before.bytes > 2 << 20, "{before:?}");
    let err = d.submit(1000, vec![fat()]).await.unwrap_err();
    let ApiError::LimitExceeded(text) = &err else {
        panic!("{err:?}")
    };
    assert!(text.contains("--max-pending-bytes-per-user"), "{text}");
    assert!(text.contains("the limit is 3M"), "{text}");
    // Control characters count as stored (six bytes each), not as one.
    let mut ctl = sleep_spec();
    ctl.env = Some(vec![format!("X={}", "\u{1}".repeat(200_000))]);
    let err = d.submit(1000, vec![ctl]).await.unwrap_err();
    assert!(matches!(err, ApiError::LimitExceeded(_)), "{err:?}");
    assert_eq!(d.state.lock().await.usage_of(1000), before);
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        size,
        "nothing written"
    );
    // Another user has a budget of their own.
    d.submit(1001, vec![fat()]).await.unwrap();

    // Output descriptors: two pending jobs with --output, not three.
    for n in 0..2 {
        d.submit_with_output(1002, vec![sleep_spec()], Some(output_file(files.path(), n)))
            .await
            .unwrap();
    }
    let err = d
        .submit_with_output(1002, vec![sleep_spec()], Some(output_file(files.path(), 2)))
        .await
        .unwrap_err();
    let ApiError::LimitExceeded(text) = &err else {
        panic!("{err:?}")
    };
    assert!(text.contains("--max-output-files-per-user"), "{text}");
    assert_eq!(
        d.outputs.lock().await.len(),
        2,
        "the third descriptor was not kept"
    );
    // Without --output the user may still queue.
    d.submit(1002, vec![sleep_spec()]).await.unwrap();

    // Cancelling gives the budget back.
    let first = d.state.lock().await.jobs.keys().copied().next().unwrap();
    d.cancel(1000, first, false).await.unwrap();
    assert_eq!(d.state.lock().await.usage_of(1000).jobs, 1);
    d.submit(1000, vec![fat()]).await.unwrap();
}

#[tokio::test]
async fn a_repeated_cancel_writes_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let (id, unit) = running_job(&d).await;
    // The unit takes its time to stop.
    d.systemd.slow_stop(&unit);
    assert_eq!(d.cancel(0, id, false).await.unwrap(), JobState::Running);
    let log = dir.path().join("jobs.log");
    let size = std::fs::metadata(&log).unwrap().len();
    for _ in 0..20 {
        assert_eq!(d.cancel(0, id, false).await.unwrap(), JobState::Running);
    }
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        size,
        "no record written again"
    );
}

#[tokio::test]
async fn a_waiting_job_keeps_its_command_on_disk_not_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let marked = || {
        let mut s = spec(vec![
            entry(
                "argv",
                vec!["/bin/echo".to_string(), "marker-argv-7".into()],
            ),
            entry("cwd", "/"),
            entry("env", vec!["MARK=env-7".to_string()]),
        ]);
        s.script = Some("echo marker-script-7\n".into());
        s
    };
    let in_memory = |j: &Job| {
        j.command.argv.is_empty() && j.command.env.is_none() && j.command.script.is_none()
    };
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let ids: Vec<JobId> = d
        .submit(1000, vec![marked(), marked(), marked()])
        .await
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    {
        let st = d.state.lock().await;
        for id in &ids {
            assert!(in_memory(&st.jobs[id]), "job {id} holds its command");
        }
        // Its owner still reads it whole, and its budget counts it whole.
        let full = st.full(ids[0]).unwrap().unwrap();
        assert_eq!(full.command.argv[1], "marker-argv-7");
        assert_eq!(full.command.env, Some(vec!["MARK=env-7".to_string()]));
        assert_eq!(
            full.command.script.as_deref(),
            Some("echo marker-script-7\n")
        );
        assert_eq!(st.usage_of(1000).bytes, 3 * full.held_bytes());
    }
    // A cancel writes the record whole (the command merged back from disk).
    d.cancel(1000, ids[2], false).await.unwrap();
    assert_eq!(
        d.state
            .lock()
            .await
            .store
            .read(ids[2])
            .unwrap()
            .command
            .argv[1],
        "marker-argv-7"
    );
    drop(d);
    // After a restart the waiting jobs are detached again; started, a job's
    // unit gets its whole command back.
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    assert!(in_memory(&d.state.lock().await.jobs[&ids[1]]));
    assert_eq!(d.state.lock().await.usage_of(1000).jobs, 2);
    d.schedule().await;
    let started = wait_state(&d, ids[0], JobState::Running).await;
    assert_eq!(started.command.argv[1], "marker-argv-7");
    let unit = crate::unit_name::of_job(ids[0]);
    for _ in 0..1000 {
        if d.systemd.unit(&unit).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let props = d.systemd.m.lock().unwrap().started[&unit].join("\n");
    assert!(props.contains("MARK=env-7"), "{props}");
    let script = std::fs::read_to_string(unit::script_path(&d.settings.unit, ids[0])).unwrap();
    assert_eq!(script, "echo marker-script-7\n");
    // What started no longer counts against the budget.
    let st = d.state.lock().await;
    assert_eq!(st.usage_of(1000).jobs, st.counts().0);
    assert!(st.usage_of(1000).jobs < 2);
}

/// Issue 16 item 7: the working directory is checked with the submitter's
/// rights, so a directory closed to them answers the same whatever it holds
/// (xlurmd used to look with root's: "does not exist" for one, accepted for the other).
#[tokio::test]
async fn a_directory_closed_to_the_submitter_tells_nothing_and_queues_nothing() {
    use crate::daemon::as_user::tests::skipped;
    use std::os::unix::fs::{chown, PermissionsExt};
    let name = "a_directory_closed_to_the_submitter_tells_nothing_and_queues_nothing";
    if !nix::unistd::geteuid().is_root() {
        skipped(
            name,
            "needs root to check as another user (CI runs it as root)",
        );
        return;
    }
    let base = tempfile::Builder::new()
        .prefix("xlurm-handler-")
        .tempdir()
        .unwrap();
    if crate::daemon::as_user::dir_problem_here(base.path().to_str().unwrap()).is_some() {
        skipped(name, "PID 1 does not see this test's temporary directory");
        return;
    }
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let closed = base.path().join("closed");
    std::fs::create_dir_all(closed.join("secret")).unwrap();
    chown(closed.join("secret"), Some(65_534), Some(65_534)).unwrap();
    chown(&closed, Some(65_534), Some(65_534)).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let closed = closed.to_str().unwrap();
    let (secret, nothere) = (format!("{closed}/secret"), format!("{closed}/nothere"));
    let in_dir = |cwd: &str| {
        let mut s = sleep_spec();
        s.cwd = cwd.to_string();
        s
    };

    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let refusal = |e: ApiError| match e {
        ApiError::InvalidArgs(m) => m,
        other => panic!("{other:?}"),
    };
    let a = refusal(d.submit(4242, vec![in_dir(&secret)]).await.unwrap_err());
    let b = refusal(d.submit(4242, vec![in_dir(&nothere)]).await.unwrap_err());
    assert_eq!(
        a,
        format!("working directory {secret:?} is not accessible to you (permission denied)")
    );
    assert_eq!(a.replace(&secret, "X"), b.replace(&nothere, "X"));
    assert_eq!(d.state.lock().await.counts(), (0, 0));
    assert!(on_disk(dir.path()).is_empty(), "nothing recorded");

    // Its owner may use it, and hears the usual answer for what is not there.
    d.submit(65_534, vec![in_dir(&secret)]).await.unwrap();
    let c = refusal(d.submit(65_534, vec![in_dir(&nothere)]).await.unwrap_err());
    assert!(c.ends_with("does not exist"), "{c}");
    // One refused directory refuses the whole submission, naming its first job.
    let many = vec![in_dir("/"), in_dir(&secret), in_dir(&secret)];
    let e = refusal(d.submit(4242, many).await.unwrap_err());
    assert!(e.starts_with("job 2: "), "{e}");
    assert_eq!(d.state.lock().await.counts(), (1, 0));
}

#[tokio::test]
async fn a_cancel_while_the_unit_is_being_started_stops_it_once_it_exists() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let gate = d.systemd.hold_starts();
    let id = d.submit(1000, vec![sleep_spec()]).await.unwrap()[0].id;
    let unit = crate::unit_name::of_job(id);
    d.schedule().await;
    // RUNNING on disk and in memory, StartTransientUnit under way.
    assert_eq!(job(&d, id).await.state, JobState::Running);
    for _ in 0..1000 {
        if d.systemd.calls("start", &unit) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(d.systemd.calls("start", &unit), 1);
    assert!(d.systemd.unit(&unit).is_none(), "no unit yet");
    assert_eq!(d.cancel(1000, id, false).await.unwrap(), JobState::Running);
    assert_eq!(job(&d, id).await.cancel_requested_by, Some(1000));
    // systemd answers: the unit it made is stopped, and the job ends CANCELLED.
    gate.add_permits(1);
    let j = wait_state(&d, id, JobState::Cancelled).await;
    assert!(d.systemd.calls("stop", &unit) >= 1, "the unit was stopped");
    assert!(d.systemd.unit(&unit).is_none(), "no unit left running");
    assert_eq!(j.cancel_requested_by, Some(1000));
    assert_eq!(on_disk(dir.path())[&id], JobState::Cancelled);
}

//! The daemon's handlers against an in-memory systemd (`MemoryUnits`): no
//! bus, no systemd. What systemd itself does is proven in the VM scenarios.

use super::*;
use crate::core::{Limits, Machine, Policy, Topology};
use crate::testing::memory_units::{MemoryUnits, CPU_NSEC};
use crate::wire::spec::entry;
use std::collections::BTreeMap;
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
    daemon_built(dir, units, tweak, |_| {}).await
}

/// `daemon_with`, its scheduler also changed by `sched_tweak` before it
/// takes the jobs loaded.
async fn daemon_built(
    dir: &std::path::Path,
    units: MemoryUnits,
    tweak: impl FnOnce(&mut Settings),
    sched_tweak: impl FnOnce(&mut Scheduler),
) -> (Arc<Daemon<MemoryUnits>>, Changes) {
    let machine = Machine::new(Topology::uniform(2, 2, 1 << 30), vec![]);
    daemon_of(dir, units, (machine, vec![]), tweak, sched_tweak).await
}

/// `daemon_built` on `machine` with the accelerator backends `accel`.
async fn daemon_of(
    dir: &std::path::Path,
    units: MemoryUnits,
    (machine, accel): (Machine, Vec<crate::accel::Active>),
    tweak: impl FnOnce(&mut Settings),
    sched_tweak: impl FnOnce(&mut Scheduler),
) -> (Arc<Daemon<MemoryUnits>>, Changes) {
    let (store, loaded) = Store::open(dir).unwrap();
    let limits = Limits {
        max_running: 8,
        max_lifetime_secs: 3600,
        min_job_mem: 64 << 20,
    };
    let mut sched = Scheduler::new(machine, Policy::FifoStrict, limits);
    sched_tweak(&mut sched);
    let mut settings = crate::testing::memory_daemon::settings(&store);
    settings.budget = crate::core::Budget {
        jobs: 3,
        ..Default::default()
    };
    tweak(&mut settings);
    let (d, changes) = Daemon::new(State::new(sched, loaded, store), settings, units, accel);
    d.readopt().await.unwrap();
    (d, changes)
}

fn spec(pairs: Vec<(String, zbus::OwnedVariant)>) -> Spec {
    crate::daemon::spec::parse(&pairs.into_iter().collect()).unwrap()
}

/// `/bin/true` that waits for `dependency`.
fn true_after(dependency: String) -> Spec {
    spec(vec![
        entry("argv", vec!["/bin/true".to_string()]),
        entry("cwd", "/"),
        entry("dependency", dependency),
    ])
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
        if j.state() == want {
            return j;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("job {id} is {:?}, not {want:?}", job(d, id).await.state());
}

/// Submits one `sleep 100` as root and runs the scheduling pass until its
/// unit runs; returns the job and its unit.
async fn running_job(d: &Arc<Daemon<MemoryUnits>>) -> (JobId, String) {
    let id = d.submit(0, vec![sleep_spec()]).await.unwrap()[0].id;
    d.schedule().await;
    wait_state(d, id, JobState::Running).await;
    let unit = crate::unit_name::of_job(id);
    for _ in 0..1000 {
        if d.systemd.unit(&unit).is_some() && !job(d, id).await.invocation_id().is_empty() {
            return (id, unit);
        }
        d.reconcile(id).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{unit} never ran");
}

/// Waits until job `id`'s unit runs (its start is no longer in flight).
pub(super) async fn until_runs(d: &Arc<Daemon<MemoryUnits>>, id: JobId) {
    let unit = crate::unit_name::of_job(id);
    for _ in 0..1000 {
        if d.systemd.unit(&unit).is_some() && !job(d, id).await.invocation_id().is_empty() {
            return;
        }
        d.reconcile(id).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "{unit} never ran: {:?} {:?}",
        job(d, id).await,
        d.systemd.m.lock().unwrap().calls
    );
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
        loaded.jobs.values().map(|j| (j.id, j.state())).collect();
    for id in 1..loaded.next_id {
        if let Some(b) = loaded.ended.get(id) {
            all.insert(id, b.state);
        }
    }
    all
}

#[tokio::test]
async fn gpus_default_is_one_device_where_there_are_accelerators_and_none_elsewhere() {
    let with = |extra: Vec<(String, zbus::OwnedVariant)>| {
        let mut pairs = vec![
            entry("argv", vec!["/bin/true".to_string()]),
            entry("cwd", "/"),
            entry("gpus_default", true),
        ];
        pairs.extend(extra);
        spec(pairs)
    };
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_of(
        dir.path(),
        MemoryUnits::default(),
        efficiency::two_gpus(),
        |_| {},
        |_| {},
    )
    .await;
    let got = d.submit(1000, vec![with(vec![])]).await.unwrap()[0].clone();
    assert!(got.gpus_defaulted);
    assert_eq!(job(&d, got.id).await.demand.devices.count, 1);
    // A count or IDs given win over the default.
    let got = d
        .submit(1000, vec![with(vec![entry("gpus", 0u32)])])
        .await
        .unwrap()[0]
        .clone();
    assert!(!got.gpus_defaulted);
    assert_eq!(job(&d, got.id).await.demand.devices.count, 0);
    let got = d
        .submit(1000, vec![with(vec![entry("device_ids", vec![1u32])])])
        .await
        .unwrap()[0]
        .clone();
    assert!(!got.gpus_defaulted);
    assert_eq!(job(&d, got.id).await.demand.devices.ids, vec![1]);
    // A refusal of the defaulted device says how to ask for none (with
    // room in the budget of 3, which is checked first).
    d.cancel(1000, got.id, false).await.unwrap();
    let before = d.state.lock().await.counts();
    let err = d
        .submit(1000, vec![with(vec![entry("vendor", "ascend")])])
        .await
        .unwrap_err();
    assert!(
        err.to_string().ends_with(&format!("({GPU_DEFAULT_HINT})")),
        "{err}"
    );
    assert_eq!(d.state.lock().await.counts(), before, "nothing queued");

    // A machine without accelerators: no device, and no word of one.
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let got = d.submit(1000, vec![with(vec![])]).await.unwrap()[0].clone();
    assert!(!got.gpus_defaulted);
    assert_eq!(job(&d, got.id).await.demand.devices.count, 0);
}

#[tokio::test]
async fn a_submission_is_queued_and_saved_and_a_bad_one_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let calls = d.systemd.m.lock().unwrap().calls.len();
    let got = d.submit(0, vec![sleep_spec()]).await.unwrap();
    assert_eq!(got.len(), 1);
    let id = got[0].id;
    assert_eq!(job(&d, id).await.state(), JobState::Pending);
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
        let o = j.outcome().expect("an outcome");
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
    let budget = job(&d, id).await.alloc().unwrap().mem_bytes;
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
    assert_eq!(j.outcome().unwrap().detail, "killed by signal 9");
}

#[tokio::test]
async fn a_start_systemd_refuses_ends_launch_failed_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    d.systemd.m.lock().unwrap().refuse_next_start = Some("Invalid property".into());
    let id = d.submit(0, vec![sleep_spec()]).await.unwrap()[0].id;
    d.schedule().await;
    let j = wait_state(&d, id, JobState::LaunchFailed).await;
    assert!(j.outcome().unwrap().detail.contains("Invalid property"));
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
    assert_eq!(job(&d, pending).await.state(), JobState::Pending);
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
    assert_eq!(j.state(), JobState::Cancelled);
    assert_eq!(j.cancel_requested_by(), Some(0));
    assert_eq!(on_disk(dir.path())[&pending], JobState::Cancelled);

    assert_eq!(
        d.cancel(0, running, false).await.unwrap(),
        JobState::Running
    );
    assert_eq!(d.systemd.calls("stop", &unit), 1);
    let j = wait_state(&d, running, JobState::Cancelled).await;
    assert_eq!(j.cancel_requested_by(), Some(0));
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
    assert!(!j.outcome().unwrap().detail.is_empty(), "says why");
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
    assert_eq!(job(&d, ids[0].0).await.state(), JobState::Running);
    let j = job(&d, ids[1].0).await;
    assert_eq!(j.state(), JobState::Failed);
    assert_eq!(j.outcome().unwrap().exit_status, Some(3));
    assert_eq!(job(&d, ids[2].0).await.state(), JobState::Lost);
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
    assert_eq!(job(&d, pending).await.state(), JobState::Pending);
    assert_eq!(job(&d, running).await.cancel_requested_by(), None);
    assert_eq!(d.state.lock().await.counts(), (1, 1));

    // The running job ends: it frees the CPUs, but RUNNING cannot be recorded
    // for the pending one, so it stays pending, in memory as on disk.
    d.systemd.end(&unit, "success", 1, 0);
    d.reconcile(running).await;
    wait_state(&d, running, JobState::Completed).await;
    d.schedule().await;
    assert_eq!(job(&d, pending).await.state(), JobState::Pending);
    assert_eq!(job(&d, pending).await.alloc(), None);
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
async fn a_cancel_while_the_unit_is_being_started_stops_it_once_it_exists() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let gate = d.systemd.hold_starts();
    let id = d.submit(1000, vec![sleep_spec()]).await.unwrap()[0].id;
    let unit = crate::unit_name::of_job(id);
    d.schedule().await;
    // RUNNING on disk and in memory, StartTransientUnit under way.
    assert_eq!(job(&d, id).await.state(), JobState::Running);
    for _ in 0..1000 {
        if d.systemd.calls("start", &unit) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(d.systemd.calls("start", &unit), 1);
    assert!(d.systemd.unit(&unit).is_none(), "no unit yet");
    assert_eq!(d.cancel(1000, id, false).await.unwrap(), JobState::Running);
    assert_eq!(job(&d, id).await.cancel_requested_by(), Some(1000));
    // systemd answers: the unit it made is stopped, and the job ends CANCELLED.
    gate.add_permits(1);
    let j = wait_state(&d, id, JobState::Cancelled).await;
    assert!(d.systemd.calls("stop", &unit) >= 1, "the unit was stopped");
    assert!(d.systemd.unit(&unit).is_none(), "no unit left running");
    assert_eq!(j.cancel_requested_by(), Some(1000));
    assert_eq!(on_disk(dir.path())[&id], JobState::Cancelled);
}

mod access;
mod announce;
mod arrays;
mod budgets;
mod efficiency;
mod ends;
mod fairness;
mod requeue;
mod slurm;
mod update;

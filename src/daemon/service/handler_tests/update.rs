//! `xlurm update` through the daemon's handlers: a pending job's demand,
//! name, nice and dependency; a running job's time limit.

use super::*;
use crate::daemon::service::update::MAX_LIVE_LIMIT_CHANGES;
use crate::daemon::spec::{parse_changes, Changes as Update};

const ALICE: u32 = 1000;
const BOB: u32 = 1001;

fn changes(pairs: Vec<(String, zbus::OwnedVariant)>) -> Update {
    parse_changes(&pairs.into_iter().collect()).unwrap()
}

fn cpus(n: u32) -> Spec {
    spec(vec![
        entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
        entry("cwd", "/"),
        entry("cpus", n),
    ])
}

async fn updating_daemon(dir: &std::path::Path) -> (Arc<Daemon<MemoryUnits>>, Changes) {
    daemon_with(dir, MemoryUnits::default(), |s| s.budget.jobs = 100).await
}

#[tokio::test]
async fn a_pending_job_changes_as_a_submission_would_and_bad_changes_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = updating_daemon(dir.path()).await;
    // 4 CPUs: a 4-CPU job runs, a 2-CPU one waits.
    let big = d.submit(ALICE, vec![cpus(4)]).await.unwrap()[0].id;
    d.schedule().await;
    wait_state(&d, big, JobState::Running).await;
    let id = d.submit(ALICE, vec![cpus(2)]).await.unwrap()[0].id;
    let before = job(&d, id).await;
    let record = std::fs::read(dir.path().join("jobs.log")).unwrap();
    for (who, ch, what) in [
        (ALICE, changes(vec![entry("cpus", 64u32)]), "InvalidRequest"),
        (ALICE, changes(vec![entry("nice", -5i32)]), "InvalidArgs"),
        (BOB, changes(vec![entry("cpus", 1u32)]), "PermissionDenied"),
        (
            ALICE,
            changes(vec![entry("dependency", format!("afterok:{id}"))]),
            "InvalidArgs",
        ),
        (
            ALICE,
            changes(vec![entry("dependency", "afterok:999")]),
            "InvalidArgs",
        ),
    ] {
        let e = d.update(who, id, false, ch).await.unwrap_err();
        assert!(format!("{e:?}").starts_with(what), "{what}: {e:?}");
        assert_eq!(
            job(&d, id).await,
            before,
            "a refused update changes nothing"
        );
    }
    assert_eq!(std::fs::read(dir.path().join("jobs.log")).unwrap(), record);
    // Malformed changes are refused before they reach the daemon.
    for bad in [
        vec![entry("argv", vec!["/bin/true".to_string()])],
        vec![],
        vec![entry("cpus", "four")],
        vec![entry("name", "")],
    ] {
        assert!(parse_changes(&bad.into_iter().collect()).is_err());
    }
    // Accepted: new demand, name and nice, in memory, on disk and in the queue.
    d.update(
        ALICE,
        id,
        false,
        changes(vec![
            entry("cpus", 1u32),
            entry("time_limit", 60u64),
            entry("name", "renamed"),
            entry("nice", 10i32),
        ]),
    )
    .await
    .unwrap();
    let j = job(&d, id).await;
    assert_eq!((j.demand.cpus, j.demand.time_limit_secs), (1, 60));
    assert_eq!((j.name.as_str(), j.nice), ("renamed", 10));
    assert!(j.demand.mem_default, "a default budget stays the default");
    assert_eq!(d.state.lock().await.sched.demand(id).unwrap().cpus, 1);
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert_eq!(loaded.jobs[&id].demand.cpus, 1, "on disk");
    // Root may lower it; a dependency that would be a cycle is refused.
    d.update(0, id, false, changes(vec![entry("nice", -5i32)]))
        .await
        .unwrap();
    let after = d.submit(ALICE, vec![sleep_spec()]).await.unwrap()[0].id;
    d.update(
        ALICE,
        after,
        false,
        changes(vec![entry("dependency", format!("afterok:{id}"))]),
    )
    .await
    .unwrap();
    match d
        .update(
            ALICE,
            id,
            false,
            changes(vec![entry("dependency", format!("afterany:{after}"))]),
        )
        .await
    {
        Err(ApiError::InvalidArgs(m)) => assert!(m.contains("neither could start"), "{m}"),
        other => panic!("{other:?}"),
    }
    // And cleared again: it runs.
    d.update(ALICE, after, false, changes(vec![entry("dependency", "")]))
        .await
        .unwrap();
    assert!(job(&d, after).await.after().is_none());
}

/// A job of `uid` that asks for a time limit of `secs`, running: its ID and unit.
async fn running_for(d: &Arc<Daemon<MemoryUnits>>, uid: u32, secs: u64) -> (JobId, String) {
    let mut s = sleep_spec();
    s.request.time_limit_secs = Some(secs);
    let id = d.submit(uid, vec![s]).await.unwrap()[0].id;
    d.schedule().await;
    wait_state(d, id, JobState::Running).await;
    until_runs(d, id).await;
    (id, crate::unit_name::of_job(id))
}

/// How many times systemd was given a time limit for `unit`, any limit.
fn limits_given(d: &Daemon<MemoryUnits>, unit: &str) -> usize {
    let m = d.systemd.m.lock().unwrap();
    m.calls
        .iter()
        .filter(|c| c.starts_with("time-limit ") && c.ends_with(unit))
        .count()
}

#[tokio::test]
async fn a_running_job_s_time_limit_is_lowered_by_its_owner_and_raised_by_an_admin_only() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = updating_daemon(dir.path()).await;
    // Alice's job, its unit given 1200 s.
    let (mine, unit) = running_for(&d, ALICE, 1200).await;
    let start = job(&d, mine).await.start_usec();
    // She lowers it: xlurmd keeps it, systemd hears nothing (no reload).
    d.update(
        ALICE,
        mine,
        false,
        changes(vec![entry("time_limit", 120u64)]),
    )
    .await
    .unwrap();
    let j = job(&d, mine).await;
    assert_eq!((j.demand.time_limit_secs, j.unit_limit_secs()), (120, 1200));
    assert_eq!(j.own_deadline(), Some(start + 120_000_000));
    assert_eq!(limits_given(&d, &unit), 0, "a lowering reloads nothing");
    assert_eq!(
        d.state.lock().await.sched.running(mine).unwrap().deadline,
        start / 1_000_000 + 120,
        "the scheduler plans with it"
    );
    // On disk (read as text: a second store on the log would compact it
    // under the daemon's feet): a restart keeps the deadline.
    let log = std::fs::read_to_string(dir.path().join("jobs.log")).unwrap();
    let last = log
        .lines()
        .rev()
        .find(|l| l.contains(&format!("\"id\":{mine},")))
        .unwrap();
    assert!(last.contains("\"unit_time_limit\":1200"), "{last}");
    // She may not raise it; an admin may, within its unit's limit without
    // systemd, beyond it with systemd.
    match d
        .update(
            ALICE,
            mine,
            false,
            changes(vec![entry("time_limit", 240u64)]),
        )
        .await
    {
        Err(ApiError::PermissionDenied(m)) => assert!(m.contains("polkit"), "{m}"),
        other => panic!("{other:?}"),
    }
    d.update(
        ALICE,
        mine,
        true,
        changes(vec![entry("time_limit", 240u64)]),
    )
    .await
    .unwrap();
    assert_eq!(limits_given(&d, &unit), 0);
    d.update(0, mine, true, changes(vec![entry("time_limit", 1800u64)]))
        .await
        .unwrap();
    assert_eq!(d.systemd.calls("time-limit 1800", &unit), 1);
    let j = job(&d, mine).await;
    assert_eq!((j.unit_limit_secs(), j.own_deadline()), (1800, None));
    // systemd refusing a raise puts the record back, its unit's limit too.
    d.systemd.m.lock().unwrap().refuse_next_start = Some("no".into());
    assert!(matches!(
        d.update(0, mine, true, changes(vec![entry("time_limit", 2400u64)]))
            .await,
        Err(ApiError::Failed(_))
    ));
    let j = job(&d, mine).await;
    assert_eq!(
        (j.demand.time_limit_secs, j.unit_limit_secs()),
        (1800, 1800)
    );
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert_eq!(
        loaded.jobs[&mine].demand.time_limit_secs, 1800,
        "on disk too"
    );
    // Its owner may change it a few times only (the admin's counted).
    let mut secs = 1700;
    let made = job(&d, mine).await.run().unwrap().limit_changes;
    for _ in made..MAX_LIVE_LIMIT_CHANGES {
        d.update(ALICE, mine, false, changes(vec![entry("time_limit", secs)]))
            .await
            .unwrap();
        secs -= 100;
    }
    match d
        .update(ALICE, mine, false, changes(vec![entry("time_limit", secs)]))
        .await
    {
        Err(ApiError::LimitExceeded(m)) => assert!(m.contains("the most its owner may"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(job(&d, mine).await.demand.time_limit_secs, secs + 100);
    assert_eq!(
        d.systemd.calls("time-limit 1800", &unit),
        1,
        "no reload since"
    );
    // Only the time limit changes while it runs; past the admin's maximum
    // lifetime it is refused.
    assert!(matches!(
        d.update(0, mine, true, changes(vec![entry("cpus", 2u32)]))
            .await,
        Err(ApiError::WrongState(_))
    ));
    assert!(matches!(
        d.update(
            0,
            mine,
            true,
            changes(vec![entry("time_limit", 1u64 << 40)])
        )
        .await,
        Err(ApiError::InvalidRequest(_))
    ));
    // Its end lets go of the drop-in.
    d.systemd.end(&unit, "success", 1, 0);
    d.reconcile(mine).await;
    wait_state(&d, mine, JobState::Completed).await;
    assert_eq!(d.systemd.calls("forget-time-limit", &unit), 1);
}

#[tokio::test]
async fn a_lowered_limit_stops_the_job_at_it_and_it_ends_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = updating_daemon(dir.path()).await;
    let (quick, quick_unit) = running_for(&d, ALICE, 1200).await;
    let (slow, slow_unit) = running_for(&d, ALICE, 1200).await;
    let (other, other_unit) = running_for(&d, 0, 1200).await;
    for id in [quick, slow] {
        d.update(ALICE, id, false, changes(vec![entry("time_limit", 60u64)]))
            .await
            .unwrap();
    }
    let start = job(&d, quick).await.start_usec();
    // Before the deadline nothing is stopped; the next one is named.
    let next = d.enforce_deadlines(start + 59_000_000, false).await;
    assert_eq!(next, Some(start + 60_000_000));
    assert_eq!(d.systemd.calls("stop", &quick_unit), 0);
    // At it, both are stopped, each marked on disk first; root's is not.
    d.systemd.slow_stop(&slow_unit);
    let later = job(&d, slow).await.start_usec() + 60_000_000;
    assert_eq!(d.enforce_deadlines(later, false).await, None);
    for unit in [&quick_unit, &slow_unit] {
        assert_eq!(d.systemd.calls("stop", unit), 1, "{unit}");
    }
    assert_eq!(d.systemd.calls("stop", &other_unit), 0);
    assert_eq!(job(&d, other).await.state(), JobState::Running);
    // Stopped and gone: TIMEOUT, saying why.
    let j = wait_state(&d, quick, JobState::Timeout).await;
    assert!(j.outcome().unwrap().detail.contains("time limit"), "{j:?}");
    // Taking SIGTERM as a clean end: TIMEOUT all the same, and the mark
    // survives a restart before the end is read.
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert!(loaded.jobs[&slow].run().unwrap().stopped_at_limit);
    // A restarted xlurmd asks systemd again for one marked that still runs.
    d.enforce_deadlines(later, true).await;
    assert_eq!(d.systemd.calls("stop", &slow_unit), 2);
    d.systemd.end(&slow_unit, "success", 2, 15);
    d.reconcile(slow).await;
    wait_state(&d, slow, JobState::Timeout).await;
    // Asked again: nothing more is stopped.
    assert_eq!(d.enforce_deadlines(later + 10_000_000, false).await, None);
    assert_eq!(d.systemd.calls("stop", &slow_unit), 2);
    assert_eq!(
        limits_given(&d, &quick_unit) + limits_given(&d, &slow_unit),
        0
    );
}

#[tokio::test]
async fn a_running_job_s_raise_waits_for_systemd_s_reload_without_holding_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = updating_daemon(dir.path()).await;
    let (id, unit) = running_for(&d, 0, 300).await;
    // systemd is slow to reload (PID 1 busy): the change waits for it.
    let gate = d.systemd.hold_starts();
    d.systemd.m.lock().unwrap().refuse_next_start = Some("reload failed".into());
    d.systemd.slow_stop(&unit);
    let change = {
        let d = d.clone();
        tokio::spawn(async move {
            d.update(0, id, false, changes(vec![entry("time_limit", 600u64)]))
                .await
        })
    };
    while d.systemd.calls("time-limit 600", &unit) == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Meanwhile the daemon answers: the state lock is free, and a cancel
    // is taken (its unit takes a while to stop).
    assert!(
        tokio::time::timeout(Duration::from_secs(5), d.state.lock())
            .await
            .is_ok(),
        "the state lock is held across systemd's reload"
    );
    d.cancel(0, id, false).await.unwrap();
    assert_eq!(
        job(&d, id).await.demand.time_limit_secs,
        600,
        "on disk first"
    );
    // A second raise waits its turn; a lowering does not wait at all.
    let second = {
        let d = d.clone();
        tokio::spawn(async move {
            d.update(0, id, false, changes(vec![entry("time_limit", 500u64)]))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(d.systemd.calls("time-limit 500", &unit), 0, "one at a time");
    // systemd refuses the first: its limit goes back, the cancel stays.
    gate.add_permits(1);
    assert!(matches!(change.await.unwrap(), Err(ApiError::Failed(_))));
    gate.add_permits(1);
    second.await.unwrap().unwrap();
    let j = job(&d, id).await;
    assert_eq!(j.demand.time_limit_secs, 500);
    assert_eq!(j.cancel_requested_by(), Some(0), "the cancel was lost");
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert_eq!(loaded.jobs[&id].demand.time_limit_secs, 500, "on disk too");
    d.update(0, id, false, changes(vec![entry("time_limit", 100u64)]))
        .await
        .unwrap();
    assert_eq!(d.systemd.calls("time-limit 100", &unit), 0);
}

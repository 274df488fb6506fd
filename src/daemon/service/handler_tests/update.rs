//! `xlurm update` through the daemon's handlers: a pending job's demand,
//! name, nice and dependency; a running job's time limit.

use super::*;
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

#[tokio::test]
async fn a_running_job_s_time_limit_is_lowered_by_its_owner_and_raised_by_an_admin_only() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = updating_daemon(dir.path()).await;
    let (id, unit) = running_job(&d).await;
    // Root's job: root may change its limit either way.
    let limit = job(&d, id).await.demand.time_limit_secs;
    d.update(0, id, false, changes(vec![entry("time_limit", 600u64)]))
        .await
        .unwrap();
    assert_eq!(job(&d, id).await.demand.time_limit_secs, 600);
    assert_eq!(d.systemd.calls("time-limit 600", &unit), 1);
    let start = job(&d, id).await.start_usec() / 1_000_000;
    assert_eq!(
        d.state.lock().await.sched.running(id).unwrap().deadline,
        start + 600
    );
    assert!(limit > 600);
    // Only the time limit changes while it runs.
    assert!(matches!(
        d.update(0, id, false, changes(vec![entry("cpus", 2u32)]))
            .await,
        Err(ApiError::WrongState(_))
    ));
    // systemd refusing it puts the record back.
    d.systemd.m.lock().unwrap().refuse_next_start = Some("no".into());
    assert!(matches!(
        d.update(0, id, false, changes(vec![entry("time_limit", 300u64)]))
            .await,
        Err(ApiError::Failed(_))
    ));
    assert_eq!(job(&d, id).await.demand.time_limit_secs, 600);
    let (_, loaded) = Store::open(dir.path()).unwrap();
    assert_eq!(loaded.jobs[&id].demand.time_limit_secs, 600, "on disk too");

    // Alice's running job: she may lower its limit, not raise it; an admin may.
    let mine = d.submit(ALICE, vec![sleep_spec()]).await.unwrap()[0].id;
    d.schedule().await;
    wait_state(&d, mine, JobState::Running).await;
    d.update(
        ALICE,
        mine,
        false,
        changes(vec![entry("time_limit", 120u64)]),
    )
    .await
    .unwrap();
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
    assert_eq!(job(&d, mine).await.demand.time_limit_secs, 240);
    // Its owner may change it a few times only (3 changes so far, the
    // admin's counted): each change reloads systemd.
    for secs in [230u64] {
        d.update(ALICE, mine, false, changes(vec![entry("time_limit", secs)]))
            .await
            .unwrap();
    }
    match d
        .update(
            ALICE,
            mine,
            false,
            changes(vec![entry("time_limit", 210u64)]),
        )
        .await
    {
        Err(ApiError::LimitExceeded(m)) => assert!(m.contains("reloads systemd"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(job(&d, mine).await.demand.time_limit_secs, 230);
    d.update(0, mine, true, changes(vec![entry("time_limit", 200u64)]))
        .await
        .unwrap();
    // Past the admin's maximum lifetime: refused.
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
    d.reconcile(id).await;
    wait_state(&d, id, JobState::Completed).await;
    assert_eq!(d.systemd.calls("forget-time-limit", &unit), 1);
}

#[tokio::test]
async fn a_running_job_s_limit_waits_for_systemd_s_reload_without_holding_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = updating_daemon(dir.path()).await;
    let (id, unit) = running_job(&d).await;
    let before = job(&d, id).await.demand.time_limit_secs;
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
    // A second change waits its turn.
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
    assert!(before > 500);
}

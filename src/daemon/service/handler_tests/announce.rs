//! What the API layer is told of a job, and in which order: RUNNING once
//! systemd has the unit, its invocation after it, once per daemon.

use super::*;

/// Records each state announced, with how many units systemd had been
/// asked to start when it was heard.
fn record_announcements(
    d: &Arc<Daemon<MemoryUnits>>,
    mut changes: Changes,
) -> Arc<std::sync::Mutex<Vec<(JobId, JobState, usize)>>> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (d, kept) = (d.clone(), seen.clone());
    tokio::spawn(async move {
        while let Some((id, change)) = changes.recv().await {
            if let Change::State(s) = change {
                let m = d.systemd.m.lock().unwrap();
                let starts = m.calls.iter().filter(|c| c.starts_with("start ")).count();
                drop(m);
                kept.lock().unwrap().push((id, s, starts));
            }
        }
    });
    seen
}

#[tokio::test]
async fn running_is_announced_once_systemd_has_the_unit() {
    // xrun looks at its job when it hears RUNNING: announced before
    // StartTransientUnit, the looks competed with the start (issue 21), and
    // a start systemd refused was announced RUNNING first.
    let dir = tempfile::tempdir().unwrap();
    let (d, changes) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let seen = record_announcements(&d, changes);
    let id = d.submit(0, vec![sleep_spec()]).await.unwrap()[0].id;
    d.schedule().await;
    let unit = format!("xlurm-job-{id}.service");
    while d.systemd.calls("start", &unit) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    d.systemd.m.lock().unwrap().refuse_next_start = Some("Invalid property".into());
    let refused = d.submit(0, vec![sleep_spec()]).await.unwrap()[0].id;
    d.schedule().await;
    wait_state(&d, refused, JobState::LaunchFailed).await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let seen = seen.lock().unwrap().clone();
    let of = |j: JobId| -> Vec<(JobState, usize)> {
        seen.iter()
            .filter(|(id, ..)| *id == j)
            .map(|(_, s, n)| (*s, *n))
            .collect()
    };
    // The first start is systemd's first call.
    assert_eq!(of(id), [(JobState::Pending, 0), (JobState::Running, 1)]);
    let states: Vec<JobState> = of(refused).into_iter().map(|(s, _)| s).collect();
    assert_eq!(states, [JobState::Pending, JobState::LaunchFailed]);
}

/// Job `id`'s changes, as the API layer hears them, until `last` (or 5 s).
async fn changes_of(changes: &mut Changes, id: JobId, last: Change) -> Vec<Change> {
    let mut seen = Vec::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while let Ok(Some((of, change))) = tokio::time::timeout_at(until, changes.recv()).await {
        if of == id {
            seen.push(change);
            if change == last {
                break;
            }
        }
    }
    seen
}

#[tokio::test]
async fn an_invocation_heard_while_the_start_is_in_flight_is_announced_after_running() {
    // The unit's own signals may tell its invocation before systemd answers
    // StartTransientUnit: its InvocationId came before its RUNNING.
    let dir = tempfile::tempdir().unwrap();
    let (d, mut changes) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let gate = d.systemd.hold_starts();
    let id = d.submit(1000, vec![sleep_spec()]).await.unwrap()[0].id;
    d.schedule().await;
    d.invocation_heard(id, "0123abcd".into()).await;
    assert_eq!(
        job(&d, id).await.invocation_id(),
        "0123abcd",
        "kept at once"
    );
    gate.add_permits(1);
    let seen = changes_of(&mut changes, id, Change::Invocation).await;
    assert_eq!(
        seen,
        [
            Change::State(JobState::Pending),
            Change::State(JobState::Running),
            Change::Invocation
        ]
    );
    // Heard again (a reconcile reads it): nothing new to announce.
    d.invocation_heard(id, "0123abcd".into()).await;
    assert!(changes.try_recv().is_err(), "announced once");
}

#[tokio::test]
async fn a_start_systemd_lost_is_made_again_and_announced_once() {
    let dir = tempfile::tempdir().unwrap();
    // A journal that holds no start of the unit: systemd lost its start job.
    let journalctl = dir.path().join("journalctl");
    std::fs::write(&journalctl, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(
        &journalctl,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = journalctl.to_string_lossy().into_owned();
    let (d, mut changes) =
        daemon_with(dir.path(), MemoryUnits::default(), |s| s.journalctl = path).await;
    let id = d.submit(1000, vec![sleep_spec()]).await.unwrap()[0].id;
    let unit = crate::unit_name::of_job(id);
    d.schedule().await;
    wait_for_calls(&d, "start", &unit, 1).await;
    assert_eq!(
        changes_of(&mut changes, id, Change::State(JobState::Running)).await,
        [
            Change::State(JobState::Pending),
            Change::State(JobState::Running)
        ]
    );
    // Gone before it ever ran: started again, RUNNING not announced again.
    d.systemd.vanish(&unit);
    d.reconcile(id).await;
    // Handed back to the launch queue: the next pass launches it.
    d.schedule().await;
    wait_for_calls(&d, "start", &unit, 2).await;
    assert_eq!(job(&d, id).await.run().map(|r| r.relaunches), Some(1));
    d.systemd.end(&unit, "success", 1, 0);
    d.reconcile(id).await;
    wait_state(&d, id, JobState::Completed).await;
    let states: Vec<Change> = changes_of(&mut changes, id, Change::State(JobState::Completed))
        .await
        .into_iter()
        .filter(|c| matches!(c, Change::State(_)))
        .collect();
    assert_eq!(
        states,
        [Change::State(JobState::Completed)],
        "one RUNNING for two starts"
    );
}

/// Waits until `verb` was called `n` times for `unit` (at most 5 s).
async fn wait_for_calls(d: &Arc<Daemon<MemoryUnits>>, verb: &str, unit: &str, n: usize) {
    for _ in 0..2500 {
        if d.systemd.calls(verb, unit) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!(
        "{verb} {unit}: {} calls, not {n}",
        d.systemd.calls(verb, unit)
    );
}

#[tokio::test]
async fn a_stopping_daemon_waits_until_its_last_changes_are_on_the_bus() {
    // At exit xlurmd lets the launches in flight finish (`stop_launching`):
    // the RUNNING each queues must be sent before it exits, or a client
    // waiting for it learns of it only by polling (issue 21).
    let dir = tempfile::tempdir().unwrap();
    let (d, mut changes) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let id = d.submit(0, vec![sleep_spec()]).await.unwrap()[0].id;
    d.schedule().await;
    d.stop_launching(Duration::from_secs(5)).await;
    // A slow sender: each change takes 100 ms to reach the bus.
    let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (d2, kept) = (d.clone(), sent.clone());
    let sender = tokio::spawn(async move {
        for _ in 0..2 {
            let Some((of, change)) = changes.recv().await else {
                break;
            };
            tokio::time::sleep(Duration::from_millis(100)).await;
            kept.lock().unwrap().push((of, change));
            d2.changes.sent();
        }
        changes
    });
    assert!(d.changes.flush(Duration::from_secs(5)).await);
    assert_eq!(
        sent.lock().unwrap().clone(),
        [
            (id, Change::State(JobState::Pending)),
            (id, Change::State(JobState::Running))
        ],
        "flush returned before the changes queued were sent"
    );
    // Bounded: with no one sending (the queue still open), it gives up at its limit.
    let _open = sender.await.unwrap();
    d.changes.send(id, Change::Usage);
    let t0 = std::time::Instant::now();
    assert!(!d.changes.flush(Duration::from_millis(100)).await);
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(100) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
}

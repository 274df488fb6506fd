//! A job's end through the handlers: its resources freed (and what it left
//! behind killed) before its accounting is read, and ended units collected
//! in batches while jobs wait.

use super::*;

/// A job whose unit's signals told its end frees its resources before its
/// accounting (CPU time) is read: the next job starts while that read is
/// under way. systemd answers one call at a time, so the read used to delay
/// every start that an end made possible.
#[tokio::test]
async fn the_next_job_starts_while_an_ended_jobs_accounting_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let (d, running, unit, pending) = a_running_and_a_pending_job(dir.path()).await;
    let gate = d.systemd.hold_accounting();
    d.systemd.end(&unit, "success", 1, 0);
    let ended = d.systemd.unit(&unit);
    let reading = tokio::spawn({
        let d = d.clone();
        async move { d.reconcile_with(running, ended).await }
    });
    for _ in 0..1000 {
        if d.systemd.calls("accounting", &unit) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        d.systemd.calls("accounting", &unit),
        1,
        "its accounting is read"
    );
    d.schedule().await;
    assert_eq!(
        job(&d, pending).await.state(),
        JobState::Running,
        "the waiting job starts while the ended one's accounting is read"
    );
    // ...but only once what the ended one left behind was killed (M1):
    // before its resources were freed, which was before its accounting read
    // and the pass that started the next job.
    let calls = d.systemd.m.lock().unwrap().calls.clone();
    let at = |c: String| calls.iter().position(|x| *x == c);
    let killed = at(format!("kill-leftovers {unit}")).expect("leftovers killed");
    assert!(
        killed < at(format!("accounting {unit}")).unwrap(),
        "{calls:?}"
    );
    assert_eq!(
        job(&d, running).await.state(),
        JobState::Running,
        "its end is not recorded yet"
    );
    gate.add_permits(1);
    reading.await.unwrap();
    let j = wait_state(&d, running, JobState::Completed).await;
    assert_eq!(
        j.outcome().and_then(|o| o.cpu_nsec),
        Some(CPU_NSEC),
        "accounting kept"
    );
    assert_eq!(on_disk(dir.path())[&running], JobState::Completed);
}

/// While jobs wait, ended units are collected in batches: the collector is
/// woken once a batch of them waits (bounding how many are left for the
/// moment the queue empties), not before.
#[tokio::test]
async fn ended_units_wake_the_collector_once_a_batch_of_them_waits() {
    use super::reconcile::COLLECT_BATCH;
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let woken = |d: Arc<Daemon<MemoryUnits>>| async move {
        tokio::time::timeout(Duration::from_millis(1), d.collect.notified())
            .await
            .is_ok()
    };
    for i in 0..COLLECT_BATCH {
        assert!(!woken(d.clone()).await, "woken with {i} ended units");
        let (id, unit) = running_job(&d).await;
        d.systemd.end(&unit, "success", 1, 0);
        d.reconcile(id).await;
        wait_state(&d, id, JobState::Completed).await;
    }
    assert!(
        woken(d.clone()).await,
        "woken with {COLLECT_BATCH} ended units"
    );
    assert_eq!(d.systemd.m.lock().unwrap().units.len(), COLLECT_BATCH);
    d.collect_ended().await;
    assert!(d.systemd.m.lock().unwrap().units.is_empty());
}

//! `--requeue`: a job whose unit vanished (a reboot) is queued again with
//! its ID instead of ending LOST, up to `MAX_REQUEUES` times.

use super::*;

fn sleep_requeue(requeue: bool) -> Spec {
    spec(vec![
        entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
        entry("cwd", "/"),
        entry("env", vec!["KEEP=me".to_string()]),
        entry("requeue", requeue),
    ])
}

/// xlurmd restarted after a reboot: the same state, and systemd without
/// the units of `gone`.
async fn reboot(
    d: Arc<Daemon<MemoryUnits>>,
    dir: &std::path::Path,
    gone: &[JobId],
) -> (Arc<Daemon<MemoryUnits>>, Changes) {
    let manager = std::mem::take(&mut *d.systemd.m.lock().unwrap());
    drop(d);
    let units = MemoryUnits::default();
    *units.m.lock().unwrap() = manager;
    for id in gone {
        units.vanish(&crate::unit_name::of_job(*id));
    }
    daemon_with(dir, units, |s| s.budget.jobs = 100).await
}

#[tokio::test]
async fn a_lost_requeue_job_is_queued_again_with_its_id_and_environment_others_end_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| s.budget.jobs = 100).await;
    let again = d.submit(1000, vec![sleep_requeue(true)]).await.unwrap()[0].id;
    let once = d.submit(1000, vec![sleep_requeue(false)]).await.unwrap()[0].id;
    d.schedule().await;
    until_runs(&d, again).await;
    until_runs(&d, once).await;
    let (d, _c) = reboot(d, dir.path(), &[again, once]).await;
    assert_eq!(job(&d, once).await.state(), JobState::Lost);
    let j = job(&d, again).await;
    assert_eq!((j.state(), j.restarts), (JobState::Pending, 1));
    assert_eq!(
        j.command.env.as_deref(),
        Some(&["KEEP=me".to_string()][..]),
        "it runs again as submitted"
    );
    assert_eq!(on_disk(dir.path())[&again], JobState::Pending);
    // It runs again, and is told so.
    d.schedule().await;
    until_runs(&d, again).await;
    let started = d.systemd.m.lock().unwrap().started[&crate::unit_name::of_job(again)].clone();
    assert!(
        started.iter().any(|p| p.contains("SLURM_RESTART_COUNT=1")),
        "{started:?}"
    );
    // Lost again and again: after MAX_REQUEUES restarts LOST is final.
    let mut d = d;
    for n in 2..=MAX_REQUEUES + 1 {
        let (next, _c) = reboot(d, dir.path(), &[again]).await;
        d = next;
        let j = job(&d, again).await;
        if n <= MAX_REQUEUES {
            assert_eq!((j.state(), j.restarts), (JobState::Pending, n));
            d.schedule().await;
            until_runs(&d, again).await;
        } else {
            assert_eq!(j.state(), JobState::Lost, "restart {n}");
            assert_eq!(j.restarts, MAX_REQUEUES);
        }
    }
}

#[tokio::test]
async fn an_array_whose_tasks_were_queued_again_and_then_cancelled_lets_its_dependents_go() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| s.budget.jobs = 100).await;
    let a = d
        .submit(
            1000,
            vec![spec(vec![
                entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
                entry("cwd", "/"),
                entry("array", "1-2"),
                entry("requeue", true),
            ])],
        )
        .await
        .unwrap()[0]
        .id;
    let after = d
        .submit(1000, vec![true_after(format!("afterany:{a}"))])
        .await
        .unwrap()[0]
        .id;
    for _ in 0..5 {
        d.schedule().await;
    }
    let task = d.find_task(1000, a, 1, false).await.unwrap();
    assert_ne!(task, a);
    until_runs(&d, task).await;
    until_runs(&d, a).await;
    let (d, _c) = reboot(d, dir.path(), &[task, a]).await;
    assert_eq!(job(&d, task).await.state(), JobState::Pending);
    assert_eq!(job(&d, a).await.state(), JobState::Pending);
    // Cancelling the array cancels its task queued again, and then nothing
    // of it is left to wait for.
    d.cancel(1000, a, false).await.unwrap();
    assert_eq!(job(&d, task).await.state(), JobState::Cancelled);
    assert_eq!(job(&d, a).await.state(), JobState::Cancelled);
    d.schedule().await;
    wait_state(&d, after, JobState::Running).await;
}

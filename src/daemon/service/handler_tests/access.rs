//! Who learns what about a job (`access.rs`), without a bus: private and
//! public queues, and working directories checked with the caller's rights.

use super::*;

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
    assert_eq!(job(&d, id).await.state(), JobState::Pending);
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

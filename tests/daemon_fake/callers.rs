//! What callers may cost and pass: the bus asked once per connection, calls
//! in flight, subscribers that never read, a terminal that is not theirs.

use super::*;

/// A connection's uid is asked of the bus once, at its first call: unique
/// names are never given again and a connection's credentials never change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connections_uid_is_asked_of_the_bus_once() {
    let e = env(Mode::Instant).await;
    let (d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let (id, _) = c.submit(spec(&["/bin/true"])).await.unwrap();
    for _ in 0..3 {
        c.get_job(id).await.unwrap();
    }
    assert_eq!(d.daemon.callers.len(), 1);
    let other = client(&e).await;
    let job = other.get_job(id).await.unwrap();
    assert_eq!(get::<u64>(&job, "id"), Some(id));
    assert_eq!(d.daemon.callers.len(), 2);
}

/// A client that sends calls without waiting for their answers holds at
/// most 32 of them per connection and 128 per user in xlurmd; past that, each
/// is answered at once with LimitExceeded saying which (before, every call
/// was kept, with its message, until answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_are_bounded_per_connection_and_per_user() {
    use futures_util::future::join_all;
    use std::os::unix::fs::PermissionsExt;
    let tools = tempfile::tempdir().unwrap();
    let path = tools.path().join("journalctl");
    // A slow journal: each ReadLog stays in flight for seconds (4 read at
    // once per user, the rest wait their turn).
    std::fs::write(&path, "#!/bin/sh\nsleep 4\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut e = env(Mode::Run).await;
    e.journalctl = path.to_string_lossy().into_owned();
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let (id, _) = c.submit(spec(&["/bin/true"])).await.unwrap();
    wait_state(&c, id, "COMPLETED").await;

    /// Sends `n` ReadLog calls on a new connection at once; their answers,
    /// LimitExceeded ones with how long they took.
    async fn burst(
        e: &Env,
        id: u64,
        n: usize,
    ) -> tokio::task::JoinHandle<Vec<Result<(), (String, Duration)>>> {
        let c = client(e).await;
        tokio::spawn(async move {
            let t0 = Instant::now();
            join_all((0..n).map(|_| async {
                match c.read_log(id, "", 10).await {
                    Ok(_) => Ok(()),
                    Err(err) => Err((error_name(err), t0.elapsed())),
                }
            }))
            .await
        })
    }
    let first = burst(&e, id, 40).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut more = Vec::new();
    for _ in 0..3 {
        more.push(burst(&e, id, 32).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let last = burst(&e, id, 10).await;
    // Refused at once, naming the cap that was reached.
    let refused = |answers: &[Result<(), (String, Duration)>], why: &str| {
        answers
            .iter()
            .filter(|a| match a {
                Err((msg, took)) if msg.contains(why) => {
                    assert!(msg.contains("LimitExceeded"), "{msg}");
                    assert!(*took < Duration::from_secs(3), "refused after {took:?}");
                    true
                }
                _ => false,
            })
            .count()
    };
    let last = last.await.unwrap();
    assert_eq!(
        refused(
            &last,
            "calls to xlurmd waiting for answers over all its connections"
        ),
        10,
        "{last:?}"
    );
    let first = first.await.unwrap();
    assert_eq!(
        refused(&first, "this connection has 32 calls to xlurmd waiting"),
        8,
        "{first:?}"
    );
    for m in more {
        let answers = m.await.unwrap();
        assert_eq!(refused(&answers, "waiting for answers"), 0, "{answers:?}");
    }
    // Once answered, the calls leave room: the same user calls again.
    let job = c.get_job(id).await.unwrap();
    assert_eq!(get_str(&job, "state"), "COMPLETED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_must_be_the_callers_own_pty_and_queues_nothing_otherwise() {
    let e = env(Mode::Instant).await;
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let (master, peer) = xlurm::wire::pty::open().unwrap();
    let with_pty = |fd: zbus::Fd<'_>, script: bool| {
        let mut s = spec(&["/bin/true"]);
        if script {
            s.extend([entry("script", "#!/bin/sh\ntrue\n")]);
        }
        s.insert(
            "pty_fd".into(),
            zbus::OwnedVariant::try_from(zbus::Variant::Fd(fd)).unwrap(),
        );
        s
    };
    let before = c.list_jobs(HashMap::new()).await.unwrap().0.len();
    let file = std::fs::File::open("/dev/null").unwrap();
    let err = error_name(
        c.submit(with_pty(zbus::Fd::from(&file), false))
            .await
            .unwrap_err(),
    );
    assert!(
        err.contains("InvalidArgs") && err.contains("not a pseudo-terminal"),
        "{err}"
    );
    // Not for a batch script.
    let err = error_name(
        c.submit(with_pty(zbus::Fd::from(&peer), true))
            .await
            .unwrap_err(),
    );
    assert!(err.contains("not with a batch script"), "{err}");
    // Not in SubmitMany.
    let err = error_name(
        c.submit_many(vec![with_pty(zbus::Fd::from(&peer), false)])
            .await
            .unwrap_err(),
    );
    assert!(err.contains("pty_fd"), "{err}");
    // Another user's terminal (as root, give it away first).
    if nix::unistd::getuid().is_root() {
        nix::unistd::fchown(&peer, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let err = error_name(
            c.submit(with_pty(zbus::Fd::from(&peer), false))
                .await
                .unwrap_err(),
        );
        assert!(err.contains("not yours"), "{err}");
    }
    assert_eq!(
        c.list_jobs(HashMap::new()).await.unwrap().0.len(),
        before,
        "nothing queued"
    );
    drop(master);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_stalls_neither_xlurmd_nor_other_clients() {
    // Anyone on the bus may subscribe to every job's changes and never read
    // them. The bus holds what a connection leaves unread (up to its
    // max_outgoing_bytes, then it drops that connection's messages) and goes
    // on reading xlurmd: xlurmd's signals, and its replies to everyone else,
    // still flow. The flood is sent from xlurmd's own connection, as its
    // JobStateChanged are, and is far more than the sockets in between hold.
    let e = env(Mode::Instant).await;
    let (_d, conn) = daemon(&e).await;
    let lazy = SchedulerProxy::new(&e.bus.connect().await.unwrap())
        .await
        .unwrap();
    let _never_read = lazy.receive_job_state_changed().await.unwrap();
    let flood = async {
        for n in 0..40_000u64 {
            conn.emit_signal(
                None::<()>,
                "/org/xlurm/Scheduler1",
                "org.xlurm.Scheduler1",
                "JobStateChanged",
                &(1_000_000 + n, "PENDING"),
            )
            .await
            .unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), flood)
        .await
        .expect("xlurmd's sends stalled behind a subscriber that never reads");
    // A client that reads hears xlurmd's own signal about its job, and the
    // job runs its course.
    let c = client(&e).await;
    let mut heard = c.receive_job_state_changed().await.unwrap();
    let (id, _) = c.submit(spec(&["/bin/true"])).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(60), async {
        use futures_util::StreamExt;
        while let Some(signal) = heard.next().await {
            let a = signal.args().unwrap();
            if a.id == id {
                return a.state.to_string();
            }
        }
        String::new()
    })
    .await
    .expect("a reading client never heard its job behind the flood");
    assert!(!got.is_empty(), "the signal stream ended");
    wait_state(&c, id, "RUNNING").await;
    c.cancel(id).await.unwrap();
    wait_state(&c, id, "CANCELLED").await;
}

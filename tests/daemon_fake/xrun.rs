//! `xrun` in the foreground: its reader, a restarted daemon, a flood of
//! other jobs' changes, and the calls it makes before its job starts.

use super::*;

/// Runs `xrun sleep 60` whose stdout's reader is gone from the start, checks
/// it cancelled the job and exited 141, and returns the job's ID.
async fn xrun_with_its_reader_gone(t: &LostStarts) -> u64 {
    let mut xrun = cli(&t.e, ["run", "--", "/bin/sleep", "60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(xrun.stdout.take());
    let out = tokio::task::spawn_blocking(move || xrun.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(stderr.contains("output was closed"), "{stderr}");
    let listed = cli_json(&t.e, &["queue", "--all", "--json"]);
    let id = listed[0]["id"].as_u64().unwrap();
    wait_state(&t.c, id, "CANCELLED").await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xrun_whose_output_reader_goes_away_cancels_its_job() {
    // `xrun ... | head -1`: head exits, xrun's next write fails (EPIPE).
    let t = lost_starts(
        Some(r#"{"__REALTIME_TIMESTAMP":"1","__CURSOR":"c1","MESSAGE":"a line"}"#),
        0,
    )
    .await;
    let id = xrun_with_its_reader_gone(&t).await;
    assert!(
        t.e.fake.was_stopped(&format!("xlurm-job-{id}.service")),
        "the job's unit was stopped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xrun_cancels_a_silent_job_once_its_output_reader_goes_away() {
    // The job prints nothing (an empty journal): xrun never writes, so only
    // polling its stdout can tell the reader went away.
    let t = lost_starts(Some(""), 0).await;
    xrun_with_its_reader_gone(&t).await;
}

/// The daemon xrun's tests run against: a journal of one line, no start lost.
async fn xrun_rig() -> LostStarts {
    lost_starts(
        Some(r#"{"__REALTIME_TIMESTAMP":"1","__CURSOR":"c1","MESSAGE":"hi"}"#),
        0,
    )
    .await
}

/// Starts `xrun -- /bin/sh -c script` (output piped) and waits until its
/// job runs; returns xrun and the job's ID.
async fn xrun_running(e: &Env, c: &SchedulerProxy<'_>, script: &str) -> (std::process::Child, u64) {
    let xrun = cli(e, ["run", "--", "/bin/sh", "-c", script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let id = loop {
        let listed = cli_json(e, &["queue", "--json"]);
        if let Some(id) = listed[0]["id"].as_u64() {
            break id;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no job submitted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    wait_state(c, id, "RUNNING").await;
    (xrun, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xrun_waits_for_a_restarted_daemon_and_reports_its_job() {
    // xlurmd goes away while xrun follows a job (an upgrade, `systemctl
    // restart`): xrun's calls fail meanwhile; it waits, and reports the
    // job's exit code once xlurmd answers again.
    let t = xrun_rig().await;
    let (d, conn) = t._d;
    let (e, c) = (t.e, t.c);
    let (xrun, _id) = xrun_running(&e, &c, "sleep 3; exit 5").await;
    drop(d);
    conn.release_name("org.xlurm.Scheduler1").await.unwrap();
    drop(conn);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _back = daemon(&e).await;
    let out = tokio::task::spawn_blocking(move || xrun.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("waiting for it to come back"), "{stderr}");
    assert!(stderr.contains("answers again"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xrun_hears_its_job_end_through_a_flood_of_other_jobs_changes() {
    // Every job's JobStateChanged reaches every xrun. zbus stops reading a
    // connection (method replies too) while a signal stream holds 64 unread
    // messages, so an xrun that left its stream unread during a call waited
    // for ever once a burst (an array cancelled, short jobs ending) filled it.
    let t = xrun_rig().await;
    let (d, conn) = t._d;
    let (e, c) = (t.e, t.c);
    let (xrun, id) = xrun_running(&e, &c, "sleep 4; exit 6").await;
    let xrun_pid = xrun.id();
    // Other jobs' changes, sent as xlurmd sends them, for 2 s on end: xrun
    // polls its job (and its output) every 200 ms meanwhile. A hung xrun is
    // killed at the deadline (the runtime would wait for its waiting thread).
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let flood_and_wait = {
        let sent = sent.clone();
        async move {
            let t1 = Instant::now();
            while t1.elapsed() < Duration::from_secs(2) {
                for _ in 0..100 {
                    let n = sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    conn.emit_signal(
                        None::<()>,
                        "/org/xlurm/Scheduler1",
                        "org.xlurm.Scheduler1",
                        "JobStateChanged",
                        &(id + 1000 + n, "PENDING"),
                    )
                    .await
                    .unwrap();
                }
                tokio::task::yield_now().await;
            }
            tokio::task::spawn_blocking(move || xrun.wait_with_output()).await
        }
    };
    let out = tokio::time::timeout(Duration::from_secs(40), flood_and_wait).await;
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    drop(d);
    if out.is_err() {
        // SAFETY: a plain kill of the child this test started.
        unsafe { libc::kill(xrun_pid as i32, libc::SIGKILL) };
    }
    let out = out
        .unwrap_or_else(|_| panic!("xrun hung after {sent} other jobs' changes"))
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(sent > 1000, "the flood was {sent} signals");
}

/// The bus as a monitor sees it (BecomeMonitor: every message).
async fn monitor(e: &Env) -> zbus::MessageStream {
    let monitor = e.bus.connect().await.unwrap();
    monitor
        .call_method(
            Some("org.freedesktop.DBus"),
            "/org/freedesktop/DBus",
            Some("org.freedesktop.DBus.Monitoring"),
            "BecomeMonitor",
            &(Vec::<&str>::new(), 0u32),
        )
        .await
        .unwrap();
    zbus::MessageStream::from(&monitor)
}

/// The next method call the monitor `seen` sees from `from` to `to` (from
/// or to anyone for `None`) within `wait`: its sender and member.
async fn next_call(
    seen: &mut zbus::MessageStream,
    (from, to): (Option<&str>, Option<&str>),
    wait: Duration,
) -> Option<(String, String)> {
    use futures_util::StreamExt;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let m = tokio::time::timeout_at(deadline, seen.next())
            .await
            .ok()??
            .ok()?;
        let h = m.header();
        let sender = h.sender().map(|s| s.to_string()).unwrap_or_default();
        let destination = h.destination().map(|s| s.to_string()).unwrap_or_default();
        if h.message_type() == zbus::message::Type::MethodCall
            && from.is_none_or(|f| f == sender)
            && to.is_none_or(|t| t == destination)
        {
            return Some((
                sender,
                h.member().map(|m| m.to_string()).unwrap_or_default(),
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xrun_calls_nothing_it_can_do_without_before_its_job_starts() {
    // Every call before the job starts is time to a running job (issue 21:
    // xrun's submit-to-running against systemd-run's). xrun hears job
    // changes through one AddMatch on xlurmd's name (zbus's proxy stream
    // also asked for the name's owner and subscribed to its changes), and
    // its first look comes when the job has started: a look at once saw it
    // pending, and competed with its start.
    let t = xrun_rig().await;
    let (e, c) = (&t.e, &t.c);
    let mut seen = monitor(e).await;
    let xrun = cli(e, ["run", "-g", "0", "-H", "--", "true"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let wait = Duration::from_secs(10);
    let (name, hello) = next_call(&mut seen, (None, None), wait)
        .await
        .expect("no Hello");
    assert_eq!(hello, "Hello");
    let mut calls = vec![hello];
    while calls.last().map(String::as_str) != Some("Submit") {
        let (_, member) = next_call(&mut seen, (Some(&name), None), wait)
            .await
            .unwrap_or_else(|| panic!("no Submit; calls {calls:?}"));
        calls.push(member);
    }
    assert_eq!(calls, ["Hello", "AddMatch", "Submit"]);
    // Held: nothing to look at before the second after which xrun says
    // why it waits, not even when someone else tells xrun's connection its
    // job runs (anyone may send a connection a signal, whatever it
    // subscribed to).
    // The Submit was seen on its way to xlurmd: it is queued once xlurmd
    // has answered it (a moment later, longer on a loaded machine).
    let t0 = Instant::now();
    let id = loop {
        if let Some(id) = cli_json(e, &["queue", "--json"])[0]["id"].as_u64() {
            break id;
        }
        assert!(t0.elapsed() < wait, "xrun's job never showed in the queue");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let forger = e.bus.connect().await.unwrap();
    forger
        .emit_signal(
            Some(name.as_str()),
            "/org/xlurm/Scheduler1",
            "org.xlurm.Scheduler1",
            "JobStateChanged",
            &(id, "RUNNING"),
        )
        .await
        .unwrap();
    let to_xlurmd = (Some(name.as_str()), Some("org.xlurm.Scheduler1"));
    let early = next_call(&mut seen, to_xlurmd, Duration::from_millis(600)).await;
    assert_eq!(early, None, "xrun called xlurmd before its job changed");
    c.release(id).await.unwrap();
    let out = tokio::task::spawn_blocking(move || xrun.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("Task started"), "{stderr}");
}

//! A job's output: `--output` descriptors, the journal, ended jobs in brief.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_descriptors_must_be_writable_regular_files() {
    let e = env(Mode::Instant).await;
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    std::fs::write(&path, "").unwrap();
    let read_only = std::fs::File::open(&path).unwrap();
    let (pipe_r, _pipe_w) = nix::unistd::pipe().unwrap();
    let with_fd = |fd: zbus::Fd<'_>| {
        let mut s = spec(&["/bin/true"]);
        s.insert(
            "output_fd".into(),
            zbus::OwnedVariant::try_from(zbus::Variant::Fd(fd)).unwrap(),
        );
        s
    };
    let err = error_name(
        c.submit(with_fd(zbus::Fd::from(&read_only)))
            .await
            .unwrap_err(),
    );
    assert!(
        err.contains("InvalidArgs") && err.contains("not open for writing"),
        "{err}"
    );
    let err = error_name(
        c.submit(with_fd(zbus::Fd::from(&pipe_r)))
            .await
            .unwrap_err(),
    );
    assert!(err.contains("not a regular file"), "{err}");
    let mut s = spec(&["/bin/true"]);
    s.extend([entry("output_fd", "not-an-fd")]);
    assert!(error_name(c.submit(s).await.unwrap_err()).contains("must have type h"));
    let writable = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    // The path shown for it is bounded like every path.
    let mut long = with_fd(zbus::Fd::from(&writable));
    long.extend([entry("output_path", "/".to_string() + &"x".repeat(4_095))]);
    let err = error_name(c.submit(long).await.unwrap_err());
    assert!(
        err.contains("InvalidArgs") && err.contains("output_path") && err.contains("4095"),
        "{err}"
    );
    let (id, _) = c.submit(with_fd(zbus::Fd::from(&writable))).await.unwrap();
    assert!(id > 0);
}

/// Until systemd has started a job's unit the job has printed nothing:
/// ReadLog answers at once without a look at the journal (xrun asks as soon
/// as its job is placed, while systemd is busy starting it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_not_looked_for_before_the_unit_started() {
    use std::os::unix::fs::PermissionsExt;
    let tools = tempfile::tempdir().unwrap();
    let calls = tools.path().join("calls");
    let path = tools.path().join("journalctl");
    let line = r#"{"__REALTIME_TIMESTAMP":"1","__CURSOR":"c1","MESSAGE":"hello"}"#;
    let script = format!(
        "#!/bin/sh\necho \"$*\" >>'{}'\ncase \"$*\" in *--after-cursor=*) exit 0 ;; esac\nprintf '%s' '{line}'\n",
        calls.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut e = env(Mode::Run).await;
    e.journalctl = path.to_string_lossy().into_owned();
    e.fake.shared.lock().unwrap().start_delay = Duration::from_millis(5000);
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let (id, _) = c.submit(spec(&["/bin/true"])).await.unwrap();
    wait_state(&c, id, "RUNNING").await;
    let (lines, cursor, state, _) = c.read_log(id, "", 100).await.unwrap();
    assert!(lines.is_empty(), "{lines:?}");
    assert_eq!((cursor.as_str(), state.as_str()), ("", "RUNNING"));
    assert!(
        !calls.exists(),
        "the journal was read before the unit started"
    );
    // A start systemd has not reported for seconds (its news may be lost):
    // the journal is read as ever.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let (lines, _, state, _) = c.read_log(id, "", 100).await.unwrap();
    assert_eq!(
        (lines, state.as_str()),
        (vec!["hello".to_string()], "RUNNING")
    );
    // Once it ran, its output is read as ever.
    wait_state(&c, id, "COMPLETED").await;
    let (lines, cursor, _, _) = c.read_log(id, "", 100).await.unwrap();
    assert_eq!((lines, cursor.as_str()), (vec!["hello".to_string()], "c1"));
    assert!(calls.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_journald_rotated_away_is_reported_not_silently_missing() {
    // The journal's oldest entry is younger than the job: its first lines are gone.
    let t = lost_starts(
        Some(r#"{"__REALTIME_TIMESTAMP":"9999999999999999","__CURSOR":"c1","MESSAGE":"the tail"}"#),
        0,
    )
    .await;
    let (id, _) = t.c.submit(spec(&["/bin/true"])).await.unwrap();
    wait_state(&t.c, id, "COMPLETED").await;
    let (lines, cursor, state, missing_before) = t.c.read_log(id, "", 100).await.unwrap();
    assert_eq!(lines, vec!["the tail".to_string()]);
    assert_eq!((cursor.as_str(), state.as_str()), ("c1", "COMPLETED"));
    assert_eq!(missing_before, 9_999_999_999_999_999);
    // Later pages do not ask again.
    let (_, _, _, again) = t.c.read_log(id, &cursor, 100).await.unwrap();
    assert_eq!(again, 0);
    let out = cli(&t.e, ["log", &id.to_string()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("the tail"));
    assert!(
        stderr.contains("no longer in the journal") && stderr.contains("SystemMaxUse="),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_jobs_kept_in_brief_still_answer_every_call() {
    let mut e = env(Mode::Run).await;
    e.linger = Duration::from_millis(200);
    let (d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let (id, _) = c.submit(spec(&["/bin/sh", "-c", "exit 3"])).await.unwrap();
    let before = wait_state(&c, id, "FAILED").await;
    let listed = |(jobs, _): (Vec<xlurm::wire::queue::JobSummary>, bool)| {
        jobs.into_iter().find(|j| j.id == id).expect("listed")
    };
    let filter = HashMap::from([entry("all_users", true), entry("finished", true)]);
    let summary_before = listed(c.list_jobs(filter.clone()).await.unwrap());
    // Once its object is gone, the job is kept in brief, its record on disk.
    let path = format!("/org/xlurm/Scheduler1/job/{id}");
    let t0 = Instant::now();
    while d.daemon.state.lock().await.jobs.contains_key(&id) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "job {id} never retired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(d.daemon.state.lock().await.ended.contains(id));
    let intro = zbus::fdo::IntrospectableProxy::builder(&e.bus.connect().await.unwrap())
        .destination("org.xlurm.Scheduler1")
        .path(path.as_str())
        .build()
        .await
        .unwrap();
    // zbus answers UnknownObject for a path it no longer serves.
    let gone = intro.introspect().await;
    assert!(
        gone.as_ref()
            .map_or(true, |x| !x.contains("org.xlurm.Job1")),
        "its object is still there: {gone:?}"
    );
    assert_eq!(
        c.get_job(id).await.unwrap(),
        before,
        "GetJob reads it back whole"
    );
    assert_eq!(
        listed(c.list_jobs(filter).await.unwrap()),
        summary_before,
        "ListJobs shows the same line"
    );
    let only_failed = HashMap::from([entry("states", vec!["FAILED".to_string()])]);
    assert_eq!(listed(c.list_jobs(only_failed).await.unwrap()).exit_code, 3);
    let active = c.list_jobs(HashMap::new()).await.unwrap();
    assert!(active.0.iter().all(|j| j.id != id), "not listed as active");
    assert!(error_name(c.cancel(id).await.unwrap_err()).contains("WrongState"));
    // ReadLog finds it (whether a journal is there to read depends on the host).
    if let Err(err) = c.read_log(id, "", 10).await {
        let err = error_name(err);
        assert!(
            !err.contains("NoSuchJob") && !err.contains("PermissionDenied"),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_at_the_line_it_wants_does_not_kill_the_cli() {
    // `xqueue ID | grep -q 'State: RUNNING'` under `set -o pipefail`: grep
    // exits at its match; had xqueue more lines still to write, it would die
    // of SIGPIPE (141) and the pipeline would fail although the state matched.
    use std::io::BufRead;
    let e = env(Mode::Run).await;
    let (_d, _conn) = daemon(&e).await;
    let c = client(&e).await;
    let (id, _) = c.submit(spec(&["/bin/sleep", "60"])).await.unwrap();
    wait_state(&c, id, "RUNNING").await;
    for args in [
        vec!["queue".to_string(), id.to_string()],
        vec!["info".into()],
    ] {
        for round in 0..40 {
            let mut cli = cli(&e, &args)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut first = String::new();
            let mut out = std::io::BufReader::new(cli.stdout.take().unwrap());
            out.read_line(&mut first).unwrap();
            drop(out);
            let status = cli.wait().unwrap();
            assert!(!first.is_empty(), "xlurm {args:?}: no output");
            assert!(status.success(), "xlurm {args:?}, round {round}: {status}");
        }
    }
    c.cancel(id).await.unwrap();
}

//! What a user's pending jobs may hold (`core::budget`), without a bus: the
//! budgets, a repeated cancel, and waiting jobs detached from their command.

use super::*;

/// A writable descriptor for `--output`, and its path.
fn output_file(dir: &std::path::Path, n: usize) -> (std::os::fd::OwnedFd, String) {
    let path = dir.join(format!("out-{n}.txt"));
    let f = std::fs::File::create(&path).unwrap();
    (f.into(), path.display().to_string())
}

#[tokio::test]
async fn each_budget_refuses_with_limit_exceeded_naming_it_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| {
        s.budget = crate::core::Budget {
            jobs: 100,
            bytes: 3 << 20,
            outputs: 2,
        };
    })
    .await;
    let fat = || {
        let mut s = sleep_spec();
        s.script = Some("#!/bin/sh\n".to_string() + &"# padding\n".repeat(100_000));
        s
    };
    // Each job holds about 1 MiB: two fit, a third does not.
    d.submit(1000, vec![fat(), fat()]).await.unwrap();
    let log = dir.path().join("jobs.log");
    let size = std::fs::metadata(&log).unwrap().len();
    let before = d.state.lock().await.usage_of(1000);
    assert_eq!(before.jobs, 2);
    assert!(before.bytes > 2 << 20, "{before:?}");
    let err = d.submit(1000, vec![fat()]).await.unwrap_err();
    let ApiError::LimitExceeded(text) = &err else {
        panic!("{err:?}")
    };
    assert!(text.contains("--max-pending-bytes-per-user"), "{text}");
    assert!(text.contains("the limit is 3M"), "{text}");
    // Control characters count as stored (six bytes each), not as one.
    let mut ctl = sleep_spec();
    ctl.env = Some(vec![format!("X={}", "\u{1}".repeat(200_000))]);
    let err = d.submit(1000, vec![ctl]).await.unwrap_err();
    assert!(matches!(err, ApiError::LimitExceeded(_)), "{err:?}");
    assert_eq!(d.state.lock().await.usage_of(1000), before);
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        size,
        "nothing written"
    );
    // Another user has a budget of their own.
    d.submit(1001, vec![fat()]).await.unwrap();

    // Output descriptors: two pending jobs with --output, not three.
    for n in 0..2 {
        d.submit_with_output(1002, vec![sleep_spec()], Some(output_file(files.path(), n)))
            .await
            .unwrap();
    }
    let err = d
        .submit_with_output(1002, vec![sleep_spec()], Some(output_file(files.path(), 2)))
        .await
        .unwrap_err();
    let ApiError::LimitExceeded(text) = &err else {
        panic!("{err:?}")
    };
    assert!(text.contains("--max-output-files-per-user"), "{text}");
    assert_eq!(
        d.state
            .lock()
            .await
            .jobs
            .values()
            .filter(|j| j.has_output_fd())
            .count(),
        2,
        "the third descriptor was not kept"
    );
    // A --pty terminal is a held descriptor too: refused while two are held.
    let (_master, peer) = crate::wire::pty::open().unwrap();
    let err = d
        .submit_as(1002, false, vec![sleep_spec()], None, Some(peer))
        .await
        .unwrap_err();
    let ApiError::LimitExceeded(text) = &err else {
        panic!("{err:?}")
    };
    assert!(text.contains("--max-output-files-per-user"), "{text}");
    // Without --output the user may still queue.
    d.submit(1002, vec![sleep_spec()]).await.unwrap();
    // And one pending --pty job holds a descriptor of another user's budget.
    let (_master, peer) = crate::wire::pty::open().unwrap();
    d.submit_as(1003, false, vec![sleep_spec()], None, Some(peer))
        .await
        .unwrap();
    assert_eq!(d.state.lock().await.usage_of(1003).outputs, 1);

    // Cancelling gives the budget back.
    let first = d.state.lock().await.jobs.keys().copied().next().unwrap();
    d.cancel(1000, first, false).await.unwrap();
    assert_eq!(d.state.lock().await.usage_of(1000).jobs, 1);
    d.submit(1000, vec![fat()]).await.unwrap();
}

#[tokio::test]
async fn a_batch_over_budget_is_refused_before_its_specs_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| {
        s.budget.jobs = 10;
    })
    .await;
    // Eleven specs, each naming 256 jobs that do not exist: the count
    // refuses them, not the first dependency (which would have had every
    // spec's targets looked up under the state lock first).
    let targets: Vec<String> = (900_000..900_256).map(|i| i.to_string()).collect();
    let waiting = || {
        let mut s = sleep_spec();
        s.dependency = Some(
            crate::core::dependency::parse(&format!("afterok:{}", targets.join(":"))).unwrap(),
        );
        s
    };
    let err = d
        .submit(1000, (0..11).map(|_| waiting()).collect())
        .await
        .unwrap_err();
    let ApiError::LimitExceeded(text) = &err else {
        panic!("{err:?}")
    };
    assert!(text.contains("--max-pending-per-user"), "{text}");
    // Within the count, the dependency is what refuses it.
    let err = d.submit(1000, vec![waiting()]).await.unwrap_err();
    assert!(matches!(err, ApiError::InvalidArgs(_)), "{err:?}");
    assert_eq!(d.state.lock().await.counts(), (0, 0), "nothing queued");
}

#[tokio::test]
async fn a_repeated_cancel_writes_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let (id, unit) = running_job(&d).await;
    // The unit takes its time to stop.
    d.systemd.slow_stop(&unit);
    assert_eq!(d.cancel(0, id, false).await.unwrap(), JobState::Running);
    let log = dir.path().join("jobs.log");
    let size = std::fs::metadata(&log).unwrap().len();
    for _ in 0..20 {
        assert_eq!(d.cancel(0, id, false).await.unwrap(), JobState::Running);
    }
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        size,
        "no record written again"
    );
}

#[tokio::test]
async fn a_waiting_job_keeps_its_command_on_disk_not_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let marked = || {
        let mut s = spec(vec![
            entry(
                "argv",
                vec!["/bin/echo".to_string(), "marker-argv-7".into()],
            ),
            entry("cwd", "/"),
            entry("env", vec!["MARK=env-7".to_string()]),
        ]);
        s.script = Some("echo marker-script-7\n".into());
        s
    };
    let in_memory = |j: &Job| {
        j.command.argv.is_empty() && j.command.env.is_none() && j.command.script.is_none()
    };
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let ids: Vec<JobId> = d
        .submit(1000, vec![marked(), marked(), marked()])
        .await
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    {
        let st = d.state.lock().await;
        for id in &ids {
            assert!(in_memory(&st.jobs[id]), "job {id} holds its command");
        }
        // Its owner still reads it whole, and its budget counts it whole.
        let full = st.full(ids[0]).unwrap().unwrap();
        assert_eq!(full.command.argv[1], "marker-argv-7");
        assert_eq!(full.command.env, Some(vec!["MARK=env-7".to_string()]));
        assert_eq!(
            full.command.script.as_deref(),
            Some("echo marker-script-7\n")
        );
        assert_eq!(st.usage_of(1000).bytes, 3 * full.held_bytes());
    }
    // A cancel writes the record whole (the command merged back from disk).
    d.cancel(1000, ids[2], false).await.unwrap();
    assert_eq!(
        d.state
            .lock()
            .await
            .store
            .read(ids[2])
            .unwrap()
            .command
            .argv[1],
        "marker-argv-7"
    );
    drop(d);
    // After a restart the waiting jobs are detached again; started, a job's
    // unit gets its whole command back.
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    assert!(in_memory(&d.state.lock().await.jobs[&ids[1]]));
    assert_eq!(d.state.lock().await.usage_of(1000).jobs, 2);
    d.schedule().await;
    let started = wait_state(&d, ids[0], JobState::Running).await;
    assert_eq!(started.command.argv[1], "marker-argv-7");
    let unit = crate::unit_name::of_job(ids[0]);
    for _ in 0..1000 {
        if d.systemd.unit(&unit).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let props = d.systemd.m.lock().unwrap().started[&unit].join("\n");
    assert!(props.contains("MARK=env-7"), "{props}");
    let script = std::fs::read_to_string(unit::script_path(&d.settings.unit, ids[0])).unwrap();
    assert_eq!(script, "echo marker-script-7\n");
    // What started no longer counts against the budget.
    let st = d.state.lock().await;
    assert_eq!(st.usage_of(1000).jobs, st.counts().0);
    assert!(st.usage_of(1000).jobs < 2);
}

//! Job arrays through the daemon's handlers: one record until tasks start,
//! each task a job of its own, `%N`, cancels of one task or all, and
//! dependencies on an array or one task.

use super::*;
use crate::core::Reason;

const ALICE: u32 = 1000;

fn array(spec_text: &str) -> Spec {
    spec(vec![
        entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
        entry("cwd", "/"),
        entry("array", spec_text),
    ])
}

/// The tasks of array `a` that started: (job ID, index, state).
async fn tasks(d: &Daemon<MemoryUnits>, a: JobId) -> Vec<(JobId, u32, JobState)> {
    let st = d.state.lock().await;
    st.jobs
        .values()
        .filter_map(|j| {
            let t = j.array.as_ref()?;
            (t.array == a && t.rest.is_empty() && j.state() != JobState::Pending)
                .then(|| (j.id, t.index, j.state()))
        })
        .collect()
}

/// Runs passes until nothing more starts.
async fn settle(d: &Arc<Daemon<MemoryUnits>>) {
    for _ in 0..30 {
        d.schedule().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn end_ok(d: &Arc<Daemon<MemoryUnits>>, id: JobId) {
    until_runs(d, id).await;
    d.systemd
        .end(&crate::unit_name::of_job(id), "success", 1, 0);
    d.reconcile(id).await;
    wait_state(d, id, JobState::Completed).await;
}

#[tokio::test]
async fn an_array_is_one_record_until_its_tasks_start_each_as_a_job_and_n_at_most_run() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| s.budget.jobs = 10).await;
    let a = d.submit(ALICE, vec![array("0-9:3%2")]).await.unwrap()[0].id;
    {
        let st = d.state.lock().await;
        assert_eq!(st.jobs.len(), 1, "one record for four tasks");
        assert_eq!(st.jobs[&a].label(), format!("{a}_[0-9:3%2]"));
    }
    settle(&d).await;
    let running = tasks(&d, a).await;
    assert_eq!(running.len(), 2, "%2: {running:?}");
    assert_eq!(
        running.iter().map(|t| t.1).collect::<Vec<_>>(),
        vec![0, 3],
        "in index order"
    );
    assert_eq!(
        d.state.lock().await.reason(a),
        Some(Reason::ArrayTaskLimit { limit: 2 })
    );
    assert_eq!(job(&d, a).await.label(), format!("{a}_[6,9%2]"));
    // Each task is told its place, as Slurm's variables say.
    let (first, ..) = running[0];
    until_runs(&d, first).await;
    let props = d.systemd.m.lock().unwrap().started[&crate::unit_name::of_job(first)].clone();
    for want in [
        format!("SLURM_ARRAY_JOB_ID={a}"),
        "SLURM_ARRAY_TASK_ID=0".into(),
        "SLURM_ARRAY_TASK_COUNT=4".into(),
        "SLURM_ARRAY_TASK_MIN=0".into(),
        "SLURM_ARRAY_TASK_MAX=9".into(),
        "SLURM_ARRAY_TASK_STEP=3".into(),
        format!("SLURM_JOB_ID={first}"),
        "XLURM_ARRAY_TASK_ID=0".into(),
    ] {
        assert!(
            props.iter().any(|p| p.contains(&want)),
            "{want} in {props:?}"
        );
    }
    // A restart keeps the array as it was, %N included.
    let manager = std::mem::take(&mut *d.systemd.m.lock().unwrap());
    drop(d);
    let units = MemoryUnits::default();
    *units.m.lock().unwrap() = manager;
    let (d, _c) = daemon_with(dir.path(), units, |s| s.budget.jobs = 10).await;
    settle(&d).await;
    assert_eq!(tasks(&d, a).await.len(), 2);
    // One ends: the next starts; in the end the array's record is its last task.
    end_ok(&d, first).await;
    settle(&d).await;
    let now: Vec<u32> = tasks(&d, a).await.iter().map(|t| t.1).collect();
    assert_eq!(now, vec![0, 3, 6]);
    for _ in 0..3 {
        let run: Vec<JobId> = tasks(&d, a)
            .await
            .iter()
            .filter(|t| t.2 == JobState::Running)
            .map(|t| t.0)
            .collect();
        end_ok(&d, run[0]).await;
        settle(&d).await;
    }
    let done = tasks(&d, a).await;
    assert_eq!(done.len(), 4, "{done:?}");
    assert!(done.iter().all(|t| t.2 == JobState::Completed), "{done:?}");
    assert!(
        done.iter().any(|t| t.0 == a && t.1 == 9),
        "the last is the array's own"
    );
    assert_eq!(job(&d, a).await.label(), format!("{a}_9"));
}

#[tokio::test]
async fn cancelling_one_task_or_the_whole_array_and_depending_on_either() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| s.budget.jobs = 10).await;
    let a = d.submit(ALICE, vec![array("1-6%1")]).await.unwrap()[0].id;
    let on_task = d
        .submit(ALICE, vec![true_after(format!("afterok:{a}_1"))])
        .await
        .unwrap()[0]
        .id;
    let on_all = d
        .submit(ALICE, vec![true_after(format!("afterany:{a}"))])
        .await
        .unwrap()[0]
        .id;
    settle(&d).await;
    let (t1, ..) = tasks(&d, a).await[0];
    // Task 4 has not started: cancelled, it is recorded as a task of its own.
    let (t4, was) = d.cancel_task(ALICE, a, 4, false).await.unwrap();
    assert_eq!(was, JobState::Pending);
    let j4 = job(&d, t4).await;
    assert_eq!(
        (j4.state(), j4.label()),
        (JobState::Cancelled, format!("{a}_4"))
    );
    assert_eq!(job(&d, a).await.label(), format!("{a}_[2-3,5-6%1]"));
    assert!(matches!(
        d.cancel_task(ALICE, a, 40, false).await,
        Err(ApiError::NoSuchJob(_))
    ));
    assert_eq!(d.find_task(ALICE, a, 1, false).await.unwrap(), t1);
    assert_eq!(
        d.find_task(ALICE, a, 2, false).await.unwrap(),
        a,
        "still waiting"
    );
    // Task 1 completes: the job waiting for it runs; the one waiting for
    // the whole array still waits.
    end_ok(&d, t1).await;
    settle(&d).await;
    wait_state(&d, on_task, JobState::Running).await;
    assert_eq!(
        d.state.lock().await.reason(on_all),
        Some(Reason::Dependency)
    );
    // Cancelling the array cancels its running task and the rest.
    let (t2, ..) = tasks(&d, a)
        .await
        .into_iter()
        .find(|t| t.2 == JobState::Running)
        .unwrap();
    until_runs(&d, t2).await;
    d.cancel(ALICE, a, false).await.unwrap();
    d.systemd
        .end(&crate::unit_name::of_job(t2), "success", 1, 0);
    d.reconcile(t2).await;
    wait_state(&d, t2, JobState::Cancelled).await;
    assert_eq!(job(&d, a).await.state(), JobState::Cancelled);
    settle(&d).await;
    wait_state(&d, on_all, JobState::Running).await;
}

#[tokio::test]
async fn a_bad_array_is_refused_and_an_array_cannot_take_an_output_file() {
    for bad in ["", "9-3", "1-3%0", "0-2000000", "1,,2"] {
        let r = crate::daemon::spec::parse(
            &[
                entry("argv", vec!["/bin/true".to_string()]),
                entry("cwd", "/"),
                entry("array", bad),
            ]
            .into_iter()
            .collect(),
        );
        assert!(r.unwrap_err().0.contains("array"), "{bad:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_on(dir.path(), MemoryUnits::default()).await;
    let file = std::fs::File::create(dir.path().join("out")).unwrap();
    let r = d
        .submit_with_output(ALICE, vec![array("1-3")], Some((file.into(), "out".into())))
        .await;
    assert!(matches!(r, Err(ApiError::InvalidArgs(_))), "{r:?}");
}

#[tokio::test]
async fn each_task_writes_its_own_output_file_named_by_its_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| s.budget.jobs = 10).await;
    let spec = spec(vec![
        entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
        entry("cwd", "/"),
        entry("name", "sweep"),
        entry("array", "4-5"),
        entry("output_template", "/tmp/out-%A_%a-%j-%x-%%.txt"),
    ]);
    let a = d.submit(ALICE, vec![spec]).await.unwrap()[0].id;
    settle(&d).await;
    let started = tasks(&d, a).await;
    assert_eq!(started.len(), 2);
    for (id, index, _) in started {
        until_runs(&d, id).await;
        let props = d.systemd.m.lock().unwrap().started[&crate::unit_name::of_job(id)].clone();
        let want = format!("--open\", \"/tmp/out-{a}_{index}-{id}-sweep-%.txt");
        assert!(
            props
                .iter()
                .any(|p| p.starts_with("ExecStart=") && p.contains(&want)),
            "{want} in {props:?}"
        );
    }
    // Only arrays name files this way; a single job passes its descriptor.
    let single = crate::daemon::spec::parse(
        &[
            entry("argv", vec!["/bin/true".to_string()]),
            entry("cwd", "/"),
            entry("output_template", "/tmp/x"),
        ]
        .into_iter()
        .collect(),
    );
    assert!(single.unwrap_err().0.contains("for arrays"));
}

/// H1 of the second security review: an array's indices are bounded at
/// submission, counted in its owner's byte budget, shown bounded in
/// listings, and a cancel cannot split them past the bound.
#[tokio::test]
async fn an_arrays_ranges_are_bounded_counted_and_listed_short() {
    let r = crate::daemon::spec::parse(
        &[
            entry("argv", vec!["/bin/true".to_string()]),
            entry("cwd", "/"),
            entry("array", "0-999999:3,1-999999:3"),
        ]
        .into_iter()
        .collect(),
    );
    let e = r.unwrap_err().0;
    assert!(
        e.contains("333334 separate ranges") && e.contains("1024"),
        "{e}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| s.budget.jobs = 10).await;
    // 1,024 ranges `3i-3i+1`: the most an array may have.
    let wide = "0-3071:3,1-3071:3";
    let mut held = spec(vec![
        entry("argv", vec!["/bin/true".to_string()]),
        entry("cwd", "/"),
        entry("array", wide),
    ]);
    held.hold = true;
    let a = d.submit(ALICE, vec![held]).await.unwrap()[0].id;
    let small = d.submit(ALICE, vec![array("0-9")]).await.unwrap()[0].id;
    let (wide_job, small_job) = (job(&d, a).await, job(&d, small).await);
    assert!(
        wide_job.held_bytes() >= small_job.held_bytes() + 24 * 1000,
        "the indices count: {} vs {}",
        wide_job.held_bytes(),
        small_job.held_bytes()
    );
    let full = wide_job.label();
    let listed = wide_job.listed_label();
    assert!(full.len() > 9000, "GetJob has them all: {}", full.len());
    assert!(listed.len() < 80, "{listed}");
    assert!(listed.starts_with(&format!("{a}_[0-1,3-4,")) && listed.ends_with(",…]"));
    assert_eq!(small_job.listed_label(), small_job.label());

    // A task at the end of a range leaves as many ranges; one inside a
    // range would make one more: refused, naming the bound and the fix.
    let (_, was) = d.cancel_task(ALICE, a, 0, false).await.unwrap();
    assert_eq!(was, JobState::Pending);
    let r = d.cancel_task(ALICE, a, 2, false).await;
    assert!(
        matches!(&r, Err(ApiError::NoSuchJob(_))),
        "2 is not a task: {r:?}"
    );
    let mut three = spec(vec![
        entry("argv", vec!["/bin/true".to_string()]),
        entry("cwd", "/"),
        entry("array", "0-3068:3,1-3068:3,3069-3071"),
    ]);
    three.hold = true;
    let b = d.submit(ALICE, vec![three]).await.unwrap()[0].id;
    let before = job(&d, b).await.label();
    let r = d.cancel_task(ALICE, b, 3070, false).await;
    match r {
        Err(ApiError::InvalidArgs(m)) => {
            assert!(m.contains("1024") && m.contains("xcancel"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(job(&d, b).await.label(), before, "nothing changed");
}

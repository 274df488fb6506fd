//! A job as a transient unit: its properties and slice, Slurm's variables,
//! bad input, cancel, and re-adoption by a restarted daemon.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_as_a_unit_with_its_limits_and_reports_its_exit() {
    let e = env(Mode::Run).await;
    let (d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let mut s = spec(&["/bin/sh", "-c", "exit 3"]);
    s.extend([
        entry("cpus", 2u32),
        entry(
            "env",
            vec!["CUDA_VISIBLE_DEVICES=7".to_string(), "A=1".to_string()],
        ),
    ]);
    let (id, info) = c.submit(s).await.unwrap();
    assert_eq!(
        get::<u64>(&info, "mem"),
        Some(1 << 30),
        "2 of 4 CPUs: half of 2 GiB"
    );
    let job = wait_state(&c, id, "FAILED").await;
    assert_eq!(get::<i32>(&job, "exit_code"), Some(3));
    assert_eq!(get_str(&job, "alloc_cpus"), "0-1");
    // Its unit, which kept its result, goes only once the end is on disk
    // (no start followed to sync it on the way).
    let unit = format!("xlurm-job-{id}.service");
    let t0 = Instant::now();
    while e.fake.is_loaded(&unit) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{unit} never collected"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(d.daemon.state.lock().await.store.is_synced());
    let props = unit_properties(&e, id);
    let p = |k: &str| {
        props
            .get(k)
            .unwrap_or_else(|| panic!("{k} not sent"))
            .try_clone()
            .unwrap()
    };
    assert_eq!(Vec::<u8>::try_from(p("AllowedCPUs")).unwrap(), vec![0b11]);
    assert_eq!(
        Vec::<u8>::try_from(p("AllowedMemoryNodes")).unwrap(),
        vec![0b1]
    );
    assert_eq!(u64::try_from(p("MemoryMax")).unwrap(), 1 << 30);
    assert_eq!(u64::try_from(p("MemorySwapMax")).unwrap(), 0);
    // No accelerator: closed by its slice (see the nodev slice's test).
    assert!(!props.contains_key("DevicePolicy"));
    assert_eq!(String::try_from(p("Slice")).unwrap(), "xlurm-nodev.slice");
    // By number (the caller's uid as the bus told it), never by name.
    assert_eq!(
        String::try_from(p("User")).unwrap(),
        nix::unistd::getuid().to_string()
    );
    assert!(bool::try_from(p("NoNewPrivileges")).unwrap());
    let env = Vec::<String>::try_from(p("Environment")).unwrap();
    assert!(env.contains(&format!("XLURM_JOB_ID={id}")));
    assert!(
        env.contains(&"CUDA_VISIBLE_DEVICES=-1".to_string()),
        "CPU job sees no GPU: {env:?}"
    );
    assert!(
        env.contains(&"ASCEND_RT_VISIBLE_DEVICES=-1".to_string()),
        "{env:?}"
    );
    assert!(env.contains(&"A=1".to_string()));
    // The signal task counts what it sent: a stopping daemon's flush of its
    // changes (PENDING, RUNNING, FAILED...) returns at once, not at its limit.
    let t0 = Instant::now();
    assert!(d.daemon.changes.flush(Duration::from_secs(5)).await);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

/// Jobs without accelerators run in `xlurm-nodev.slice`, which xlurmd
/// closed to devices at its start, and carry no device program of their own
/// (systemd builds one per unit that has a policy); jobs with accelerators
/// keep theirs in `xlurm.slice`. When systemd will not close the slice,
/// every unit closes itself as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_without_accelerators_run_in_the_slice_xlurmd_closed() {
    for refused in [false, true] {
        let mut e = env(Mode::Run).await;
        e.devices = one_gpu();
        e.fake.shared.lock().unwrap().refuse_set_properties = refused;
        let (_d, _c) = daemon(&e).await;
        let c = client(&e).await;
        let sets = e.fake.shared.lock().unwrap().set_properties.clone();
        if refused {
            assert!(sets.is_empty(), "{sets:?}");
        } else {
            let (unit, runtime, props) = &sets[0];
            assert_eq!((unit.as_str(), *runtime), ("xlurm-nodev.slice", true));
            let policy = String::try_from(props["DevicePolicy"].try_clone().unwrap()).unwrap();
            assert_eq!(policy, "closed");
            let allow =
                Vec::<(String, String)>::try_from(props["DeviceAllow"].try_clone().unwrap())
                    .unwrap();
            assert!(allow.is_empty(), "{allow:?}");
        }
        let mut ids = Vec::new();
        for gpus in [0u32, 1] {
            let mut s = spec(&["/bin/true"]);
            s.extend([entry("gpus", gpus)]);
            ids.push(c.submit(s).await.unwrap().0);
        }
        for id in &ids {
            wait_state(&c, *id, "COMPLETED").await;
        }
        let cpu = unit_properties(&e, ids[0]);
        let gpu = unit_properties(&e, ids[1]);
        let slice = |p: &HashMap<String, zbus::OwnedVariant>| {
            String::try_from(p["Slice"].try_clone().unwrap()).unwrap()
        };
        let policy = |p: &HashMap<String, zbus::OwnedVariant>| {
            p.get("DevicePolicy")
                .map(|v| String::try_from(v.try_clone().unwrap()).unwrap())
        };
        if refused {
            assert_eq!(slice(&cpu), "xlurm.slice");
            assert_eq!(policy(&cpu).as_deref(), Some("closed"));
        } else {
            assert_eq!(slice(&cpu), "xlurm-nodev.slice");
            assert_eq!(policy(&cpu), None);
            assert!(!cpu.contains_key("DeviceAllow"));
        }
        assert_eq!(slice(&gpu), "xlurm.slice");
        assert_eq!(policy(&gpu).as_deref(), Some("closed"));
        let allow =
            Vec::<(String, String)>::try_from(gpu["DeviceAllow"].try_clone().unwrap()).unwrap();
        assert!(
            allow.iter().any(|(node, _)| node.contains("nvidia")),
            "{allow:?}"
        );
    }
}

/// xlurmd reads the nodev slice's device policy back (at start and every
/// recheck). Opened by `systemctl set-property`, it is closed again; opened
/// by a drop-in that wins over xlurmd's, the next CPU jobs close their own
/// units in `xlurm.slice` and the one running in the slice is closed by its
/// unit; once the drop-in is gone, jobs go back to the slice. (Before, the
/// slice was set once and never looked at again: every later CPU job could
/// open any device.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodev_slice_is_kept_closed_or_its_jobs_close_themselves() {
    let mut e = env(Mode::Run).await;
    e.recheck = Duration::from_millis(200);
    let (d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let nodev = "xlurm-nodev.slice";
    let sets_of = |unit: &str| {
        e.fake
            .shared
            .lock()
            .unwrap()
            .set_properties
            .iter()
            .filter(|(u, _, _)| u == unit)
            .count()
    };
    let slice_policy = |id: u64| {
        let p = unit_properties(&e, id);
        (
            String::try_from(p["Slice"].try_clone().unwrap()).unwrap(),
            p.get("DevicePolicy")
                .map(|v| String::try_from(v.try_clone().unwrap()).unwrap()),
        )
    };
    assert_eq!(sets_of(nodev), 1, "closed at start");
    // An admin opens it for this boot: closed again at the next look.
    e.fake.shared.lock().unwrap().set_properties.push((
        nodev.into(),
        true,
        HashMap::from([(
            "DevicePolicy".to_string(),
            zbus::OwnedVariant::try_from(zbus::Variant::from("auto")).unwrap(),
        )]),
    ));
    until("closed again", || sets_of(nodev) == 3).await;
    assert!(!d
        .daemon
        .nodev_open
        .load(std::sync::atomic::Ordering::Acquire));
    let (a, _) = c.submit(spec(&["/bin/true"])).await.unwrap();
    wait_state(&c, a, "COMPLETED").await;
    assert_eq!(slice_policy(a), (nodev.to_string(), None));

    // A drop-in that wins over xlurmd's: a job running in the slice is
    // closed by its unit, the next ones close their own in xlurm.slice.
    let (running, _) = c.submit(spec(&["/bin/sleep", "30"])).await.unwrap();
    let running_unit = format!("xlurm-job-{running}.service");
    until("the unit started", || e.fake.is_loaded(&running_unit)).await;
    assert_eq!(slice_policy(running), (nodev.to_string(), None));
    e.fake.shared.lock().unwrap().slice_drop_in = Some(xlurm::testing::fake_systemd::SliceDropIn {
        path: "/etc/systemd/system.control/xlurm-nodev.slice.d/50-DevicePolicy.conf".into(),
        policy: "auto".into(),
        allow: vec![],
    });
    until("the running job closed by its unit", || {
        sets_of(&running_unit) == 1
    })
    .await;
    assert!(d
        .daemon
        .nodev_open
        .load(std::sync::atomic::Ordering::Acquire));
    {
        let shared = e.fake.shared.lock().unwrap();
        let (_, runtime, props) = shared
            .set_properties
            .iter()
            .find(|(u, _, _)| *u == running_unit)
            .unwrap();
        assert!(*runtime);
        let policy = String::try_from(props["DevicePolicy"].try_clone().unwrap()).unwrap();
        assert_eq!(policy, "closed");
    }
    let (b, _) = c.submit(spec(&["/bin/true"])).await.unwrap();
    wait_state(&c, b, "COMPLETED").await;
    assert_eq!(
        slice_policy(b),
        ("xlurm.slice".to_string(), Some("closed".to_string()))
    );
    // Found open again at later looks: the running job is not closed twice.
    let looks = sets_of(nodev);
    until("looked at twice more", || sets_of(nodev) >= looks + 2).await;
    assert_eq!(sets_of(&running_unit), 1);

    // The drop-in removed: the slice is closed and used again.
    e.fake.shared.lock().unwrap().slice_drop_in = None;
    until("the slice used again", || {
        !d.daemon
            .nodev_open
            .load(std::sync::atomic::Ordering::Acquire)
    })
    .await;
    let (c3, _) = c.submit(spec(&["/bin/true"])).await.unwrap();
    wait_state(&c, c3, "COMPLETED").await;
    assert_eq!(slice_policy(c3), (nodev.to_string(), None));
    c.cancel(running).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_get_slurms_variables_and_the_cancel_grace_and_one_device_by_default() {
    let mut e = env(Mode::Run).await;
    e.devices = one_gpu();
    e.cancel_grace = Duration::from_secs(3);
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    // Without -g a job asks for one device on a machine that has some.
    let gpu = xbatch(&e, &["--wrap", "true"], &[]).unwrap();
    let job = c.get_job(gpu).await.unwrap();
    assert_eq!(get_str(&job, "devices_requested"), "auto:1", "{job:?}");
    c.cancel(gpu).await.ok();
    // -g 0 asks for none; its unit has Slurm's variables, forwarded ones replaced.
    let cpu = xbatch(
        &e,
        &[
            "-g", "0", "-c", "2", "-m", "100M", "-n", "sweep", "--wrap", "true",
        ],
        &[("SLURM_JOB_ID", "999"), ("SLURM_NTASKS", "8")],
    )
    .unwrap();
    // (The double runs no batch script: only its unit's properties matter.)
    let t0 = Instant::now();
    while ["PENDING", "RUNNING"]
        .contains(&get_str(&c.get_job(cpu).await.unwrap(), "state").as_str())
    {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "job {cpu} never ended"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let p = unit_properties(&e, cpu);
    let env = Vec::<String>::try_from(p["Environment"].try_clone().unwrap()).unwrap();
    let node = xlurm::daemon::job_env::node_name();
    for want in [
        format!("SLURM_JOB_ID={cpu}"),
        format!("SLURM_JOBID={cpu}"),
        "SLURM_JOB_NAME=sweep".into(),
        "SLURM_CPUS_PER_TASK=2".into(),
        "SLURM_CPUS_ON_NODE=2".into(),
        "SLURM_MEM_PER_NODE=100".into(),
        "SLURM_NTASKS=1".into(),
        "SLURM_JOB_NUM_NODES=1".into(),
        format!("SLURM_NODELIST={node}"),
        format!(
            "SLURM_SUBMIT_DIR={}",
            std::env::current_dir().unwrap().display()
        ),
    ] {
        assert!(env.contains(&want), "{want} not in {env:?}");
    }
    assert!(!env
        .iter()
        .any(|v| v == "SLURM_JOB_ID=999" || v == "SLURM_NTASKS=8"));
    assert!(!env.iter().any(|v| v.starts_with("SLURM_JOB_GPUS=")));
    // --cancel-grace reaches the unit: SIGTERM, then SIGKILL 3 s later.
    assert_eq!(
        u64::try_from(p["TimeoutStopUSec"].try_clone().unwrap()).unwrap(),
        3_000_000
    );
    // A refusal of a defaulted device says how to ask for none.
    let err = xbatch(&e, &["-c", "99", "--wrap", "true"], &[]).unwrap_err();
    assert!(
        !err.contains("-g defaults to 1"),
        "not about devices: {err}"
    );
    let err = xbatch(&e, &["-x", "0", "--wrap", "true"], &[]).unwrap_err();
    assert!(err.contains("-g defaults to 1"), "{err}");
    // A #SBATCH line xlurm cannot honour queues nothing.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("array.sh");
    std::fs::write(
        &script,
        "#!/bin/bash\n#SBATCH --array=3-1\necho $SLURM_ARRAY_TASK_ID\n",
    )
    .unwrap();
    let ids = || {
        cli_json(&e, &["queue", "--all", "--json"])
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    let before = ids();
    let err = xbatch(&e, &[script.to_str().unwrap()], &[]).unwrap_err();
    assert!(
        err.contains("line 2: #SBATCH --array=3-1: array range")
            && err.contains("nothing was queued"),
        "{err}"
    );
    assert_eq!(ids(), before, "nothing queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_named_errors_and_queues_nothing() {
    let e = env(Mode::Instant).await;
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let mut unknown = spec(&["/bin/true"]);
    unknown.extend([entry("colour", "red")]);
    let mut wrong = spec(&["/bin/true"]);
    wrong.extend([entry("cpus", "two")]);
    let mut huge = spec(&["/bin/true"]);
    huge.extend([entry("cpus", 5u32)]);
    let mut zero = spec(&["/bin/true"]);
    zero.extend([entry("mem", 0u64)]);
    let cases = [
        (unknown, "Error.InvalidArgs unknown spec key \"colour\""),
        (
            wrong,
            "Error.InvalidArgs spec key \"cpus\" must have type u",
        ),
        (
            spec(&["true"]),
            "Error.InvalidArgs argv[0] \"true\" must be an absolute path",
        ),
        (
            huge,
            "Error.InvalidRequest asks for 5 CPUs, but jobs here can use at most 4",
        ),
        (zero, "Error.InvalidRequest a memory budget of 0 bytes"),
        (
            HashMap::from([entry("argv", vec!["/bin/true".to_string()])]),
            "Error.InvalidArgs spec key \"cwd\" is missing",
        ),
    ];
    for (s, want) in cases {
        let err = error_name(c.submit(s).await.expect_err(want));
        assert!(
            err.starts_with("org.xlurm.Scheduler1.") && err.contains(want),
            "{err} lacks {want}"
        );
    }
    let bad_batch = vec![spec(&["/bin/true"]), spec(&["nope"])];
    assert!(error_name(c.submit_many(bad_batch).await.unwrap_err()).contains("job 2:"));
    let all = HashMap::from([entry("all_users", true), entry("finished", true)]);
    assert!(
        c.list_jobs(all.clone()).await.unwrap().0.is_empty(),
        "nothing queued"
    );
    assert!(error_name(c.get_job(999).await.unwrap_err()).contains("NoSuchJob"));
    assert!(error_name(c.cancel(999).await.unwrap_err()).contains("NoSuchJob"));
    let bad_filter = HashMap::from([entry("states", vec!["SLEEPING".to_string()])]);
    assert!(error_name(c.list_jobs(bad_filter).await.unwrap_err()).contains("unknown state"));
    assert!(error_name(c.set_policy("sjf").await.unwrap_err()).contains("InvalidArgs"));
    // The per-user pending limit (5 here) holds and says so.
    let ids = c
        .submit_many((0..4).map(|_| spec(&["/bin/sleep", "1"])).collect())
        .await
        .unwrap();
    assert_eq!(ids.len(), 4);
    // The daemon still serves after all that.
    let (listed, more) = c.list_jobs(all.clone()).await.unwrap();
    assert_eq!((listed.len(), more), (4, false));
    // Paging: the newest two, then the two before them; the descriptor holds all four.
    let mut page = all.clone();
    let (k, v) = entry("limit", 2u32);
    page.insert(k, v);
    let (newest, more) = c.list_jobs(page.clone()).await.unwrap();
    assert!(more);
    assert_eq!(newest, listed[2..]);
    let (k, v) = entry("before", newest[0].id);
    page.insert(k, v);
    let (older, more) = c.list_jobs(page).await.unwrap();
    assert!(!more);
    assert_eq!(older, listed[..2]);
    let fd = c.list_jobs_by_file_descriptor(all).await.unwrap();
    let listing = xlurm::wire::queue::read_fd(fd.into()).unwrap();
    let lines = listing.lines().unwrap();
    let lines: Vec<_> = lines
        .into_iter()
        .map(xlurm::wire::queue::JobSummary::from)
        .collect();
    assert_eq!(lines, listed);
    let bad = HashMap::from([entry("before", 3u32)]);
    let err = error_name(c.list_jobs_by_file_descriptor(bad).await.unwrap_err());
    assert!(err.contains("\"before\" must have type t"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_unit_and_pending_jobs_leave_the_queue() {
    let e = env(Mode::Run).await;
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let mut big = spec(&["/bin/sleep", "30"]);
    big.extend([entry("cpus", 4u32)]);
    let (running, _) = c.submit(big.clone()).await.unwrap();
    wait_state(&c, running, "RUNNING").await;
    let (pending, _) = c.submit(big).await.unwrap();
    let job = c.get_job(pending).await.unwrap();
    assert_eq!(get_str(&job, "state"), "PENDING");
    assert!(
        get_str(&job, "reason").starts_with("Resources (CPUs"),
        "{}",
        get_str(&job, "reason")
    );
    assert_eq!(c.cancel(pending).await.unwrap(), "PENDING");
    wait_state(&c, pending, "CANCELLED").await;
    c.cancel(running).await.unwrap();
    let job = wait_state(&c, running, "CANCELLED").await;
    assert_eq!(get::<i32>(&job, "exit_code"), Some(130));
    assert!(e.fake.was_stopped(&format!("xlurm-job-{running}.service")));
    assert!(error_name(c.cancel(running).await.unwrap_err()).contains("WrongState"));
}

/// A job cancelled while systemd is still creating its unit (the stop finds
/// no unit yet) is stopped once the unit exists, not left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_the_launch_stops_the_unit_once_it_exists() {
    let e = env(Mode::Instant).await;
    e.fake.shared.lock().unwrap().start_delay = Duration::from_millis(500);
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let (id, _) = c.submit(spec(&["/bin/x"])).await.unwrap();
    wait_state(&c, id, "RUNNING").await;
    assert!(
        !e.fake.is_loaded(&format!("xlurm-job-{id}.service")),
        "the unit exists already: the test misses the window"
    );
    c.cancel(id).await.unwrap();
    wait_state(&c, id, "CANCELLED").await;
    assert!(e.fake.was_stopped(&format!("xlurm-job-{id}.service")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_readopts_harvests_and_marks_lost() {
    let e = env(Mode::Instant).await;
    let c = client(&e).await;
    let (d, conn) = daemon(&e).await;
    let (a, _) = c.submit(spec(&["/bin/a"])).await.unwrap();
    let (b, _) = c.submit(spec(&["/bin/b"])).await.unwrap();
    let (q, _) = c
        .submit(HashMap::from([
            entry("argv", vec!["/bin/q".to_string()]),
            entry("cwd", "/"),
            entry("cpus", 4u32),
        ]))
        .await
        .unwrap();
    wait_state(&c, a, "RUNNING").await;
    wait_state(&c, b, "RUNNING").await;
    // The daemon goes away; meanwhile job a exits 5 and job b's unit vanishes.
    drop(d);
    conn.release_name("org.xlurm.Scheduler1").await.unwrap();
    drop(conn);
    e.fake.finish(&format!("xlurm-job-{a}.service"), 5).await;
    e.fake.vanish(&format!("xlurm-job-{b}.service")).await;
    let (_d2, _c2) = daemon(&e).await;
    let job = wait_state(&c, a, "FAILED").await;
    assert_eq!(get::<i32>(&job, "exit_code"), Some(5));
    // Its unit is collected once the result is recorded (failed: reset).
    let t0 = Instant::now();
    while e.fake.is_loaded(&format!("xlurm-job-{a}.service")) {
        assert!(t0.elapsed() < Duration::from_secs(10), "unit not collected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let job = wait_state(&c, b, "LOST").await;
    assert!(get_str(&job, "detail").contains("vanished"));
    // The queued job survived and starts once the others freed the CPUs.
    wait_state(&c, q, "RUNNING").await;
    // IDs are never reused.
    let (next, _) = c.submit(spec(&["/bin/n"])).await.unwrap();
    assert!(next > q);
    let started = e
        .fake
        .shared
        .lock()
        .unwrap()
        .started
        .iter()
        .filter(|r| r.name == format!("xlurm-job-{a}.service"))
        .count();
    assert_eq!(started, 1, "job a was never started twice");
}

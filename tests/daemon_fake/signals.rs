//! Units followed through systemd's signals: what each costs systemd, forged
//! signals, the owner of systemd's name, a lost bus.

use super::*;

/// A job is followed through its unit's signals: its invocation is known
/// while it runs and its end is recorded, with the accounting read, without
/// reading the unit whole (GetUnit and two GetAll: costly for systemd).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_followed_through_its_units_signals_without_whole_reads() {
    let mut e = env(Mode::Instant).await;
    // No safety-net reads during the test: what happens comes from signals.
    e.recheck = Duration::from_secs(3600);
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    // Job objects' PropertiesChanged, watched from before the jobs exist.
    let watcher = e.bus.connect().await.unwrap();
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .interface("org.freedesktop.DBus.Properties")
        .member("PropertiesChanged")
        .path_namespace("/org/xlurm/Scheduler1/job")
        .build()
        .unwrap();
    let mut signals = zbus::MessageStream::for_match_rule(rule, &watcher, None)
        .await
        .unwrap();
    let mut said: HashMap<String, Vec<String>> = HashMap::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(c.submit(spec(&["/bin/x"])).await.unwrap().0);
    }
    let unit = |id: u64| format!("xlurm-job-{id}.service");
    for &id in &ids {
        wait_state(&c, id, "RUNNING").await;
        // The double numbers units in the order it was asked to start them
        // (launches run concurrently: not necessarily the jobs' order).
        let t0 = Instant::now();
        let serial = loop {
            let pos = e
                .fake
                .shared
                .lock()
                .unwrap()
                .started
                .iter()
                .position(|r| r.name == unit(id));
            if let Some(pos) = pos {
                break pos as u32 + 1;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{} never started",
                unit(id)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let want: String = xlurm::testing::fake_systemd::invocation_of(serial)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let t0 = Instant::now();
        while get_str(&c.get_job(id).await.unwrap(), "invocation_id") != want {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no invocation for {id}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // ... and the job's object said so (signals of the other jobs' objects
        // may come first: they are kept for those jobs' turn).
        let path = format!("/org/xlurm/Scheduler1/job/{id}");
        while !said.get(&path).is_some_and(|v| v.contains(&want)) {
            use futures_util::StreamExt;
            let msg = tokio::time::timeout(Duration::from_secs(5), signals.next())
                .await
                .unwrap_or_else(|_| panic!("no InvocationId change signalled for {id}"))
                .unwrap()
                .unwrap();
            type Changed = (String, HashMap<String, zbus::OwnedVariant>, Vec<String>);
            let (_, changed, _): Changed = msg.body().deserialize().unwrap();
            if let (Some(p), Some(v)) = (msg.header().path(), changed.get("InvocationId")) {
                said.entry(p.to_string())
                    .or_default()
                    .push(String::try_from(v.try_clone().unwrap()).unwrap());
            }
        }
    }
    e.fake.finish(&unit(ids[0]), 0).await;
    e.fake.finish(&unit(ids[1]), 7).await;
    let done = wait_state(&c, ids[0], "COMPLETED").await;
    assert_eq!(get::<u64>(&done, "cpu_nsec"), Some(1_000_000));
    assert_eq!(get::<u64>(&done, "memory_peak"), Some(1 << 20));
    let failed = wait_state(&c, ids[1], "FAILED").await;
    assert_eq!(get::<i32>(&failed, "exit_code"), Some(7));
    assert_eq!(get::<u64>(&failed, "cpu_nsec"), Some(1_000_000));
    // Collected: the exited unit stopped, the failed one reset.
    let t0 = Instant::now();
    loop {
        let gone = {
            let shared = e.fake.shared.lock().unwrap();
            shared.stopped.contains(&unit(ids[0]))
                && !shared.stopped.contains(&unit(ids[1]))
                && shared.started.len() == 3
        };
        if gone {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "units not collected"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let shared = e.fake.shared.lock().unwrap();
    for id in ids {
        assert_eq!(
            shared.get_unit_calls.get(&unit(id)),
            None,
            "job {id}'s unit was read whole"
        );
    }
}

/// systemd before 256 reports no memory peak and removes a unit's cgroup as
/// soon as its processes are gone: the peak last read from the cgroup of the
/// running job is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_peak_systemd_does_not_report_is_the_last_one_read_from_the_cgroup() {
    let mut e = env(Mode::Instant).await;
    let root = tempfile::tempdir().unwrap();
    let slice = root.path().join("xlurm.slice");
    e.job_cgroups = Some(slice.clone());
    e.recheck = Duration::from_millis(100);
    e.fake.shared.lock().unwrap().no_memory_peak = true;
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let (id, _) = c.submit(spec(&["/bin/x"])).await.unwrap();
    let unit = format!("xlurm-job-{id}.service");
    let t0 = Instant::now();
    while !e.fake.is_loaded(&unit) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{unit} never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A job without accelerators: in the nodev slice below the job slice.
    let dir = slice.join("xlurm-nodev.slice").join(&unit);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("memory.peak"), "9876543\n").unwrap();
    // A few looks at it while it runs; then the cgroup goes with the job.
    tokio::time::sleep(Duration::from_millis(400)).await;
    std::fs::remove_dir_all(&dir).unwrap();
    e.fake.finish(&unit, 0).await;
    let job = wait_state(&c, id, "COMPLETED").await;
    assert_eq!(get::<u64>(&job, "memory_peak"), Some(9_876_543));
    assert_eq!(
        get::<u64>(&job, "cpu_nsec"),
        Some(1_000_000),
        "systemd's figure"
    );
    // A job too short to be looked at has none: not a made-up one.
    let (id, _) = c.submit(spec(&["/bin/x"])).await.unwrap();
    let unit = format!("xlurm-job-{id}.service");
    while !e.fake.is_loaded(&unit) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    e.fake.finish(&unit, 0).await;
    let job = wait_state(&c, id, "COMPLETED").await;
    assert_eq!(get::<u64>(&job, "memory_peak"), None);
}

/// Ended units are not collected between starts while jobs wait (stop jobs
/// would delay those starts in systemd), but as soon as nothing waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_units_are_collected_once_no_job_waits() {
    let mut e = env(Mode::Instant).await;
    e.recheck = Duration::from_secs(3600);
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let whole = || {
        let mut s = spec(&["/bin/x"]);
        s.insert("cpus".into(), zbus::OwnedVariant::from(4u32));
        s
    };
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(c.submit(whole()).await.unwrap().0);
    }
    let units: Vec<String> = ids
        .iter()
        .map(|id| format!("xlurm-job-{id}.service"))
        .collect();
    let loaded = |unit: &str, want: bool| {
        let (fake, unit) = (e.fake.clone(), unit.to_string());
        async move {
            let t0 = Instant::now();
            while fake.is_loaded(&unit) != want {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "{unit}: never {want}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    // The first ends: the second starts, the third still waits.
    loaded(&units[0], true).await;
    e.fake.finish(&units[0], 0).await;
    wait_state(&c, ids[0], "COMPLETED").await;
    loaded(&units[1], true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(e.fake.is_loaded(&units[0]), "collected while a job waits");
    // The second ends, the third starts and nothing waits: both ended go.
    e.fake.finish(&units[1], 0).await;
    wait_state(&c, ids[1], "COMPLETED").await;
    loaded(&units[2], true).await;
    loaded(&units[0], false).await;
    loaded(&units[1], false).await;
    e.fake.finish(&units[2], 0).await;
    wait_state(&c, ids[2], "COMPLETED").await;
    loaded(&units[2], false).await;
}

/// Units that end while xlurmd still waits for StartTransientUnit's answer
/// (their signals arrive before it) are recorded from those signals too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_that_end_before_their_start_is_answered_are_not_read_whole() {
    let mut e = env(Mode::Instant).await;
    e.recheck = Duration::from_secs(3600);
    e.fake.shared.lock().unwrap().exit_at_once = true;
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    // In batches of 5 (the pending limit here), 8 running at a time.
    for _ in 0..6 {
        let ids = c
            .submit_many((0..5).map(|_| spec(&["/bin/x"])).collect())
            .await
            .unwrap();
        for &id in &ids {
            let job = wait_state(&c, id, "COMPLETED").await;
            assert_eq!(get::<i32>(&job, "exit_code"), Some(0));
        }
    }
    let shared = e.fake.shared.lock().unwrap();
    let read: Vec<&String> = shared.get_unit_calls.keys().collect();
    assert!(read.is_empty(), "units read whole: {read:?}");
}

/// Sends the two `PropertiesChanged` signals systemd sends when job `id`'s
/// unit ends with `status`, from `conn`, to `to` (or broadcast).
async fn unit_end_signals(conn: &zbus::Connection, to: Option<&str>, id: u64, status: i32) {
    use zbus::Variant;
    let (result, active, sub) = if status == 0 {
        ("success", "active", "exited")
    } else {
        ("exit-code", "failed", "failed")
    };
    let service = HashMap::from([
        ("Result", Variant::from(result)),
        ("ExecMainCode", Variant::from(1i32)),
        ("ExecMainStatus", Variant::from(status)),
    ]);
    let root = zbus::ObjectPath::from_static_str_unchecked("/");
    let unit = HashMap::from([
        ("ActiveState", Variant::from(active)),
        ("SubState", Variant::from(sub)),
        ("InvocationID", Variant::from(Vec::<u8>::new())),
        ("Job", Variant::from((0u32, root))),
    ]);
    for (iface, props) in [
        ("org.freedesktop.systemd1.Service", service),
        ("org.freedesktop.systemd1.Unit", unit),
    ] {
        properties_changed(conn, to, id, &(iface, props, Vec::<&str>::new())).await;
    }
}

/// Sends a `PropertiesChanged` signal with `body` for job `id`'s unit.
async fn properties_changed<B>(conn: &zbus::Connection, to: Option<&str>, id: u64, body: &B)
where
    B: serde::Serialize + zbus::zvariant::DynamicType,
{
    let path = format!("/org/freedesktop/systemd1/unit/xlurm_2djob_2d{id}_2eservice");
    conn.emit_signal(
        to,
        path.as_str(),
        "org.freedesktop.DBus.Properties",
        "PropertiesChanged",
        body,
    )
    .await
    .unwrap();
}

/// Counts the method calls that reach the systemd double's connection.
fn count_calls(conn: &zbus::Connection) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use futures_util::StreamExt;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut stream = zbus::MessageStream::from(conn);
    let counted = calls.clone();
    tokio::spawn(async move {
        while let Some(Ok(msg)) = stream.next().await {
            if msg.message_type() == zbus::message::Type::MethodCall {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    calls
}

/// A daemon that learns of units only from their signals (no safety-net
/// reads), with one job running on the systemd double.
async fn one_job_followed_by_signals_only(
) -> (Env, Served, zbus::Connection, SchedulerProxy<'static>, u64) {
    let mut e = env(Mode::Instant).await;
    e.recheck = Duration::from_secs(3600);
    let (d, daemon_conn) = daemon(&e).await;
    let c = client(&e).await;
    let id = c.submit(spec(&["/bin/x"])).await.unwrap().0;
    wait_state(&c, id, "RUNNING").await;
    (e, d, daemon_conn, c, id)
}

/// Any user can address a signal to xlurmd's unique name, and the bus
/// delivers it whatever xlurmd's match rules say: a unit signal counts only
/// from the connection that owns org.freedesktop.systemd1. Forged ends (sent
/// to xlurmd and broadcast) and a flood of forged signals of every shape leave
/// the job running, stop nothing and cost systemd no call; systemd's own end
/// is then recorded as it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_unit_signals_touch_no_job_and_cost_systemd_nothing() {
    let (e, _d, daemon_conn, c, id) = one_job_followed_by_signals_only().await;
    let t0 = Instant::now();
    while get_str(&c.get_job(id).await.unwrap(), "invocation_id").is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let calls = count_calls(&e._fake_conn);
    let unit = format!("xlurm-job-{id}.service");

    let attacker = e.bus.connect().await.unwrap();
    let xlurmd = daemon_conn.unique_name().unwrap().to_string();
    unit_end_signals(&attacker, Some(&xlurmd), id, 0).await;
    unit_end_signals(&attacker, None, id, 0).await;
    // A flood: ends, and signals that would make xlurmd read a unit (an
    // unclear one, a unit inactive with nothing queued), for this job and others.
    for i in 0..500u64 {
        let other = id + 1 + i % 50;
        unit_end_signals(&attacker, Some(&xlurmd), other, (i % 3) as i32).await;
        for target in [id, other] {
            let root = zbus::ObjectPath::from_static_str_unchecked("/");
            let inactive = HashMap::from([
                ("ActiveState", zbus::Variant::from("inactive")),
                ("SubState", zbus::Variant::from("dead")),
                ("InvocationID", zbus::Variant::from(Vec::<u8>::new())),
                ("Job", zbus::Variant::from((0u32, root))),
            ]);
            let unit_iface = "org.freedesktop.systemd1.Unit";
            let to = Some(xlurmd.as_str());
            properties_changed(
                &attacker,
                to,
                target,
                &(unit_iface, inactive, Vec::<&str>::new()),
            )
            .await;
            properties_changed(&attacker, to, target, &"garbage").await;
        }
    }
    // xlurmd answers while it drains the flood, and after.
    let job = c.get_job(id).await.unwrap();
    assert_eq!(get_str(&job, "state"), "RUNNING");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let job = c.get_job(id).await.unwrap();
    assert_eq!(get_str(&job, "state"), "RUNNING", "{job:?}");
    assert!(!e.fake.was_stopped(&unit), "a forged end stopped the unit");
    assert!(e.fake.is_loaded(&unit));
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "forged signals made xlurmd call systemd"
    );

    // systemd's own word still counts.
    e.fake.finish(&unit, 7).await;
    let job = wait_state(&c, id, "FAILED").await;
    assert_eq!(get::<i32>(&job, "exit_code"), Some(7));
}

/// systemd takes a new unique name when it re-executes: xlurmd follows the
/// bus's NameOwnerChanged to the new owner and ignores the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unit_signals_follow_the_owner_of_systemds_name() {
    let (e, _d, _daemon_conn, c, id) = one_job_followed_by_signals_only().await;
    let next = e.bus.connect().await.unwrap();
    // Answers calls (with UnknownObject: the job's accounting stays unknown).
    let _ = next.object_server();
    unit_end_signals(&next, None, id, 0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        get_str(&c.get_job(id).await.unwrap(), "state"),
        "RUNNING",
        "not yet systemd's owner"
    );
    e._fake_conn
        .release_name("org.freedesktop.systemd1")
        .await
        .unwrap();
    next.request_name("org.freedesktop.systemd1").await.unwrap();
    // The old owner is no one now.
    unit_end_signals(&e._fake_conn, None, id, 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(get_str(&c.get_job(id).await.unwrap(), "state"), "RUNNING");
    unit_end_signals(&next, None, id, 0).await;
    wait_state(&c, id, "COMPLETED").await;
}

/// Without its bus connection xlurmd serves no one: `Served::bus_lost`
/// returns, and xlurmd's main loop exits non-zero so that systemd restarts it
/// (a connection dbus-daemon closed used to leave an "active" daemon with no
/// name on the bus).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_bus_connection_is_noticed() {
    let mut e = env(Mode::Instant).await;
    let (served, _c) = daemon(&e).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), served.bus_lost())
            .await
            .is_err(),
        "not while the bus is there"
    );
    e.bus.kill();
    tokio::time::timeout(Duration::from_secs(10), served.bus_lost())
        .await
        .expect("the lost bus was noticed");
}

/// The xlurmd binary itself, in `--user` mode on a private bus with the
/// systemd double as its manager: when the bus goes away it exits 69
/// (EX_UNAVAILABLE: `Restart=on-failure` restarts it), not 0 and not 78.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xlurmd_exits_69_when_its_bus_goes_away() {
    let mut e = env(Mode::Instant).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_xlurmd"))
        .args([
            "--user",
            "--no-cgroup-check",
            "--backends",
            "none",
            "--state-dir",
        ])
        .arg(e.state.path())
        .env("DBUS_SESSION_BUS_ADDRESS", &e.bus.address)
        .env_remove("JOURNAL_STREAM")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let c = client(&e).await;
    let t0 = Instant::now();
    while c.get_machine().await.is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "xlurmd never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    e.bus.kill();
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("xlurmd exited")
        .unwrap();
    assert_eq!(status.code(), Some(69));
}

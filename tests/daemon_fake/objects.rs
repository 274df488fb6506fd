//! One object per job (`org.xlurm.Job1`): its properties, introspection,
//! and what a private queue publishes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_has_an_object_whose_properties_follow_it() {
    let e = env(Mode::Run).await;
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let (id, _) = c
        .submit(spec(&["/bin/sh", "-c", "sleep 0.3; exit 4"]))
        .await
        .unwrap();
    let conn = e.bus.connect().await.unwrap();
    let job_path = format!("/org/xlurm/Scheduler1/job/{id}");
    let props = zbus::fdo::PropertiesProxy::builder(&conn)
        .destination("org.xlurm.Scheduler1")
        .path(job_path.as_str())
        .build()
        .await
        .unwrap();
    let iface = zbus::names::InterfaceName::try_from("org.xlurm.Job1").unwrap();
    let mut changes = props.receive_properties_changed().await.unwrap();
    wait_state(&c, id, "FAILED").await;
    let all = props.get_all(iface.clone()).await.unwrap();
    assert_eq!(get::<u64>(&all, "Id"), Some(id));
    assert_eq!(get_str(&all, "State"), "FAILED");
    assert_eq!(get::<i32>(&all, "ExitCode"), Some(4));
    assert_eq!(get_str(&all, "Unit"), format!("xlurm-job-{id}.service"));
    assert!(
        get_str(&all, "Allocated").starts_with("cpus=0 mem_nodes=0"),
        "{}",
        get_str(&all, "Allocated")
    );
    assert!(
        !all.contains_key("Argv") && !all.contains_key("Environment"),
        "no command on the public object"
    );
    // One PropertiesChanged per change of state carried the state and what
    // changed with it, and told that Reason is to be read anew.
    use futures_util::StreamExt;
    let mut saw = Vec::new();
    while let Ok(Some(sig)) = tokio::time::timeout(Duration::from_millis(500), changes.next()).await
    {
        let args = sig.args().unwrap();
        let changed = args.changed_properties();
        if let Some(v) = changed.get("State") {
            let state = String::try_from(v.try_clone().unwrap()).unwrap();
            assert!(changed.contains_key("StartTime"), "{changed:?}");
            assert_eq!(
                args.invalidated_properties().as_ref(),
                ["Reason", "EstimatedStart", "Estimate", "ExpectedStart"]
            );
            if state == "FAILED" {
                let code = changed.get("ExitCode").expect("ExitCode with the end");
                assert_eq!(i32::try_from(code.try_clone().unwrap()).unwrap(), 4);
                assert!(changed.contains_key("EndTime") && changed.contains_key("MemoryPeak"));
            }
            saw.push(state);
        }
    }
    assert!(saw.contains(&"FAILED".to_string()), "{saw:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_object_tells_when_it_is_estimated_to_start() {
    let e = env(Mode::Run).await;
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let whole = |argv: &[&str], limit: u64| {
        let mut s = spec(argv);
        s.extend([entry("cpus", 4u32), entry("time_limit", limit)]);
        s
    };
    // A job of the first one's kind (owner, name, resources) completed in
    // about a second: the first is expected to take as long.
    let (like, _) = c.submit(whole(&["/bin/sleep", "1"], 120)).await.unwrap();
    wait_state(&c, like, "COMPLETED").await;
    let (first, _) = c.submit(whole(&["/bin/sleep", "30"], 120)).await.unwrap();
    let running = wait_state(&c, first, "RUNNING").await;
    let started = get::<u64>(&running, "start_time").unwrap();
    let (second, _) = c.submit(whole(&["/bin/true"], 60)).await.unwrap();
    let job = c.get_job(second).await.unwrap();
    let expected = get::<u64>(&job, "expected_start").unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        expected >= started / 1_000_000 && expected <= now + 3,
        "expected_start {expected}: the first should end about 1 s after its start {started} µs (now {now})"
    );
    assert!(
        get::<u64>(&job, "estimated_start").unwrap() >= started / 1_000_000 + 119,
        "the bound stays the time limit's: {job:?}"
    );
    let conn = e.bus.connect().await.unwrap();
    let props = |id: u64| {
        let conn = conn.clone();
        async move {
            zbus::fdo::PropertiesProxy::builder(&conn)
                .destination("org.xlurm.Scheduler1")
                .path(format!("/org/xlurm/Scheduler1/job/{id}"))
                .build()
                .await
                .unwrap()
                .get_all(zbus::names::InterfaceName::try_from("org.xlurm.Job1").unwrap())
                .await
                .unwrap()
        }
    };
    let queued = props(second).await;
    // It can start when the first reaches its 120 s limit, at the latest.
    let at = get::<u64>(&queued, "EstimatedStart").unwrap();
    let bound = started + 120 * 1_000_000;
    assert!(
        at >= started && at <= bound + 1_000_000,
        "EstimatedStart {at}, first started {started}, bound {bound}"
    );
    assert!(
        get_str(&queued, "Estimate").contains("time limits"),
        "{queued:?}"
    );
    let likely = get::<u64>(&queued, "ExpectedStart").unwrap();
    assert!(
        likely > 0 && likely < at,
        "ExpectedStart {likely} EstimatedStart {at}"
    );
    // The same figure as GetJob's (seconds there).
    let job = c.get_job(second).await.unwrap();
    assert_eq!(
        get::<u64>(&job, "estimated_start").map(|s| s * 1_000_000),
        Some(at)
    );
    // A running job has none.
    let run = props(first).await;
    assert_eq!(get::<u64>(&run, "EstimatedStart"), Some(0));
    assert_eq!(get_str(&run, "Estimate"), "");
    c.cancel(first).await.unwrap();
    c.cancel(second).await.unwrap();
}

/// The node names under `path` as xlurmd's introspection lists them.
async fn child_nodes(conn: &zbus::Connection, path: &str) -> Vec<String> {
    let intro = zbus::fdo::IntrospectableProxy::builder(conn)
        .destination("org.xlurm.Scheduler1")
        .path(path)
        .build()
        .await
        .unwrap();
    match intro.introspect().await {
        Ok(xml) => xml
            .lines()
            .filter_map(|l| l.trim().strip_prefix("<node name=\""))
            .map(|l| l.trim_end_matches("\">").to_string())
            .collect(),
        Err(_) => vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_queue_publishes_no_job_objects_and_tells_only_who_asked() {
    use futures_util::StreamExt;
    let mut e = env(Mode::Run).await;
    e.public = false;
    let (_d, _c) = daemon(&e).await;
    let owner = client(&e).await;
    let other = client(&e).await;
    let mut heard = owner.receive_job_state_changed().await.unwrap();
    let mut overheard = other.receive_job_state_changed().await.unwrap();
    let (id, _) = owner
        .submit(spec(&["/bin/sh", "-c", "sleep 0.3; exit 4"]))
        .await
        .unwrap();
    let conn = e.bus.connect().await.unwrap();
    assert!(
        child_nodes(&conn, "/org/xlurm/Scheduler1/job")
            .await
            .is_empty()
            && !child_nodes(&conn, "/org/xlurm/Scheduler1")
                .await
                .contains(&"job".to_string()),
        "a private queue lists no job objects"
    );
    let props = zbus::fdo::PropertiesProxy::builder(&conn)
        .destination("org.xlurm.Scheduler1")
        .path(format!("/org/xlurm/Scheduler1/job/{id}"))
        .build()
        .await
        .unwrap();
    let iface = zbus::names::InterfaceName::try_from("org.xlurm.Job1").unwrap();
    assert!(
        props.get_all(iface).await.is_err(),
        "no object for job {id}"
    );
    wait_state(&owner, id, "FAILED").await;
    // The submitter heard each change, unicast; the other connection nothing.
    let mut states = Vec::new();
    while let Ok(Some(sig)) = tokio::time::timeout(Duration::from_secs(2), heard.next()).await {
        let a = sig.args().unwrap();
        assert_eq!(a.id, id);
        assert_eq!(
            sig.message().header().destination().map(|d| d.to_string()),
            owner
                .inner()
                .connection()
                .unique_name()
                .map(|n| n.to_string()),
            "unicast"
        );
        states.push(a.state.to_string());
        if a.state == "FAILED" {
            break;
        }
    }
    assert_eq!(
        states.last().map(String::as_str),
        Some("FAILED"),
        "{states:?}"
    );
    let leak = tokio::time::timeout(Duration::from_millis(500), overheard.next()).await;
    assert!(leak.is_err(), "another connection heard: {leak:?}");
}

/// A raw method call to xlurmd: its reply's body as a string (or its
/// signature), or the error's name and message.
async fn raw_call<B>(
    conn: &zbus::Connection,
    path: &str,
    iface: &str,
    member: &str,
    body: &B,
) -> Result<String, String>
where
    B: serde::Serialize + zbus::zvariant::DynamicType,
{
    match conn
        .call_method(
            Some("org.xlurm.Scheduler1"),
            path,
            Some(iface),
            member,
            body,
        )
        .await
    {
        Ok(reply) => Ok(reply
            .body()
            .deserialize::<String>()
            .unwrap_or_else(|_| reply.body().signature().to_string())),
        Err(e) => Err(error_name(e)),
    }
}

/// Job objects are answered from the job table (not registered one by one):
/// they behave as any D-Bus object does, with the standard interfaces and
/// errors, from the queue down to the job, and nothing else answers.
#[tokio::test]
async fn job_objects_answer_as_registered_objects_would() {
    let e = env(Mode::Instant).await;
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let (id, _) = c.submit(spec(&["/bin/true"])).await.unwrap();
    wait_state(&c, id, "RUNNING").await;
    let conn = e.bus.connect().await.unwrap();
    let job = format!("/org/xlurm/Scheduler1/job/{id}");
    const PROPS: &str = "org.freedesktop.DBus.Properties";
    const INTRO: &str = "org.freedesktop.DBus.Introspectable";
    // Every level of the tree introspects and names the next one.
    for (path, child) in [
        ("/", "org"),
        ("/org", "xlurm"),
        ("/org/xlurm", "Scheduler1"),
        ("/org/xlurm/Scheduler1", "job"),
    ] {
        let xml = raw_call(&conn, path, INTRO, "Introspect", &())
            .await
            .unwrap();
        assert!(
            xml.contains(&format!("<node name=\"{child}\"/>")),
            "{path}: {xml}"
        );
        assert!(xml.contains("org.freedesktop.DBus.Peer"), "{path}: {xml}");
    }
    let jobs = raw_call(&conn, "/org/xlurm/Scheduler1/job", INTRO, "Introspect", &())
        .await
        .unwrap();
    assert!(jobs.contains(&format!("<node name=\"{id}\"/>")), "{jobs}");
    // The job's own object.
    let state = conn
        .call_method(
            Some("org.xlurm.Scheduler1"),
            job.as_str(),
            Some(PROPS),
            "Get",
            &("org.xlurm.Job1", "Id"),
        )
        .await
        .unwrap();
    let v: zbus::OwnedVariant = state.body().deserialize().unwrap();
    assert_eq!(u64::try_from(v).unwrap(), id);
    assert_eq!(
        raw_call(&conn, &job, "org.freedesktop.DBus.Peer", "Ping", &()).await,
        Ok("".to_string()),
        "Peer answers"
    );
    // The errors a registered object would give.
    let wrong = [
        (
            format!("{PATH}/job/0{id}"),
            INTRO,
            "Introspect",
            "UnknownObject",
        ),
        (
            format!("{PATH}/job/999999"),
            INTRO,
            "Introspect",
            "UnknownObject",
        ),
        (
            format!("{PATH}/job/x"),
            INTRO,
            "Introspect",
            "UnknownObject",
        ),
        (format!("{PATH}/jobs"), INTRO, "Introspect", "UnknownObject"),
        (
            job.clone(),
            "org.xlurm.Scheduler1",
            "Submit",
            "UnknownInterface",
        ),
        (job.clone(), "org.xlurm.Job1", "Explode", "UnknownMethod"),
        (job.clone(), INTRO, "Explode", "UnknownMethod"),
    ];
    for (path, iface, member, want) in wrong {
        let got = raw_call(&conn, &path, iface, member, &()).await;
        assert!(
            got.as_ref().is_err_and(|n| n.contains(want)),
            "{iface}.{member} on {path}: {got:?}, not {want}"
        );
    }
    let unknown = raw_call(&conn, &job, PROPS, "Get", &("org.xlurm.Job1", "Colour")).await;
    assert!(unknown.unwrap_err().contains("UnknownProperty"));
    let set = raw_call(
        &conn,
        &job,
        PROPS,
        "Set",
        &("org.xlurm.Job1", "State", zbus::Variant::from("COMPLETED")),
    )
    .await;
    assert!(set.unwrap_err().contains("PropertyReadOnly"));
    let bad_args = raw_call(&conn, &job, PROPS, "Get", &(42u32,)).await;
    assert!(bad_args.unwrap_err().contains("InvalidArgs"));
    assert_eq!(
        c.get_job(id).await.map(|j| get_str(&j, "state")).unwrap(),
        "RUNNING",
        "nothing changed"
    );
}

//! Malformed calls to org.xlurm.Scheduler1 over a real (private) dbus-daemon,
//! with systemd replaced by the double: each gets the named error, and
//! afterwards the queue and systemd are exactly as before. The same calls run
//! against real systemd in the VM (tests/vm/scenarios/20-bad-input.sh); here
//! also those the VM cannot send from a shell (a 10 MiB argv, 100,001 specs).

use std::collections::HashMap;
use xlurm::core::{Limits, Machine, Policy, Topology};
use xlurm::daemon::bus::api::{BUS_NAME, PATH};
use xlurm::daemon::serve::{serve, ServeConfig, Served};
use xlurm::testing::bus::PrivateBus;
use xlurm::testing::fake_systemd::{FakeSystemd, Mode};
use zbus::{Connection, Variant};

const IFACE: &str = "org.xlurm.Scheduler1";
const ERR: &str = "org.xlurm.Scheduler1.Error.";

struct Env {
    _bus: PrivateBus,
    fake: FakeSystemd,
    _state: tempfile::TempDir,
    _fake_conn: Connection,
    _served: Served,
    client: Connection,
}

async fn env() -> Env {
    let bus = PrivateBus::start().expect("dbus-daemon");
    let fake_conn = bus.connect().await.unwrap();
    let fake = FakeSystemd::serve(&fake_conn, Mode::Instant).await.unwrap();
    let state = tempfile::tempdir().unwrap();
    let conn = bus.connect().await.unwrap();
    let cfg = ServeConfig {
        object_linger: std::time::Duration::from_secs(600),
        accel: vec![],
        tee_path: env!("CARGO_BIN_EXE_xlurm").to_string(),
        machine: Machine::new(Topology::uniform(2, 2, 1 << 30), vec![]),
        policy: Policy::EasyBackfill,
        limits: Limits {
            max_running: 1,
            max_lifetime_secs: 3600,
            min_job_mem: 64 << 20,
        },
        priority: xlurm::core::PriorityConfig::default(),
        user_limits: xlurm::core::UserLimits::default(),
        gate: false,
        gate_exempt: Vec::new(),
        idle_gpu: Default::default(),
        state_dir: state.path().to_path_buf(),
        settings_user_mode: false,
        memory_nodes: xlurm::daemon::systemd::unit::MemoryNodesChoice::Auto,
        slice: "xlurm.slice".into(),
        budget: xlurm::core::Budget {
            jobs: 3,
            ..Default::default()
        },
        retention_secs: 3600,
        accounting_retention_secs: 365 * 86_400,
        cancel_grace: std::time::Duration::from_secs(10),
        list_is_public: true,
        journalctl: "journalctl".into(),
        recheck: std::time::Duration::from_secs(5),
        job_cgroups: None,
    };
    let served = serve(&conn, cfg).await.map_err(|r| r.0).unwrap();
    let client = bus.connect().await.unwrap();
    Env {
        _bus: bus,
        fake,
        _state: state,
        _fake_conn: fake_conn,
        _served: served,
        client,
    }
}

/// Calls `method` with `body`; returns the D-Bus error name, or "" on success.
async fn call<B>(c: &Connection, method: &str, body: &B) -> (String, String)
where
    B: serde::Serialize + zbus::Type,
{
    match c
        .call_method(Some(BUS_NAME), PATH, Some(IFACE), method, body)
        .await
    {
        Ok(_) => (String::new(), String::new()),
        Err(zbus::Error::MethodError(name, msg, _)) => (name.to_string(), msg.unwrap_or_default()),
        Err(zbus::Error::FDO(e)) => {
            use zbus::DBusError;
            (
                e.name().to_string(),
                e.description().unwrap_or_default().to_string(),
            )
        }
        Err(e) => (format!("other: {e}"), String::new()),
    }
}

/// Everything observable: all jobs (as root: every user, finished too) and
/// every unit systemd was asked to start.
async fn snapshot(e: &Env) -> (String, usize) {
    let filter: HashMap<&str, Variant> = HashMap::from([
        ("all_users", Variant::from(true)),
        ("finished", Variant::from(true)),
    ]);
    let reply = e
        .client
        .call_method(Some(BUS_NAME), PATH, Some(IFACE), "ListJobs", &(filter,))
        .await
        .expect("ListJobs");
    let body = reply.body();
    let jobs: zbus::Structure = body.deserialize().expect("ListJobs body");
    let started = e.fake.shared.lock().unwrap().started.len();
    (format!("{jobs:?}"), started)
}

type Spec<'a> = HashMap<&'a str, Variant<'a>>;

fn good<'a>() -> Spec<'a> {
    HashMap::from([
        ("argv", Variant::from(vec!["/bin/true"])),
        ("cwd", Variant::from("/")),
    ])
}

fn with<'a>(k: &'a str, v: Variant<'a>) -> Spec<'a> {
    let mut s = good();
    s.insert(k, v);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_calls_get_named_errors_and_change_nothing() {
    let e = env().await;
    // Some state to protect: one running job, one pending.
    for _ in 0..2 {
        let (name, msg) = call(&e.client, "Submit", &(good(),)).await;
        assert_eq!(name, "", "{msg}");
    }
    // The first one's unit is started in the background: wait for it.
    let t0 = std::time::Instant::now();
    while e.fake.shared.lock().unwrap().started.is_empty() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "no job started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let before = snapshot(&e).await;
    assert_eq!(before.1, 1, "one job started (max_running 1)");

    let big = "x".repeat(1 << 20);
    let ten_mib: Vec<&str> = std::iter::once("/bin/echo")
        .chain(std::iter::repeat_n(big.as_str(), 10))
        .collect();
    let submits: Vec<(&str, Spec, &str)> = vec![
        (
            "unknown key",
            with("user", Variant::from("root")),
            "InvalidArgs",
        ),
        (
            "unknown key uid",
            with("uid", Variant::from(0u32)),
            "InvalidArgs",
        ),
        (
            "unknown key unit",
            with("unit", Variant::from("x.service")),
            "InvalidArgs",
        ),
        (
            "unknown key slice",
            with("slice", Variant::from("-.slice")),
            "InvalidArgs",
        ),
        (
            "cpus as string",
            with("cpus", Variant::from("4")),
            "InvalidArgs",
        ),
        (
            "mem as int64 -1",
            with("mem", Variant::from(-1i64)),
            "InvalidArgs",
        ),
        (
            "argv as string",
            with("argv", Variant::from("/bin/true")),
            "InvalidArgs",
        ),
        (
            "empty argv",
            with("argv", Variant::from(Vec::<&str>::new())),
            "InvalidArgs",
        ),
        (
            "relative argv0",
            with("argv", Variant::from(vec!["true"])),
            "InvalidArgs",
        ),
        (
            "relative cwd",
            with("cwd", Variant::from("tmp")),
            "InvalidArgs",
        ),
        (
            "missing cwd",
            HashMap::from([("argv", Variant::from(vec!["/bin/true"]))]),
            "InvalidArgs",
        ),
        (
            "non-existent cwd",
            with("cwd", Variant::from("/nonexistent/x")),
            "InvalidArgs",
        ),
        (
            "cwd is a file",
            with("cwd", Variant::from("/etc/passwd")),
            "InvalidArgs",
        ),
        (
            "bad env name",
            with("env", Variant::from(vec!["A-B=1"])),
            "InvalidArgs",
        ),
        (
            "env without =",
            with("env", Variant::from(vec!["NOEQUALS"])),
            "InvalidArgs",
        ),
        (
            "10 MiB argv",
            with("argv", Variant::from(ten_mib.clone())),
            "InvalidArgs",
        ),
        (
            "0 CPUs",
            with("cpus", Variant::from(0u32)),
            "InvalidRequest",
        ),
        (
            "u32::MAX CPUs",
            with("cpus", Variant::from(u32::MAX)),
            "InvalidRequest",
        ),
        ("mem 0", with("mem", Variant::from(0u64)), "InvalidRequest"),
        (
            "mem u64::MAX",
            with("mem", Variant::from(u64::MAX)),
            "InvalidRequest",
        ),
        (
            "time limit 0",
            with("time_limit", Variant::from(0u64)),
            "InvalidRequest",
        ),
        (
            "time limit u64::MAX",
            with("time_limit", Variant::from(u64::MAX)),
            "InvalidRequest",
        ),
        (
            "gpus without devices",
            with("gpus", Variant::from(1u32)),
            "InvalidRequest",
        ),
        (
            "unknown device id",
            with("device_ids", Variant::from(vec![7u32])),
            "InvalidRequest",
        ),
        (
            "unknown vendor",
            with("vendor", Variant::from("amd")),
            "InvalidArgs",
        ),
    ];
    for (what, spec, want) in submits {
        let (name, msg) = call(&e.client, "Submit", &(spec,)).await;
        assert_eq!(name, format!("{ERR}{want}"), "{what}: {msg}");
        assert!(!msg.is_empty(), "{what}: empty message");
    }

    // Wrong signatures: zbus refuses them before xlurmd's code runs.
    let sig = "org.freedesktop.DBus.Error.InvalidArgs";
    assert_eq!(call(&e.client, "Submit", &("/bin/true",)).await.0, sig);
    assert_eq!(call(&e.client, "Submit", &()).await.0, sig);
    assert_eq!(call(&e.client, "Cancel", &("1",)).await.0, sig);
    assert_eq!(call(&e.client, "GetJob", &(-1i32,)).await.0, sig);
    assert_eq!(call(&e.client, "SetMaxRunning", &(-1i64,)).await.0, sig);
    assert_eq!(call(&e.client, "ListJobs", &(1u32,)).await.0, sig);

    // Other methods.
    let nsj = format!("{ERR}NoSuchJob");
    for id in [0u64, u64::MAX, 999] {
        assert_eq!(call(&e.client, "Cancel", &(id,)).await.0, nsj);
        assert_eq!(call(&e.client, "GetJob", &(id,)).await.0, nsj);
    }
    let inv = format!("{ERR}InvalidArgs");
    let filters: Vec<HashMap<&str, Variant>> = vec![
        HashMap::from([("bogus", Variant::from(true))]),
        HashMap::from([("all_users", Variant::from("yes"))]),
        HashMap::from([("states", Variant::from(vec!["SLEEPING"]))]),
        HashMap::from([("states", Variant::from("RUNNING"))]),
        HashMap::from([("limit", Variant::from(-1i32))]),
    ];
    for f in filters {
        assert_eq!(call(&e.client, "ListJobs", &(f,)).await.0, inv);
    }
    assert_eq!(call(&e.client, "SetPolicy", &("junk",)).await.0, inv);
    assert_eq!(call(&e.client, "SetPolicy", &("",)).await.0, inv);
    assert_eq!(call(&e.client, "SetMaxRunning", &(0u32,)).await.0, inv);
    let no_ids: Vec<u32> = vec![];
    assert_eq!(
        call(&e.client, "SetDevicesDisabled", &("nv", no_ids, true))
            .await
            .0,
        inv
    );
    assert_eq!(
        call(&e.client, "SetDevicesDisabled", &("amd", vec![0u32], true))
            .await
            .0,
        inv
    );
    assert_eq!(
        call(&e.client, "SetDevicesDisabled", &("nv", vec![0u32], true))
            .await
            .0,
        inv
    );
    // SubmitMany: one bad spec queues none; more than 100,000 specs is refused.
    let many = vec![good(), with("cpus", Variant::from(0u32))];
    assert_eq!(
        call(&e.client, "SubmitMany", &(many,)).await.0,
        format!("{ERR}InvalidRequest")
    );
    let many = vec![good(), with("bogus", Variant::from(1u32))];
    assert_eq!(call(&e.client, "SubmitMany", &(many,)).await.0, inv);
    let huge: Vec<Spec> = (0..100_001).map(|_| Spec::new()).collect();
    assert_eq!(call(&e.client, "SubmitMany", &(huge,)).await.0, inv);
    // Per-user pending limit (3 here; one job pending): 3 more would be 4.
    let three = vec![good(), good(), good()];
    assert_eq!(
        call(&e.client, "SubmitMany", &(three,)).await.0,
        format!("{ERR}LimitExceeded")
    );

    assert_eq!(snapshot(&e).await, before, "state changed by refused calls");
    // And the daemon still serves.
    let (name, msg) = call(&e.client, "Submit", &(good(),)).await;
    assert_eq!(name, "", "{msg}");
}

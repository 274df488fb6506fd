//! xlurmd's D-Bus logic against a systemd double on a private bus: what it
//! sends to systemd and how it reacts to unit changes. Real systemd is
//! tested in the VM (tests/vm/scenarios).

use std::collections::HashMap;
use std::time::{Duration, Instant};
use xlurm::cli::client::{get, get_str, Dict, SchedulerProxy};
use xlurm::core::{Limits, Machine, Policy, Topology};
use xlurm::daemon::startup::{serve, ServeConfig, Served};
use xlurm::testing::bus::PrivateBus;
use xlurm::testing::fake_systemd::{FakeSystemd, Mode};
use xlurm::wire::spec::entry;

struct Env {
    bus: PrivateBus,
    fake: FakeSystemd,
    state: tempfile::TempDir,
    _fake_conn: zbus::Connection,
    /// The journalctl the daemon runs (a double in some tests).
    journalctl: String,
    /// Accelerators the machine has (none by default).
    devices: Vec<xlurm::core::Device>,
    /// How long an ended job's object stays (then it is kept in brief).
    linger: Duration,
    /// How often the daemon checks running jobs' units besides their signals.
    recheck: Duration,
    /// Where finished units's accounting is read (None: asked of systemd).
    job_cgroups: Option<std::path::PathBuf>,
    /// `--list-is-public` (true by default).
    public: bool,
    /// `--cancel-grace` (10 s by default).
    cancel_grace: Duration,
    /// `--idle-gpu-action` (flag by default; a GPU is idle after 1 s here).
    idle_action: xlurm::core::IdleAction,
}

async fn env(mode: Mode) -> Env {
    let bus = PrivateBus::start().expect("dbus-daemon");
    let conn = bus.connect().await.unwrap();
    let fake = FakeSystemd::serve(&conn, mode).await.unwrap();
    Env {
        bus,
        fake,
        state: tempfile::tempdir().unwrap(),
        _fake_conn: conn,
        journalctl: "journalctl".into(),
        devices: vec![],
        linger: Duration::from_secs(600),
        recheck: Duration::from_secs(5),
        job_cgroups: None,
        public: true,
        cancel_grace: Duration::from_secs(10),
        idle_action: xlurm::core::IdleAction::Flag,
    }
}

/// A backend that found `e.devices` and polls them healthy, unused by
/// outsiders, idle, with 1 GiB of 80 GiB in use.
struct FakeGpus(Vec<xlurm::accel::DiscoveredDevice>);

impl xlurm::accel::Backend for FakeGpus {
    fn vendor(&self) -> xlurm::core::Vendor {
        xlurm::core::Vendor::Nv
    }
    fn library(&self) -> &std::path::Path {
        std::path::Path::new("fake")
    }
    fn api(&self) -> &'static str {
        "fake"
    }
    fn discover(&self) -> Result<Vec<xlurm::accel::DiscoveredDevice>, xlurm::accel::AccelError> {
        Ok(self.0.clone())
    }
    fn poll(
        &self,
        devices: &[xlurm::accel::DiscoveredDevice],
    ) -> Result<Vec<xlurm::accel::DevicePoll>, xlurm::accel::QueryError> {
        Ok(devices
            .iter()
            .map(|d| xlurm::accel::DevicePoll {
                index: d.index,
                uuid: Ok(d.uuid.clone()),
                processes: Ok(vec![]),
                condition: Ok(xlurm::accel::Condition::Healthy),
                load: xlurm::core::Load {
                    util_pct: Some(0),
                    mem_used: Some(1 << 30),
                    mem_total: Some(80 << 30),
                },
            })
            .collect())
    }
}

/// The backends for `devices` (none without devices).
fn fake_accel(devices: &[xlurm::core::Device]) -> Vec<xlurm::accel::Active> {
    if devices.is_empty() {
        return vec![];
    }
    let found: Vec<xlurm::accel::DiscoveredDevice> = devices
        .iter()
        .map(|d| xlurm::accel::DiscoveredDevice {
            vendor: d.vendor,
            index: d.index,
            uuid: d.uuid.clone(),
            pci_bdf: None,
            numa_node: d.numa_node,
            device_nodes: vec![format!("/dev/nvidia{}", d.index).into()],
        })
        .collect();
    vec![xlurm::accel::Active {
        backend: std::sync::Arc::new(FakeGpus(found.clone())),
        devices: found,
    }]
}

async fn daemon(e: &Env) -> (Served, zbus::Connection) {
    let conn = e.bus.connect().await.unwrap();
    let cfg = ServeConfig {
        accel: fake_accel(&e.devices),
        tee_path: env!("CARGO_BIN_EXE_xlurm").to_string(),
        object_linger: e.linger,
        machine: Machine::new(Topology::uniform(2, 2, 1 << 30), e.devices.clone()),
        policy: Policy::FifoStrict,
        limits: Limits {
            max_running: 8,
            max_lifetime_secs: 3600,
            min_job_mem: 64 << 20,
        },
        priority: xlurm::core::PriorityConfig::default(),
        user_limits: xlurm::core::UserLimits::default(),
        gate: false,
        gate_exempt: Vec::new(),
        // An idle GPU is flagged after a second here.
        idle_gpu: xlurm::core::IdleRule {
            below_pct: 5,
            after_secs: Some(1),
            action: e.idle_action,
        },
        state_dir: e.state.path().to_path_buf(),
        settings_user_mode: false,
        memory_nodes: xlurm::daemon::systemd::unit::MemoryNodesChoice::Auto,
        slice: "xlurm.slice".into(),
        budget: xlurm::core::Budget {
            jobs: 5,
            ..Default::default()
        },
        retention_secs: 3600,
        accounting_retention_secs: 365 * 86_400,
        cancel_grace: e.cancel_grace,
        list_is_public: e.public,
        journalctl: e.journalctl.clone(),
        recheck: e.recheck,
        job_cgroups: e.job_cgroups.clone(),
    };
    let served = serve(&conn, cfg).await.map_err(|r| r.0).unwrap();
    served.daemon.kick.notify_one();
    (served, conn)
}

async fn client(e: &Env) -> SchedulerProxy<'static> {
    let conn = e.bus.connect().await.unwrap();
    SchedulerProxy::new(&conn).await.unwrap()
}

fn spec(argv: &[&str]) -> Dict {
    HashMap::from([
        entry(
            "argv",
            argv.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        ),
        entry("cwd", "/"),
    ])
}

async fn wait_state(c: &SchedulerProxy<'_>, id: u64, want: &str) -> Dict {
    let t0 = Instant::now();
    loop {
        let job = c.get_job(id).await.unwrap();
        if get_str(&job, "state") == want {
            return job;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "job {id} stuck in {} (wanted {want}): {}",
            get_str(&job, "state"),
            get_str(&job, "detail")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn error_name(e: zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, msg, _) => {
            format!("{} {}", name.as_str(), msg.unwrap_or_default())
        }
        other => format!("{other}"),
    }
}

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

/// One NVIDIA device, 0, on NUMA node 0.
fn one_gpu() -> Vec<xlurm::core::Device> {
    vec![xlurm::core::Device::new(
        xlurm::core::Vendor::Nv,
        0,
        "GPU-0",
        Some(0),
    )]
}

/// The properties the unit of job `id` was started with.
fn unit_properties(e: &Env, id: u64) -> HashMap<String, zbus::OwnedVariant> {
    let shared = e.fake.shared.lock().unwrap();
    let rec = shared
        .started
        .iter()
        .find(|r| r.name == format!("xlurm-job-{id}.service"))
        .expect("unit started");
    rec.properties
        .iter()
        .map(|(k, v)| (k.clone(), v.try_clone().unwrap()))
        .collect()
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

/// Waits up to 10 s for `ok`, failing the test naming `what`.
async fn until(what: &str, ok: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
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

/// `xbatch ARGS` against the test's daemon: its job ID, or its stderr.
fn xbatch(e: &Env, args: &[&str], env: &[(&str, &str)]) -> Result<u64, String> {
    let out = cli(e, std::iter::once("batch").chain(args.iter().copied()))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.trim().strip_prefix("Submitted batch job ") {
        Some(id) if out.status.success() => Ok(id.parse().unwrap()),
        _ => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
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

/// The `<interface name="...">` block of an introspection document, whitespace-trimmed per line.
fn interface_block(xml: &str, name: &str) -> String {
    let start = format!("<interface name=\"{name}\">");
    let mut out = Vec::new();
    let mut inside = false;
    for line in xml.lines().map(str::trim) {
        if line == start {
            inside = true;
        }
        if inside {
            out.push(line.to_string());
            if line == "</interface>" {
                break;
            }
        }
    }
    out.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_interface_matches_dbus_xml() {
    let e = env(Mode::Instant).await;
    let (_d, _c) = daemon(&e).await;
    let conn = e.bus.connect().await.unwrap();
    let intro = zbus::fdo::IntrospectableProxy::builder(&conn)
        .destination("org.xlurm.Scheduler1")
        .path("/org/xlurm/Scheduler1")
        .build()
        .await
        .unwrap();
    let live = interface_block(&intro.introspect().await.unwrap(), "org.xlurm.Scheduler1");
    assert!(live.contains("<method name=\"Submit\">"), "{live}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/dbus/org.xlurm.Scheduler1.xml");
    if std::env::var_os("XLURM_BLESS").is_some() {
        let doc = format!(
            "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<!-- org.xlurm.Scheduler1 at /org/xlurm/Scheduler1. Generated from the running daemon\n     (XLURM_BLESS=1 cargo test --test daemon_fake the_served_interface); checked by that\n     test and by the VM scenario 10-xlurmd-jobs. The README documents each method. -->\n<node>\n{}\n</node>\n",
            live.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
        );
        std::fs::write(path, doc).unwrap();
    }
    let doc = std::fs::read_to_string(path).expect("dbus/org.xlurm.Scheduler1.xml exists");
    assert_eq!(
        interface_block(&doc, "org.xlurm.Scheduler1"),
        live,
        "dbus/org.xlurm.Scheduler1.xml is out of date: rerun with XLURM_BLESS=1"
    );

    // org.xlurm.Job1 on a job's object.
    let c = client(&e).await;
    let (id, _) = c.submit(spec(&["/bin/true"])).await.unwrap();
    let job_path = format!("/org/xlurm/Scheduler1/job/{id}");
    let intro = zbus::fdo::IntrospectableProxy::builder(&conn)
        .destination("org.xlurm.Scheduler1")
        .path(job_path.as_str())
        .build()
        .await
        .unwrap();
    let live = interface_block(&intro.introspect().await.unwrap(), "org.xlurm.Job1");
    assert!(live.contains("<property name=\"State\""), "{live}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/dbus/org.xlurm.Job1.xml");
    if std::env::var_os("XLURM_BLESS").is_some() {
        let doc = format!(
            "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<!-- org.xlurm.Job1 at /org/xlurm/Scheduler1/job/ID. Generated from the running daemon\n     (XLURM_BLESS=1 cargo test --test daemon_fake the_served_interface) and checked by that test. -->\n<node>\n{}\n</node>\n",
            live.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
        );
        std::fs::write(path, doc).unwrap();
    }
    let doc = std::fs::read_to_string(path).expect("dbus/org.xlurm.Job1.xml exists");
    assert_eq!(
        interface_block(&doc, "org.xlurm.Job1"),
        live,
        "dbus/org.xlurm.Job1.xml is out of date: rerun with XLURM_BLESS=1"
    );
}

/// What an interface in an introspection document declares.
#[derive(Debug, Default)]
struct Members {
    /// `(name, in types, out types)`.
    methods: Vec<(String, String, String)>,
    /// `(name, argument types)`.
    signals: Vec<(String, String)>,
    properties: Vec<String>,
}

/// The members of the first interface in an introspection document.
fn xml_members(xml: &str) -> Members {
    let attr = |line: &str, key: &str| {
        line.split(&format!(" {key}=\""))
            .nth(1)
            .and_then(|r| r.split('"').next())
            .map(str::to_string)
    };
    let mut m = Members::default();
    // Where the `<arg>`s seen go: the last method, or the last signal.
    let mut in_signal = false;
    for line in xml.lines().map(str::trim) {
        let name = || attr(line, "name").unwrap_or_default();
        if line.starts_with("<method ") {
            m.methods.push((name(), String::new(), String::new()));
            in_signal = false;
        } else if line.starts_with("<signal ") {
            m.signals.push((name(), String::new()));
            in_signal = true;
        } else if line.starts_with("<property ") {
            m.properties.push(name());
        } else if line.starts_with("<arg ") {
            let t = attr(line, "type").unwrap_or_default();
            if in_signal {
                if let Some(sig) = m.signals.last_mut() {
                    sig.1.push_str(&t);
                }
            } else if let Some(meth) = m.methods.last_mut() {
                if attr(line, "direction").as_deref() == Some("out") {
                    meth.2.push_str(&t);
                } else {
                    meth.1.push_str(&t);
                }
            }
        } else if line.starts_with("</interface>") {
            break;
        }
    }
    m
}

/// The D-Bus API section of the README, as the Scheduler1 part and the Job1
/// bullet ("- One object per job ...").
fn readme_dbus_parts() -> (String, String) {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme
        .find("\n## D-Bus API")
        .expect("README has a D-Bus API section");
    let rest = &readme[start + 1..];
    let section = &rest[..rest[1..].find("\n## ").map_or(rest.len(), |i| i + 1)];
    let job_at = section
        .find("\n- One object per job")
        .expect("README's D-Bus API describes the job objects");
    let job_end = section[job_at + 1..]
        .find("\n- ")
        .map_or(section.len(), |i| job_at + 1 + i);
    let job = section[job_at..job_end].to_string();
    let scheduler = format!("{}{}", &section[..job_at], &section[job_end..]);
    (scheduler, job)
}

/// Each "`Name(...)`" in README text: `(name, what follows "Name(" up to the
/// closing backtick, whether the word before it is "signal")`.
fn readme_calls(text: &str) -> Vec<(String, String, bool)> {
    let parts: Vec<&str> = text.split('`').collect();
    let mut out = Vec::new();
    for (k, code) in parts.iter().enumerate().skip(1).step_by(2) {
        let Some((name, shown)) = code.split_once('(') else {
            continue;
        };
        if !name.starts_with(|c: char| c.is_ascii_uppercase())
            || !name.chars().all(|c| c.is_ascii_alphanumeric())
        {
            continue;
        }
        let signal = parts[k - 1]
            .trim_end()
            .to_ascii_lowercase()
            .ends_with("signal");
        out.push((name.to_string(), shown.to_string(), signal));
    }
    out
}

/// The types of a signature as the README shows it after "Name(":
/// "t id, s x) -> (t id, a{sv} info)" -> ("ts", "ta{sv}").
fn readme_signature(shown: &str) -> (String, String) {
    let (args, ret) = shown.split_once(" -> ").unwrap_or((shown, ""));
    let args = args.strip_suffix(')').unwrap_or(args);
    // "t id, a{sv} info" -> "ta{sv}"; a lone word is a type ("s", "aa{sv}").
    let types = |s: &str| -> String {
        s.split(',')
            .filter_map(|p| p.split_whitespace().next())
            .collect()
    };
    let ret = match ret.strip_prefix('(') {
        Some(r) => r.strip_suffix(')').unwrap_or(r),
        None => ret,
    };
    (types(args), types(ret))
}

/// The backticked names in the list after "properties " in README text
/// ("properties `A`, `B`, `C`." or "... `C`, with ...").
fn readme_properties(text: &str) -> Vec<String> {
    let Some(at) = text.find("properties ") else {
        return Vec::new();
    };
    let mut rest = &text[at + "properties ".len()..];
    let mut names = Vec::new();
    loop {
        rest = rest.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
        let Some(r) = rest.strip_prefix('`') else {
            break;
        };
        let Some(end) = r.find('`') else { break };
        names.push(r[..end].to_string());
        rest = &r[end + 1..];
    }
    names
}

/// Both ways: what the README shows is what there is, once each.
fn same_names(what: &str, readme: &[String], actual: &[String]) {
    let missing: Vec<_> = actual.iter().filter(|n| !readme.contains(n)).collect();
    let extra: Vec<_> = readme.iter().filter(|n| !actual.contains(n)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "README's D-Bus API and {what} differ: not in the README: {missing:?}; \
         in the README but not in {what}: {extra:?}"
    );
    let mut once = readme.to_vec();
    once.sort();
    once.dedup();
    assert_eq!(
        once.len(),
        readme.len(),
        "README lists some of {what} twice: {readme:?}"
    );
}

#[test]
fn the_readme_documents_every_method_with_the_signature_it_has() {
    let (scheduler, job) = readme_dbus_parts();
    for (iface, text) in [
        ("org.xlurm.Scheduler1", &scheduler),
        ("org.xlurm.Job1", &job),
    ] {
        let path = format!("{}/dbus/{iface}.xml", env!("CARGO_MANIFEST_DIR"));
        let xml = std::fs::read_to_string(&path).unwrap();
        let methods = xml_members(&interface_block(&xml, iface)).methods;
        assert!(!methods.is_empty(), "{path}: no methods");
        let shown: Vec<(String, String)> = readme_calls(text)
            .into_iter()
            .filter(|(_, _, signal)| !signal)
            .map(|(n, s, _)| (n, s))
            .collect();
        // Both ways: every method is shown, and every method shown exists.
        same_names(
            &format!("{iface}'s methods"),
            &shown.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            &methods.iter().map(|(n, ..)| n.clone()).collect::<Vec<_>>(),
        );
        for (name, ins, outs) in &methods {
            let (_, text) = shown.iter().find(|(n, _)| n == name).unwrap();
            let (args, ret) = readme_signature(text);
            assert_eq!(args, *ins, "README's {iface}.{name} arguments: {text}");
            assert_eq!(ret, *outs, "README's {iface}.{name} returns: {text}");
        }
    }
}

#[test]
fn the_readme_documents_every_property_signal_and_error() {
    let (scheduler, job) = readme_dbus_parts();
    for (iface, text, min_props) in [
        ("org.xlurm.Scheduler1", &scheduler, 3),
        ("org.xlurm.Job1", &job, 18),
    ] {
        let path = format!("{}/dbus/{iface}.xml", env!("CARGO_MANIFEST_DIR"));
        let xml = std::fs::read_to_string(&path).unwrap();
        let m = xml_members(&interface_block(&xml, iface));
        assert!(m.properties.len() >= min_props, "{path}: {m:?}");
        same_names(
            &format!("{iface}'s properties"),
            &readme_properties(text),
            &m.properties,
        );
        let signals: Vec<(String, String)> = readme_calls(text)
            .into_iter()
            .filter(|(_, _, signal)| *signal)
            .map(|(n, s, _)| (n, s))
            .collect();
        same_names(
            &format!("{iface}'s signals"),
            &signals.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            &m.signals.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        );
        for (name, types) in &m.signals {
            let (_, text) = signals.iter().find(|(n, _)| n == name).unwrap();
            let (args, ret) = readme_signature(text);
            assert_eq!(
                (args.as_str(), ret.as_str()),
                (types.as_str(), ""),
                "README's {iface}.{name} signal: {text}"
            );
        }
    }
    assert!(
        scheduler.contains("Signal `JobStateChanged("),
        "the parts are split as expected"
    );

    // Errors: "`org.xlurm.Scheduler1.Error.{A, B, ...}`" against the daemon's.
    let prefix = "org.xlurm.Scheduler1.Error.{";
    let at = scheduler
        .find(prefix)
        .expect("README lists the errors as org.xlurm.Scheduler1.Error.{...}");
    let list = &scheduler[at + prefix.len()..];
    let list = &list[..list.find('}').expect("the error list ends with }")];
    let readme_errors: Vec<String> = list
        .split(',')
        .map(|n| format!("org.xlurm.Scheduler1.Error.{}", n.trim()))
        .collect();
    use xlurm::wire::error::ApiError as E;
    use zbus::DBusError;
    let all = [
        E::InvalidArgs(String::new()),
        E::InvalidRequest(String::new()),
        E::NoSuchJob(String::new()),
        E::PermissionDenied(String::new()),
        E::WrongState(String::new()),
        E::LimitExceeded(String::new()),
        E::Failed(String::new()),
    ];
    for e in &all {
        // Stops compiling when an error is added: add it to `all` (and the README).
        match e {
            E::ZBus(_)
            | E::InvalidArgs(_)
            | E::InvalidRequest(_)
            | E::NoSuchJob(_)
            | E::PermissionDenied(_)
            | E::WrongState(_)
            | E::LimitExceeded(_)
            | E::Failed(_) => {}
        }
    }
    let code_errors: Vec<String> = all.iter().map(|e| e.name().to_string()).collect();
    same_names("the daemon's errors", &readme_errors, &code_errors);
}

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

/// A daemon whose systemd loses the next `lose` starts (the call succeeds, no
/// unit is left), with a journalctl double printing `journal` (`None`: no
/// journalctl at all).
struct LostStarts {
    e: Env,
    c: SchedulerProxy<'static>,
    _d: (Served, zbus::Connection),
    _tools: tempfile::TempDir,
}

async fn lost_starts(journal: Option<&str>, lose: usize) -> LostStarts {
    use std::os::unix::fs::PermissionsExt;
    let tools = tempfile::tempdir().unwrap();
    let mut e = env(Mode::Run).await;
    let path = tools.path().join("journalctl");
    if let Some(out) = journal {
        // Like journalctl: nothing new after the cursor of what it printed.
        let script = format!(
            "#!/bin/sh\ncase \"$*\" in *--after-cursor=*) exit 0 ;; esac\nprintf '%s' '{out}'\n"
        );
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    e.journalctl = path.to_string_lossy().into_owned();
    e.fake.shared.lock().unwrap().lose_starts = lose;
    // A lost start sends no signal: the periodic check finds it.
    e.recheck = Duration::from_millis(200);
    let d = daemon(&e).await;
    let c = client(&e).await;
    LostStarts {
        e,
        c,
        _d: d,
        _tools: tools,
    }
}

impl LostStarts {
    fn starts_of(&self, id: u64) -> usize {
        let unit = format!("xlurm-job-{id}.service");
        let shared = self.e.fake.shared.lock().unwrap();
        shared.started.iter().filter(|r| r.name == unit).count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_systemd_lost_before_the_unit_ran_is_started_again() {
    // The journal has no trace of the unit: it never started.
    let t = lost_starts(Some(""), 1).await;
    let mut s = spec(&["/bin/sh", "-c", "echo \"$SECRET\" >/dev/null; exit 4"]);
    s.extend([entry("env", vec!["SECRET=1".to_string()])]);
    let (id, _) = t.c.submit(s).await.unwrap();
    let job = wait_state(&t.c, id, "FAILED").await;
    assert_eq!(get::<i32>(&job, "exit_code"), Some(4), "{job:?}");
    assert_eq!(t.starts_of(id), 2, "started once more, not more");
    let shared = t.e.fake.shared.lock().unwrap();
    let second = shared
        .started
        .iter()
        .rfind(|r| r.name == format!("xlurm-job-{id}.service"))
        .unwrap();
    let env: Vec<String> = second
        .properties
        .get("Environment")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Vec::<String>::try_from(v).ok())
        .unwrap_or_default();
    assert!(
        env.contains(&"SECRET=1".to_string()),
        "the second start keeps the submitted environment: {env:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_that_started_and_vanished_is_not_started_again() {
    // The journal shows systemd's "Starting" message for it.
    let t = lost_starts(Some(r#"{"MESSAGE":"Starting"}"#), 1).await;
    let (id, _) = t.c.submit(spec(&["/bin/true"])).await.unwrap();
    let job = wait_state(&t.c, id, "CANCELLED").await;
    assert!(
        get_str(&job, "detail").contains("stopped outside xlurm"),
        "{job:?}"
    );
    assert_eq!(t.starts_of(id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_lost_again_and_again_end_in_launch_failed() {
    let t = lost_starts(Some(""), 100).await;
    let (id, _) = t.c.submit(spec(&["/bin/true"])).await.unwrap();
    let job = wait_state(&t.c, id, "LAUNCH_FAILED").await;
    assert!(
        get_str(&job, "detail").contains("lost the start"),
        "{job:?}"
    );
    assert_eq!(
        t.starts_of(id),
        1 + xlurm::daemon::service::MAX_RELAUNCHES as usize
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_journal_a_vanished_unit_is_cancelled_saying_so() {
    let t = lost_starts(None, 1).await;
    let (id, _) = t.c.submit(spec(&["/bin/true"])).await.unwrap();
    let job = wait_state(&t.c, id, "CANCELLED").await;
    assert!(
        get_str(&job, "detail").contains("whether it ever ran is unknown"),
        "{job:?}"
    );
    assert_eq!(t.starts_of(id), 1);
}

/// The keys of the tables under the `## ` heading starting with `heading` in
/// docs/json.md, one set per table.
fn documented_keys(doc: &str, heading: &str) -> Vec<std::collections::BTreeSet<String>> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("docs/json.md has no section {heading:?}"));
    let mut tables = Vec::new();
    let mut current = std::collections::BTreeSet::new();
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("| `") {
            current.insert(rest.split('`').next().unwrap().to_string());
        } else if !current.is_empty() && !line.starts_with('|') {
            tables.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        tables.push(current);
    }
    tables
}

/// The CLI, `xlurm --user ARGS`, against the test's bus (the session bus).
fn cli<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(
    e: &Env,
    args: I,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_xlurm"));
    cmd.arg("--user")
        .args(args)
        .env("DBUS_SESSION_BUS_ADDRESS", &e.bus.address);
    cmd
}

/// Runs the CLI against the test's bus (`--user`: the session bus) and parses its JSON.
fn cli_json(e: &Env, args: &[&str]) -> serde_json::Value {
    let out = cli(e, args).output().unwrap();
    assert!(
        out.status.success(),
        "xlurm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| panic!("xlurm {args:?}: {err}"))
}

fn keys(v: &serde_json::Value) -> std::collections::BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_schemas_in_docs_json_md_are_what_the_daemon_sends() {
    let mut e = env(Mode::Run).await;
    e.devices = one_gpu();
    let (d, conn) = daemon(&e).await;
    let c = client(&e).await;
    // Finished: one exited, one killed by a signal.
    let (exited, _) = c.submit(spec(&["/bin/sh", "-c", "exit 3"])).await.unwrap();
    let (killed, _) = c
        .submit(spec(&["/bin/sh", "-c", "kill -9 $$"]))
        .await
        .unwrap();
    wait_state(&c, exited, "FAILED").await;
    wait_state(&c, killed, "FAILED").await;
    // Running: all 4 CPUs and the GPU, which the polls (here: handed over
    // by the test) find idle for long enough: IdleGPU and its figures.
    // Pending behind it: an environment and an --output file.
    let mut s = spec(&["/bin/sleep", "60"]);
    s.extend([entry("cpus", 4u32), entry("gpus", 1u32)]);
    let (running, _) = c.submit(s).await.unwrap();
    wait_state(&c, running, "RUNNING").await;
    // The fake backend's polls find the GPU idle; the rule here flags it
    // after a second.
    let idle_gpu = async |c: &SchedulerProxy<'_>| {
        let t0 = Instant::now();
        while get_str(&c.get_job(running).await.unwrap(), "flag") != "IdleGPU" {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "never flagged IdleGPU"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    idle_gpu(&c).await;
    let mut seen_job = std::collections::BTreeSet::new();
    seen_job.extend(keys(&cli_json(
        &e,
        &["queue", &running.to_string(), "--json"],
    )));
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::create(dir.path().join("out")).unwrap();
    let mut s = spec(&["/bin/true"]);
    s.extend([entry("env", vec!["X=1".to_string()])]);
    s.insert(
        "output_fd".into(),
        zbus::OwnedVariant::try_from(zbus::Variant::Fd(zbus::Fd::from(&file))).unwrap(),
    );
    let (pending, _) = c.submit(s).await.unwrap();
    seen_job.extend(keys(&cli_json(
        &e,
        &["queue", &pending.to_string(), "--json"],
    )));
    // Held, with a dependency: then cancelled.
    let mut s = spec(&["/bin/true"]);
    s.extend([
        entry("hold", true),
        entry("dependency", format!("afterany:{running}")),
        entry("kill_on_invalid_dep", true),
        entry("array", "1-4%2"),
    ]);
    let (held, _) = c.submit(s).await.unwrap();
    seen_job.extend(keys(&cli_json(&e, &["queue", &held.to_string(), "--json"])));
    c.cancel(held).await.unwrap();
    // A restart while it waits loses its --output descriptor (outside systemd
    // there is no descriptor store): once it runs it says so in output_error.
    drop(d);
    conn.release_name("org.xlurm.Scheduler1").await.unwrap();
    drop(conn);
    let (_d2, _c2) = daemon(&e).await;
    // A running job's load samples are kept in memory only: the restarted
    // daemon's polls give it new ones (its usage row has gpu_util from them;
    // a cancel before the first poll left none on a loaded machine).
    idle_gpu(&c).await;
    c.cancel(running).await.unwrap();
    let job = wait_state(&c, pending, "COMPLETED").await;
    assert!(
        get_str(&job, "output_error").contains("lost when xlurmd restarted"),
        "{job:?}"
    );

    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/json.md")).unwrap();
    for id in [exited, killed, running, pending] {
        seen_job.extend(keys(&cli_json(&e, &["queue", &id.to_string(), "--json"])));
    }
    assert_eq!(
        seen_job,
        documented_keys(&doc, "`xqueue ID --json`")[0],
        "docs/json.md (xqueue ID --json) vs GetJob"
    );
    let list = cli_json(&e, &["queue", "--all", "--json"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 5);
    for item in list {
        assert_eq!(
            keys(item),
            documented_keys(&doc, "`xqueue --json`")[0],
            "docs/json.md (xqueue --json) vs ListJobs"
        );
    }
    // A limit for everyone, so that the caller's `limits` has an entry.
    client(&e)
        .await
        .set_user_limits(r#"{"default": {"running_jobs": 100}}"#)
        .await
        .unwrap();
    // The restarted daemon's first poll gives the device its load.
    let t0 = Instant::now();
    while cli_json(&e, &["info", "--json"])["devices"][0]["util_pct"].is_null() {
        assert!(t0.elapsed() < Duration::from_secs(20), "no device load");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let info = cli_json(&e, &["info", "--json"]);
    let tables = documented_keys(&doc, "`xinfo --json`");
    assert_eq!(
        tables.len(),
        4,
        "xinfo: the machine, nodes, devices, limits"
    );
    assert_eq!(keys(&info["limits"][0]), tables[3], "docs/json.md: limits");
    assert_eq!(
        keys(&info),
        tables[0],
        "docs/json.md (xinfo --json) vs GetMachine"
    );
    assert_eq!(keys(&info["nodes"][0]), tables[1], "docs/json.md: nodes");
    assert_eq!(
        keys(&info["devices"][0]),
        tables[2],
        "docs/json.md: devices"
    );

    // The accounting log has every job that ended here, across the restart:
    // 2 FAILED, the running one and the held array CANCELLED, 1 COMPLETED.
    let rows = cli_json(&e, &["usage", "--json"]);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "one user, one day: {rows:?}");
    let row = &rows[0];
    assert_eq!(row["jobs"], 5, "{row}");
    assert_eq!(row["states"]["FAILED"], 2, "{row}");
    assert_eq!(row["states"]["CANCELLED"], 2, "{row}");
    assert_eq!(row["states"]["COMPLETED"], 1, "{row}");
    assert!(row["gpu_hours"].as_f64().unwrap() > 0.0, "{row}");
    let documented = documented_keys(&doc, "`xlurm usage --json`")[0].clone();
    let seen = keys(row);
    assert!(
        seen.is_subset(&documented),
        "undocumented: {seen:?} vs {documented:?}"
    );
    for k in [
        "period",
        "uid",
        "user",
        "jobs",
        "states",
        "cpu_hours",
        "gpu_hours",
        "wait_median",
        "gpu_util",
    ] {
        assert!(seen.contains(k), "{k} missing from {row}");
    }
    // A window with none of them: no rows; a bad option: a named error.
    let none = cli_json(
        &e,
        &[
            "usage",
            "--json",
            "--until",
            "2000-01-01",
            "--since",
            "1999-01-01",
        ],
    );
    assert_eq!(none.as_array().unwrap().len(), 0);
    let out = cli(&e, ["usage", "--since", "yesterday"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a date"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xlurm_top_draws_a_daemon_with_fake_devices_in_80x24() {
    let mut e = env(Mode::Run).await;
    e.devices = one_gpu();
    let (_d, _conn) = daemon(&e).await;
    let c = client(&e).await;
    let mut s = spec(&["/bin/sleep", "60"]);
    s.extend([entry("gpus", 1u32), entry("name", "train")]);
    let (gpu, _) = c.submit(s).await.unwrap();
    wait_state(&c, gpu, "RUNNING").await;
    let mut s = spec(&["/bin/sleep", "60"]);
    s.extend([entry("gpus", 1u32), entry("name", "next")]);
    let (waiting, _) = c.submit(s).await.unwrap();
    // The fake backend's polls give the GPU its load (0 %, 1G of 80G).
    let ui = xlurm::cli::top::Ui::default();
    let t0 = Instant::now();
    let m = loop {
        let m = xlurm::cli::top::load(&c, &ui, 10, true).await.unwrap();
        let (run, _) = m.listed(&ui);
        if run.first().is_some_and(|j| j.gpu_util.is_some()) {
            break m;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no load on screen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).unwrap();
    t.draw(|f| xlurm::cli::top::draw(f, &m, &ui)).unwrap();
    let buf = t.backend().buffer().clone();
    let lines: Vec<String> = (0..24)
        .map(|y| {
            (0..80)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
        })
        .collect();
    let all = lines.join("\n");
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .map_or_else(|| nix::unistd::getuid().to_string(), |u| u.name);
    assert!(
        lines[0].starts_with("xlurm top  fifo-strict  1 running, 1 pending"),
        "{all}"
    );
    assert!(
        all.contains("│0    1/2"),
        "node 0 with the GPU job's CPU: {all}"
    );
    assert!(
        all.contains(&format!("│nv:0   0%    1G/80G      job {gpu} {me}")),
        "{all}"
    );
    assert!(
        all.contains(&format!("│{gpu:<6} {:<8} train ", &me[..me.len().min(8)])),
        "{all}"
    );
    assert!(all.contains("nv:[0] 0%"), "{all}");
    assert!(all.contains(&format!("│{waiting:<6}")), "{all}");
    c.cancel(waiting).await.unwrap();
    c.cancel(gpu).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_gpu_cancels_its_job_only_when_the_admin_opted_in() {
    let mut e = env(Mode::Run).await;
    e.devices = one_gpu();
    e.idle_action = xlurm::core::IdleAction::Cancel;
    let (_d, _conn) = daemon(&e).await;
    let c = client(&e).await;
    let mut s = spec(&["/bin/sleep", "60"]);
    s.extend([entry("gpus", 1u32)]);
    let (id, _) = c.submit(s).await.unwrap();
    // The fake backend polls the GPU idle: flagged after a second, then cancelled.
    let job = wait_state(&c, id, "CANCELLED").await;
    assert!(
        get::<u64>(&job, "start_time").unwrap_or(0) > 0,
        "it ran: {job:?}"
    );
    // A CPU job beside it is never judged.
    let (cpu, _) = c.submit(spec(&["/bin/sleep", "60"])).await.unwrap();
    wait_state(&c, cpu, "RUNNING").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(get_str(&c.get_job(cpu).await.unwrap(), "state"), "RUNNING");
    c.cancel(cpu).await.unwrap();
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_name_users_and_xinfo_shows_the_callers_own() {
    let e = env(Mode::Instant).await;
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .expect("the test's user has a name")
        .name;
    let text = cli(&e, ["info"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("your limits: none"),
        "{text:?}"
    );
    c.set_user_limits(&format!(
        r#"{{"users": {{"{me}": {{"running_jobs": 3, "gpus": 2, "shares": 4}}}}}}"#
    ))
    .await
    .unwrap();
    // Shown by name; an unknown name is refused and changes nothing.
    let shown = c.get_user_limits().await.unwrap();
    assert!(shown.contains(&format!("\"{me}\"")), "{shown}");
    let err = c
        .set_user_limits(r#"{"users": {"no-such-user-xlurm": {"gpus": 1}}}"#)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("no user named \"no-such-user-xlurm\""),
        "{err}"
    );
    assert_eq!(c.get_user_limits().await.unwrap(), shown);
    // xinfo: each of the caller's limits, in use of limit, and where set.
    let out = cli(&e, ["info"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let uid = nix::unistd::getuid().as_raw();
    assert!(
        text.contains(&format!(
            "your limits:\n    running jobs: 0 of 3 (the limit set for user {uid})\n    GPUs: 0 of 2 (the limit set for user {uid})\n"
        )),
        "{text}"
    );
    let info = cli_json(&e, &["info", "--json"]);
    assert_eq!(info["limits"][1]["scope"], "user", "{info}");
    assert_eq!(info["limits"][1]["limit"], 2, "{info}");
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

const PATH: &str = "/org/xlurm/Scheduler1";

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

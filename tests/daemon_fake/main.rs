//! xlurmd's D-Bus logic against a systemd double on a private bus: what it
//! sends to systemd and how it reacts to unit changes. Real systemd is
//! tested in the VM (tests/vm/scenarios).

use std::collections::HashMap;
use std::time::{Duration, Instant};
use xlurm::cli::client::{get, get_str, Dict, SchedulerProxy};
use xlurm::core::{Limits, Machine, Policy, Topology};
use xlurm::daemon::serve::{serve, ServeConfig, Served};
use xlurm::testing::bus::PrivateBus;
use xlurm::testing::fake_systemd::{FakeSystemd, Mode};
use xlurm::wire::spec::entry;

mod api_docs;
mod callers;
mod machine;
mod objects;
mod output;
mod signals;
mod starts;
mod units;
mod xrun;

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

/// Waits up to 10 s for `ok`, failing the test naming `what`.
async fn until(what: &str, ok: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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

const PATH: &str = "/org/xlurm/Scheduler1";

//! What the benchmarks that run xlurmd in a child process share: its
//! configuration, the child itself, and the figures read from /proc.
#![allow(dead_code)] // each benchmark uses its own part

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;
use xlurm::core::{Limits, Machine, Policy, Topology};
use xlurm::daemon::serve::{serve, ServeConfig};
use xlurm::testing::bus::PrivateBus;

/// One CPU and max-running 1: one job runs, the rest queue (the submit path,
/// and a long queue). `XLURM_BENCH_PRIVATE=1`: a private queue, where jobs
/// have no D-Bus objects (what the objects cost).
pub fn config(state_dir: PathBuf) -> ServeConfig {
    ServeConfig {
        machine: Machine::new(Topology::single(1, 1 << 30), vec![]),
        accel: vec![],
        tee_path: "/usr/bin/xlurm".to_string(),
        object_linger: Duration::from_secs(1),
        policy: Policy::FifoStrict,
        limits: Limits {
            max_running: 1,
            max_lifetime_secs: 3600,
            min_job_mem: 1 << 20,
        },
        priority: xlurm::core::PriorityConfig::default(),
        user_limits: xlurm::core::UserLimits::default(),
        gate: false,
        gate_exempt: Vec::new(),
        idle_gpu: Default::default(),
        state_dir,
        settings_user_mode: false,
        memory_nodes: xlurm::daemon::systemd::unit::MemoryNodesChoice::Auto,
        slice: "xlurm.slice".into(),
        budget: xlurm::core::Budget {
            jobs: 1_000_000,
            bytes: 1 << 40,
            ..Default::default()
        },
        retention_secs: 86400,
        accounting_retention_secs: 365 * 86_400,
        cancel_grace: Duration::from_secs(10),
        list_is_public: std::env::var_os("XLURM_BENCH_PRIVATE").is_none(),
        journalctl: "journalctl".into(),
        recheck: Duration::from_secs(5),
        job_cgroups: None,
    }
}

/// In the child: serves xlurmd when the parent asked for it (then never
/// returns); false in the parent. Call it first thing in `main`, before any
/// runtime: like xlurmd's own `main`, it tunes the allocator before a second
/// thread exists (threads that allocated before keep their own arenas), then
/// builds the daemon's runtime of two workers.
pub fn serve_if_child() -> bool {
    let (Ok(address), Ok(state)) = (
        std::env::var("XLURM_BENCH_BUS"),
        std::env::var("XLURM_BENCH_STATE"),
    ) else {
        return false;
    };
    xlurm::daemon::heap::tune();
    runtime().block_on(serve_child(address, state));
    true
}

/// The runtime xlurmd builds (src/bin/xlurmd.rs), for the daemon child and
/// the benchmarks' own clients.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn serve_child(address: String, state: String) {
    let conn = zbus::connection::Builder::address(address.as_str())
        .build()
        .await
        .unwrap();
    let served = serve(&conn, config(state.into()))
        .await
        .map_err(|r| r.0)
        .unwrap();
    served.daemon.kick.notify_one();
    let mut usr1 =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).unwrap();
    let mut n = 0;
    loop {
        usr1.recv().await;
        eprintln!("  ({})", heap());
        n += 1;
        if let Some(prefix) = std::env::var_os("XLURM_BENCH_MALLOC_INFO") {
            malloc_info(&format!(
                "{}.{}.{n}.xml",
                prefix.to_string_lossy(),
                std::process::id()
            ));
        }
    }
}

/// glibc's own account of its arenas (free chunks by size, per arena) in
/// the file at `path`: where fragmentation sits, when RSS exceeds the heap
/// in use (`XLURM_BENCH_MALLOC_INFO=prefix`).
fn malloc_info(path: &str) {
    let Ok(c_path) = std::ffi::CString::new(path) else {
        return;
    };
    // SAFETY: a FILE opened here, written by glibc and closed here.
    unsafe {
        let f = libc::fopen(c_path.as_ptr(), c"w".as_ptr());
        if !f.is_null() {
            libc::malloc_info(0, f);
            libc::fclose(f);
        }
    }
}

/// What glibc's allocator holds, all arenas: in use (mmapped blocks
/// included), and free but kept (what fragmentation costs in RSS at most).
fn heap() -> String {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let m = unsafe { libc::mallinfo2() };
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map_or(String::new(), |l| {
                l.split_whitespace().skip(1).collect::<Vec<_>>().join(" ")
            })
    };
    format!(
        "xlurmd's heap: {:.1} MiB in use, {:.1} MiB free in its arenas; RssAnon {}, RssFile {}, threads {}",
        mib(m.uordblks + m.hblkhd),
        mib(m.fordblks),
        field("RssAnon:"),
        field("RssFile:"),
        field("Threads:")
    )
}

/// Has the daemon child `child` print its heap figures (see [`heap`]).
pub async fn print_heap(child: &Child) {
    // SAFETY: sends a signal to our own child, which handles it.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGUSR1);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Starts xlurmd in a child process (this benchmark again, see
/// [`serve_if_child`]) on `bus` with its state in `state`, and waits until
/// it owns its name.
pub async fn start_daemon(bus: &PrivateBus, state: &std::path::Path) -> Child {
    let child = Command::new(std::env::current_exe().unwrap())
        .env("XLURM_BENCH_BUS", &bus.address)
        .env("XLURM_BENCH_STATE", state)
        .spawn()
        .unwrap();
    let conn = bus.connect().await.unwrap();
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
    let name = zbus::names::BusName::try_from("org.xlurm.Scheduler1").unwrap();
    while !dbus.name_has_owner(name.clone()).await.unwrap() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child
}

/// Process `pid`'s resident memory, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .unwrap_or(0)
}

pub fn rss_mib(pid: u32) -> f64 {
    rss_kib(pid) as f64 / 1024.0
}

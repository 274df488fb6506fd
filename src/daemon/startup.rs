//! xlurmd's start-up: options, refusals, the bus, readiness, the main loop
//! (serving itself is `serve.rs`).

use super::serve::{notify_status, serve, ServeConfig};
use crate::core::request::{parse_bytes, parse_duration_secs};
use crate::core::{IdSet, Limits, Machine, Policy, Reserve, Scheduler};
use std::path::PathBuf;
use std::time::Duration;

/// The exit status of every refusal (EX_CONFIG); the unit's
/// `RestartPreventExitStatus=78` stops systemd from retrying.
pub const EX_CONFIG: i32 = 78;

pub use super::options::Options;

/// The `xlurm` binary installed beside this `xlurmd` (after an in-place
/// upgrade `current_exe` ends in " (deleted)": strip it), else /usr/bin/xlurm.
pub fn sibling_xlurm() -> String {
    let exe = std::fs::read_link("/proc/self/exe").ok().map(|p| {
        let s = p.display().to_string();
        std::path::PathBuf::from(s.trim_end_matches(" (deleted)"))
    });
    exe.and_then(|p| p.parent().map(|d| d.join("xlurm")))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/usr/bin/xlurm".to_string())
}

/// Parses `[VENDOR:]ID[,ID...]`; without a vendor, the machine's only vendor.
pub fn parse_device_list(
    text: &str,
    machine: &Machine,
) -> Result<(crate::core::Vendor, Vec<u32>), String> {
    let (vendor, ids) = match text.split_once(':') {
        Some((v, ids)) => (
            Some(
                v.parse::<crate::core::Vendor>()
                    .map_err(|e| e.to_string())?,
            ),
            ids,
        ),
        None => (None, text),
    };
    let vendor = match vendor {
        Some(v) => v,
        None => {
            let mut vendors: Vec<crate::core::Vendor> =
                machine.devices.iter().map(|d| d.vendor).collect();
            vendors.dedup();
            match vendors[..] {
                [v] => v,
                [] => return Err("this machine has no accelerators".into()),
                _ => {
                    return Err(format!(
                        "several vendors here ({}): name one, e.g. nv:1,3",
                        machine.vendor_summary()
                    ))
                }
            }
        }
    };
    let ids = ids
        .split(',')
        .map(|i| {
            i.trim()
                .parse::<u32>()
                .map_err(|_| format!("{i:?} is not a device ID"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((vendor, ids))
}

/// A refusal: a message and exit status 78.
#[derive(Debug)]
pub struct Refusal(pub String);

fn refuse<T>(msg: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(msg.into()))
}

fn init_logging() {
    use tracing_subscriber::prelude::*;
    let journal = std::env::var_os("JOURNAL_STREAM")
        .is_some()
        .then(|| tracing_journald::layer().ok())
        .flatten();
    let registry =
        tracing_subscriber::registry().with(tracing_subscriber::filter::LevelFilter::INFO);
    match journal {
        Some(j) => registry.with(j).init(),
        None => registry
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .init(),
    }
}

fn limits(o: &Options) -> Result<Limits, Refusal> {
    let max_lifetime_secs = parse_duration_secs(&o.max_lifetime)
        .map_err(|e| Refusal(format!("--max-lifetime: {e}")))?;
    let min_job_mem =
        parse_bytes(&o.min_job_mem).map_err(|e| Refusal(format!("--min-job-mem: {e}")))?;
    if o.max_running == 0 {
        return refuse("--max-running must be at least 1");
    }
    Ok(Limits {
        max_running: o.max_running,
        max_lifetime_secs,
        min_job_mem,
    })
}

/// `--cancel-grace`: at least a second (systemd reads 0 as no limit at all)
/// and at most a day.
fn cancel_grace(text: &str) -> Result<Duration, Refusal> {
    const MAX_SECS: u64 = 86_400;
    let secs = parse_duration_secs(text).map_err(|e| Refusal(format!("--cancel-grace: {e}")))?;
    if secs > MAX_SECS {
        return refuse(format!(
            "--cancel-grace {text}: at most 1d (a cancelled job would hold its resources that long)"
        ));
    }
    Ok(Duration::from_secs(secs))
}

/// How a daemon that started ended.
enum Exit {
    /// SIGTERM or SIGINT: exit 0.
    Stopped,
    /// Its bus connection is gone: exit [`EX_UNAVAILABLE`], so that
    /// `Restart=on-failure` restarts it.
    BusLost,
}

/// The exit status when the bus connection is lost (EX_UNAVAILABLE).
pub const EX_UNAVAILABLE: i32 = 69;

/// Runs the daemon until SIGTERM. Returns the process exit status.
pub async fn main(o: Options) -> i32 {
    init_logging();
    match run(o).await {
        Ok(Exit::Stopped) => 0,
        Ok(Exit::BusLost) => EX_UNAVAILABLE,
        Err(Refusal(msg)) => {
            eprintln!("xlurmd: {msg}");
            tracing::error!("refusing to start: {msg}");
            EX_CONFIG
        }
    }
}

async fn run(o: Options) -> Result<Exit, Refusal> {
    let policy: Policy = o
        .policy
        .parse()
        .map_err(|e| Refusal(format!("--policy: {e}")))?;
    let limits = limits(&o)?;
    let priority = super::fairness::priority_config(&o)?;
    let user_limits = super::fairness::read_user_limits(&o.user_limits)?;
    let gate = super::device_gate::parse_setting(&o.gate)
        .ok_or_else(|| Refusal(format!("--gate: {:?}: give on or off", o.gate)))?;
    let gate_exempt = super::device_gate::parse_exempt(&o.gate_exempt)
        .map_err(|e| Refusal(format!("--gate-exempt: {e}")))?;
    let idle_gpu = super::monitor::idle_rule(&o)?;
    let retention_secs =
        parse_duration_secs(&o.retention).map_err(|e| Refusal(format!("--retention: {e}")))?;
    let accounting_retention_secs = parse_duration_secs(&o.accounting_retention)
        .map_err(|e| Refusal(format!("--accounting-retention: {e}")))?;
    let cancel_grace = cancel_grace(&o.cancel_grace)?;
    let reserve = Reserve {
        cpus: IdSet::parse_list(&o.reserve_cpus)
            .map_err(|e| Refusal(format!("--reserve-cpus: {e}")))?,
        mem_bytes: match &o.reserve_mem {
            Some(m) => parse_bytes(m).map_err(|e| Refusal(format!("--reserve-mem: {e}")))?,
            None => 0,
        },
    };
    let is_root = nix::unistd::geteuid().is_root();
    if !o.user && !is_root {
        return refuse(
            "must run as root on the system bus (use --user to try xlurm on your session bus)",
        );
    }
    if !o.no_cgroup_check {
        if let Some(problem) = crate::host::cgroup_v2_problem(std::path::Path::new("/")) {
            return refuse(format!(
                "{problem}: xlurm could not pin CPUs and NUMA memory or enforce budgets (--no-cgroup-check starts anyway, without isolation)"
            ));
        }
    }
    let topology = crate::host::read_topology(std::path::Path::new("/"))
        .map_err(|e| Refusal(format!("reading the NUMA topology: {e:#}")))?
        .apply_reserve(&reserve)
        .map_err(|e| Refusal(format!("--reserve-cpus/--reserve-mem: {e}")))?;
    let state_dir = o.state_dir.clone().unwrap_or_else(|| {
        if o.user {
            let base = std::env::var_os("XDG_STATE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".local/state")
                });
            base.join("xlurm")
        } else {
            std::env::var_os("STATE_DIRECTORY")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/var/lib/xlurm"))
        }
    });
    let choice: crate::accel::BackendChoice = o
        .backends
        .parse()
        .map_err(|e| Refusal(format!("--backends: {e}")))?;
    let accel_config = crate::accel::AccelConfig::from_env(choice, |k| std::env::var_os(k));
    let selection = crate::accel::select(&accel_config)
        .map_err(|e| Refusal(format!("accelerator backend {}: {e} (--backends auto skips vendors that fail, --backends none runs CPU jobs only)", o.backends)))?;
    for w in &selection.warnings {
        tracing::info!("accelerators: skipped: {w}");
    }
    let devices: Vec<crate::core::Device> = selection
        .active
        .iter()
        .flat_map(|a| a.devices.iter().map(|d| d.to_device()))
        .collect();
    let mut machine = Machine::new(topology, devices);
    if let Some(list) = &o.exclude_device_ids {
        let (vendor, ids) = parse_device_list(list, &machine)
            .map_err(|e| Refusal(format!("--exclude-device-ids: {e}")))?;
        let mut sched = Scheduler::new(machine, policy, limits.clone());
        sched
            .set_disabled(vendor, &ids, true)
            .map_err(|e| Refusal(format!("--exclude-device-ids: {e}")))?;
        machine = sched.machine().clone();
    }
    tracing::info!("accelerators: {}", machine.vendor_summary());
    let mut priority = priority;
    let weights = super::fairness::usage_weights(&o.usage_weights, &machine)
        .map_err(|e| Refusal(format!("--usage-weights: {e}")))?;
    tracing::info!(
        "fair-share usage per second: CPU 1, GPU {}, GiB of memory {}",
        weights.gpu,
        weights.mem_gib
    );
    priority.usage_weights = Some(weights);
    let conn = if o.user {
        zbus::Connection::session().await
    } else {
        zbus::Connection::system().await
    }
    .map_err(|e| {
        Refusal(format!(
            "cannot connect to the {} bus: {e}",
            if o.user { "session" } else { "system" }
        ))
    })?;
    let config = ServeConfig {
        tee_path: sibling_xlurm(),
        object_linger: super::bus::job_object::OBJECT_LINGER,
        machine,
        accel: selection.active,
        policy,
        limits,
        priority,
        user_limits,
        gate,
        gate_exempt,
        idle_gpu,
        state_dir,
        settings_user_mode: o.user,
        memory_nodes: o
            .memory_nodes
            .parse()
            .map_err(|e| Refusal(format!("--memory-nodes: {e}")))?,
        slice: o.slice.clone(),
        budget: crate::core::Budget {
            jobs: o.max_pending_per_user,
            bytes: parse_bytes(&o.max_pending_bytes_per_user)
                .map_err(|e| Refusal(format!("--max-pending-bytes-per-user: {e}")))?,
            outputs: o.max_output_files_per_user,
        },
        retention_secs,
        accounting_retention_secs,
        cancel_grace,
        list_is_public: o.list_is_public,
        journalctl: super::journal::JOURNALCTL.into(),
        recheck: Duration::from_secs(5),
        // The user manager's slices live under user@UID.service: there the
        // memory peak comes from systemd alone (256 and later).
        job_cgroups: (!o.user).then(|| {
            super::systemd::slice_cgroup(std::path::Path::new("/sys/fs/cgroup"), &o.slice)
        }),
    };
    let served = serve(&conn, config).await?;
    let daemon = served.daemon.clone();
    daemon.clean().await;
    daemon.kick.notify_one();
    notify_status(&daemon).await;
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    tracing::info!(
        "xlurmd ready on the {} bus (policy {policy})",
        if o.user { "session" } else { "system" }
    );

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Refusal(format!("installing the SIGTERM handler: {e}")))?;
    let bus_lost = tokio::select! {
        _ = term.recv() => false,
        _ = tokio::signal::ctrl_c() => false,
        _ = served.bus_lost() => true,
    };
    if bus_lost {
        // Not a refusal (exit 78 keeps the unit down): systemd restarts it.
        let msg = "lost the connection to the bus; exiting so that systemd restarts xlurmd \
                   (running jobs keep running)";
        eprintln!("xlurmd: {msg}");
        tracing::error!("{msg}");
        return Ok(Exit::BusLost);
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    // Let launches in flight reach systemd before exiting.
    daemon.stop_launching(Duration::from_secs(10)).await;
    daemon.collect_ended().await;
    // What those launches and ends announced (RUNNING...) reaches the bus
    // before exit: clients waiting for it need not poll for it.
    if !daemon.changes.flush(Duration::from_secs(2)).await {
        tracing::warn!("stopping before every job change was announced on the bus");
    }
    tracing::info!("stopping; running jobs keep running under systemd");
    Ok(Exit::Stopped)
}

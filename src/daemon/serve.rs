//! Serving: connect to systemd, load the state, re-adopt jobs, own the bus
//! name, and run the daemon's tasks (unit watcher, scheduling loop,
//! collector, device polls, recheck) until dropped.

use super::bus::api::{SchedulerApi, BUS_NAME, PATH};
use super::service::{Daemon, State};
pub use super::settings::ServeConfig;
use super::settings::Settings;
use super::startup::Refusal;
use super::store::Store;
use super::systemd::{Systemd, Units};
use crate::core::Scheduler;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A serving daemon; dropping it stops its tasks (jobs keep running).
pub struct Served {
    pub daemon: Arc<Daemon>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Notified when the bus connection is gone (see [`Served::bus_lost`]).
    lost: Arc<tokio::sync::Notify>,
}

impl Served {
    /// Returns once xlurmd's bus connection is gone (dbus-daemon closed it,
    /// or restarted): without it xlurmd serves no one and hears no unit
    /// signal, so it must exit and let systemd restart it.
    pub async fn bus_lost(&self) {
        self.lost.notified().await
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The manager's runtime unit directory: `/run/systemd/system`, or a user
/// manager's `$XDG_RUNTIME_DIR/systemd/user`.
fn runtime_units(user: bool) -> Option<std::path::PathBuf> {
    if user {
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(|d| std::path::PathBuf::from(d).join("systemd/user"))
    } else {
        Some("/run/systemd/system".into())
    }
}

/// Connects to systemd on `conn`, loads state, re-adopts jobs, serves the API
/// and owns the bus name; the caller then signals readiness.
pub async fn serve(conn: &zbus::Connection, cfg: ServeConfig) -> Result<Served, Refusal> {
    let mut tasks = Vec::new();
    let conn = conn.clone();
    let systemd = Systemd::connect(&conn)
        .await
        .map_err(|e| {
            Refusal(format!(
                "{e:#} (is systemd running as the {} manager?)",
                if cfg.settings_user_mode {
                    "user"
                } else {
                    "system"
                }
            ))
        })?
        .with_job_cgroups(cfg.job_cgroups.clone())
        .with_runtime_units(runtime_units(cfg.settings_user_mode));
    let version = systemd.version();
    let memory_nodes = cfg.memory_nodes.resolve(version);
    tracing::info!("systemd {version}: job memory kept on its nodes by {memory_nodes:?}");
    let nodev_slice = super::systemd::nodev_slice::close(&systemd, &cfg.slice).await;
    let (store, loaded) = Store::open(&cfg.state_dir).map_err(|e| {
        Refusal(format!(
            "state directory {}: {e:#}",
            cfg.state_dir.display()
        ))
    })?;
    if let Some(w) = &loaded.warning {
        tracing::error!("{w}");
    }
    let settings = Settings::of(&cfg, store.script_dir(), nodev_slice, memory_nodes);
    let mut sched = Scheduler::with_priority(cfg.machine, cfg.policy, cfg.limits, cfg.priority);
    // Limits set live (kept in the state directory) win over the file's.
    let user_limits = match super::fairness::load_user_limits(&cfg.state_dir) {
        Ok(Some(l)) => l,
        Ok(None) => cfg.user_limits,
        Err(e) => return Err(Refusal(format!("{e:#} (fix or remove it)"))),
    };
    sched.set_user_limits(user_limits);
    match super::fairness::load_usage(&cfg.state_dir) {
        Ok(Some(ledger)) => sched.restore_usage(ledger),
        Ok(None) => {}
        // Usage only orders the queue: start without it rather than not at all.
        Err(e) => tracing::error!("{e:#}; fair share starts from no usage"),
    }
    let state = State::new(sched, loaded, store);
    let (daemon, changes) = Daemon::new(state, settings, systemd.clone(), cfg.accel);
    // What was just set, read back (and kept so: every recheck).
    super::systemd::nodev_slice::keep_closed(&daemon).await;
    // Re-adoption fails only for passing reasons (systemd busy or re-executing,
    // a full state disk): it is retried, never a refusal, which exit 78 would
    // make final. Readiness waits for it; if it takes longer than the unit's
    // TimeoutStartSec, systemd stops xlurmd and starts it again.
    let mut attempt = 0u32;
    while let Err(e) = daemon.readopt().await {
        attempt += 1;
        let wait = Duration::from_millis(500 * u64::from(attempt.min(10)));
        tracing::error!(
            "re-adopting jobs failed ({e:#}); trying again in {wait:?} (attempt {attempt})"
        );
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(&format!(
            "re-adopting jobs failed, retrying: {e:#}"
        ))]);
        tokio::time::sleep(wait).await;
    }
    daemon.gate.set_exempt(cfg.gate_exempt.clone());
    apply_gate(&daemon, &cfg.state_dir, cfg.gate, cfg.settings_user_mode).await;
    // --output descriptors of pending jobs, kept in systemd's store across a crash.
    {
        let restored = super::output::from_listen_fds();
        let mut st = daemon.state.lock().await;
        for (id, fd) in restored {
            match st.jobs.get_mut(&id) {
                Some(j) if j.state() == super::job::JobState::Pending => j.hold_output_fd(fd),
                _ => super::output::unstore(id),
            }
        }
    }

    let audience = Arc::new(super::bus::audience::Audience::new(
        daemon.settings.list_is_public,
    ));
    let api = SchedulerApi {
        daemon: daemon.clone(),
        fixed_uid: None,
        audience: audience.clone(),
    };
    let publish = audience.public();
    tasks.push(
        super::bus::objects::Objects::serve(&conn, api, publish)
            .await
            .map_err(|e| Refusal(format!("serving {PATH}: {e}")))?,
    );
    conn.request_name(BUS_NAME)
        .await
        .map_err(|e| Refusal(format!("cannot own {BUS_NAME} ({e}): is another xlurmd running, and is the bus policy installed?")))?;

    // Unit watcher: any change of a job unit triggers a read of its status.
    // It ends when the bus connection does.
    let lost = Arc::new(tokio::sync::Notify::new());
    if let Some(t) =
        super::systemd::watch::spawn_unit_watcher(daemon.clone(), conn.clone(), lost.clone()).await
    {
        tasks.push(t);
    }
    // Jobs that ended before a restart leave the table after the usual while.
    let ended: Vec<u64> = {
        let st = daemon.state.lock().await;
        st.jobs
            .values()
            .filter(|j| j.state().is_final())
            .map(|j| j.id)
            .collect()
    };
    for id in ended {
        super::bus::job_object::retire_later(&daemon, id);
    }
    // Signals for job changes.
    tasks.push(super::bus::announce::spawn(
        conn.clone(),
        daemon.clone(),
        audience.clone(),
        publish,
        changes,
    ));
    // Scheduling loop.
    {
        let d = daemon.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                d.schedule().await;
                let _ = tokio::time::timeout(Duration::from_secs(5), d.kick.notified()).await;
            }
        }));
    }
    // Time limits lowered while jobs run (see `service::deadline`).
    {
        let d = daemon.clone();
        tasks.push(tokio::spawn(async move { d.keep_deadlines().await }));
    }
    // Collector: ended units in batches while jobs wait (see `collect_ended`).
    {
        let d = daemon.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                d.collect.notified().await;
                d.collect_ended().await;
            }
        }));
    }
    // Device monitoring: every 2 s per backend, off the event loop, with a timeout.
    for active in &daemon.accel {
        let poller = crate::accel::Poller::new(active.backend.clone(), active.devices.clone());
        let d = daemon.clone();
        tasks.push(tokio::spawn(async move {
            super::monitor::devices(d, poller).await
        }));
    }
    // Safety net for missed signals, retention (every minute) and status.
    {
        let d = daemon.clone();
        let recheck = cfg.recheck.max(Duration::from_millis(100));
        let clean_every = (60_000 / recheck.as_millis().max(1)).max(1) as u64;
        tasks.push(tokio::spawn(async move {
            let mut tick = 0u64;
            loop {
                tokio::time::sleep(recheck).await;
                tick += 1;
                d.collect_ended().await;
                recheck_running(&d).await;
                super::systemd::nodev_slice::keep_closed(&d).await;
                // Memory freed by jobs retired since (see State::trim).
                d.state.lock().await.trim();
                if tick.is_multiple_of(clean_every) {
                    d.clean().await;
                }
                notify_status(&d).await;
            }
        }));
    }
    Ok(Served {
        daemon,
        tasks,
        lost,
    })
}

/// Reads the units of running jobs that may have ended without xlurmd
/// hearing it (a signal lost): one listing of all job units, then a read of
/// each that is not plainly still running. Also notes their memory peak so
/// far (`Daemon::sample_memory_peaks`).
async fn recheck_running(d: &Arc<Daemon>) {
    let running: Vec<(u64, String)> = {
        let st = d.state.lock().await;
        st.jobs
            .values()
            .filter(|j| j.state() == super::job::JobState::Running)
            .map(|j| (j.id, j.unit()))
            .collect()
    };
    if running.is_empty() {
        return;
    }
    d.sample_memory_peaks(&running).await;
    let states = d.systemd.states(crate::unit_name::ALL_JOBS).await;
    for (id, unit) in running {
        let busy = match &states {
            Ok(states) => states
                .get(&unit)
                .is_some_and(|(active, sub, job)| super::systemd::outcome::busy(active, sub, *job)),
            Err(_) => false,
        };
        if !busy {
            d.reconcile(id).await;
        }
    }
}

pub(super) async fn notify_status(d: &Arc<Daemon>) {
    let (pending, running) = d.state.lock().await.counts();
    let status = format!("{pending} pending, {running} running");
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(&status)]);
}

/// Puts the accelerator gate as kept in `state_dir` (else `default`), at
/// start: its drop-ins are in /run, gone after a reboot. A failure is logged,
/// not a refusal: jobs run either way.
async fn apply_gate(daemon: &Daemon, state_dir: &Path, default: bool, user_mode: bool) {
    let on = super::device_gate::load(state_dir).unwrap_or(default);
    if user_mode {
        if on {
            tracing::warn!("the accelerator gate is for the system instance; ignored with --user");
        }
        return;
    }
    match daemon
        .gate
        .turn(&daemon.systemd, &daemon.accel, on, true)
        .await
    {
        Ok(()) if on => {
            tracing::info!("accelerator gate on: only xlurm jobs open the accelerators")
        }
        Ok(()) => {}
        Err(e) => tracing::error!("setting the accelerator gate: {e}"),
    }
}

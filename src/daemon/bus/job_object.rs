//! org.xlurm.Job1: one D-Bus object per job at `/org/xlurm/Scheduler1/job/<id>`.
//!
//! Objects exist while a job is pending or running and for a while after it
//! ends (`OBJECT_LINGER` by default), so a client watching it sees the final
//! state: while it is in the job table in full, which is where `objects`
//! finds it when it is called (objects are not registered one by one);
//! afterwards `GetJob` still answers for as long as the job is retained.
//! Properties carry the queue summary only (never command, environment or
//! output), so they are readable by everyone like the queue itself. On a
//! private queue jobs have no objects at all (see `audience`).

use crate::core::JobId;
use crate::daemon::job::{Job, JobState};
use crate::daemon::service::Daemon;
use crate::wire::error::ApiError;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use zbus::message::Header;
use zbus::{Connection, Variant};

/// How long a finished job's object stays on the bus.
pub const OBJECT_LINGER: Duration = Duration::from_secs(600);

pub fn job_path(id: JobId) -> String {
    format!("{}/job/{id}", crate::daemon::bus::api::PATH)
}

pub struct JobObject {
    pub daemon: Arc<Daemon>,
    pub id: JobId,
}

impl JobObject {
    async fn queued_estimate(&self) -> Option<(u64, String)> {
        let st = self.daemon.state.lock().await;
        let now = crate::wire::time::now_usec() / 1_000_000;
        crate::daemon::fairness::estimate(&st.sched, self.id, now)
    }

    async fn with<T>(&self, f: impl FnOnce(&Job) -> T, default: T) -> T {
        let st = self.daemon.state.lock().await;
        st.jobs.get(&self.id).map(f).unwrap_or(default)
    }
}

#[zbus::interface(name = "org.xlurm.Job1")]
impl JobObject {
    /// Cancels this job (its owner, or an admin through polkit: see Scheduler1.Cancel).
    async fn cancel(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, ApiError> {
        let uid = crate::daemon::bus::caller::caller_uid(&self.daemon.callers, conn, &hdr).await?;
        let owner = self.with(|j| j.uid, uid).await;
        if !crate::daemon::service::owns(uid, owner) {
            return Err(ApiError::PermissionDenied(format!(
                "job {} is not yours; admins cancel it through org.xlurm.Scheduler1.Cancel",
                self.id
            )));
        }
        Ok(self
            .daemon
            .cancel(uid, self.id, false)
            .await?
            .name()
            .to_string())
    }

    #[zbus(property(emits_changed_signal = "const"))]
    async fn id(&self) -> u64 {
        self.id
    }
    #[zbus(property(emits_changed_signal = "const"))]
    async fn name(&self) -> String {
        self.with(|j| j.name.clone(), String::new()).await
    }
    #[zbus(property(emits_changed_signal = "const"))]
    async fn user(&self) -> String {
        self.with(|j| j.user.clone(), String::new()).await
    }
    #[zbus(property(emits_changed_signal = "const"))]
    async fn uid(&self) -> u32 {
        self.with(|j| j.uid, 0).await
    }
    /// PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, LAUNCH_FAILED, LOST.
    #[zbus(property)]
    async fn state(&self) -> String {
        self.with(|j| j.state().name().to_string(), String::new())
            .await
    }
    /// Why it waits, while pending.
    #[zbus(property(emits_changed_signal = "invalidates"))]
    async fn reason(&self) -> String {
        let st = self.daemon.state.lock().await;
        st.reason(self.id)
            .map(|r| r.to_string())
            .or_else(|| st.jobs.get(&self.id)?.flag().map(str::to_string))
            .unwrap_or_default()
    }
    /// While queued: when it is estimated to start, microseconds since the
    /// epoch, from running jobs' time limits and the jobs ahead (as `xqueue
    /// --start`); 0 when that cannot be bounded (see Estimate) or it is not
    /// in the queue (running, ended, or kept out: see Reason).
    #[zbus(property(emits_changed_signal = "invalidates"))]
    async fn estimated_start(&self) -> u64 {
        self.queued_estimate()
            .await
            .map_or(0, |(at, _)| at.saturating_mul(1_000_000))
    }
    /// While queued: how EstimatedStart was reached, or why there is none (a
    /// running job without a time limit, busy devices, a limit); empty when
    /// it is not in the queue.
    #[zbus(property(emits_changed_signal = "invalidates"))]
    async fn estimate(&self) -> String {
        self.queued_estimate()
            .await
            .map(|(_, why)| why)
            .unwrap_or_default()
    }
    /// While queued: when it is *expected* to start, microseconds since the
    /// epoch, if jobs take what completed jobs of their kind (owner, name,
    /// resources) recently took rather than their time limits; not a bound;
    /// 0 when unknown or not in the queue.
    #[zbus(property(emits_changed_signal = "invalidates"))]
    async fn expected_start(&self) -> u64 {
        let st = self.daemon.state.lock().await;
        let now = crate::wire::time::now_usec() / 1_000_000;
        st.sched
            .expected_start(self.id, now)
            .and_then(|e| e.time())
            .map_or(0, |at| at.saturating_mul(1_000_000))
    }
    /// Microseconds since the epoch.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn submit_time(&self) -> u64 {
        self.with(|j| j.submit_usec, 0).await
    }
    #[zbus(property)]
    async fn start_time(&self) -> u64 {
        self.with(|j| j.start_usec(), 0).await
    }
    #[zbus(property)]
    async fn end_time(&self) -> u64 {
        self.with(|j| j.end_usec(), 0).await
    }
    /// Requested resources as `xqueue` shows them (`cpus=2 mem=4G devices=nv:1`).
    #[zbus(property(emits_changed_signal = "const"))]
    async fn requested(&self) -> String {
        self.with(
            |j| {
                format!(
                    "cpus={} mem={} devices={} time_limit={}s",
                    j.demand.cpus,
                    crate::core::request::format_bytes(j.demand.mem_bytes),
                    j.devices_requested(),
                    j.demand.time_limit_secs
                )
            },
            String::new(),
        )
        .await
    }
    /// The allocated CPU list, memory nodes and devices once started.
    #[zbus(property)]
    async fn allocated(&self) -> String {
        self.with(allocated, String::new()).await
    }
    #[zbus(property(emits_changed_signal = "const"))]
    async fn unit(&self) -> String {
        self.with(|j| j.unit(), String::new()).await
    }
    #[zbus(property)]
    async fn invocation_id(&self) -> String {
        self.with(|j| j.invocation_id().to_string(), String::new())
            .await
    }
    /// The exit code xrun reports; -1 while it has none.
    #[zbus(property)]
    async fn exit_code(&self) -> i32 {
        self.with(|j| j.exit_code().unwrap_or(-1), -1).await
    }
    /// systemd's Result of the unit (`success`, `exit-code`, `oom-kill`, ...).
    #[zbus(property)]
    async fn result(&self) -> String {
        self.with(|j| outcome(j, |o| o.result.clone()), String::new())
            .await
    }
    /// How it ended, in one line.
    #[zbus(property)]
    async fn detail(&self) -> String {
        self.with(|j| outcome(j, |o| o.detail.clone()), String::new())
            .await
    }
    #[zbus(property, name = "CPUTimeNSec")]
    async fn cpu_time_nsec(&self) -> u64 {
        self.with(|j| outcome(j, |o| o.cpu_nsec.unwrap_or(0)), 0)
            .await
    }
    #[zbus(property)]
    async fn memory_peak(&self) -> u64 {
        self.with(|j| outcome(j, |o| o.memory_peak.unwrap_or(0)), 0)
            .await
    }
    /// Its accelerators' mean busy percent over every poll while it ran
    /// (so far, while it runs); -1 when none was read. Changes with each
    /// poll without a signal: read it.
    #[zbus(property(emits_changed_signal = "false"), name = "GPUUtilization")]
    async fn gpu_utilization(&self) -> f64 {
        self.with(gpu_mean, -1.0).await
    }
    /// Their highest busy percent read; 0 when none was.
    #[zbus(property(emits_changed_signal = "false"), name = "GPUUtilizationPeak")]
    async fn gpu_utilization_peak(&self) -> u32 {
        self.with(|j| j.gpu_use().map_or(0, |g| u32::from(g.util_peak)), 0)
            .await
    }
    /// The most device memory one of its accelerators had in use, bytes; 0
    /// when none was read.
    #[zbus(property(emits_changed_signal = "false"), name = "GPUMemoryPeak")]
    async fn gpu_memory_peak(&self) -> u64 {
        self.with(|j| j.gpu_use().and_then(|g| g.mem_peak).unwrap_or(0), 0)
            .await
    }
    /// Once ended: its CPU time over its CPUs times how long it ran (0 to
    /// 1); -1 when it cannot be told.
    #[zbus(property, name = "CPUEfficiency")]
    async fn cpu_efficiency(&self) -> f64 {
        self.with(|j| j.cpu_efficiency().unwrap_or(-1.0), -1.0)
            .await
    }
    /// While it runs: an accelerator of it stayed idle past the admin's rule
    /// (xlurmd --idle-gpu-below, --idle-gpu-after); xqueue shows IdleGPU.
    #[zbus(property, name = "IdleGPU")]
    async fn idle_gpu(&self) -> bool {
        self.with(|j| j.flag().is_some(), false).await
    }
}

/// The `GPUUtilization` property.
fn gpu_mean(j: &Job) -> f64 {
    j.gpu_use().and_then(|g| g.util_mean()).unwrap_or(-1.0)
}

/// The `Allocated` property.
fn allocated(j: &Job) -> String {
    match j.alloc() {
        Some(a) => format!(
            "cpus={} mem_nodes={} devices={}{}",
            a.cpus,
            a.mem_nodes,
            j.devices_allocated().unwrap_or_default(),
            if a.spread { " spread" } else { "" }
        ),
        None => String::new(),
    }
}

/// A property of how the job ended (its default while it has not).
fn outcome<T: Default>(j: &Job, f: impl FnOnce(&crate::daemon::job::Outcome) -> T) -> T {
    j.outcome().map(f).unwrap_or_default()
}

/// The properties that change as a job moves on, by their names on the bus,
/// with the values the getters give: sent as one PropertiesChanged per
/// change of state (not one signal per property).
fn changed_properties(j: &Job) -> HashMap<&'static str, Variant<'static>> {
    let mut p = HashMap::from([
        ("State", Variant::from(j.state().name().to_string())),
        ("StartTime", Variant::from(j.start_usec())),
        ("Allocated", Variant::from(allocated(j))),
        ("InvocationId", Variant::from(j.invocation_id().to_string())),
    ]);
    if j.state().is_final() {
        p.extend([
            ("EndTime", Variant::from(j.end_usec())),
            ("ExitCode", Variant::from(j.exit_code().unwrap_or(-1))),
            ("Result", Variant::from(outcome(j, |o| o.result.clone()))),
            ("Detail", Variant::from(outcome(j, |o| o.detail.clone()))),
            (
                "CPUTimeNSec",
                Variant::from(outcome(j, |o| o.cpu_nsec.unwrap_or(0))),
            ),
            (
                "MemoryPeak",
                Variant::from(outcome(j, |o| o.memory_peak.unwrap_or(0))),
            ),
            (
                "CPUEfficiency",
                Variant::from(j.cpu_efficiency().unwrap_or(-1.0)),
            ),
            ("IdleGPU", Variant::from(false)),
        ]);
    }
    p
}

/// Signals that job `id` now shows IdleGPU, or no longer does (and its
/// Reason, which says so, is to be read again).
pub async fn usage_changed(conn: &Connection, daemon: &Arc<Daemon>, id: JobId) {
    let idle = |j: &Job| ("IdleGPU", Variant::from(j.flag().is_some()));
    announce(conn, daemon, id, idle, &["Reason"]).await;
}

/// Signals that job `id`'s unit invocation became known (it runs).
pub async fn invocation_known(conn: &Connection, daemon: &Arc<Daemon>, id: JobId) {
    let invocation = |j: &Job| ("InvocationId", Variant::from(j.invocation_id().to_string()));
    announce(conn, daemon, id, invocation, &[]).await;
}

/// PropertiesChanged with one property of job `id` as `property` reads it
/// now, if the job is still in the table.
async fn announce(
    conn: &Connection,
    daemon: &Arc<Daemon>,
    id: JobId,
    property: impl FnOnce(&Job) -> (&'static str, Variant<'static>),
    invalidated: &[&str],
) {
    let Some((name, value)) = daemon.state.lock().await.jobs.get(&id).map(property) else {
        return;
    };
    emit_changed(conn, id, HashMap::from([(name, value)]), invalidated).await;
}

/// Tells job `id`'s watchers what changed, and retires it from the job
/// table `object_linger` after it ended (its object goes with it: see
/// `objects`). On a private queue (`publish` false) jobs have no objects;
/// a finished job still goes into brief after the same while.
pub async fn on_change(
    conn: &Connection,
    daemon: &Arc<Daemon>,
    id: JobId,
    state: JobState,
    publish: bool,
) {
    // A job's object exists from its submission on: nothing changed yet.
    if publish && state != JobState::Pending {
        let changed = {
            let st = daemon.state.lock().await;
            st.jobs.get(&id).map(changed_properties)
        };
        if let Some(changed) = changed {
            // Reason is meaningful only while pending: clients read it anew.
            emit_changed(
                conn,
                id,
                changed,
                &["Reason", "EstimatedStart", "Estimate", "ExpectedStart"],
            )
            .await;
        }
    }
    if state.is_final() {
        retire_later(daemon, id);
    }
}

/// Moves ended job `id` out of the table (its object goes with it) into
/// brief, `object_linger` from now: nobody watches it closely any more.
pub fn retire_later(daemon: &Arc<Daemon>, id: JobId) {
    let linger = daemon.settings.object_linger;
    let daemon = daemon.clone();
    tokio::spawn(async move {
        tokio::time::sleep(linger).await;
        let retired = daemon
            .state
            .lock()
            .await
            .apply(crate::daemon::service::Commit::Retired(vec![id]));
        if let Err(e) = retired {
            tracing::warn!(job = id, "keeping it in brief: {e}");
        }
    });
}

/// PropertiesChanged of org.xlurm.Job1 on job `id`'s object.
async fn emit_changed(
    conn: &Connection,
    id: JobId,
    changed: HashMap<&str, Variant<'_>>,
    invalidated: &[&str],
) {
    if let Ok(emitter) = zbus::object_server::SignalEmitter::new(conn, job_path(id)) {
        crate::daemon::bus::objects::properties_changed(
            &emitter,
            crate::daemon::bus::objects::JOB1,
            changed,
            invalidated,
        )
        .await;
    }
}

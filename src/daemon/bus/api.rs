//! org.xlurm.Scheduler1: thin D-Bus wrappers over `service`, one call each.
//!
//! Callers are identified by the bus (`GetConnectionUnixUser` of the sender),
//! never by anything they send. Admin actions go through polkit with the
//! caller's unique bus name as subject.

use crate::core::{Policy, Vendor};
use crate::daemon::bus::audience::Audience;
use crate::daemon::bus::caller::{take_output, take_pty};
use crate::daemon::job::Hold;
use crate::daemon::service::Daemon;
use crate::daemon::spec;
use crate::wire::error::ApiError;
use crate::wire::keys;
use crate::wire::queue::JobSummary;
use std::collections::HashMap;
use std::sync::Arc;
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::Connection;

pub const BUS_NAME: &str = "org.xlurm.Scheduler1";
pub const PATH: &str = "/org/xlurm/Scheduler1";
/// The polkit action of every admin method.
pub const ACTION_MANAGE: &str = "org.xlurm.scheduler.manage";

pub use crate::wire::dict::Dict;

pub struct SchedulerApi {
    pub daemon: Arc<Daemon>,
    /// Without a bus broker (tests over a p2p connection) everyone is this uid.
    pub fixed_uid: Option<u32>,
    /// Who hears of a job's changes (see `audience`).
    pub audience: Arc<Audience>,
}

/// PropertiesChanged for one property of Scheduler1.
async fn announce(em: &SignalEmitter<'_>, name: &str, value: zbus::Variant<'_>) {
    let changed = HashMap::from([(name, value)]);
    crate::daemon::bus::objects::properties_changed(
        em,
        crate::daemon::bus::objects::SCHEDULER1,
        changed,
        &[],
    )
    .await;
}

fn wire_now() -> u64 {
    crate::wire::time::now_usec() / 1_000_000
}

#[zbus::interface(name = "org.xlurm.Scheduler1")]
impl SchedulerApi {
    /// Queues one job. Returns its ID and what it was given: `mem` (t, its
    /// memory budget), `mem_default` (b, the budget is the default) and
    /// `gpus_default` (b, it got one accelerator by default).
    #[zbus(out_args("id", "info"))]
    async fn submit(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        spec: Dict,
    ) -> Result<(u64, Dict), ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        let mut spec = spec;
        let output = take_output(&mut spec)?;
        let pty = take_pty(&mut spec, uid)?;
        let spec = spec::parse(&spec).map_err(|e| ApiError::InvalidArgs(e.0))?;
        let admin = self.may_raise(conn, &hdr, uid, [&spec]).await?;
        let s = self
            .daemon
            .submit_as(uid, admin, vec![spec], output, pty)
            .await?
            .remove(0);
        self.listen(&hdr, s.id);
        let mut info = Dict::new();
        keys::submitted::MEM.put(&mut info, s.mem_bytes);
        keys::submitted::MEM_DEFAULT.put(&mut info, s.mem_default);
        keys::submitted::GPUS_DEFAULT.put(&mut info, s.gpus_defaulted);
        Ok((s.id, info))
    }

    /// Queues many jobs at once: all are checked first; any bad spec queues none.
    #[zbus(out_args("ids"))]
    async fn submit_many(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        specs: Vec<Dict>,
    ) -> Result<Vec<u64>, ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        if specs.len() > 100_000 {
            return Err(ApiError::InvalidArgs(
                "at most 100000 specs per call".into(),
            ));
        }
        let mut parsed = Vec::with_capacity(specs.len());
        for (i, s) in specs.iter().enumerate() {
            parsed.push(
                spec::parse(s)
                    .map_err(|e| ApiError::InvalidArgs(format!("job {}: {}", i + 1, e.0)))?,
            );
        }
        let admin = self.may_raise(conn, &hdr, uid, &parsed).await?;
        let ids: Vec<u64> = self
            .daemon
            .submit_as(uid, admin, parsed, None, None)
            .await?
            .into_iter()
            .map(|s| s.id)
            .collect();
        for &id in &ids {
            self.listen(&hdr, id);
        }
        Ok(ids)
    }

    /// Cancels a job: the owner's, or anyone's with the admin authorization.
    /// Returns the state the job was in.
    #[zbus(out_args("state"))]
    async fn cancel(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        id: u64,
    ) -> Result<String, ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        let admin = self.admin_for(conn, &hdr, uid, id, true).await?;
        Ok(self.daemon.cancel(uid, id, admin).await?.name().to_string())
    }

    /// Cancels task `index` of array `array` (`123_4`): the task's own job
    /// if it started, else it is taken off the array's tasks not started
    /// yet. Returns the task's job ID and the state it was in.
    #[zbus(out_args("id", "state"))]
    async fn cancel_task(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        array: u64,
        index: u32,
    ) -> Result<(u64, String), ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        let admin = self.admin_for(conn, &hdr, uid, array, true).await?;
        let (id, state) = self.daemon.cancel_task(uid, array, index, admin).await?;
        Ok((id, state.name().to_string()))
    }

    /// The job that holds task `index` of array `array` (`123_4`): the
    /// task's own once it started, the array's while the task waits.
    #[zbus(out_args("id"))]
    async fn find_task(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        array: u64,
        index: u32,
    ) -> Result<u64, ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        let admin = self.admin_for(conn, &hdr, uid, array, false).await?;
        self.daemon.find_task(uid, array, index, admin).await
    }

    /// Holds a pending job: its owner's hold, or an admin's (polkit) on
    /// anyone's, which only an admin may release. Returns whether it was
    /// not held that way already.
    #[zbus(out_args("changed"))]
    async fn hold(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        id: u64,
    ) -> Result<bool, ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        let admin = self.admin_for(conn, &hdr, uid, id, true).await?;
        self.daemon.hold(uid, id, admin).await
    }

    /// Releases a pending job's hold (an admin's hold needs polkit, even
    /// for the owner). Returns whether it was held.
    #[zbus(out_args("changed"))]
    async fn release(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        id: u64,
    ) -> Result<bool, ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        let admin = if uid != 0 && self.daemon.hold_of(id).await == Some(Hold::Admin) {
            self.authorized(conn, &hdr, uid).await?
        } else {
            self.admin_for(conn, &hdr, uid, id, true).await?
        };
        self.daemon.release(uid, id, admin).await
    }

    /// Changes a job (`time_limit` t, `cpus` u, `mem` t, `gpus` u, `name` s,
    /// `nice` i, `dependency` s, empty to clear): a pending job's, checked
    /// as a submission; a running job's time limit only (raised by an admin).
    async fn update(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        id: u64,
        changes: Dict,
    ) -> Result<(), ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        let changes = spec::parse_changes(&changes).map_err(|e| ApiError::InvalidArgs(e.0))?;
        // Raising a running job's time limit, or any job's priority (a
        // negative nice), needs polkit, even for its owner.
        let raising = changes.nice.is_some_and(|n| n < 0)
            || self
                .daemon
                .raises_time_limit(id, changes.time_limit_secs)
                .await;
        let admin = if raising && uid != 0 {
            self.authorized(conn, &hdr, uid).await?
        } else {
            self.admin_for(conn, &hdr, uid, id, true).await?
        };
        self.daemon.update(uid, id, admin, changes).await
    }

    /// One job. Command, arguments, environment and directory only for its owner and root.
    #[zbus(out_args("job"))]
    async fn get_job(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        id: u64,
    ) -> Result<Dict, ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        let admin = self.admin_for(conn, &hdr, uid, id, false).await?;
        let (job, listens) = self.daemon.job_reply(uid, id, admin).await?;
        if listens {
            self.listen(&hdr, id);
        }
        Ok(job)
    }

    /// Fair share per user with usage or jobs (as `sshare`): `uid`, `user`,
    /// `shares`, `norm_shares`, `usage` (decayed resource-seconds),
    /// `effective_usage`, `fair_share` (0..1). On a private queue a user
    /// sees their own line only.
    #[zbus(out_args("shares"))]
    async fn get_shares(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<Dict>, ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        let rows = self.daemon.share_rows(uid, wire_now()).await;
        // Names come from NSS, which may block: off the event loop.
        off_loop(move || crate::daemon::fairness::shares(rows)).await
    }

    /// A usage report from the accounting log (`xlurm usage`, like sacct and
    /// sreport): one row per user and period with jobs by final state,
    /// CPU-hours, GPU-hours, median wait, memory peak quantiles and
    /// accelerator efficiency. Options: `period` (s: day, week, month),
    /// `since`, `until` (t: seconds since the epoch; default the last 30
    /// days), `utc_offset` (i: where days begin), `all_users` (b: every
    /// user's jobs, for root or through polkit; otherwise the caller's own).
    async fn get_usage(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        options: HashMap<String, zbus::OwnedVariant>,
    ) -> Result<Vec<Dict>, ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        let ask = crate::daemon::accounting::parse_usage(&options, uid, wire_now())?;
        if ask.all_users && uid != 0 && !self.authorized(conn, &hdr, uid).await? {
            return Err(ApiError::PermissionDenied(format!(
                "a report of every user's jobs needs the polkit authorization {} (root, or a group granted it by an admin rule); without all_users you get your own",
                ACTION_MANAGE
            )));
        }
        let dir = self.daemon.accounting_dir().await?;
        // File reads and NSS lookups: off the event loop.
        off_loop(move || crate::daemon::accounting::usage_report(dir, &ask)).await?
    }

    /// The per-user limits and shares in force, as JSON (see the admin
    /// guide): users and groups by name where the system knows them.
    #[zbus(out_args("limits"))]
    async fn get_user_limits(&self) -> Result<String, ApiError> {
        let limits = self.daemon.user_limits().await;
        // Names come from NSS, which may block: off the event loop.
        off_loop(move || {
            crate::daemon::fairness::render_user_limits(&limits, &crate::daemon::fairness::Nss)
        })
        .await
    }

    /// Replaces the per-user limits and shares, live (admin): JSON as
    /// `GetUserLimits` gives, users and groups by name or ID (an unknown
    /// name is refused); kept in the state directory, which then wins over
    /// `--user-limits`. Jobs running keep running; waiting ones are held to
    /// the new limits at the next pass.
    async fn set_user_limits(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        limits: &str,
    ) -> Result<(), ApiError> {
        // Asked first: nobody else's text is parsed.
        self.require_admin(conn, &hdr, "changing user limits")
            .await?;
        let text = limits.to_string();
        let limits = off_loop(move || {
            crate::daemon::fairness::parse_user_limits(&text, &crate::daemon::fairness::Nss)
        })
        .await?
        .map_err(ApiError::InvalidArgs)?;
        self.daemon.set_user_limits(limits).await
    }

    /// Jobs, oldest first, at most 8 MiB of them: `more` says that older
    /// ones match too (pass the first `id` as `before` for the next page).
    /// Filter keys: `all_users` (b), `states` (as), `limit` (u: the newest
    /// this many), `finished` (b: include finished jobs), `before` (t).
    #[zbus(out_args("jobs", "more"))]
    async fn list_jobs(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        filter: Dict,
    ) -> Result<(Vec<JobSummary>, bool), ApiError> {
        let (uid, f) = self.list_filter(conn, &hdr, &filter).await?;
        Ok(self.daemon.list_page(uid, &f).await)
    }

    /// Every job `ListJobs` would list with this filter, without a page
    /// limit: a sealed memfd holding the array `a(tsusssttttutbsiss)` in
    /// little-endian D-Bus encoding, to be read from offset 0.
    #[zbus(out_args("jobs"))]
    async fn list_jobs_by_file_descriptor(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        filter: Dict,
    ) -> Result<zbus::OwnedFd, ApiError> {
        let (uid, f) = self.list_filter(conn, &hdr, &filter).await?;
        Ok(self.daemon.list_memfd(uid, &f).await?.into())
    }

    /// Up to `max_lines` lines of a job's output after `cursor` ("" = from the start),
    /// for its owner and root. A page holds at most `max_lines` lines and 4 MiB
    /// (a longer single line is cut, saying so). Returns the lines, the cursor
    /// to pass next, the job's state when read (once it is final, read until
    /// `lines` comes back empty) and, on the first page, `missing_before`: 0, or
    /// the time (µs since the epoch) before which the journal no longer holds
    /// anything, when that is after the job started: journald rotated its first
    /// output away.
    #[zbus(out_args("lines", "cursor", "state", "missing_before"))]
    async fn read_log(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        id: u64,
        cursor: &str,
        max_lines: u32,
    ) -> Result<(Vec<String>, String, String, u64), ApiError> {
        let uid = self.caller(conn, &hdr).await?;
        if cursor.len() > 4096 {
            return Err(ApiError::InvalidArgs("cursor too long".into()));
        }
        let page = self.daemon.read_log(uid, id, cursor, max_lines).await?;
        if !page.state.is_final() {
            self.listen(&hdr, id);
        }
        Ok((
            page.lines,
            page.cursor,
            page.state.name().to_string(),
            page.missing_before,
        ))
    }

    /// The machine: NUMA nodes, devices with states and holders, policy and
    /// limits; `limits` (aa{sv}): each per-user limit that holds for the
    /// caller, with `resource`, `used`, `limit`, `scope` (user, group,
    /// default) and `text`.
    #[zbus(out_args("machine"))]
    async fn get_machine(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Dict, ApiError> {
        let caller = self.caller(conn, &hdr).await?;
        Ok(self.daemon.machine(caller).await)
    }

    /// Changes the scheduling policy live (admin).
    async fn set_policy(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(signal_emitter)] em: SignalEmitter<'_>,
        policy: &str,
    ) -> Result<(), ApiError> {
        let p: Policy = policy
            .parse()
            .map_err(|e: crate::core::policy::UnknownPolicy| {
                ApiError::InvalidArgs(e.to_string())
            })?;
        self.require_admin(conn, &hdr, "changing the policy")
            .await?;
        self.daemon.set_policy(p).await;
        announce(&em, "Policy", p.name().into()).await;
        Ok(())
    }

    /// Changes how many jobs may run at once, live (admin).
    async fn set_max_running(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(signal_emitter)] em: SignalEmitter<'_>,
        max_running: u32,
    ) -> Result<(), ApiError> {
        if max_running == 0 {
            return Err(ApiError::InvalidArgs(
                "max_running must be at least 1".into(),
            ));
        }
        self.require_admin(conn, &hdr, "changing max-running")
            .await?;
        self.daemon.set_max_running(max_running).await;
        announce(&em, "MaxRunning", max_running.into()).await;
        Ok(())
    }

    /// Turns the accelerator gate on or off, live (admin): with it on,
    /// processes outside xlurm jobs (login sessions, services, cron)
    /// cannot open the machine's accelerators; root's sessions and the
    /// services of `--gate-exempt` still can. Kept in the
    /// state directory, which then wins over `--gate`.
    async fn set_gate(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(signal_emitter)] em: SignalEmitter<'_>,
        on: bool,
    ) -> Result<(), ApiError> {
        self.require_admin(conn, &hdr, "changing the accelerator gate")
            .await?;
        if self.daemon.settings.unit.user_mode {
            return Err(ApiError::Failed(
                "the accelerator gate is for the system instance: systemd ignores device policies in user managers (not with xlurmd --user)".into(),
            ));
        }
        self.daemon
            .gate
            .turn(&self.daemon.systemd, &self.daemon.accel, on, false)
            .await
            .map_err(|e| ApiError::Failed(e.to_string()))?;
        let dir = self.daemon.state_dir().await;
        let kept = crate::daemon::device_gate::save(&dir, on);
        announce(&em, "Gate", self.daemon.gate.is_on().into()).await;
        kept.map_err(|e| {
            ApiError::Failed(format!(
                "the gate is {}, but keeping the setting failed (a restart would go back): {e:#}",
                if on { "on" } else { "off" }
            ))
        })
    }

    /// Disables (`disabled` true) or enables devices of one vendor, live (admin).
    /// The whole list is checked before anything changes.
    async fn set_devices_disabled(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        vendor: &str,
        ids: Vec<u32>,
        disabled: bool,
    ) -> Result<(), ApiError> {
        let v: Vendor = vendor
            .parse()
            .map_err(|e: crate::core::device::UnknownVendor| {
                ApiError::InvalidArgs(e.to_string())
            })?;
        if ids.is_empty() {
            return Err(ApiError::InvalidArgs("give at least one device ID".into()));
        }
        self.require_admin(conn, &hdr, "excluding or including devices")
            .await?;
        self.daemon.set_devices_disabled(v, &ids, disabled).await
    }

    /// Emitted when a job enters a new state: broadcast on a public queue; on
    /// a private one (`--list-is-public=false`) sent only to the connections
    /// of the job's owner that submitted it or read it (GetJob, ReadLog).
    /// RUNNING is sent once systemd has created the job's unit (`GetJob`
    /// reads RUNNING from the moment the start began); the change of a job
    /// whose unit systemd refuses is sent as LAUNCH_FAILED only.
    #[zbus(signal)]
    pub async fn job_state_changed(
        em: &SignalEmitter<'_>,
        id: u64,
        state: &str,
    ) -> zbus::Result<()>;

    #[zbus(property)]
    async fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    #[zbus(property)]
    async fn policy(&self) -> String {
        self.daemon.policy().await.name().to_string()
    }

    #[zbus(property)]
    async fn max_running(&self) -> u32 {
        self.daemon.max_running().await
    }

    /// Whether the accelerator gate is on (`SetGate`).
    #[zbus(property)]
    async fn gate(&self) -> bool {
        self.daemon.gate.is_on()
    }
}

/// Runs `f` off the event loop (NSS lookups and file reads may block); a
/// thread that panicked is a failed call.
async fn off_loop<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Failed(e.to_string()))
}

//! A job as the daemon keeps it: what was submitted, where it is, how it ended.

use crate::core::{Allocation, Demand, JobId, Vendor};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Job states, named as Slurm users know them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Pending,
    Running,
    /// Exited 0.
    Completed,
    /// Exited non-zero, or killed by a signal.
    Failed,
    Cancelled,
    /// Ran past its time limit.
    Timeout,
    OutOfMemory,
    /// systemd could not start it (bad user, missing binary, ...).
    LaunchFailed,
    /// Its unit vanished while the daemon was down, without a result (a reboot).
    Lost,
}

impl JobState {
    pub const ALL: [JobState; 9] = [
        JobState::Pending,
        JobState::Running,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::OutOfMemory,
        JobState::LaunchFailed,
        JobState::Lost,
    ];

    pub fn name(self) -> &'static str {
        match self {
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Completed => "COMPLETED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
            JobState::Timeout => "TIMEOUT",
            JobState::OutOfMemory => "OUT_OF_MEMORY",
            JobState::LaunchFailed => "LAUNCH_FAILED",
            JobState::Lost => "LOST",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL
            .into_iter()
            .find(|st| st.name().eq_ignore_ascii_case(s))
    }

    pub fn is_final(self) -> bool {
        !matches!(self, JobState::Pending | JobState::Running)
    }
}

/// How a finished job ended, as read from its unit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// systemd's `Result` (`success`, `exit-code`, `signal`, `timeout`, `oom-kill`, ...).
    pub result: String,
    /// Exit status when it exited; `None` when killed.
    pub exit_status: Option<i32>,
    /// The signal that killed it.
    pub signal: Option<i32>,
    /// A one-line explanation for states other than COMPLETED/FAILED.
    pub detail: String,
    pub cpu_nsec: Option<u64>,
    pub memory_peak: Option<u64>,
}

/// What runs: a command line, or a batch script snapshot run under bash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub argv: Vec<String>,
    /// The batch script's contents, if this is a batch job. Kept root-only.
    pub script: Option<String>,
    pub cwd: String,
    /// The forwarded environment, `None` for a clean one. Dropped once the job starts.
    pub env: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub name: String,
    pub uid: u32,
    pub user: String,
    pub command: Command,
    pub demand: Demand,
    pub state: JobState,
    /// Microseconds since the epoch.
    pub submit_usec: u64,
    pub start_usec: u64,
    pub end_usec: u64,
    pub alloc: Option<Allocation>,
    /// systemd's InvocationID of the unit, hex.
    pub invocation_id: String,
    pub outcome: Option<Outcome>,
    /// Set when a cancel was asked for while it ran (by whom).
    pub cancel_requested_by: Option<u32>,
    /// `--output`: where the job's output is also copied (see `daemon::output`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputCopy>,
    /// How often its unit was started again because systemd lost the start job
    /// before the unit ever ran (see `Daemon::restart_lost`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub relaunches: u8,
    /// Set while the job waits with its argv, environment and script only in
    /// its record on disk, not in memory ([`Job::detach`]): the bytes they
    /// held, still counted against its owner's budget. Never stored.
    #[serde(skip)]
    pub detached: Option<u64>,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

/// A job's `--output` copy (see `daemon::output`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputCopy {
    /// The path as the client named it (for display only; the daemon never opens it).
    pub path: String,
    /// Why the copy cannot be made, if so.
    #[serde(default)]
    pub error: String,
}

/// A job's state changes, all of them. Each returns the job as it is to be,
/// leaving `self` as it is: a handler persists the new record first and
/// changes memory only once it is on disk, so memory and disk never disagree.
/// What a record costs besides its strings (its other fields, in memory
/// and on disk), in bytes.
pub const RECORD_OVERHEAD: u64 = 512;

/// The bytes `s` takes in a JSON record: quotes and a separator, and six
/// for each control character (`\u00XX`), two for `"` and `\`.
fn stored_len(s: &str) -> u64 {
    let escapes: u64 = s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' => 1,
            0..=0x1f => 5,
            _ => 0,
        })
        .sum();
    s.len() as u64 + escapes + 3
}

impl Job {
    /// What the job holds while it is pending, in memory and in its record,
    /// counted against its owner's `--max-pending-bytes-per-user`: its name,
    /// command, environment, script, directory and output path as stored.
    pub fn held_bytes(&self) -> u64 {
        if let Some(held) = self.detached {
            return held;
        }
        let c = &self.command;
        let strings = std::iter::once(&self.name)
            .chain(&c.argv)
            .chain(c.script.iter())
            .chain(std::iter::once(&c.cwd))
            .chain(c.env.iter().flatten())
            .chain(self.output.iter().map(|o| &o.path));
        RECORD_OVERHEAD + strings.map(|s| stored_len(s)).sum::<u64>()
    }

    /// A pending job whose record is on disk lets go of its argv,
    /// environment and script in memory: they are read back from the record
    /// when needed ([`Job::attach`]), at its start or for its owner's
    /// `GetJob`, and merged into every record written of it meanwhile
    /// (`Store::save`). A waiting job then costs xlurmd a few hundred bytes.
    pub fn detach(&mut self) {
        if self.state != JobState::Pending || self.detached.is_some() {
            return;
        }
        self.detached = Some(self.held_bytes());
        self.command.argv = Vec::new();
        self.command.env = None;
        self.command.script = None;
    }

    /// Takes back the argv, environment and script of its record `stored`.
    pub fn attach(&mut self, stored: Job) {
        if self.detached.take().is_some() {
            self.command.argv = stored.command.argv;
            self.command.env = stored.command.env;
            self.command.script = stored.command.script;
        }
    }

    /// What the job holds of its owner's budgets while pending.
    pub fn usage(&self) -> crate::core::Usage {
        crate::core::Usage {
            jobs: 1,
            bytes: self.held_bytes(),
            outputs: usize::from(self.output.is_some()),
        }
    }

    /// PENDING to RUNNING: placed (`alloc`) and started at `now` (µs).
    pub fn started(&self, alloc: crate::core::Allocation, now: u64) -> Job {
        debug_assert_eq!(self.state, JobState::Pending);
        Job {
            state: JobState::Running,
            start_usec: now,
            alloc: Some(alloc),
            ..self.clone()
        }
    }

    /// A running job that `by` (a uid) asked to cancel: it ends CANCELLED
    /// when its unit stops.
    pub fn cancel_requested(&self, by: u32) -> Job {
        Job {
            cancel_requested_by: Some(by),
            ..self.clone()
        }
    }

    /// PENDING or RUNNING to a final `state`, at `now` (µs), for the reason
    /// `outcome` gives. Its forwarded environment goes with it.
    pub fn ended(&self, state: JobState, outcome: Outcome, now: u64) -> Job {
        debug_assert!(state.is_final() && !self.state.is_final());
        Job {
            state,
            end_usec: now,
            outcome: Some(outcome),
            command: Command {
                env: None,
                ..self.command.clone()
            },
            ..self.clone()
        }
    }

    /// A pending job its owner (or an admin, `by`) cancelled before it started.
    pub fn cancelled_pending(&self, by: u32, now: u64) -> Job {
        let outcome = Outcome {
            detail: "cancelled before it started".into(),
            ..Default::default()
        };
        Job {
            cancel_requested_by: Some(by),
            ..self.ended(JobState::Cancelled, outcome, now)
        }
    }
}

impl Job {
    /// Its unit's name (derived, not stored: one string less per job).
    pub fn unit(&self) -> String {
        crate::unit_name::of_job(self.id)
    }

    /// The request as `xqueue` shows it before the job starts: `cpu`, `auto:1`, `nv:2`, `nv:[0,1]`.
    pub fn devices_requested(&self) -> String {
        let d = &self.demand.devices;
        if d.count == 0 {
            return "cpu".into();
        }
        let v = d.vendor.map(Vendor::short).unwrap_or("auto");
        if d.ids.is_empty() {
            format!("{v}:{}", d.count)
        } else {
            let ids: Vec<String> = d.ids.iter().map(u32::to_string).collect();
            format!("{v}:[{}]", ids.join(","))
        }
    }

    /// What the job got, once started: `nv:[0,1]`, or `cpu`.
    pub fn devices_allocated(&self) -> Option<String> {
        let a = self.alloc.as_ref()?;
        Some(match a.devices.first() {
            None => "cpu".into(),
            Some(first) => {
                let ids: Vec<String> = a.devices.iter().map(|d| d.index.to_string()).collect();
                format!("{}:[{}]", first.vendor, ids.join(","))
            }
        })
    }

    /// Whether the forwarded environment is still needed: until systemd has
    /// started the unit (an invocation ID is known), a lost start is retried
    /// with it. It is dropped from memory and state after that.
    pub fn keeps_env(&self) -> bool {
        match self.state {
            JobState::Pending => true,
            JobState::Running => self.invocation_id.is_empty(),
            _ => false,
        }
    }

    /// The exit code the CLI reports: the status, 128+signal, or fixed codes
    /// for states without one (see the README).
    pub fn exit_code(&self) -> Option<i32> {
        let o = self.outcome.as_ref()?;
        Some(match self.state {
            JobState::Completed | JobState::Failed => match (o.exit_status, o.signal) {
                (Some(s), _) => s,
                (None, Some(sig)) => 128 + sig,
                _ => 1,
            },
            JobState::Timeout => 124,
            JobState::OutOfMemory => 137,
            JobState::Cancelled => 130,
            JobState::LaunchFailed => 125,
            JobState::Lost => 126,
            JobState::Pending | JobState::Running => return None,
        })
    }
}

/// A job in brief: what a queue line shows of it. Jobs that ended are kept in
/// memory only so (about 130 bytes each, their strings shared through
/// [`Strings`]); their whole record stays in the job log and is read back for
/// `GetJob` and `ReadLog` (see `store`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brief {
    pub submit_usec: u64,
    pub start_usec: u64,
    pub end_usec: u64,
    pub mem_bytes: u64,
    pub time_limit_secs: u64,
    pub uid: u32,
    pub cpus: u32,
    /// The exit code the CLI reports, -1 while the job has none.
    pub exit_code: i32,
    pub state: JobState,
    pub spread: bool,
    pub name: Arc<str>,
    pub user: Arc<str>,
    /// Devices given, or requested while pending (`cpu`, `nv:[0,1]`, `auto:1`).
    pub devices: Arc<str>,
    /// How it ended, in a line; empty while active.
    pub detail: Arc<str>,
}

impl Brief {
    /// `job` in brief, its strings made by `intern`.
    pub fn of(job: &Job, mut intern: impl FnMut(&str) -> Arc<str>) -> Brief {
        let devices = job
            .devices_allocated()
            .unwrap_or_else(|| job.devices_requested());
        Brief {
            submit_usec: job.submit_usec,
            start_usec: job.start_usec,
            end_usec: job.end_usec,
            mem_bytes: job.demand.mem_bytes,
            time_limit_secs: job.demand.time_limit_secs,
            uid: job.uid,
            cpus: job.demand.cpus,
            exit_code: job.exit_code().unwrap_or(-1),
            state: job.state,
            spread: job.alloc.as_ref().is_some_and(|a| a.spread),
            name: intern(&job.name),
            user: intern(&job.user),
            devices: intern(&devices),
            detail: intern(job.outcome.as_ref().map_or("", |o| o.detail.as_str())),
        }
    }
}

/// Strings shared between brief records: users, and the names, device
/// summaries and details that repeat across a user's jobs.
#[derive(Default)]
pub struct Strings(std::collections::HashSet<Arc<str>>);

impl Strings {
    pub fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(x) = self.0.get(s) {
            return x.clone();
        }
        let x: Arc<str> = s.into();
        self.0.insert(x.clone());
        x
    }

    /// Lets go of strings no brief record uses any more.
    pub fn prune(&mut self) {
        self.0.retain(|s| Arc::strong_count(s) > 1);
    }
}

/// Jobs that ended, in brief, by ID: a sorted vector, about half the memory
/// of a B-tree. Jobs end roughly in ID order, so inserts land at or near the
/// end, and retention removes them in one pass.
#[derive(Debug, Default)]
pub struct Ended(Vec<(JobId, Brief)>);

impl Ended {
    pub fn insert(&mut self, id: JobId, brief: Brief) {
        match self.0.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => self.0[i].1 = brief,
            Err(i) => self.0.insert(i, (id, brief)),
        }
    }

    pub fn get(&self, id: JobId) -> Option<&Brief> {
        let i = self.0.binary_search_by_key(&id, |e| e.0).ok()?;
        Some(&self.0[i].1)
    }

    pub fn contains(&self, id: JobId) -> bool {
        self.get(id).is_some()
    }

    pub fn retain(&mut self, mut keep: impl FnMut(JobId, &Brief) -> bool) {
        self.0.retain(|(id, b)| keep(*id, b));
    }

    /// Highest ID first.
    pub fn iter_rev(&self) -> impl Iterator<Item = (JobId, &Brief)> {
        self.0.iter().rev().map(|(id, b)| (*id, b))
    }

    /// Lowest ID first, from `from` on.
    pub fn iter_from(&self, from: JobId) -> impl Iterator<Item = (JobId, &Brief)> {
        let start = self.0.partition_point(|e| e.0 < from);
        self.0[start..].iter().map(|(id, b)| (*id, b))
    }

    pub fn ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.0.iter().map(|e| e.0)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Gives back spare room once it is more than a quarter.
    pub fn shrink(&mut self) {
        if self.0.capacity() > self.0.len() + self.0.len() / 4 {
            self.0.shrink_to_fit();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_parse() {
        for s in JobState::ALL {
            assert_eq!(JobState::parse(s.name()), Some(s));
        }
        assert_eq!(JobState::parse("bogus"), None);
        assert!(JobState::Lost.is_final() && !JobState::Running.is_final());
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use crate::core::{Limits, Machine, Request, Topology};

    /// A finished job with the given state and outcome, for exit-code tests.
    pub fn job_with(state: JobState, outcome: Outcome) -> Job {
        let machine = Machine::new(Topology::single(1, 1 << 30), vec![]);
        let request = Request::default();
        let demand = crate::core::request::validate(&request, &machine, &Limits::default())
            .expect("default request fits");
        Job {
            id: 1,
            name: "t".into(),
            uid: 1000,
            user: "u".into(),
            command: Command {
                argv: vec!["/bin/true".into()],
                script: None,
                cwd: "/".into(),
                env: None,
            },
            demand,
            state,
            submit_usec: 0,
            start_usec: 0,
            end_usec: 0,
            alloc: None,
            invocation_id: String::new(),
            outcome: Some(outcome),
            cancel_requested_by: None,
            output: None,
            relaunches: 0,
            detached: None,
        }
    }
}

//! A job as the daemon keeps it: what was submitted, where it is, how it ended.

use crate::core::{Allocation, Demand, JobId, Vendor};
use serde::{Deserialize, Serialize};

mod array;
mod brief;
mod record;
mod stage;
mod table;
mod time_limit;

pub use array::Task;
pub use brief::{merge_sorted, Brief, Briefs, Shared, Strings};
pub use stage::{Admission, After, End, Heard, HeldFd, Hold, Launch, Reading, Run, Stage, Waiting};
pub use table::Jobs;

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
    /// What its accelerators did (see `core::efficiency`); boxed, as most
    /// jobs have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Box<crate::core::GpuUse>>,
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
    /// The submitter's umask (the unit's `UMask=`); `None`: systemd's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
}

/// A job: what was submitted, and its stage ([`Stage`]: where it is, with
/// only what is valid there). Stored as a flat record (`record`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "record::In")]
pub struct Job {
    pub id: JobId,
    pub name: String,
    pub uid: u32,
    pub user: String,
    pub command: Command,
    pub demand: Demand,
    /// Microseconds since the epoch.
    pub submit_usec: u64,
    /// `--output`: where the job's output is also copied (see `daemon::output`);
    /// boxed, as most jobs have none.
    pub output: Option<Box<OutputCopy>>,
    /// `--nice`: positive lowers its priority (see `core::priority`).
    pub nice: i32,
    /// Its owner's primary group when submitted (for group limits);
    /// `u32::MAX` when not known (records written before it was kept).
    pub gid: u32,
    /// `--requeue`: queued again, keeping its ID, if it is LOST (its unit
    /// vanished, say in a reboot) instead of ending there.
    pub requeue: bool,
    /// How often it was queued again (`SLURM_RESTART_COUNT`).
    pub restarts: u8,
    /// `xrun --pty`: runs on the terminal its client passed (held like an
    /// output descriptor until the start), not with its output in the journal.
    pub pty: bool,
    /// Its place in an array (`--array`); boxed, as most jobs have none.
    pub array: Option<Box<Task>>,
    pub stage: Stage,
}

/// How often a `--requeue` job is queued again before LOST is final
/// (Slurm's `MaxBatchRequeue` default).
pub const MAX_REQUEUES: u8 = 5;

/// A job's `--output` copy (see `daemon::output`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputCopy {
    /// The path as the client named it (for display only; the daemon never opens it).
    pub path: String,
    /// Why the copy cannot be made, if so.
    #[serde(default)]
    pub error: String,
}

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
    /// command, environment, script, directory, output path, an array's
    /// pending indices and its dependency, as stored.
    pub fn held_bytes(&self) -> u64 {
        if let Some(held) = self.detached() {
            return held.get();
        }
        let c = &self.command;
        let strings = std::iter::once(&self.name)
            .chain(&c.argv)
            .chain(c.script.iter())
            .chain(std::iter::once(&c.cwd))
            .chain(c.env.iter().flatten())
            .chain(self.output.iter().map(|o| &o.path));
        // An array's pending indices and a dependency are stored as text in
        // every record too (at most 24 bytes a range: `1000000-1000000:1000000,`).
        let indices = self
            .array
            .as_ref()
            .map_or(0, |t| 24 * t.rest.range_count() as u64);
        let dependency = self
            .after()
            .map_or(0, |a| a.dependency.to_string().len() as u64);
        RECORD_OVERHEAD + strings.map(|s| stored_len(s)).sum::<u64>() + indices + dependency
    }

    /// A pending job whose record is on disk lets go of its argv,
    /// environment and script in memory: they are read back from the record
    /// when needed ([`Job::attach`]), at its start or for its owner's
    /// `GetJob`, and merged into every record written of it meanwhile
    /// (`Store::save`). A waiting job then costs xlurmd a few hundred bytes.
    pub fn detach(&mut self) {
        let held = self.held_bytes();
        let Stage::Pending(w) = &mut self.stage else {
            return;
        };
        if w.detached.is_some() {
            return;
        }
        w.detached = std::num::NonZeroU64::new(held);
        self.command.argv = Vec::new();
        self.command.env = None;
        self.command.script = None;
    }

    /// Takes back the argv, environment and script of its record `stored`.
    pub fn attach(&mut self, stored: Job) {
        let Stage::Pending(w) = &mut self.stage else {
            return;
        };
        if w.detached.take().is_some() {
            self.command.argv = stored.command.argv;
            self.command.env = stored.command.env;
            self.command.script = stored.command.script;
        }
    }

    /// What the job holds of its owner's budgets while pending: an
    /// `--output` file and a `--pty` terminal are both a descriptor xlurmd
    /// keeps open.
    pub fn usage(&self) -> crate::core::Usage {
        crate::core::Usage {
            jobs: 1,
            bytes: self.held_bytes(),
            outputs: usize::from(self.output.is_some() || self.pty),
        }
    }

    /// A new pending job.
    pub fn pending(
        id: JobId,
        name: String,
        (uid, user): (u32, String),
        command: Command,
        demand: Demand,
        submit_usec: u64,
        output: Option<OutputCopy>,
    ) -> Job {
        Job {
            id,
            name,
            uid,
            user,
            command,
            demand,
            submit_usec,
            output: output.map(Box::new),
            nice: 0,
            gid: u32::MAX,
            requeue: false,
            restarts: 0,
            pty: false,
            array: None,
            stage: Stage::Pending(Waiting::default()),
        }
    }

    /// What the scheduler keeps of its submission besides its demand.
    pub fn submission(&self) -> crate::core::Submission {
        crate::core::Submission {
            owner: crate::core::Owner {
                uid: self.uid,
                gid: self.gid,
            },
            nice: self.nice,
            submitted_at: self.submit_usec / 1_000_000,
            kind: self.kind(),
        }
    }

    /// Its kind for expected runtimes (`core::runtimes`): jobs of one owner
    /// with the same name and resources (CPUs, memory, devices, time limit).
    pub fn kind(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let d = &self.demand;
        (self.uid, &self.name, d.cpus, d.mem_bytes, d.time_limit_secs).hash(&mut h);
        (
            d.devices.count,
            d.devices.vendor.map(|v| v.index()),
            d.exclusive,
        )
            .hash(&mut h);
        h.finish().max(1)
    }

    pub fn state(&self) -> JobState {
        match &self.stage {
            Stage::Pending(_) => JobState::Pending,
            Stage::Running(_) => JobState::Running,
            Stage::Ended(e) => e.state,
        }
    }

    pub fn is_final(&self) -> bool {
        matches!(self.stage, Stage::Ended(_))
    }

    /// The bytes its argv, environment and script held, while they are on disk only.
    pub fn detached(&self) -> Option<std::num::NonZeroU64> {
        match &self.stage {
            Stage::Pending(w) => w.detached,
            _ => None,
        }
    }

    pub fn run(&self) -> Option<&Run> {
        match &self.stage {
            Stage::Running(r) => Some(r),
            _ => None,
        }
    }

    /// When it started (µs since the epoch), 0 if it has not.
    pub fn start_usec(&self) -> u64 {
        match &self.stage {
            Stage::Pending(_) => 0,
            Stage::Running(r) => r.start_usec,
            Stage::Ended(e) => e.start_usec,
        }
    }

    /// When it ended (µs since the epoch), 0 if it has not.
    pub fn end_usec(&self) -> u64 {
        match &self.stage {
            Stage::Ended(e) => e.end_usec,
            _ => 0,
        }
    }

    /// What it holds or held.
    pub fn alloc(&self) -> Option<&Allocation> {
        match &self.stage {
            Stage::Pending(_) => None,
            Stage::Running(r) => Some(&r.alloc),
            Stage::Ended(e) => e.alloc.as_ref(),
        }
    }

    /// Its unit's InvocationID, hex; empty while not known.
    pub fn invocation_id(&self) -> &str {
        match &self.stage {
            Stage::Pending(_) => "",
            Stage::Running(r) => &r.invocation_id,
            Stage::Ended(e) => &e.invocation_id,
        }
    }

    /// How it ended.
    /// What its accelerators did so far (running) or in all (ended).
    pub fn gpu_use(&self) -> Option<&crate::core::GpuUse> {
        match &self.stage {
            Stage::Running(r) => (!r.gpu.is_empty()).then_some(&r.gpu),
            Stage::Ended(e) => e.outcome.gpu.as_deref(),
            Stage::Pending(_) => None,
        }
    }

    /// A running job's flag for the REASON column: `IdleGPU` while an
    /// accelerator of it stays idle past the rule.
    pub fn flag(&self) -> Option<&'static str> {
        match &self.stage {
            Stage::Running(r) if r.gpu.idle => Some("IdleGPU"),
            _ => None,
        }
    }

    /// An ended job's CPU efficiency: CPU time over its CPUs times how long
    /// it ran (see `core::cpu_efficiency`).
    pub fn cpu_efficiency(&self) -> Option<f64> {
        let Stage::Ended(e) = &self.stage else {
            return None;
        };
        let cpus = e.alloc.as_ref()?.cpus.len();
        let elapsed = e
            .end_usec
            .checked_sub(e.start_usec)
            .filter(|_| e.start_usec > 0)?;
        crate::core::cpu_efficiency(e.outcome.cpu_nsec, cpus, elapsed)
    }

    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.stage {
            Stage::Ended(e) => Some(&e.outcome),
            _ => None,
        }
    }

    /// Who asked to cancel it, if anyone did.
    pub fn cancel_requested_by(&self) -> Option<u32> {
        match &self.stage {
            Stage::Pending(_) => None,
            Stage::Running(r) => r.cancel_requested_by,
            Stage::Ended(e) => e.cancel_requested_by,
        }
    }

    pub fn relaunches(&self) -> u8 {
        match &self.stage {
            Stage::Pending(_) => 0,
            Stage::Running(r) => r.relaunches,
            Stage::Ended(e) => e.relaunches,
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
        let a = self.alloc()?;
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
        match &self.stage {
            Stage::Pending(_) => true,
            // It may run again.
            Stage::Running(_) if self.requeue => true,
            Stage::Running(r) => r.invocation_id.is_empty(),
            Stage::Ended(_) => false,
        }
    }

    /// The exit code the CLI reports: the status, 128+signal, or fixed codes
    /// for states without one (see the README).
    pub fn exit_code(&self) -> Option<i32> {
        let o = self.outcome()?;
        Some(match self.state() {
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

    /// A job of user 1000 in `state`: pending as submitted; running with
    /// [`some_alloc`], started at 0; ended from pending (no allocation) with
    /// `outcome` at 0.
    pub fn job_with(state: JobState, outcome: Outcome) -> Job {
        let machine = Machine::new(Topology::single(1, 1 << 30), vec![]);
        let request = Request::default();
        let demand = crate::core::request::validate(&request, &machine, &Limits::default())
            .expect("default request fits");
        let command = Command {
            argv: vec!["/bin/true".into()],
            script: None,
            cwd: "/".into(),
            env: None,
            umask: None,
        };
        let job = Job::pending(1, "t".into(), (1000, "u".into()), command, demand, 0, None);
        match state {
            JobState::Pending => job,
            JobState::Running => job.started(some_alloc(), 0),
            _ => job.ended(state, outcome, 0),
        }
    }

    /// One CPU of node 0 and 64 MiB.
    pub fn some_alloc() -> Allocation {
        Allocation {
            cpus: crate::core::IdSet::parse_list("0").expect("a CPU list"),
            mem_nodes: crate::core::IdSet::parse_list("0").expect("a node list"),
            mem_bytes: 64 << 20,
            mem_charge: vec![(0, 64 << 20)],
            devices: vec![],
            spread: false,
            exclusive: false,
        }
    }
}

#[cfg(test)]
mod stage_tests;

//! The command line's definitions, and nothing else: `build.rs` includes this
//! file to generate man pages and shell completions.

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "xlurm",
    version,
    propagate_version = true,
    about = "Submit and watch jobs on this machine's xlurm scheduler"
)]
pub struct Cli {
    #[command(flatten)]
    pub bus: Bus,
    #[command(subcommand)]
    pub command: Command,
}

/// Which daemon to talk to: an option of every subcommand.
#[derive(Debug, Args)]
pub struct Bus {
    /// Talk to a --user daemon on the session bus (also XLURM_USER_BUS=1).
    #[arg(long, global = true, env = "XLURM_USER_BUS")]
    pub user: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a job in the foreground: wait, then exit with its exit code.
    Run(SubmitArgs),
    /// Queue a batch script (or --wrap 'cmd') and print its job ID.
    Batch(BatchArgs),
    /// Show the queue, or one job in detail.
    Queue(QueueArgs),
    /// Cancel jobs.
    Cancel(CancelArgs),
    /// Show the machine: NUMA nodes, devices, policy.
    Info(InfoArgs),
    /// Print a job's output (owner and root); -f follows it until the job ends.
    Log(LogArgs),
    /// Show one job in detail (the same as `xqueue ID`).
    Show(ShowArgs),
    /// Change the scheduling policy live (admin): fifo-strict, easy-backfill, strict-backfill, largest-first.
    Policy { policy: String },
    /// Change how many jobs may run at once, live (admin).
    MaxRunning { max_running: u32 },
    /// Keep devices from new jobs, live (admin): `1,3` or `nv:1,3`. Running jobs keep theirs.
    Exclude { devices: String },
    /// Give excluded devices back to jobs (admin).
    Include { devices: String },
    /// Fair share per user: shares, decayed usage, fair-share factor (like sshare).
    Share {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Hold pending jobs: they wait until released (an admin's hold on anyone's job, only an admin releases).
    Hold(IdsArgs),
    /// Release held jobs.
    Release(IdsArgs),
    /// Change a pending job (checked as a submission), or a running job's
    /// time limit (its owner may lower it; raising it needs an admin), as
    /// `scontrol update`.
    Update(UpdateArgs),
    /// Show the per-user limits, or replace them live (admin) with --set FILE (JSON; - for stdin).
    Limits {
        #[arg(long, value_name = "FILE")]
        set: Option<String>,
    },
    /// Show the accelerator gate, or turn it on or off live (admin): with it on,
    /// only xlurm jobs (and root's sessions) can open the machine's accelerators.
    Gate {
        #[arg(value_parser = ["on", "off"])]
        setting: Option<String>,
    },
    /// A usage report from the accounting log (like sacct/sreport): per user
    /// and per day, week or month, jobs by final state, CPU-hours, GPU-hours,
    /// median wait, memory peaks and GPU efficiency. Your own jobs; --all
    /// every user's (admin).
    Usage(UsageArgs),
    /// A live view of the machine and the queue (like htop and nvtop): NUMA
    /// nodes, accelerators with their load and holder, running and pending
    /// jobs. Keys: q, s (order), m (yours), up/down, Enter (detail), c
    /// (cancel yours). Printed once as text when not on a terminal.
    Top {
        /// Only your own jobs.
        #[arg(long, short = 'm')]
        mine: bool,
    },
    /// Metrics of the machine, the queue and xlurmd, as Prometheus text (for
    /// node_exporter's textfile collector: units/xlurm-metrics.timer writes
    /// them every 15 s).
    Metrics {
        /// OpenMetrics 1.0 instead of the Prometheus text format 0.0.4.
        #[arg(long)]
        openmetrics: bool,
        /// Write to FILE whole (a temporary file renamed over it) instead of
        /// standard output.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Args, Clone)]
pub struct UsageArgs {
    /// Rows per day, week (from Monday) or month, in local time.
    #[arg(long, default_value = "day", value_parser = ["day", "week", "month"])]
    pub period: String,
    /// Jobs that ended from this local date (YYYY-MM-DD) or this long ago (30d).
    #[arg(long, default_value = "30d")]
    pub since: String,
    /// ... and before this date or this long ago (default: now).
    #[arg(long)]
    pub until: Option<String>,
    /// Every user's jobs (root, or an admin through polkit).
    #[arg(long, short = 'a')]
    pub all: bool,
    /// JSON: one object per row (docs/json.md).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// CSV, with a header line.
    #[arg(long)]
    pub csv: bool,
}

#[derive(Debug, Args, Clone, Default)]
pub struct ResourceArgs {
    /// Number of accelerators (alias --devices): default 1 where the machine has
    /// accelerators, 0 without; -g 0 for a CPU job.
    #[arg(short = 'g', long = "gpus", visible_alias = "devices")]
    pub gpus: Option<u32>,
    /// Exact device IDs, e.g. 0,1.
    #[arg(short = 'i', long = "device-ids", value_delimiter = ',')]
    pub device_ids: Vec<u32>,
    /// Device IDs never to use.
    #[arg(short = 'x', long = "exclude-device-ids", value_delimiter = ',')]
    pub exclude_device_ids: Vec<u32>,
    /// Vendor: nv|asc|mtt|mx|ppu|hcu (or nvidia|ascend|mthreads|metax), default auto.
    #[arg(long = "device")]
    pub vendor: Option<String>,
    /// CPUs.
    #[arg(short = 'c', long = "cpus")]
    pub cpus: Option<u32>,
    /// Memory budget, e.g. 64G, 512M (default: the CPUs' share of a node).
    #[arg(short = 'm', long = "mem")]
    pub mem: Option<String>,
    /// Wait for, then hold, the whole machine.
    #[arg(long)]
    pub exclusive: bool,
    /// Keep all memory on one NUMA node (wait rather than spread).
    #[arg(long = "numa-local")]
    pub numa_local: bool,
    /// Time limit: seconds, or 45m, 2h, 1h30m.
    #[arg(short = 't', long = "time-limit")]
    pub time_limit: Option<String>,
    /// Job name (default: the command's name).
    #[arg(short = 'n', long)]
    pub name: Option<String>,
    /// Lower the job's priority by N (a negative N raises it: admins only, through polkit).
    #[arg(long, allow_negative_numbers = true)]
    pub nice: Option<i32>,
    /// Queue the job held: it waits until `xlurm release ID`.
    #[arg(short = 'H', long)]
    pub hold: bool,
    /// (xbatch) A job array: one task per index, e.g. 0-99, 0-99:2, 1,3,5-7,
    /// with %N for at most N running at once (SLURM_ARRAY_TASK_ID in each).
    #[arg(short = 'a', long, value_name = "INDICES")]
    pub array: Option<String>,
    /// (xbatch) Queue the job again, keeping its ID, if it is lost (its unit
    /// vanished, e.g. in a reboot), up to 5 times; without it LOST is final.
    #[arg(long)]
    pub requeue: bool,
    /// Start only after other jobs: afterok:ID[:ID...], afternotok, afterany,
    /// after, singleton; `,` all of them, `?` any (as sbatch -d).
    #[arg(short = 'd', long, value_name = "DEPENDENCY")]
    pub dependency: Option<String>,
    /// yes: cancel the job if its dependency can never be met (default no:
    /// it waits as DependencyNeverSatisfied until cancelled).
    #[arg(long = "kill-on-invalid-dep", value_name = "yes|no", value_parser = ["yes", "no"])]
    pub kill_on_invalid_dep: Option<String>,
    /// Start the job with a clean environment instead of forwarding yours.
    #[arg(long = "clean-env")]
    pub clean_env: bool,
    /// Also write the job's output to PATH (opened by you, with your rights; `%j` = job ID).
    #[arg(short = 'o', long = "output")]
    pub output: Option<String>,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub res: ResourceArgs,
    /// Run on a terminal of its own, interactively (like srun --pty): full-screen
    /// programs, Ctrl-C and job control work; without a command, your login shell.
    #[arg(long)]
    pub pty: bool,
    /// The command and its arguments, passed unchanged (`--` optional).
    #[arg(required_unless_present = "pty", trailing_var_arg = true, allow_hyphen_values = true, num_args = 1..)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct BatchArgs {
    #[command(flatten)]
    pub res: ResourceArgs,
    /// Refused: a batch job has no terminal (use xrun --pty).
    #[arg(long, hide = true)]
    pub pty: bool,
    /// Wrap a shell command line into a batch script.
    #[arg(long)]
    pub wrap: Option<String>,
    /// The script and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub script: Vec<String>,
}

#[derive(Debug, Args)]
pub struct QueueArgs {
    /// Show one job in detail (an array's task: 123_4).
    pub id: Option<String>,
    /// Include finished jobs.
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Only my jobs.
    #[arg(long)]
    pub mine: bool,
    /// Show the N newest jobs (default: 100, or 1000 with --all; 0: every one).
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// With an ID: print the job's output instead (like `xlurm log`).
    #[arg(long)]
    pub log: bool,
    /// With --log: follow the output until the job ends.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Pending jobs in priority order with their estimated start (like `squeue --start`).
    #[arg(long, conflicts_with_all = ["id", "all", "log", "follow"])]
    pub start: bool,
    /// Cancel jobs instead (the same as `xcancel ID...`).
    #[arg(long, value_name = "ID", num_args = 1.., value_parser = job_ref,
          conflicts_with_all = ["id", "all", "mine", "limit", "json", "log", "follow"])]
    pub cancel: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A job ID, or an array's task (123_4).
    pub id: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// A job ID, or an array's task (123_4).
    pub id: String,
    /// Keep printing new output until the job ends.
    #[arg(short = 'f', long)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Job IDs; an array's ID cancels all its tasks, 123_4 one task,
    /// 123_[1-3,7] several.
    #[arg(required = true, num_args = 1.., value_parser = job_ref)]
    pub ids: Vec<String>,
}

/// A job ID as xcancel and xqueue take it, `123`, `123_4` or `123_[1-3,7]`,
/// in outline (this file stands alone for build.rs; the verbs parse it whole).
fn job_ref(s: &str) -> Result<String, String> {
    let (job, task) = match s.split_once('_') {
        Some((j, t)) => (j, Some(t)),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let tasks = |t: &str| {
        digits(t)
            || (t.starts_with('[')
                && t.ends_with(']')
                && t.bytes()
                    .all(|b| b.is_ascii_digit() || b"[]-,:%".contains(&b)))
    };
    if digits(job) && task.is_none_or(tasks) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a job ID: give 123, an array's task 123_4, or tasks 123_[1-3,7]"
        ))
    }
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    pub id: u64,
    /// Time limit: seconds, or 45m, 2h, 1h30m.
    #[arg(short = 't', long = "time-limit")]
    pub time_limit: Option<String>,
    /// CPUs.
    #[arg(short = 'c', long)]
    pub cpus: Option<u32>,
    /// Memory budget, e.g. 64G.
    #[arg(short = 'm', long)]
    pub mem: Option<String>,
    /// Number of accelerators.
    #[arg(short = 'g', long)]
    pub gpus: Option<u32>,
    /// Job name.
    #[arg(short = 'n', long)]
    pub name: Option<String>,
    /// Priority adjustment (a negative one raises priority: admins only, through polkit).
    #[arg(long, allow_negative_numbers = true)]
    pub nice: Option<i32>,
    /// A new dependency (as -d at submission); "" clears it.
    #[arg(short = 'd', long)]
    pub dependency: Option<String>,
}

#[derive(Debug, Args)]
pub struct IdsArgs {
    #[arg(required = true, num_args = 1..)]
    pub ids: Vec<u64>,
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    #[arg(long)]
    pub json: bool,
}

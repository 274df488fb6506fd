//! xlurmd's options, and nothing else: `build.rs` includes this file to
//! generate the man page.

use std::path::PathBuf;

/// xlurmd's options: set them in the unit's ExecStart or a drop-in.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "xlurmd",
    version,
    about = "The xlurm scheduler daemon (org.xlurm.Scheduler1)"
)]
pub struct Options {
    /// Run on the session bus with the user's own systemd manager (development).
    #[arg(long)]
    pub user: bool,
    /// Scheduling policy: fifo-strict, easy-backfill, strict-backfill, largest-first.
    #[arg(long, default_value = "easy-backfill")]
    pub policy: String,
    /// The order the policy serves pending jobs in: fair (fair share, age and
    /// nice, as Slurm's multifactor priority) or fifo (submission order).
    #[arg(long, default_value = "fair")]
    pub priority: String,
    /// Half-life of the usage fair share counts (seconds or 7d, 12h; 0: no decay).
    #[arg(long, default_value = "7d")]
    pub fairshare_half_life: String,
    /// What a second of each resource costs in fair-share usage, relative to
    /// one CPU: `gpu=N,mem-gib=N` (either may be left out); default: each
    /// resource counts as its share of the machine (all GPUs as all CPUs).
    #[arg(long, default_value = "auto")]
    pub usage_weights: String,
    /// The accelerator gate (on, off): with it on, processes outside xlurm
    /// jobs (login sessions, services, cron) cannot open the machine's
    /// accelerators; root's sessions still can. `xlurm gate` changes it live and keeps it
    /// in the state directory, which then wins over this option.
    #[arg(long, default_value = "off")]
    pub gate: String,
    /// Services that still open the accelerators with the gate on, as
    /// NAME.service, comma-separated: a drop-in moves each into accel.slice
    /// (beside system.slice, which the gate closes) from its next start.
    /// Empty: none.
    #[arg(
        long,
        default_value = "nvidia-persistenced.service,nvidia-fabricmanager.service,nvidia-dcgm.service,dcgm.service"
    )]
    pub gate_exempt: String,
    /// An allocated accelerator busy under this percentage is idle: one idle
    /// for --idle-gpu-after makes its job show IdleGPU (xqueue), logs it once
    /// for the admin and tells the owner in the job's log. Nothing is killed.
    #[arg(long, default_value_t = 5)]
    pub idle_gpu_below: u32,
    /// How long an allocated accelerator must stay idle before its job shows
    /// IdleGPU: seconds or 30s, 10m, 1h; off: never.
    #[arg(long, default_value = "30m")]
    pub idle_gpu_after: String,
    /// What else happens to a job whose accelerator stays idle: flag (it
    /// shows IdleGPU, nothing more) or cancel (it is also cancelled, saying
    /// why in its log).
    #[arg(long, default_value = "flag", value_parser = ["flag", "cancel"])]
    pub idle_gpu_action: String,
    /// Per-user, per-group and default limits (JSON, see the admin guide); a
    /// missing file means none. `xlurm limits --set` changes them live and
    /// keeps them in the state directory, which then wins over this file.
    #[arg(long, default_value = "/etc/xlurm/limits.json")]
    pub user_limits: PathBuf,
    /// Most jobs running at once.
    #[arg(long, default_value_t = 32)]
    pub max_running: u32,
    /// Longest any job may run (and the limit of jobs that give none): seconds or 45m, 2h, 7d.
    #[arg(long, default_value = "7d")]
    pub max_lifetime: String,
    /// Floor of the default memory budget (e.g. 256M).
    #[arg(long, default_value = "256M")]
    pub min_job_mem: String,
    /// CPUs kept for the OS, never given to jobs (e.g. 0,1).
    #[arg(long, default_value = "")]
    pub reserve_cpus: String,
    /// Memory kept for the OS (e.g. 2G).
    #[arg(long)]
    pub reserve_mem: Option<String>,
    /// Finished jobs are kept this long (seconds or 7d, 12h).
    #[arg(long, default_value = "7d")]
    pub retention: String,
    /// How long the accounting log (one 48-byte record per ended job, for
    /// `xlurm usage`) keeps a month after it ended: 365d, 90d...
    #[arg(long, default_value = "365d")]
    pub accounting_retention: String,
    /// Most pending jobs one user may have.
    #[arg(long, default_value_t = 10_000)]
    pub max_pending_per_user: usize,
    /// Most bytes one user's pending jobs may hold: their commands, environments
    /// and scripts, in xlurmd's memory and in its job log (e.g. 256M).
    #[arg(long, default_value = "256M")]
    pub max_pending_bytes_per_user: String,
    /// Most pending jobs with an open `--output` file one user may have (each
    /// holds a descriptor in xlurmd until it starts).
    #[arg(long, default_value_t = 256)]
    pub max_output_files_per_user: usize,
    /// How long a job that is cancelled, passes its time limit or is stopped
    /// otherwise has between SIGTERM (to all its processes) and SIGKILL:
    /// seconds or 30s, 2m (systemd's TimeoutStopSec of each job's unit; jobs
    /// started before a change keep theirs).
    #[arg(long, default_value = "10s")]
    pub cancel_grace: String,
    /// Let every user see every job's summary (never commands or output).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub list_is_public: bool,
    /// Where job state lives.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Start even without cgroup v2 cpuset/memory controllers (no pinning, no budgets enforced).
    #[arg(long)]
    pub no_cgroup_check: bool,
    /// How a job's memory is kept on its NUMA nodes: fence (AllowedMemoryNodes,
    /// which no process of the job can leave), local (NUMAPolicy=local: placed
    /// on its nodes through its CPUs, not fenced), or auto: fence on systemd 255
    /// and later, local before, where each fenced start migrates PID 1's pages
    /// between nodes (see the admin guide).
    #[arg(long, default_value = "auto")]
    pub memory_nodes: String,
    /// The slice jobs run in.
    #[arg(long, default_value = "xlurm.slice")]
    pub slice: String,
    /// Accelerator backends: auto (every vendor whose library loads), none, or one vendor
    /// (nv|asc|mtt|mx|ppu|hcu; then a discovery error stops the daemon).
    #[arg(long, default_value = "auto")]
    pub backends: String,
    /// Devices never given to jobs, e.g. `1,3` or `nv:1,3` (`xlurm include` re-enables live).
    #[arg(long)]
    pub exclude_device_ids: Option<String>,
}

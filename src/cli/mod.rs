//! The xlurm command line: `xlurm run|batch|queue|cancel|info`, also installed
//! as `xrun`, `xbatch`, `xqueue`, `xcancel` and `xinfo` (chosen by argv[0]).

pub mod client;
pub mod commands;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "xlurm",
    version,
    about = "Submit and watch jobs on this machine's xlurm scheduler"
)]
pub struct Cli {
    /// Talk to a --user daemon on the session bus (also XLURM_USER_BUS=1).
    #[arg(long, global = true, env = "XLURM_USER_BUS")]
    pub user: bool,
    #[command(subcommand)]
    pub command: Command,
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
    /// Change the scheduling policy (admin).
    Policy { policy: String },
}

#[derive(Debug, Args, Clone, Default)]
pub struct ResourceArgs {
    /// Number of accelerators (alias --devices); 0 for a CPU job.
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
    /// Start the job with a clean environment instead of forwarding yours.
    #[arg(long = "clean-env")]
    pub clean_env: bool,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub res: ResourceArgs,
    /// The command and its arguments, passed unchanged (`--` optional).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, num_args = 1..)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct BatchArgs {
    #[command(flatten)]
    pub res: ResourceArgs,
    /// Wrap a shell command line into a batch script.
    #[arg(long)]
    pub wrap: Option<String>,
    /// The script and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub script: Vec<String>,
}

#[derive(Debug, Args)]
pub struct QueueArgs {
    /// Show one job in detail.
    pub id: Option<u64>,
    /// Include finished jobs.
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Only my jobs.
    #[arg(long)]
    pub mine: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    #[arg(required = true, num_args = 1..)]
    pub ids: Vec<u64>,
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    #[arg(long)]
    pub json: bool,
}

/// Rewrites `xrun ARGS` as `xlurm run ARGS` (and so on) by argv[0].
pub fn normalize_args(args: Vec<String>) -> Vec<String> {
    let prog = args
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
        .unwrap_or_default();
    let sub = match prog.as_str() {
        "xrun" => "run",
        "xbatch" => "batch",
        "xqueue" => "queue",
        "xcancel" => "cancel",
        "xinfo" => "info",
        _ => return args,
    };
    let mut out = vec!["xlurm".to_string(), sub.to_string()];
    out.extend(args.into_iter().skip(1));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(normalize_args(args.iter().map(|s| s.to_string()).collect())).unwrap()
    }

    #[test]
    fn xrun_passes_everything_after_the_command_unchanged() {
        let Command::Run(a) = parse(&[
            "xrun", "-g", "0", "-c", "2", "python", "train.py", "-g", "4", "--lr=1",
        ])
        .command
        else {
            panic!("not run")
        };
        assert_eq!(a.res.gpus, Some(0));
        assert_eq!(a.res.cpus, Some(2));
        assert_eq!(a.command, vec!["python", "train.py", "-g", "4", "--lr=1"]);
        let Command::Run(a) = parse(&["/usr/bin/xrun", "--", "ls", "-l"]).command else {
            panic!()
        };
        assert_eq!(a.command, vec!["ls", "-l"]);
    }

    #[test]
    fn device_options_parse_all_forms() {
        let Command::Run(a) = parse(&[
            "xlurm", "run", "-i", "0,2", "--device", "nvidia", "-x", "3", "-m", "64G", "-t",
            "1h30m", "true",
        ])
        .command
        else {
            panic!()
        };
        assert_eq!(a.res.device_ids, vec![0, 2]);
        assert_eq!(a.res.exclude_device_ids, vec![3]);
        assert_eq!(a.res.vendor.as_deref(), Some("nvidia"));
        assert_eq!(a.res.mem.as_deref(), Some("64G"));
        let Command::Run(a) = parse(&["xrun", "--devices", "2", "true"]).command else {
            panic!()
        };
        assert_eq!(a.res.gpus, Some(2));
    }

    #[test]
    fn other_names_map_to_subcommands() {
        assert!(matches!(
            parse(&["xqueue", "--all"]).command,
            Command::Queue(QueueArgs { all: true, .. })
        ));
        assert!(
            matches!(parse(&["xcancel", "3", "4"]).command, Command::Cancel(CancelArgs { ref ids }) if ids == &[3, 4])
        );
        assert!(matches!(parse(&["xinfo"]).command, Command::Info(_)));
        assert!(matches!(
            parse(&["xbatch", "--wrap", "echo hi"]).command,
            Command::Batch(BatchArgs { wrap: Some(_), .. })
        ));
        assert!(
            Cli::try_parse_from(["xlurm", "run"]).is_err(),
            "run needs a command"
        );
    }
}

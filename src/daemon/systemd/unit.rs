//! Every property of a job's transient unit, built in one place.
//!
//! The result is the `a(sv)` argument of systemd's `StartTransientUnit`; see
//! systemd.resource-control(5), systemd.exec(5) and systemd.service(5), and
//! `../shared/notes/systemd.md` for the D-Bus types.

use crate::core::JobId;
use crate::daemon::job::Job;
use crate::daemon::job_env::environment;
use crate::daemon::systemd::memory_nodes::MPOL_LOCAL;
pub use crate::daemon::systemd::memory_nodes::{MemoryNodes, MemoryNodesChoice};
pub use crate::daemon::systemd::nodev_slice::{nodev_slice, nodev_slice_properties};
use zbus::Variant;

/// Who the job runs as, resolved at start. Given to systemd by number:
/// a name could be renamed, reused or look like a number by the time
/// systemd resolves it; the submitter's uid is what the bus told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary one left out).
    pub groups: Vec<u32>,
}

/// Settings of the daemon that shape every unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSettings {
    pub slice: String,
    /// Where jobs that use no accelerator go: the child slice of `slice` named
    /// by [`nodev_slice`], whose `DevicePolicy=closed` (its unit file's, and
    /// set by xlurmd at every start: [`nodev_slice_properties`]) binds every
    /// unit in it. `None` when it could not be set: each unit then carries its
    /// own policy.
    pub nodev_slice: Option<String>,
    /// A user manager cannot switch users: `User=` and friends are left out.
    pub user_mode: bool,
    /// Where batch script snapshots are kept (root-only).
    pub script_dir: std::path::PathBuf,
    /// How long a stopping job gets between SIGTERM and SIGKILL.
    pub stop_timeout_usec: u64,
    /// The `xlurm` binary, whose `__tee-output` wraps jobs with `--output`.
    pub tee_path: String,
    /// How a job's memory is kept on its NUMA nodes.
    pub memory_nodes: MemoryNodes,
}

/// The credential name under which a batch script snapshot is passed.
pub const SCRIPT_CREDENTIAL: &str = "xlurm-script";

pub fn script_path(settings: &UnitSettings, id: JobId) -> std::path::PathBuf {
    settings.script_dir.join(id.to_string())
}

/// `ExecStart`: the command as given, or bash on the script snapshot, which
/// systemd hands to the job as a credential only the job's user can read.
fn exec_start(job: &Job) -> (String, Vec<String>) {
    if job.command.script.is_some() {
        let mut argv = vec![
            "bash".to_string(),
            "-c".to_string(),
            format!("exec /bin/bash \"$CREDENTIALS_DIRECTORY/{SCRIPT_CREDENTIAL}\" \"$@\""),
            "bash".to_string(),
        ];
        argv.extend(job.command.argv.iter().cloned());
        ("/bin/bash".to_string(), argv)
    } else {
        (job.command.argv[0].clone(), job.command.argv.clone())
    }
}

/// `ExecStart` arguments that reach the job exactly as given. systemd expands
/// `$VAR` and `${VAR}` in them when it runs the command and turns `$$` into `$`
/// (systemd.service(5), "Command lines"), so every `$` is doubled.
///
/// Not `ExecStartEx` with the `no-env-expand` flag: systemd 252 (Debian 12)
/// writes that as `ExecStartEx=` into the transient unit file and cannot read
/// it back, so after a `daemon-reload` a job whose start was still queued had
/// no command ("Service has no ExecStart=... Refusing.").
fn literal(argv: &[String]) -> Vec<String> {
    argv.iter().map(|a| a.replace('$', "$$")).collect()
}

/// All properties of job `job`'s unit. `devices` is the `DeviceAllow` list,
/// `visibility` the accelerator variables.
pub fn properties(
    job: &Job,
    settings: &UnitSettings,
    run_as: Option<&RunAs>,
    visibility: &[(String, String)],
    devices: &[(String, String)],
    output: Option<std::os::fd::OwnedFd>,
) -> Vec<(&'static str, Variant<'static>)> {
    let alloc = job.alloc();
    let (mut path, mut argv) = exec_start(job);
    // xrun --pty: the descriptor held is the job's terminal (`daemon::pty`),
    // its stdin, stdout and stderr; the `__pty` wrapper makes it the job's
    // controlling terminal and execs the command.
    let (output, tty) = match output {
        Some(fd) if job.pty => (None, Some(fd)),
        other => (other, None),
    };
    // --output: the tee wrapper gets the user's file as its stdin
    // descriptor; an array's task names its own (`%A_%a`) and the wrapper,
    // running as the user, opens it.
    let opens = job.output_path_of_task();
    let (stdin, open): (Variant<'static>, Option<String>) = match (output, opens) {
        (Some(fd), _) => (Variant::Fd(zbus::Fd::from(fd)), None),
        (None, Some(p)) => (Variant::from("null"), Some(p)),
        (None, None) => (Variant::from("null"), None),
    };
    if tty.is_some() {
        let mut wrapped = vec![settings.tee_path.clone(), "__pty".into(), "--".into()];
        argv[0] = path.clone();
        wrapped.extend(argv);
        argv = wrapped;
        path = settings.tee_path.clone();
    } else if matches!(stdin, Variant::Fd(_)) || open.is_some() {
        let mut wrapped = vec![settings.tee_path.clone(), "__tee-output".to_string()];
        if let Some(p) = open {
            wrapped.extend(["--open".to_string(), p]);
        }
        wrapped.push("--".to_string());
        argv[0] = path.clone();
        wrapped.extend(argv);
        argv = wrapped;
        path = settings.tee_path.clone();
    }
    // No accelerator: the nodev slice's device policy is the job's (see
    // `nodev_slice`). Otherwise the unit's own: closed, plus its devices.
    let (slice, own_devices) = match &settings.nodev_slice {
        Some(nodev) if devices.is_empty() => (nodev.clone(), false),
        _ => (settings.slice.clone(), true),
    };
    let mut p: Vec<(&'static str, Variant<'static>)> = vec![
        (
            "Description",
            Variant::from(format!(
                "xlurm job {} ({}) of {}",
                job.id, job.name, job.user
            )),
        ),
        ("Slice", Variant::from(slice)),
        ("Type", Variant::from("exec")),
        (
            "ExecStart",
            Variant::from(vec![(path, literal(&argv), false)]),
        ),
        ("WorkingDirectory", Variant::from(job.command.cwd.clone())),
        ("Environment", Variant::from(environment(job, visibility))),
        (
            "LogExtraFields",
            Variant::from(vec![format!("XLURM_JOB_ID={}", job.id).into_bytes()]),
        ),
        // journald's rate limit for the job's output. 0 would mean journald's
        // default, 10,000 lines per 30 s (scaled down as the journal fills up),
        // which dropped most of a chatty job's output (VM 28). Allow 100,000
        // lines a second; past that journald logs how many it suppressed.
        ("LogRateLimitIntervalUSec", Variant::from(1_000_000u64)),
        ("LogRateLimitBurst", Variant::from(100_000u32)),
        ("RemainAfterExit", Variant::from(true)),
        ("KillMode", Variant::from("control-group")),
        ("SendSIGKILL", Variant::from(true)),
        ("TimeoutStopUSec", Variant::from(settings.stop_timeout_usec)),
        ("NoNewPrivileges", Variant::from(true)),
        (
            "RuntimeMaxUSec",
            Variant::from(job.demand.time_limit_secs.saturating_mul(1_000_000)),
        ),
        ("MemorySwapMax", Variant::from(0u64)),
    ];
    if own_devices {
        p.push(("DevicePolicy", Variant::from("closed")));
        p.push(("DeviceAllow", Variant::from(devices.to_vec())));
    }
    p.extend(streams(stdin, tty));
    if let Some(a) = alloc {
        p.push(("AllowedCPUs", Variant::from(a.cpus.to_mask_bytes())));
        match settings.memory_nodes {
            MemoryNodes::Fence => p.push((
                "AllowedMemoryNodes",
                Variant::from(a.mem_nodes.to_mask_bytes()),
            )),
            MemoryNodes::Local => p.push(("NUMAPolicy", Variant::from(MPOL_LOCAL))),
        }
        p.push(("MemoryMax", Variant::from(a.mem_bytes)));
    }
    if settings.user_mode {
        // A user manager's unit is found in the journal by
        // `_SYSTEMD_USER_UNIT`, which journald reads from the writing
        // process's cgroup: a job that exits at once can leave lines without
        // it (VM 13 in CI: "user-mode-1" with neither unit nor job ID). The
        // system manager names the unit in the output stream itself, a user
        // manager does not; the identifier is always there (`journal::read`).
        p.push((
            "SyslogIdentifier",
            Variant::from(crate::unit_name::log_identifier(job.id)),
        ));
    }
    if let Some(r) = run_as {
        if !settings.user_mode {
            p.push(("User", Variant::from(r.uid.to_string())));
            p.push(("Group", Variant::from(r.gid.to_string())));
            p.push((
                "SupplementaryGroups",
                Variant::from(r.groups.iter().map(u32::to_string).collect::<Vec<_>>()),
            ));
        }
    }
    // The files the job creates (an array task's --output among them) get
    // the submitter's permissions, not systemd's 0022 (second review, M4).
    if let Some(m) = job.command.umask {
        p.push(("UMask", Variant::from(m)));
    }
    if job.command.script.is_some() {
        let src = script_path(settings, job.id).display().to_string();
        p.push((
            "LoadCredential",
            Variant::from(vec![(SCRIPT_CREDENTIAL.to_string(), src)]),
        ));
    }
    p
}

/// The job's standard streams: its terminal for all three (`xrun --pty`;
/// systemd then sends SIGHUP with the stop signal, as to a login shell), or
/// `stdin` (null, or `--output`'s file for the tee wrapper) with output to
/// the journal.
fn streams(
    stdin: Variant<'static>,
    tty: Option<std::os::fd::OwnedFd>,
) -> Vec<(&'static str, Variant<'static>)> {
    let Some(tty) = tty else {
        let name = if matches!(stdin, Variant::Fd(_)) {
            "StandardInputFileDescriptor"
        } else {
            "StandardInput"
        };
        return vec![
            (name, stdin),
            ("StandardOutput", Variant::from("journal")),
            ("StandardError", Variant::from("journal")),
        ];
    };
    let fd = |f: &std::os::fd::OwnedFd| f.try_clone().ok().map(|c| Variant::Fd(zbus::Fd::from(c)));
    let mut p = Vec::with_capacity(4);
    for name in [
        "StandardOutputFileDescriptor",
        "StandardErrorFileDescriptor",
    ] {
        if let Some(v) = fd(&tty) {
            p.push((name, v));
        }
    }
    p.push((
        "StandardInputFileDescriptor",
        Variant::Fd(zbus::Fd::from(tty)),
    ));
    p.push(("SendSIGHUP", Variant::from(true)));
    p
}

#[cfg(test)]
mod tests;

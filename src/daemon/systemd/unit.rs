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
mod tests {
    use super::*;
    use crate::core::{Allocation, DeviceRef, IdSet, Vendor};
    use crate::daemon::job::{tests_support::job_with, JobState, Outcome};
    use crate::daemon::job_env::{
        environment_on, node_name, reserved_env, short_host, slurm_variables, ARRAY_VARIABLES,
    };

    fn settings() -> UnitSettings {
        UnitSettings {
            slice: "xlurm.slice".into(),
            nodev_slice: None,
            user_mode: false,
            script_dir: "/var/lib/xlurm/scripts".into(),
            stop_timeout_usec: 10_000_000,
            tee_path: "/usr/bin/xlurm".into(),
            memory_nodes: MemoryNodes::Fence,
        }
    }

    fn running_job() -> Job {
        let mut job = job_with(JobState::Pending, Outcome::default());
        job.id = 7;
        job.command.argv = vec!["/usr/bin/env".into(), "-0".into()];
        job.command.env = Some(vec![
            "HOME=/home/u".into(),
            "XLURM_JOB_ID=999".into(),
            "CUDA_VISIBLE_DEVICES=0,1,2".into(),
        ]);
        job.started(
            Allocation {
                cpus: IdSet::parse_list("1,3").unwrap(),
                mem_nodes: IdSet::parse_list("1").unwrap(),
                mem_bytes: 64 << 20,
                mem_charge: vec![(1, 64 << 20)],
                devices: vec![DeviceRef {
                    vendor: Vendor::Nv,
                    index: 0,
                    uuid: "GPU-a".into(),
                }],
                spread: false,
                exclusive: false,
            },
            0,
        )
    }

    fn get<'a>(p: &'a [(&str, Variant<'static>)], name: &str) -> &'a Variant<'static> {
        &p.iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("{name} missing"))
            .1
    }

    #[test]
    fn pins_limits_and_isolates() {
        let job = running_job();
        let run_as = RunAs {
            uid: 1000,
            gid: 1000,
            groups: vec![44],
        };
        let vis = vec![("CUDA_VISIBLE_DEVICES".to_string(), "GPU-a".to_string())];
        let dev = vec![("/dev/nvidia0".to_string(), "rw".to_string())];
        let p = properties(&job, &settings(), Some(&run_as), &vis, &dev, None);
        assert_eq!(get(&p, "AllowedCPUs"), &Variant::from(vec![0b1010u8]));
        assert_eq!(get(&p, "AllowedMemoryNodes"), &Variant::from(vec![0b10u8]));
        assert_eq!(get(&p, "MemoryMax"), &Variant::from(64u64 << 20));
        assert_eq!(get(&p, "MemorySwapMax"), &Variant::from(0u64));
        assert_eq!(get(&p, "DevicePolicy"), &Variant::from("closed"));
        assert_eq!(get(&p, "DeviceAllow"), &Variant::from(dev.clone()));
        assert_eq!(get(&p, "User"), &Variant::from("1000"));
        assert_eq!(get(&p, "Group"), &Variant::from("1000"));
        assert_eq!(
            get(&p, "SupplementaryGroups"),
            &Variant::from(vec!["44".to_string()])
        );
        assert_eq!(get(&p, "NoNewPrivileges"), &Variant::from(true));
        // A chatty job's output is not dropped by journald's default rate limit.
        assert_eq!(
            get(&p, "LogRateLimitIntervalUSec"),
            &Variant::from(1_000_000u64)
        );
        assert_eq!(get(&p, "LogRateLimitBurst"), &Variant::from(100_000u32));
        assert_eq!(get(&p, "Type"), &Variant::from("exec"));
        assert_eq!(
            get(&p, "RuntimeMaxUSec"),
            &Variant::from(job.demand.time_limit_secs * 1_000_000)
        );
        assert_eq!(
            get(&p, "ExecStart"),
            &Variant::from(vec![(
                "/usr/bin/env".to_string(),
                vec!["/usr/bin/env".to_string(), "-0".to_string()],
                false
            )])
        );
        // Forwarded values never override the daemon's variables.
        let env = environment(&job, &vis);
        assert!(env.contains(&"HOME=/home/u".to_string()));
        assert!(env.contains(&"XLURM_JOB_ID=7".to_string()));
        assert!(env.contains(&"CUDA_VISIBLE_DEVICES=GPU-a".to_string()));
        assert!(!env
            .iter()
            .any(|e| e == "XLURM_JOB_ID=999" || e == "CUDA_VISIBLE_DEVICES=0,1,2"));
    }

    fn value<'a>(env: &'a [String], name: &str) -> Option<&'a str> {
        let found: Vec<&str> = env
            .iter()
            .filter_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .collect();
        assert!(found.len() <= 1, "{name} set twice: {found:?}");
        found.first().copied()
    }

    #[test]
    fn every_job_gets_slurms_variables_which_forwarded_values_cannot_change() {
        let mut job = running_job();
        job.name = "train".into();
        job.user = "alice".into();
        job.uid = 1001;
        job.command.cwd = "/home/alice/exp".into();
        job.demand.cpus = 2;
        job.command.env = Some(
            [
                "HOME=/home/alice",
                "SLURM_JOB_ID=1",
                "SLURM_JOBID=1",
                "SLURM_CPUS_PER_TASK=99",
                "SLURM_NTASKS=8",
                "SLURM_NODELIST=node[1-8]",
                "SLURM_ARRAY_TASK_ID=3",
                "XLURM_ARRAY_TASK_ID=3",
                "SLURM_MEM_PER_CPU=100",
                "SLURM_RESTART_COUNT=4",
                "SLURM_CONF=/etc/slurm/slurm.conf",
            ]
            .map(String::from)
            .to_vec(),
        );
        let env = environment_on(&job, &[], "gpu1");
        for (name, want) in [
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOBID", "7"),
            ("SLURM_JOB_NAME", "train"),
            ("SLURM_JOB_USER", "alice"),
            ("SLURM_JOB_UID", "1001"),
            ("SLURM_SUBMIT_DIR", "/home/alice/exp"),
            ("SLURM_SUBMIT_HOST", "gpu1"),
            ("SLURM_CPUS_PER_TASK", "2"),
            ("SLURM_CPUS_ON_NODE", "2"),
            ("SLURM_JOB_CPUS_PER_NODE", "2"),
            ("SLURM_MEM_PER_NODE", "64"),
            ("SLURM_JOB_NUM_NODES", "1"),
            ("SLURM_NNODES", "1"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_NPROCS", "1"),
            ("SLURM_TASKS_PER_NODE", "1"),
            ("SLURM_NODELIST", "gpu1"),
            ("SLURM_JOB_NODELIST", "gpu1"),
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "0"),
            ("SLURM_GPUS_ON_NODE", "1"),
            ("SLURM_JOB_GPUS", "0"),
            ("XLURM_JOB_ID", "7"),
            ("HOME", "/home/alice"),
            ("SLURM_CONF", "/etc/slurm/slurm.conf"),
        ] {
            assert_eq!(value(&env, name), Some(want), "{name} in {env:?}");
        }
        // Not this job's: dropped rather than passed on (it never restarted:
        // Slurm sets SLURM_RESTART_COUNT only after a restart).
        for name in [
            "SLURM_ARRAY_TASK_ID",
            "XLURM_ARRAY_TASK_ID",
            "SLURM_MEM_PER_CPU",
            "SLURM_RESTART_COUNT",
        ] {
            assert_eq!(value(&env, name), None, "{name} in {env:?}");
        }
        // The unit gets the same list.
        let p = properties(&job, &settings(), None, &[], &[], None);
        let Variant::Array(a) = get(&p, "Environment") else {
            panic!("Environment is not an array")
        };
        assert!(format!("{a:?}").contains("SLURM_JOB_ID=7"));
    }

    #[test]
    fn a_cpu_job_has_no_gpu_variables_even_forwarded_and_exclusive_jobs_count_all_cpus() {
        let mut job = job_with(JobState::Pending, Outcome::default());
        job.command.env = Some(vec![
            "SLURM_JOB_GPUS=3".into(),
            "SLURM_GPUS_ON_NODE=1".into(),
        ]);
        job.demand.cpus = 1;
        let mut alloc = running_job().alloc().unwrap().clone();
        alloc.devices.clear();
        alloc.cpus = IdSet::parse_list("0-15").unwrap();
        alloc.mem_bytes = (3 << 30) + 12345;
        let job = job.started(alloc, 0);
        let env = environment_on(&job, &[], "h");
        assert_eq!(value(&env, "SLURM_JOB_GPUS"), None, "{env:?}");
        assert_eq!(value(&env, "SLURM_GPUS_ON_NODE"), None, "{env:?}");
        assert_eq!(value(&env, "SLURM_CPUS_PER_TASK"), Some("1"));
        assert_eq!(value(&env, "SLURM_CPUS_ON_NODE"), Some("16"));
        assert_eq!(value(&env, "SLURM_MEM_PER_NODE"), Some("3072"));
    }

    #[test]
    fn the_node_is_the_short_host_name_and_every_set_name_is_reserved() {
        assert_eq!(short_host("gpu1.lab.example.org"), "gpu1");
        assert_eq!(short_host("box"), "box");
        assert_eq!(short_host(""), "localhost");
        assert!(!node_name().is_empty());
        let job = running_job();
        for (name, _) in slurm_variables(&job, "h") {
            assert!(reserved_env(&name), "{name} is set but not reserved");
        }
        for name in ARRAY_VARIABLES {
            assert!(reserved_env(name), "{name}");
        }
        assert!(!reserved_env("SLURM_CONF"));
    }

    #[test]
    fn output_wraps_the_command_in_the_tee_with_the_file_as_stdin() {
        let job = running_job();
        let f = tempfile::tempfile().unwrap();
        let p = properties(&job, &settings(), None, &[], &[], Some(f.into()));
        assert!(!p.iter().any(|(n, _)| *n == "StandardInput"));
        assert!(matches!(
            get(&p, "StandardInputFileDescriptor"),
            Variant::Fd(_)
        ));
        let want = Variant::from(vec![(
            "/usr/bin/xlurm".to_string(),
            vec!["/usr/bin/xlurm", "__tee-output", "--", "/usr/bin/env", "-0"]
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>(),
            false,
        )]);
        assert_eq!(get(&p, "ExecStart"), &want);
    }

    #[test]
    fn a_pty_job_runs_its_command_under_the_pty_wrapper_on_its_terminal() {
        let mut job = running_job();
        job.pty = true;
        let f = tempfile::tempfile().unwrap();
        let p = properties(&job, &settings(), None, &[], &[], Some(f.into()));
        for name in [
            "StandardInputFileDescriptor",
            "StandardOutputFileDescriptor",
            "StandardErrorFileDescriptor",
        ] {
            assert!(matches!(get(&p, name), Variant::Fd(_)), "{name}");
        }
        for name in ["StandardInput", "StandardOutput", "StandardError"] {
            assert!(!p.iter().any(|(n, _)| *n == name), "{name} set");
        }
        assert_eq!(get(&p, "SendSIGHUP"), &Variant::from(true));
        let want = Variant::from(vec![(
            "/usr/bin/xlurm".to_string(),
            vec!["/usr/bin/xlurm", "__pty", "--", "/usr/bin/env", "-0"]
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>(),
            false,
        )]);
        assert_eq!(get(&p, "ExecStart"), &want);
        // Everything else is a job's as usual.
        assert_eq!(get(&p, "DevicePolicy"), &Variant::from("closed"));
        assert!(p.iter().any(|(n, _)| *n == "AllowedCPUs"));
        // Without its descriptor (never built so: the launch refuses first)
        // it would be a plain job.
        let p = properties(&job, &settings(), None, &[], &[], None);
        assert_eq!(get(&p, "StandardOutput"), &Variant::from("journal"));
    }

    #[test]
    fn jobs_without_accelerators_take_the_nodev_slices_device_policy() {
        let s = UnitSettings {
            nodev_slice: nodev_slice("xlurm.slice"),
            ..settings()
        };
        let own = |p: &[(&str, Variant<'static>)]| {
            p.iter()
                .filter(|(n, _)| *n == "DevicePolicy" || *n == "DeviceAllow")
                .count()
        };
        // No device: the slice's program binds it, the unit has none.
        let p = properties(&running_job(), &s, None, &[], &[], None);
        assert_eq!(get(&p, "Slice"), &Variant::from("xlurm-nodev.slice"));
        assert_eq!(own(&p), 0);
        // Devices: its own closed policy and its nodes, in the job slice.
        let dev = vec![("/dev/nvidia0".to_string(), "rw".to_string())];
        let p = properties(&running_job(), &s, None, &[], &dev, None);
        assert_eq!(get(&p, "Slice"), &Variant::from("xlurm.slice"));
        assert_eq!(get(&p, "DevicePolicy"), &Variant::from("closed"));
        assert_eq!(get(&p, "DeviceAllow"), &Variant::from(dev));
        assert_eq!(own(&p), 2);
        // Without the slice (it could not be closed): every unit its own.
        let p = properties(&running_job(), &settings(), None, &[], &[], None);
        assert_eq!(get(&p, "Slice"), &Variant::from("xlurm.slice"));
        assert_eq!(get(&p, "DevicePolicy"), &Variant::from("closed"));
        assert_eq!(
            get(&p, "DeviceAllow"),
            &Variant::from(Vec::<(String, String)>::new())
        );
    }

    #[test]
    fn dollars_are_doubled_so_systemd_passes_arguments_unexpanded() {
        let mut job = running_job();
        job.command.argv = ["/bin/echo", "$HOME", "${PATH}", "$$", "a$", "%u", "plain"]
            .map(String::from)
            .to_vec();
        let p = properties(&job, &settings(), None, &[], &[], None);
        let want = Variant::from(vec![(
            "/bin/echo".to_string(),
            [
                "/bin/echo",
                "$$HOME",
                "$${PATH}",
                "$$$$",
                "a$$",
                "%u",
                "plain",
            ]
            .map(String::from)
            .to_vec(),
            false,
        )]);
        assert_eq!(get(&p, "ExecStart"), &want);
        assert!(!p.iter().any(|(n, _)| *n == "ExecStartEx"));
    }

    #[test]
    fn local_memory_places_without_a_fence() {
        let s = UnitSettings {
            memory_nodes: MemoryNodes::Local,
            ..settings()
        };
        let p = properties(&running_job(), &s, None, &[], &[], None);
        assert_eq!(get(&p, "NUMAPolicy"), &Variant::from(MPOL_LOCAL));
        assert_eq!(get(&p, "AllowedCPUs"), &Variant::from(vec![0b1010u8]));
        assert!(!p.iter().any(|(n, _)| *n == "AllowedMemoryNodes"));
        let fenced = properties(&running_job(), &settings(), None, &[], &[], None);
        assert!(!fenced.iter().any(|(n, _)| *n == "NUMAPolicy"));
    }

    #[test]
    fn user_mode_leaves_out_user_switching() {
        let s = UnitSettings {
            user_mode: true,
            ..settings()
        };
        let run_as = RunAs {
            uid: 1000,
            gid: 1000,
            groups: vec![],
        };
        let p = properties(&running_job(), &s, Some(&run_as), &[], &[], None);
        assert!(!p.iter().any(|(n, _)| *n == "User" || *n == "Group"));
        // Its output carries the job in the stream itself (`journal::read`).
        assert_eq!(get(&p, "SyslogIdentifier"), &Variant::from("xlurm-job-7"));
        let system = properties(&running_job(), &settings(), Some(&run_as), &[], &[], None);
        assert!(!system.iter().any(|(n, _)| *n == "SyslogIdentifier"));
    }

    #[test]
    fn batch_jobs_run_bash_on_a_credential() {
        let mut job = running_job();
        job.command.script = Some("echo hi\n".into());
        job.command.argv = vec!["a1".into()];
        let p = properties(&job, &settings(), None, &[], &[], None);
        let want = Variant::from(vec![(
            SCRIPT_CREDENTIAL.to_string(),
            "/var/lib/xlurm/scripts/7".to_string(),
        )]);
        assert_eq!(get(&p, "LoadCredential"), &want);
        let Variant::Array(a) = get(&p, "ExecStart") else {
            panic!("not an array")
        };
        assert_eq!(a.len(), 1);
        let text = format!("{:?}", get(&p, "ExecStart"));
        assert!(
            text.contains("$$CREDENTIALS_DIRECTORY") && text.contains("a1"),
            "{text}"
        );
    }
}

//! Tests of `unit.rs`.
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

/// Second review, M4: the submitter's umask is the unit's `UMask=` (the
/// files the job creates, an array task's `--output` among them); a job
/// from a client that sent none gets systemd's default.
#[test]
fn the_submitters_umask_is_the_units() {
    let mut job = running_job();
    let p = properties(&job, &settings(), None, &[], &[], None);
    assert!(p.iter().all(|(n, _)| *n != "UMask"), "none sent: systemd's");
    job.command.umask = Some(0o077);
    let p = properties(&job, &settings(), None, &[], &[], None);
    assert_eq!(get(&p, "UMask"), &Variant::from(0o077u32));
}

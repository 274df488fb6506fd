//! What every submission must satisfy, whatever a caller sends: shared by the
//! property test (`tests/security_spec.rs`) and the fuzz target
//! (`fuzz/fuzz_targets/spec.rs`, which includes this file with `#[path]`).
//!
//! A spec map goes through `spec::parse`, the working directory check
//! (`as_user::dir_problem_here`: this process's own rights), then
//! `core::request::validate` against a fixed machine, then `unit::properties`,
//! as xlurmd does (`api.rs` -> `service/submit.rs` -> `unit.rs`). [`check`] panics when a refusal has
//! no message, or when something accepted breaks a documented bound or would
//! give a unit systemd refuses (invalid environment names, a relative or
//! overlong path) or that lacks the isolation every job must have.
#![allow(dead_code)]

use std::collections::HashMap;
use xlurm::core::{Device, Limits, Machine, Topology, Vendor};
use xlurm::daemon::job::{Job, JobState};
use xlurm::daemon::spec::{self, Spec};
use xlurm::daemon::systemd::unit::{self, RunAs, UnitSettings};
use zbus::{OwnedVariant, Variant};

const GIB: u64 = 1 << 30;

/// Two NUMA nodes of 4 CPUs and 8 GiB, four NVIDIA devices (nv:3 disabled) and
/// two Ascend ones.
pub fn machine() -> Machine {
    let mut devices: Vec<Device> = (0..4)
        .map(|i| Device::new(Vendor::Nv, i, format!("GPU-{i}"), Some(i / 2)))
        .chain((0..2).map(|i| Device::new(Vendor::Asc, i, format!("NPU-{i}"), Some(i))))
        .collect();
    devices[3].disabled = true;
    Machine::new(Topology::uniform(2, 4, 8 * GIB), devices)
}

pub fn limits() -> Limits {
    Limits::default()
}

/// A D-Bus value as a caller could send it, of any type.
#[derive(Debug, Clone)]
pub enum V {
    Bool(bool),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(String),
    Strs(Vec<String>),
    U32s(Vec<u32>),
    U64s(Vec<u64>),
    Bytes(Vec<u8>),
    /// A variant inside the variant (`v` holding `v`).
    Nested(Box<V>),
    /// An `a{su}` dictionary.
    Dict(Vec<(String, u32)>),
}

impl V {
    pub fn to_variant(&self) -> Variant<'static> {
        match self {
            V::Bool(b) => Variant::from(*b),
            V::U8(x) => Variant::from(*x),
            V::I16(x) => Variant::from(*x),
            V::U16(x) => Variant::from(*x),
            V::I32(x) => Variant::from(*x),
            V::U32(x) => Variant::from(*x),
            V::I64(x) => Variant::from(*x),
            V::U64(x) => Variant::from(*x),
            V::F64(x) => Variant::from(*x),
            V::Str(s) => Variant::from(s.clone()),
            V::Strs(v) => Variant::from(v.clone()),
            V::U32s(v) => Variant::from(v.clone()),
            V::U64s(v) => Variant::from(v.clone()),
            V::Bytes(v) => Variant::from(v.clone()),
            V::Nested(v) => Variant::Variant(Box::new(v.to_variant())),
            V::Dict(d) => {
                let m: HashMap<String, u32> = d.iter().cloned().collect();
                Variant::from(m)
            }
        }
    }
}

/// Keys an attacker would try: what the daemon must never take from a request.
pub const HOSTILE_KEYS: [&str; 16] = [
    "user",
    "User",
    "uid",
    "gid",
    "group",
    "unit",
    "slice",
    "Slice",
    "properties",
    "NoNewPrivileges",
    "owner",
    "ExecStart",
    "ARGV",
    "argv ",
    "",
    "env\0",
];

/// The spec map built from `(key, value)` pairs; a later pair replaces an earlier one.
pub fn to_map(entries: &[(String, V)]) -> HashMap<String, OwnedVariant> {
    let mut m = HashMap::new();
    for (k, v) in entries {
        if let Ok(ov) = OwnedVariant::try_from(v.to_variant()) {
            m.insert(k.clone(), ov);
        }
    }
    m
}

/// What happened to one input, for coverage counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `spec::parse` or the working directory check refused it
    /// (`org.xlurm.Scheduler1.Error.InvalidArgs`).
    BadSpec,
    /// `validate` refused it (`org.xlurm.Scheduler1.Error.InvalidRequest`).
    BadRequest,
    Accepted,
}

fn path_ok(p: &str) -> bool {
    p.starts_with('/')
        && p.len() <= spec::MAX_PATH_BYTES
        && p.split('/')
            .all(|c| c.len() <= spec::MAX_PATH_COMPONENT_BYTES)
        && !p.contains('\0')
}

/// Runs one spec map through the daemon's checks and unit builder; panics on a
/// broken invariant.
pub fn check(map: &HashMap<String, OwnedVariant>) -> Verdict {
    let machine = machine();
    let limits = limits();
    let spec = match spec::parse(map) {
        Ok(s) => s,
        Err(e) => {
            assert!(
                !e.to_string().trim().is_empty(),
                "empty spec error for {map:?}"
            );
            assert!(e.to_string().len() < 16_384, "overlong spec error");
            return Verdict::BadSpec;
        }
    };
    // The working directory, looked at as xlurmd does for a caller who is
    // its own user (`as_user`): with this process's rights, through PID 1's root.
    if let Some(problem) = xlurm::daemon::as_user::dir_problem_here(&spec.cwd) {
        assert!(!problem.trim().is_empty(), "empty cwd error for {map:?}");
        return Verdict::BadSpec;
    }
    // Nothing outside the known keys was accepted.
    for k in map.keys() {
        assert!(
            xlurm::wire::spec::KEYS.iter().any(|(name, _)| name == k),
            "unknown key {k:?} accepted"
        );
    }
    check_spec(&spec);
    let demand = match xlurm::core::request::validate(&spec.request, &machine, &limits) {
        Ok(d) => d,
        Err(e) => {
            assert!(!e.to_string().trim().is_empty(), "empty request error");
            return Verdict::BadRequest;
        }
    };
    let topo = &machine.topology;
    assert!(
        demand.cpus >= 1 && demand.cpus <= topo.total_cpus(),
        "{demand:?}"
    );
    assert!(
        demand.mem_bytes >= 1 && demand.mem_bytes <= topo.total_mem(),
        "{demand:?}"
    );
    assert!(
        demand.time_limit_secs >= 1 && demand.time_limit_secs <= limits.max_lifetime_secs,
        "{demand:?}"
    );
    let d = &demand.devices;
    assert!(d.count as usize <= machine.devices.len(), "{demand:?}");
    if !d.ids.is_empty() {
        assert_eq!(d.count as usize, d.ids.len());
        let v = d.vendor.expect("exact IDs settle the vendor");
        for id in &d.ids {
            let slot = machine.slot(v, *id).expect("accepted IDs exist");
            assert!(!machine.devices[slot].disabled, "disabled device accepted");
        }
    }
    check_unit(&spec, demand);
    Verdict::Accepted
}

/// The documented bounds of an accepted spec (README "D-Bus API", spec.rs).
fn check_spec(s: &Spec) {
    assert!(!s.argv.is_empty() || s.script.is_some(), "nothing to run");
    if s.script.is_none() {
        assert!(path_ok(&s.argv[0]), "argv[0] {:?}", s.argv[0]);
    }
    assert!(s.argv.len() <= spec::MAX_ARGS);
    assert!(s.argv.iter().map(|a| a.len() + 1).sum::<usize>() <= spec::MAX_ARGV_BYTES);
    assert!(s.argv.iter().all(|a| !a.contains('\0')));
    if let Some(script) = &s.script {
        assert!(script.len() <= spec::MAX_SCRIPT_BYTES && !script.contains('\0'));
    }
    assert!(path_ok(&s.cwd), "cwd {:?}", s.cwd);
    assert!(
        std::path::Path::new(&s.cwd).is_dir(),
        "cwd {:?} is no directory",
        s.cwd
    );
    if let Some(env) = &s.env {
        assert!(env.len() <= spec::MAX_ENV_VARS);
        assert!(env.iter().map(|e| e.len() + 1).sum::<usize>() <= spec::MAX_ENV_BYTES);
        for kv in env {
            let (name, _) = kv.split_once('=').expect("NAME=VALUE");
            assert!(xlurm::wire::spec::valid_env_name(name), "env name {name:?}");
            assert!(!kv.contains('\0'));
        }
    }
    let n = s.name.chars().count();
    assert!((1..=spec::MAX_NAME_CHARS).contains(&n), "name {:?}", s.name);
    assert!(!s.name.chars().any(char::is_control), "name {:?}", s.name);
    let d = &s.request.devices;
    assert!(d.ids.len() <= spec::MAX_DEVICE_IDS && d.exclude.len() <= spec::MAX_DEVICE_IDS);
}

/// What a job is charged against its owner's byte budget never undercounts
/// what its record stores of its strings (JSON escapes included), and a
/// detached job is charged the same.
fn check_held_bytes(job: &Job) {
    let c = &job.command;
    let strings = std::iter::once(&job.name)
        .chain(&c.argv)
        .chain(c.script.iter())
        .chain(std::iter::once(&c.cwd))
        .chain(c.env.iter().flatten());
    let stored: u64 = strings
        .map(|s| serde_json::to_string(s).expect("a string").len() as u64 + 1)
        .sum();
    let held = job.held_bytes();
    assert!(
        held >= stored + xlurm::daemon::job::RECORD_OVERHEAD,
        "held {held} < stored {stored}"
    );
    let mut waiting = job.clone();
    assert_eq!(waiting.state(), JobState::Pending);
    waiting.detach();
    assert_eq!(waiting.held_bytes(), held);
    assert!(waiting.command.argv.is_empty() && waiting.command.env.is_none());
}

/// The unit xlurmd would start for the accepted spec: systemd must accept it, and
/// it carries the submitter's identity and every isolation property.
fn check_unit(s: &Spec, demand: xlurm::core::Demand) {
    // Built from a record (serde) so fields added to `Job` later take their
    // defaults; pending, as placed by no allocation (properties follow `alloc`).
    let job: Job = serde_json::from_value(serde_json::json!({
        "id": 42,
        "name": s.name,
        "uid": 1001,
        "user": "alice",
        "command": {"argv": s.argv, "script": s.script, "cwd": s.cwd, "env": s.env},
        "request": s.request,
        "demand": demand,
        "state": JobState::Pending,
        "submit_usec": 1,
        "start_usec": 0,
        "end_usec": 0,
        "alloc": null,
        "unit": xlurm::unit_name::of_job(42),
        "invocation_id": "",
        "outcome": null,
        "cancel_requested_by": null,
    }))
    .expect("a job record");
    check_held_bytes(&job);
    // Each unit closed by its own device policy, or (xlurmd having closed
    // the nodev slice at start) by the slice's.
    for nodev_slice in [None, unit::nodev_slice("xlurm.slice")] {
        check_unit_properties(s, &job, nodev_slice);
    }
}

fn check_unit_properties(s: &Spec, job: &Job, nodev_slice: Option<String>) {
    let settings = UnitSettings {
        slice: "xlurm.slice".into(),
        nodev_slice: nodev_slice.clone(),
        user_mode: false,
        script_dir: "/var/lib/xlurm/scripts".into(),
        stop_timeout_usec: 10_000_000,
        tee_path: "/usr/bin/xlurm".into(),
        memory_nodes: xlurm::daemon::systemd::unit::MemoryNodes::Fence,
    };
    let run_as = RunAs {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    let props = unit::properties(job, &settings, Some(&run_as), &[], &[], None);
    let get = |name: &str| -> Vec<&Variant<'static>> {
        props
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .collect()
    };
    let one = |name: &str| -> &Variant<'static> {
        let v = get(name);
        assert_eq!(v.len(), 1, "property {name} set {} times", v.len());
        v[0]
    };
    assert_eq!(one("User"), &Variant::from("1000"));
    assert_eq!(one("Group"), &Variant::from("1000"));
    assert_eq!(one("NoNewPrivileges"), &Variant::from(true));
    match &nodev_slice {
        None => {
            assert_eq!(one("Slice"), &Variant::from("xlurm.slice"));
            assert_eq!(one("DevicePolicy"), &Variant::from("closed"));
        }
        Some(nodev) => {
            // No devices: the slice's closed policy, none of its own.
            assert_eq!(one("Slice"), &Variant::from(nodev.as_str()));
            assert!(get("DevicePolicy").is_empty() && get("DeviceAllow").is_empty());
            let closed = unit::nodev_slice_properties();
            assert!(closed.contains(&("DevicePolicy", Variant::from("closed"))));
        }
    }
    assert_eq!(one("MemorySwapMax"), &Variant::from(0u64));
    assert_eq!(one("KillMode"), &Variant::from("control-group"));
    assert_eq!(one("WorkingDirectory"), &Variant::from(s.cwd.clone()));
    let runtime = u64::try_from(one("RuntimeMaxUSec").clone()).expect("t");
    assert!(runtime >= 1_000_000, "RuntimeMaxUSec {runtime}");
    let env = Vec::<String>::try_from(one("Environment").clone()).expect("as");
    for kv in &env {
        let (name, _) = kv.split_once('=').expect("NAME=VALUE");
        assert!(
            xlurm::wire::spec::valid_env_name(name),
            "systemd refuses Environment {kv:?}"
        );
    }
    assert!(env.contains(&"XLURM_JOB_ID=42".to_string()));
    assert_eq!(
        env.iter()
            .filter(|kv| kv.starts_with("XLURM_JOB_ID="))
            .count(),
        1,
        "a forwarded XLURM_JOB_ID survived"
    );
    // ExecStart: one command, an absolute valid path, a non-empty argv, and
    // every `$` doubled so systemd expands nothing in the arguments.
    let Variant::Array(cmds) = one("ExecStart") else {
        panic!("ExecStart is not an array")
    };
    assert_eq!(cmds.len(), 1);
    let exec: Vec<(String, Vec<String>, bool)> =
        Vec::try_from(one("ExecStart").clone()).expect("a(sasb)");
    let (path, argv, _) = &exec[0];
    assert!(path_ok(path), "ExecStart path {path:?}");
    assert!(!argv.is_empty());
    for a in argv {
        assert!(
            !a.replace("$$", "").contains('$'),
            "a lone $ in {a:?}: systemd would expand it"
        );
    }
    // Nothing the caller sent named a property.
    const ALLOWED: [&str; 28] = [
        "Description",
        "Slice",
        "Type",
        "ExecStart",
        "WorkingDirectory",
        "Environment",
        "StandardInput",
        "StandardOutput",
        "StandardError",
        "LogExtraFields",
        "LogRateLimitIntervalUSec",
        "LogRateLimitBurst",
        "RemainAfterExit",
        "KillMode",
        "SendSIGKILL",
        "TimeoutStopUSec",
        "NoNewPrivileges",
        "RuntimeMaxUSec",
        "MemorySwapMax",
        "DevicePolicy",
        "DeviceAllow",
        "AllowedCPUs",
        "AllowedMemoryNodes",
        "NUMAPolicy",
        "MemoryMax",
        "User",
        "Group",
        "SupplementaryGroups",
    ];
    for (name, _) in &props {
        assert!(
            ALLOWED.contains(name) || *name == "LoadCredential",
            "unexpected unit property {name}"
        );
    }
}

/// A spec that must be accepted.
pub fn good() -> Vec<(String, V)> {
    vec![
        (
            "argv".into(),
            V::Strs(vec!["/bin/echo".into(), "hi".into()]),
        ),
        ("cwd".into(), V::Str("/".into())),
    ]
}

#[test]
fn the_fixed_machine_accepts_a_plain_job_and_refuses_hostile_keys() {
    assert_eq!(check(&to_map(&good())), Verdict::Accepted);
    for k in HOSTILE_KEYS {
        let mut e = good();
        e.push((k.to_string(), V::Str("root".into())));
        assert_eq!(check(&to_map(&e)), Verdict::BadSpec, "key {k:?}");
    }
}

//! A job log written by xlurmd before the log had a format version (format 1,
//! checked in under `tests/data/jobs-log-v1/`) still loads, every job and
//! field as it was written. A change to the record format must keep this test
//! passing: migrate the old records, do not edit the checked-in file.
//!
//! The file holds, besides each job's current record, superseded records
//! (the last record of an ID wins) and IDs that were cleaned away before it
//! was written (`next-id` is above every ID in it). Users, paths, UUIDs and
//! invocation IDs in it are made up. It was written once, through
//! `Store::save` and `Store::save_next_id`, by the store of commit 7639f2f;
//! it is never regenerated.

use std::path::Path;
use xlurm::core::{Allocation, Demand, DeviceRef, DeviceRequest, IdSet, JobId, Vendor};
use xlurm::daemon::job::{
    Brief, Command, End, Job, JobState, Outcome, OutputCopy, Run, Stage, Waiting,
};
use xlurm::daemon::store::Store;

const GIB: u64 = 1 << 30;
/// 2023-11-14 22:13:20 UTC, in microseconds.
const T0: u64 = 1_700_000_000_000_000;
const SEC: u64 = 1_000_000;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jobs-log-v1");

fn ids(list: &str) -> IdSet {
    IdSet::parse_list(list).expect("an ID list")
}

fn device(vendor: Vendor, index: u32, uuid: &str) -> DeviceRef {
    DeviceRef {
        vendor,
        index,
        uuid: uuid.into(),
    }
}

fn nv(index: u32) -> DeviceRef {
    let uuid = format!("GPU-00000000-0000-4000-8000-00000000000{index}");
    device(Vendor::Nv, index, &uuid)
}

/// `count` devices of `vendor`, any of them.
fn any_of(vendor: Vendor, count: u32) -> DeviceRequest {
    DeviceRequest {
        count,
        vendor: Some(vendor),
        ..Default::default()
    }
}

fn ended(result: &str, exit_status: Option<i32>, signal: Option<i32>, detail: &str) -> Outcome {
    Outcome {
        result: result.into(),
        exit_status,
        signal,
        detail: detail.into(),
        cpu_nsec: Some(1_500_000_000),
        memory_peak: Some(300 << 20),
        gpu: None,
    }
}

/// A job's fields as a v1 record has them, made into a [`Job`] by [`Rec::job`].
struct Rec {
    id: JobId,
    name: String,
    uid: u32,
    user: String,
    command: Command,
    demand: Demand,
    state: JobState,
    submit_usec: u64,
    start_usec: u64,
    end_usec: u64,
    alloc: Option<Allocation>,
    invocation_id: String,
    outcome: Option<Outcome>,
    cancel_requested_by: Option<u32>,
    output: Option<OutputCopy>,
    relaunches: u8,
}

impl Rec {
    /// The job these fields describe, in its stage.
    fn job(self) -> Job {
        let stage = match self.state {
            JobState::Pending => Stage::Pending(Waiting::default()),
            JobState::Running => Stage::Running(Box::new(Run::loaded(
                self.alloc.expect("a running job's allocation"),
                self.start_usec,
                self.invocation_id,
                self.cancel_requested_by,
                self.relaunches,
            ))),
            state => Stage::Ended(Box::new(End {
                state,
                start_usec: self.start_usec,
                end_usec: self.end_usec,
                alloc: self.alloc,
                invocation_id: self.invocation_id,
                outcome: self.outcome.expect("an ended job's outcome"),
                cancel_requested_by: self.cancel_requested_by,
                relaunches: self.relaunches,
            })),
        };
        Job {
            id: self.id,
            name: self.name,
            uid: self.uid,
            user: self.user,
            command: self.command,
            demand: self.demand,
            submit_usec: self.submit_usec,
            output: self.output.map(Box::new),
            nice: 0,
            gid: u32::MAX,
            requeue: false,
            restarts: 0,
            pty: false,
            array: None,
            stage,
        }
    }
}

/// A job of `user` (uid `uid`) submitted `id` seconds after T0, with a CPU
/// request and nothing else set.
fn job(id: JobId, state: JobState, name: &str, uid: u32, user: &str) -> Rec {
    Rec {
        id,
        name: name.into(),
        uid,
        user: user.into(),
        command: Command {
            argv: vec!["/usr/bin/python3".into(), "run.py".into()],
            script: None,
            cwd: format!("/home/{user}/proj"),
            env: None,
            umask: None,
        },
        demand: Demand {
            cpus: 1,
            mem_bytes: GIB,
            mem_default: true,
            devices: DeviceRequest::default(),
            exclusive: false,
            numa_local: false,
            time_limit_secs: 3600,
        },
        state,
        submit_usec: T0 + id * SEC,
        start_usec: 0,
        end_usec: 0,
        alloc: None,
        invocation_id: String::new(),
        outcome: None,
        cancel_requested_by: None,
        output: None,
        relaunches: 0,
    }
}

/// `j` started 10 s after its submit on CPUs `cpus` of node 0 with `devices`,
/// and, unless `ended` is `None`, ended after `ran` seconds so.
fn started(mut j: Rec, cpus: &str, devices: Vec<DeviceRef>, ended: Option<(u64, Outcome)>) -> Rec {
    j.start_usec = j.submit_usec + 10 * SEC;
    j.alloc = Some(Allocation {
        cpus: ids(cpus),
        mem_nodes: ids("0"),
        mem_bytes: j.demand.mem_bytes,
        mem_charge: vec![(0, j.demand.mem_bytes)],
        devices,
        spread: false,
        exclusive: false,
    });
    j.invocation_id = format!("{:032x}", 0xabc0_0000 + j.id);
    if let Some((ran, outcome)) = ended {
        j.end_usec = j.start_usec + ran * SEC;
        j.outcome = Some(outcome);
    }
    j
}

/// Each job's current record in the checked-in log, as written.
fn expected() -> Vec<Job> {
    let mut jobs = Vec::new();

    // A pending batch job with every request field set: its forwarded
    // environment is kept until its unit starts.
    let mut j = job(1, JobState::Pending, "train-small", 1001, "alice");
    j.command = Command {
        argv: vec!["train.sh".into(), "--epochs".into(), "3".into()],
        script: Some("#!/bin/bash\n#SBATCH --gpus=nv:2\npython3 train.py \"$@\"\n".into()),
        cwd: "/home/alice/proj".into(),
        env: Some(vec![
            "PATH=/usr/local/bin:/usr/bin:/bin".into(),
            "HOME=/home/alice".into(),
            "LANG=C.UTF-8".into(),
        ]),
        umask: None,
    };
    j.demand = Demand {
        cpus: 4,
        mem_bytes: 8 * GIB,
        mem_default: false,
        devices: DeviceRequest {
            count: 2,
            vendor: Some(Vendor::Nv),
            ids: vec![0, 1],
            exclude: vec![],
        },
        exclusive: false,
        numa_local: true,
        time_limit_secs: 7200,
    };
    j.output = Some(OutputCopy {
        path: "/home/alice/proj/train.out".into(),
        error: String::new(),
    });
    jobs.push(j);

    // Running, launching: marked RUNNING, its unit not started yet (no
    // invocation ID), so it keeps its environment; its start was lost once.
    let mut j = job(2, JobState::Running, "sweep", 1002, "bob");
    j.command.env = Some(vec!["CUDA_CACHE_DISABLE=1".into()]);
    j.demand.devices = DeviceRequest {
        count: 1,
        vendor: None,
        ids: vec![],
        exclude: vec![3],
    };
    let mut j = started(j, "0", vec![nv(2)], None);
    j.invocation_id.clear();
    j.relaunches = 1;
    jobs.push(j);

    // Running, started, spread over both nodes, with a cancel asked for.
    let mut j = job(3, JobState::Running, "big-mem", 1001, "alice");
    j.demand.cpus = 8;
    j.demand.mem_bytes = 96 * GIB;
    j.demand.mem_default = false;
    j.demand.devices = any_of(Vendor::Asc, 2);
    let asc = [0, 1].map(|i| device(Vendor::Asc, i, &format!("asc-{i}")));
    let mut j = started(j, "0-3,32-35", asc.to_vec(), None);
    if let Some(a) = &mut j.alloc {
        a.mem_nodes = ids("0-1");
        a.mem_charge = vec![(0, 48 * GIB), (1, 48 * GIB)];
        a.spread = true;
    }
    j.cancel_requested_by = Some(1001);
    jobs.push(j);

    // Ended, one in each final state.
    let j = job(4, JobState::Completed, "ok", 1002, "bob");
    let mut j = started(
        j,
        "1",
        vec![],
        Some((60, ended("success", Some(0), None, ""))),
    );
    j.output = Some(OutputCopy {
        path: "/srv/shared/out/ok.log".into(),
        error: "cannot open /srv/shared/out/ok.log: Permission denied".into(),
    });
    jobs.push(j);

    let outcome = ended("exit-code", Some(3), None, "");
    jobs.push(started(
        job(5, JobState::Failed, "exit3", 1001, "alice"),
        "2",
        vec![nv(0)],
        Some((5, outcome)),
    ));

    let outcome = ended("signal", None, Some(11), "killed by signal 11");
    jobs.push(started(
        job(6, JobState::Failed, "segv", 1001, "alice"),
        "2",
        vec![],
        Some((7, outcome)),
    ));

    let outcome = ended("signal", None, Some(15), "cancelled");
    let mut j = started(
        job(7, JobState::Cancelled, "long", 1002, "bob"),
        "4-5",
        vec![],
        Some((120, outcome)),
    );
    j.cancel_requested_by = Some(0);
    jobs.push(j);

    let mut j = job(8, JobState::Timeout, "slow", 1002, "bob");
    j.demand.time_limit_secs = 60;
    let outcome = ended("timeout", None, Some(15), "killed at its time limit");
    jobs.push(started(j, "6", vec![], Some((60, outcome))));

    let mut j = job(9, JobState::OutOfMemory, "hog", 1001, "alice");
    j.demand.mem_bytes = 2 * GIB;
    j.demand.mem_default = false;
    let mut outcome = ended(
        "oom-kill",
        None,
        Some(9),
        "killed for exceeding its memory budget (MemoryMax)",
    );
    outcome.memory_peak = Some(2 * GIB);
    jobs.push(started(j, "7", vec![], Some((30, outcome))));

    // systemd could not start it: it never ran.
    let mut j = job(10, JobState::LaunchFailed, "nouser", 1003, "carol");
    j.command.argv = vec!["/opt/missing/bin/tool".into()];
    j.end_usec = j.submit_usec + SEC;
    j.outcome = Some(Outcome {
        result: "resources".into(),
        detail: "systemd could not start it: resources".into(),
        ..Default::default()
    });
    jobs.push(j);

    // Exclusive, on a Moore Threads device; its unit vanished (a reboot).
    let mut j = job(11, JobState::Lost, "whole-box", 1003, "carol");
    j.demand.exclusive = true;
    j.demand.devices = any_of(Vendor::Mtt, 1);
    let mut j = started(j, "0-63", vec![device(Vendor::Mtt, 0, "mtt-0")], None);
    if let Some(a) = &mut j.alloc {
        a.exclusive = true;
    }
    j.end_usec = j.start_usec + 3600 * SEC;
    j.outcome = Some(Outcome {
        detail: "its unit vanished while xlurmd was down".into(),
        ..Default::default()
    });
    jobs.push(j);

    jobs.into_iter().map(Rec::job).collect()
}

/// Copies the checked-in state directory to a fresh one (opening a store
/// compacts its log: the checked-in file is never opened in place).
fn copy_fixture(to: &Path) {
    for entry in std::fs::read_dir(FIXTURE).expect("the checked-in log") {
        let entry = entry.expect("a fixture file");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copying the fixture");
    }
}

#[test]
fn a_log_written_before_format_versions_loads_whole() {
    let dir = tempfile::tempdir().expect("a temp dir");
    copy_fixture(dir.path());
    let expected = expected();
    let (store, loaded) = Store::open(dir.path()).expect("the v1 log loads");
    assert_eq!(loaded.warning, None);
    assert_eq!(loaded.next_id, 15, "from next-id: IDs 12-14 were cleaned");
    let active: Vec<&Job> = expected.iter().filter(|j| !j.state().is_final()).collect();
    assert_eq!(
        loaded.jobs.keys().copied().collect::<Vec<_>>(),
        active.iter().map(|j| j.id).collect::<Vec<_>>()
    );
    for j in active {
        assert_eq!(&loaded.jobs[&j.id], j, "job {} as loaded", j.id);
    }
    let done: Vec<&Job> = expected.iter().filter(|j| j.state().is_final()).collect();
    assert_eq!(
        loaded.ended.ids().collect::<Vec<_>>(),
        done.iter().map(|j| j.id).collect::<Vec<_>>()
    );
    for j in done {
        let brief = Brief::of(j, |s| s.into());
        assert_eq!(
            loaded.ended.get(j.id),
            Some(&brief),
            "job {} in brief",
            j.id
        );
    }
    for j in &expected {
        assert_eq!(
            &store.read(j.id).expect("its record"),
            j,
            "job {} read back",
            j.id
        );
    }
    // Every state is in the file.
    for state in JobState::ALL {
        assert!(
            expected.iter().any(|j| j.state() == state),
            "no {state:?} job"
        );
    }
    // Loading compacted it, under the version record it had not.
    let version = "{\"format\":\"xlurm-jobs-log\",\"version\":1}\n";
    let read = |dir: &Path| std::fs::read_to_string(dir.join("jobs.log")).expect("the log");
    assert!(!read(Path::new(FIXTURE)).starts_with("{\"format\""));
    assert!(read(dir.path()).starts_with(version));
}

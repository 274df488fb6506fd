//! Rule-by-rule tests of the core on fake topologies and device states.

use super::*;

const GIB: u64 = 1 << 30;

fn gpus(vendor: Vendor, n: u32, node_of: impl Fn(u32) -> Option<u32>) -> Vec<Device> {
    (0..n)
        .map(|i| Device::new(vendor, i, format!("{vendor}-uuid-{i}"), node_of(i)))
        .collect()
}

/// 2 nodes x 4 CPUs x 8 GiB, GPUs 0,1 on node 0 and 2,3 on node 1.
fn two_nodes() -> Machine {
    Machine::new(
        Topology::uniform(2, 4, 8 * GIB),
        gpus(Vendor::Nv, 4, |i| Some(i / 2)),
    )
}

/// 8 nodes x 32 CPUs x 256 GiB, GPU i on node i.
fn big() -> Machine {
    Machine::new(
        Topology::uniform(8, 32, 256 * GIB),
        gpus(Vendor::Nv, 8, Some),
    )
}

fn limits() -> Limits {
    Limits {
        max_running: 32,
        max_lifetime_secs: 3600,
        min_job_mem: 64 << 20,
    }
}

fn req(cpus: u32, gpus: u32) -> Request {
    Request {
        cpus,
        mem_bytes: Some(GIB),
        devices: DeviceRequest {
            count: gpus,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn sched(machine: Machine, policy: Policy) -> Scheduler {
    Scheduler::new(machine, policy, limits())
}

fn submit(s: &mut Scheduler, id: JobId, r: Request) {
    let d = s.validate(&r).expect("valid request");
    s.enqueue(id, d);
}

fn started(starts: &[(JobId, Allocation)]) -> Vec<JobId> {
    let mut ids: Vec<JobId> = starts.iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    ids
}

// ---- validation: every impossible request is refused, naming what exists ----

#[test]
fn rejects_impossible_requests_with_what_exists() {
    let s = sched(two_nodes(), Policy::FifoStrict);
    let cases: Vec<(Request, &str)> = vec![
        (
            Request {
                cpus: 0,
                ..req(1, 0)
            },
            "at least 1 CPU",
        ),
        (
            Request {
                cpus: 9,
                ..req(1, 0)
            },
            "at most 8 (node0: 4 CPUs, node1: 4 CPUs)",
        ),
        (
            Request {
                mem_bytes: Some(0),
                ..req(1, 0)
            },
            "0 bytes",
        ),
        (
            Request {
                mem_bytes: Some(17 * GIB),
                ..req(1, 0)
            },
            "at most 16G",
        ),
        (
            Request {
                mem_bytes: Some(u64::MAX),
                ..req(1, 0)
            },
            "at most 16G",
        ),
        (
            Request {
                cpus: 5,
                numa_local: true,
                ..req(1, 0)
            },
            "largest node has 4",
        ),
        (
            Request {
                mem_bytes: Some(9 * GIB),
                numa_local: true,
                ..req(1, 0)
            },
            "largest node has 8G",
        ),
        (
            Request {
                time_limit_secs: Some(0),
                ..req(1, 0)
            },
            "0 seconds",
        ),
        (
            Request {
                time_limit_secs: Some(3601),
                ..req(1, 0)
            },
            "maximum job lifetime 3600s",
        ),
        (req(1, 5), "enabled: nv:4"),
    ];
    for (r, want) in cases {
        let err = s
            .validate(&r)
            .expect_err(&format!("{r:?} accepted"))
            .to_string();
        assert!(err.contains(want), "{err:?} lacks {want:?}");
    }
}

#[test]
fn rejects_bad_device_lists() {
    let mut m = two_nodes();
    m.devices.push(Device::new(Vendor::Asc, 7, "asc-7", None));
    let m = Machine::new(m.topology.clone(), m.devices);
    let mut s = sched(m, Policy::FifoStrict);
    let dev = |count, vendor, ids: &[u32], exclude: &[u32]| Request {
        devices: DeviceRequest {
            count,
            vendor,
            ids: ids.to_vec(),
            exclude: exclude.to_vec(),
        },
        ..req(1, 0)
    };
    use RequestError as E;
    let cases: Vec<(Request, RequestError)> = vec![
        (dev(1, None, &[0], &[1]), E::IdsWithExclude),
        (
            dev(1, None, &[0, 1], &[]),
            E::CountMismatch { count: 1, ids: 2 },
        ),
        (dev(2, None, &[1, 1], &[]), E::DuplicateId(1)),
        (dev(2, None, &[], &[1, 1]), E::DuplicateId(1)),
        (
            dev(1, Some(Vendor::Nv), &[9], &[]),
            E::UnknownId {
                vendor: Vendor::Nv,
                id: 9,
                have: "0-3".into(),
            },
        ),
        (
            dev(1, Some(Vendor::Mtt), &[], &[]),
            E::NoSuchVendor {
                vendor: Vendor::Mtt,
                have: "nv:4, asc:1".into(),
            },
        ),
        (
            dev(2, None, &[0, 7], &[]),
            E::IdsSpanVendors {
                ids: "0,7".into(),
                have: "nv:4, asc:1".into(),
            },
        ),
        (dev(0, None, &[], &[1]), E::ExcludeWithoutCount),
        (
            dev(1, Some(Vendor::Nv), &[], &[5]),
            E::UnknownId {
                vendor: Vendor::Nv,
                id: 5,
                have: "0-3".into(),
            },
        ),
        (
            dev(1, None, &[], &[9]),
            E::UnknownExcludedId {
                id: 9,
                have: "nv 0-3, asc 7".into(),
            },
        ),
        (
            dev(4, Some(Vendor::Nv), &[], &[0]),
            E::TooManyDevices {
                count: 4,
                have: "nv:4, asc:1".into(),
            },
        ),
    ];
    for (r, want) in cases {
        assert_eq!(s.validate(&r), Err(want), "{r:?}");
    }
    // Excluding an ID of one of several vendors is fine.
    assert!(s.validate(&dev(1, None, &[], &[7])).is_ok());
    // A vendor is settled from exact IDs: 7 exists only for Ascend.
    let d = s.validate(&dev(1, None, &[7], &[])).unwrap();
    assert_eq!(d.devices.vendor, Some(Vendor::Asc));
    // A disabled device cannot be named at submission.
    s.set_disabled(Vendor::Nv, &[2], true).unwrap();
    assert_eq!(
        s.validate(&dev(1, Some(Vendor::Nv), &[2], &[])),
        Err(E::DisabledId {
            vendor: Vendor::Nv,
            id: 2
        })
    );
    assert!(s.validate(&dev(4, Some(Vendor::Nv), &[], &[])).is_err());
    // No accelerators at all.
    let cpu_only = sched(
        Machine::new(Topology::single(2, GIB), vec![]),
        Policy::FifoStrict,
    );
    assert_eq!(cpu_only.validate(&req(1, 1)), Err(E::NoDevices));
}

#[test]
fn set_disabled_validates_whole_list_first() {
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    assert!(s.set_disabled(Vendor::Nv, &[0, 9], true).is_err());
    assert!(
        s.machine().devices.iter().all(|d| !d.disabled),
        "partial change"
    );
    assert_eq!(
        s.set_disabled(Vendor::Nv, &[1, 1], true),
        Err(RequestError::DuplicateId(1))
    );
    s.set_disabled(Vendor::Nv, &[1], true).unwrap();
    s.set_disabled(Vendor::Nv, &[1], true).unwrap();
    assert!(s.machine().devices[1].disabled);
}

// ---- memory budgets ----

#[test]
fn default_budget_is_the_cpus_share_floored_and_exclusive_gets_all() {
    let s = sched(big(), Policy::FifoStrict);
    let r = Request {
        cpus: 4,
        mem_bytes: None,
        ..Default::default()
    };
    let d = s.validate(&r).unwrap();
    assert_eq!(d.mem_bytes, 32 * GIB);
    assert!(d.mem_default);
    let tiny = Scheduler::new(
        Machine::new(Topology::single(64, GIB), vec![]),
        Policy::FifoStrict,
        Limits {
            min_job_mem: 512 << 20,
            ..limits()
        },
    );
    assert_eq!(
        tiny.validate(&Request::default()).unwrap().mem_bytes,
        512 << 20
    );
    let ex = Request {
        exclusive: true,
        mem_bytes: None,
        ..Default::default()
    };
    assert_eq!(s.validate(&ex).unwrap().mem_bytes, 8 * 256 * GIB);
    assert_eq!(s.validate(&req(1, 0)).unwrap().time_limit_secs, 3600);
}

/// The default memory budget a job of `cpus` CPUs is given on `topo`.
fn default_budget_on(topo: Topology) -> impl Fn(u32) -> u64 {
    let s = sched(Machine::new(topo, vec![]), Policy::FifoStrict);
    move |cpus| {
        s.validate(&Request {
            cpus,
            mem_bytes: None,
            ..Default::default()
        })
        .unwrap()
        .mem_bytes
    }
}

#[test]
fn default_budget_on_uneven_nodes_is_the_share_of_the_poorest_node_that_fits() {
    // node0: 4 CPUs, 16 GiB (4 GiB per CPU); node1: 8 CPUs, 8 GiB (1 GiB per CPU).
    let topo = Topology {
        nodes: vec![
            Node {
                id: 0,
                cpus: IdSet::parse_list("0-3").unwrap(),
                mem_bytes: 16 * GIB,
            },
            Node {
                id: 1,
                cpus: IdSet::parse_list("4-11").unwrap(),
                mem_bytes: 8 * GIB,
            },
        ],
    };
    let budget = default_budget_on(topo);
    // Either node can hold 2 CPUs: node1's share, never more than a share of either.
    assert_eq!(budget(2), 2 * GIB);
    // Only node1 has 6 CPUs: its share.
    assert_eq!(budget(6), 6 * GIB);
    // Wider than any node: the machine's share, 12 of 12 CPUs.
    assert_eq!(budget(12), 24 * GIB);
}

// ---- placement ----

#[test]
fn cpu_job_lands_on_one_node_lowest_cpus() {
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    submit(&mut s, 1, req(3, 0));
    let starts = s.schedule(0);
    let a = &starts[0].1;
    assert_eq!(a.cpus.to_list(), "0-2");
    assert_eq!(a.mem_nodes.to_list(), "0");
    assert_eq!(a.mem_charge, vec![(0, GIB)]);
    assert!(!a.spread);
}

#[test]
fn best_fit_keeps_big_holes_open() {
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    submit(&mut s, 1, req(3, 0)); // node 0 (tie, lowest id)
    submit(&mut s, 2, req(1, 0)); // best fit: node 0's last CPU
    submit(&mut s, 3, req(4, 0)); // still fits node 1 whole
    let starts = s.schedule(0);
    assert_eq!(started(&starts), vec![1, 2, 3]);
    assert_eq!(starts[1].1.cpus.to_list(), "3");
    assert_eq!(starts[2].1.cpus.to_list(), "4-7");
}

#[test]
fn gpu_job_gets_cpus_on_its_gpus_node() {
    let mut s = sched(big(), Policy::FifoStrict);
    let r = Request {
        devices: DeviceRequest {
            count: 1,
            vendor: Some(Vendor::Nv),
            ids: vec![5],
            exclude: vec![],
        },
        ..req(4, 0)
    };
    submit(&mut s, 1, r);
    let a = s.schedule(0).remove(0).1;
    assert_eq!(a.devices[0].index, 5);
    assert_eq!(a.devices[0].uuid, "nv-uuid-5");
    assert_eq!(a.cpus.to_list(), "160-163");
    assert_eq!(a.mem_nodes.to_list(), "5");
}

#[test]
fn devices_prefer_one_node_then_lowest_ids() {
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    submit(&mut s, 1, req(1, 1)); // GPU 0, node 0
    submit(&mut s, 2, req(1, 2)); // node 0 has only GPU 1 free: take 2,3 on node 1
    let starts = s.schedule(0);
    let ids = |a: &Allocation| a.devices.iter().map(|d| d.index).collect::<Vec<_>>();
    assert_eq!(ids(&starts[0].1), vec![0]);
    assert_eq!(ids(&starts[1].1), vec![2, 3]);
    assert_eq!(starts[1].1.cpus.to_list(), "4");
    // The last GPU is taken even though it is alone on its node.
    submit(&mut s, 3, req(1, 1));
    assert_eq!(ids(&s.schedule(0)[0].1), vec![1]);
}

#[test]
fn auto_follows_vendor_order_and_exclusions() {
    let mut devs = gpus(Vendor::Hcu, 2, |_| None);
    devs.extend(gpus(Vendor::Asc, 2, |_| None));
    let mut s = sched(
        Machine::new(Topology::single(8, 8 * GIB), devs),
        Policy::FifoStrict,
    );
    submit(&mut s, 1, req(1, 2)); // ascend before hcu
    submit(&mut s, 2, req(1, 1)); // ascend full: hcu
    let x = Request {
        devices: DeviceRequest {
            count: 1,
            vendor: Some(Vendor::Hcu),
            ids: vec![],
            exclude: vec![1],
        },
        ..req(1, 0)
    };
    submit(&mut s, 3, x);
    let starts = s.schedule(0);
    assert_eq!(starts[0].1.devices[0].vendor, Vendor::Asc);
    assert_eq!(starts[1].1.devices[0].vendor, Vendor::Hcu);
    assert_eq!(starts[1].1.devices[0].index, 0);
    assert_eq!(
        starts.len(),
        2,
        "job 3 must not take excluded hcu 1, and hcu 0 is held"
    );
    assert_eq!(
        s.reason(3),
        Some(Reason::Resources(Shortage::Devices {
            vendor: Some(Vendor::Hcu),
            need: 1,
            free: 0
        }))
    );
}

#[test]
fn budget_larger_than_a_node_spreads_unless_numa_local() {
    let mut s = sched(two_nodes(), Policy::EasyBackfill);
    let r = Request {
        mem_bytes: Some(10 * GIB),
        ..req(2, 0)
    };
    submit(&mut s, 1, r.clone());
    let a = s.schedule(0).remove(0).1;
    assert!(a.spread);
    assert_eq!(a.mem_nodes.to_list(), "0-1");
    assert_eq!(a.mem_charge.iter().map(|c| c.1).sum::<u64>(), 10 * GIB);
    assert_eq!(a.mem_bytes, 10 * GIB);
    // Node 0 has 2 GiB... a numa-local 7 GiB job waits and says where.
    let local = Request {
        mem_bytes: Some(7 * GIB),
        numa_local: true,
        ..req(1, 0)
    };
    submit(&mut s, 2, local);
    assert!(s.schedule(0).is_empty());
    match s.reason(2) {
        Some(Reason::Resources(Shortage::Memory {
            node: Some(_),
            need,
            ..
        })) => {
            assert_eq!(need, 7 * GIB)
        }
        other => panic!("unexpected reason {other:?}"),
    }
    s.finish(1);
    let a = s.schedule(0).remove(0).1;
    assert!(!a.spread);
    assert_eq!(a.mem_nodes.len(), 1);
}

#[test]
fn cpus_beyond_a_node_spread_over_nodes() {
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    submit(&mut s, 1, req(6, 0));
    let a = s.schedule(0).remove(0).1;
    assert_eq!(a.cpus.len(), 6);
    assert_eq!(a.cpu_nodes(s.machine()).to_list(), "0-1");
    assert!(a.spread);
    // Both nodes' CPUs, so both nodes' memory, each charged its CPUs' share.
    assert_eq!(a.mem_nodes.to_list(), "0-1");
    assert_eq!(a.mem_charge.iter().map(|c| c.1).sum::<u64>(), a.mem_bytes);
    let cpus_on = |n: u32| {
        a.cpus
            .intersection_len(&s.machine().topology.nodes[n as usize].cpus) as u64
    };
    for (node, bytes) in &a.mem_charge {
        let share = a.mem_bytes * cpus_on(*node) / 6;
        assert!(
            bytes.abs_diff(share) <= 1,
            "node {node}: {bytes} for {share}"
        );
    }
}

#[test]
fn exclusive_waits_for_idle_then_holds_everything() {
    let mut s = sched(two_nodes(), Policy::EasyBackfill);
    submit(&mut s, 1, req(1, 0));
    assert_eq!(started(&s.schedule(0)), vec![1]);
    submit(
        &mut s,
        2,
        Request {
            exclusive: true,
            mem_bytes: None,
            ..req(1, 0)
        },
    );
    submit(&mut s, 3, req(1, 0));
    // Job 3 may use the budget frozen when job 2 blocked.
    assert_eq!(started(&s.schedule(0)), vec![3]);
    assert_eq!(s.reason(2), Some(Reason::Exclusive));
    s.finish(1);
    assert!(s.schedule(0).is_empty(), "job 3 still runs");
    s.finish(3);
    let starts = s.schedule(0);
    assert_eq!(started(&starts), vec![2]);
    let a = &starts[0].1;
    assert_eq!(a.cpus.to_list(), "0-7");
    assert_eq!(a.mem_bytes, 16 * GIB);
    assert!(a.exclusive);
    submit(&mut s, 4, req(1, 0));
    assert!(s.schedule(0).is_empty());
    assert_eq!(s.reason(4), Some(Reason::Exclusive));
    assert!((0..4).all(|slot| s.holder(slot) == Some(2)));
}

#[test]
fn busy_unknown_and_disabled_devices_are_not_allocated() {
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    s.set_health(0, Health::Busy { processes: 2 });
    s.set_health(
        1,
        Health::Unknown {
            error: "NVML timeout".into(),
        },
    );
    s.set_disabled(Vendor::Nv, &[2], true).unwrap();
    submit(&mut s, 1, req(1, 1));
    let a = s.schedule(0).remove(0).1;
    assert_eq!(a.devices[0].index, 3);
    let want = |ids: Vec<u32>| Request {
        devices: DeviceRequest {
            count: ids.len() as u32,
            vendor: Some(Vendor::Nv),
            ids,
            exclude: vec![],
        },
        ..req(1, 0)
    };
    submit(&mut s, 2, want(vec![0]));
    submit(&mut s, 3, want(vec![1]));
    submit(&mut s, 4, want(vec![3]));
    s.set_disabled(Vendor::Nv, &[3], true).unwrap();
    assert!(s.schedule(0).is_empty());
    assert_eq!(s.reason(2), Some(Reason::DevicesBusy));
    assert_eq!(s.reason(3), Some(Reason::DevicesUnknown));
    // GPU 3 is disabled while job 1 holds it: job 1 keeps it, job 4 waits.
    assert_eq!(s.holder(3), Some(1));
    assert_eq!(s.reason(4), Some(Reason::DevicesDisabled));
    s.finish(1);
    s.schedule(0);
    assert_eq!(s.reason(4), Some(Reason::DevicesDisabled));
    s.set_disabled(Vendor::Nv, &[3], false).unwrap();
    s.set_health(0, Health::Ok);
    assert_eq!(started(&s.schedule(0)), vec![2, 4]);
}

#[test]
fn jobs_waiting_on_busy_devices_do_not_block_the_queue() {
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    s.set_health(0, Health::Busy { processes: 1 });
    let r = Request {
        devices: DeviceRequest {
            count: 1,
            vendor: None,
            ids: vec![0],
            exclude: vec![],
        },
        ..req(1, 0)
    };
    submit(&mut s, 1, r);
    submit(&mut s, 2, req(1, 0));
    assert_eq!(started(&s.schedule(0)), vec![2]);
    assert_eq!(s.reason(1), Some(Reason::DevicesBusy));
}

#[test]
fn fifo_strict_names_device_reasons_before_and_after_a_blocked_head() {
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    s.set_health(0, Health::Busy { processes: 1 });
    let on_gpu0 = Request {
        devices: DeviceRequest {
            count: 1,
            vendor: Some(Vendor::Nv),
            ids: vec![0],
            exclude: vec![],
        },
        ..req(1, 0)
    };
    submit(&mut s, 1, req(4, 0));
    assert_eq!(started(&s.schedule(0)), vec![1]);
    // 2: waits on a GPU busy outside xlurm; 3: the head, 8 CPUs while job 1
    // holds 4 of them; 4: after the head, on the busy GPU too; 5: after the
    // head, would fit.
    submit(&mut s, 2, on_gpu0.clone());
    submit(&mut s, 3, req(8, 0));
    submit(&mut s, 4, on_gpu0);
    submit(&mut s, 5, req(1, 0));
    assert!(s.schedule(0).is_empty());
    assert_eq!(s.head(), Some(3));
    assert_eq!(s.reason(2), Some(Reason::DevicesBusy), "before the head");
    assert!(
        matches!(
            s.reason(3),
            Some(Reason::Resources(Shortage::Cpus { need: 8, free: 4 }))
        ),
        "{:?}",
        s.reason(3)
    );
    assert_eq!(s.reason(4), Some(Reason::DevicesBusy), "after the head");
    assert_eq!(s.reason(5), Some(Reason::Priority), "held behind the head");
}

#[test]
fn largest_first_lets_a_small_job_pass_a_larger_one_short_of_gpus() {
    let mut s = sched(two_nodes(), Policy::LargestFirst);
    submit(&mut s, 1, req(1, 1));
    assert_eq!(started(&s.schedule(0)), vec![1]);
    // 4 GPUs wait for job 1's; a later 1-GPU job goes first on what is free.
    submit(&mut s, 2, req(1, 4));
    submit(&mut s, 3, req(1, 1));
    assert_eq!(started(&s.schedule(0)), vec![3]);
    assert_eq!(s.head(), Some(2));
    assert!(
        matches!(
            s.reason(2),
            Some(Reason::Resources(Shortage::Devices { .. }))
        ),
        "{:?}",
        s.reason(2)
    );
}

#[test]
fn max_running_bounds_concurrency() {
    let mut s = Scheduler::new(
        two_nodes(),
        Policy::EasyBackfill,
        Limits {
            max_running: 2,
            ..limits()
        },
    );
    for id in 1..=4 {
        submit(&mut s, id, req(1, 0));
    }
    assert_eq!(started(&s.schedule(0)), vec![1, 2]);
    assert_eq!(s.reason(3), Some(Reason::MaxRunning));
    s.finish(1);
    assert_eq!(started(&s.schedule(0)), vec![3]);
}

// ---- policies: the running example, GPU demands [1, 4, 2, 1, 2] on 4 GPUs ----

fn example(policy: Policy, limit: impl Fn(JobId) -> u64) -> Scheduler {
    let m = Machine::new(
        Topology::single(16, 64 * GIB),
        gpus(Vendor::Nv, 4, |_| Some(0)),
    );
    let mut s = Scheduler::new(m, policy, limits());
    for (i, g) in [1u32, 4, 2, 1, 2].into_iter().enumerate() {
        let id = i as JobId + 1;
        submit(
            &mut s,
            id,
            Request {
                time_limit_secs: Some(limit(id)),
                ..req(1, g)
            },
        );
    }
    s
}

#[test]
fn fifo_strict_stops_at_the_first_blocked_job() {
    let mut s = example(Policy::FifoStrict, |_| 100);
    assert_eq!(started(&s.schedule(0)), vec![1]);
    assert_eq!(s.reason(3), Some(Reason::Priority));
    assert!(matches!(
        s.reason(2),
        Some(Reason::Resources(Shortage::Devices {
            need: 4,
            free: 3,
            ..
        }))
    ));
    s.finish(1);
    assert_eq!(started(&s.schedule(1)), vec![2]);
    s.finish(2);
    assert_eq!(started(&s.schedule(2)), vec![3, 4]);
}

#[test]
fn easy_backfill_fills_the_frozen_budget_then_holds_for_the_head() {
    let mut s = example(Policy::EasyBackfill, |_| 100);
    assert_eq!(started(&s.schedule(0)), vec![1, 3, 4]);
    assert_eq!(
        s.reason(5),
        Some(Reason::Resources(Shortage::Devices {
            vendor: Some(Vendor::Nv),
            need: 2,
            free: 0
        }))
    );
    // Job 3 ends: its 2 GPUs are held for job 2, not given to job 5.
    s.finish(3);
    assert!(s.schedule(1).is_empty());
    assert_eq!(s.reason(5), Some(Reason::Priority));
    // A job submitted later also stays within the (now empty) budget.
    submit(&mut s, 6, req(1, 1));
    assert!(s.schedule(1).is_empty());
    s.finish(1);
    s.finish(4);
    assert_eq!(started(&s.schedule(2)), vec![2]);
}

#[test]
fn strict_backfill_lets_only_jobs_that_end_before_the_reservation_pass() {
    // Job 1 (1 GPU) runs until t=100. Job 2 (4 GPUs) is reserved for t=100.
    // Job 3 (2 GPUs) would end at 200: refused. Job 4 (1 GPU) ends at 50: runs.
    // Job 5 (2 GPUs) would end at 150: refused.
    let mut s = example(Policy::StrictBackfill, |id| match id {
        1 => 100,
        3 => 200,
        4 => 50,
        5 => 150,
        _ => 100,
    });
    assert_eq!(started(&s.schedule(0)), vec![1, 4]);
    assert_eq!(s.reserved_start(), Some((2, 100)));
    assert_eq!(s.reason(3), Some(Reason::Priority));
    assert_eq!(s.reason(5), Some(Reason::Priority));
    s.finish(1);
    s.finish(4);
    assert_eq!(started(&s.schedule(60)), vec![2]);
    // With job 5 ending exactly at the reservation, it may run beside 1 and 4.
    let mut s = example(Policy::StrictBackfill, |id| {
        [0, 100, 100, 200, 50, 100][id as usize]
    });
    assert_eq!(started(&s.schedule(0)), vec![1, 4, 5]);
}

#[test]
fn strict_backfill_lets_long_jobs_use_what_the_head_does_not_need() {
    // 8 GPUs; job 1 holds 4 until t=100; job 2 needs 6: reserved at t=100 with
    // GPUs 0-5. Job 3 (1 GPU, long) may take GPU 6 or 7 now.
    let m = Machine::new(
        Topology::single(16, 64 * GIB),
        gpus(Vendor::Nv, 8, |_| Some(0)),
    );
    let mut s = Scheduler::new(m, Policy::StrictBackfill, limits());
    let g = |n, t| Request {
        time_limit_secs: Some(t),
        ..req(1, n)
    };
    submit(&mut s, 1, g(4, 100));
    s.schedule(0);
    submit(&mut s, 2, g(6, 100));
    submit(&mut s, 3, g(1, 3000));
    submit(&mut s, 4, g(3, 3000));
    let starts = s.schedule(0);
    assert_eq!(started(&starts), vec![3]);
    assert!(starts[0].1.devices[0].index >= 6);
}

#[test]
fn largest_first_orders_by_devices_and_lets_small_jobs_pass() {
    let mut s = example(Policy::LargestFirst, |_| 100);
    assert_eq!(started(&s.schedule(0)), vec![2]);
    s.finish(2);
    assert_eq!(started(&s.schedule(1)), vec![3, 5]);
    s.finish(3);
    assert_eq!(started(&s.schedule(2)), vec![1, 4]);
    // Smaller jobs pass a waiting larger one.
    let mut s = example(Policy::LargestFirst, |_| 100);
    s.set_health(3, Health::Unknown { error: "x".into() });
    assert_eq!(started(&s.schedule(0)), vec![1, 3]);
    assert!(s.reason(2).is_some());
}

#[test]
fn policy_changes_live_and_reorders_the_queue() {
    let mut s = example(Policy::FifoStrict, |_| 100);
    s.set_policy(Policy::LargestFirst);
    assert_eq!(started(&s.schedule(0)), vec![2]);
    assert_eq!(s.policy(), Policy::LargestFirst);
    assert_eq!(
        "easy-backfill".parse::<Policy>().unwrap(),
        Policy::EasyBackfill
    );
    assert!("sjf"
        .parse::<Policy>()
        .unwrap_err()
        .to_string()
        .contains("fifo-strict"));
}

#[test]
fn adopt_and_finish_keep_books_exact() {
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    let free = s.free().clone();
    submit(&mut s, 1, req(2, 2));
    let (id, a) = s.schedule(0).remove(0);
    let mut t = sched(two_nodes(), Policy::FifoStrict);
    t.adopt(id, a.clone(), 100);
    assert_eq!(t.free(), s.free());
    assert_eq!(s.finish(1), Some(a));
    assert_eq!(s.free(), &free);
    assert_eq!(s.finish(1), None);
}

#[test]
fn a_pass_is_deterministic() {
    let run = || {
        let mut s = sched(big(), Policy::EasyBackfill);
        for id in 0..200u64 {
            submit(&mut s, id, req(1 + (id % 7) as u32, (id % 3) as u32));
        }
        s.schedule(0)
    };
    assert_eq!(run(), run());
}

// ---- regressions found by the property tests (tests/core_props.rs) ----

#[test]
fn auto_job_waiting_on_a_held_vendor_blocks_fifo() {
    // GPUs: nv 0 (busy outside xlurm), asc 0 (held by job 1). Job 2 asks for
    // any 1 device: nv is busy, but asc frees up once job 1 ends, so job 2 is
    // the head and fifo-strict must not let job 3 pass it.
    let mut devs = gpus(Vendor::Nv, 1, |_| None);
    devs.extend(gpus(Vendor::Asc, 1, |_| None));
    let mut s = sched(
        Machine::new(Topology::single(4, 8 * GIB), devs),
        Policy::FifoStrict,
    );
    s.set_health(0, Health::Busy { processes: 1 });
    submit(&mut s, 1, req(1, 1));
    assert_eq!(started(&s.schedule(0)), vec![1]);
    submit(&mut s, 2, req(1, 1));
    submit(&mut s, 3, req(1, 0));
    assert!(s.schedule(0).is_empty(), "job 3 overtook job 2");
    assert!(matches!(
        s.reason(2),
        Some(Reason::Resources(Shortage::Devices {
            vendor: Some(Vendor::Asc),
            ..
        }))
    ));
    s.finish(1);
    assert_eq!(started(&s.schedule(1)), vec![2, 3]);
}

#[test]
fn exclusive_job_on_busy_devices_never_becomes_the_head() {
    // Job 1 (exclusive, busy GPU 0) can never run; whether or not the machine
    // is idle it says DevicesBusy and does not take job 3's reservation.
    let m = Machine::new(
        Topology::single(8, 8 * GIB),
        gpus(Vendor::Nv, 1, |_| Some(0)),
    );
    let mut s = Scheduler::new(m, Policy::StrictBackfill, limits());
    s.set_health(0, Health::Busy { processes: 1 });
    let t = |cpus, secs| Request {
        time_limit_secs: Some(secs),
        ..req(cpus, 0)
    };
    submit(
        &mut s,
        1,
        Request {
            exclusive: true,
            ..req(1, 1)
        },
    );
    assert!(s.schedule(0).is_empty());
    assert_eq!(s.reason(1), Some(Reason::DevicesBusy));
    submit(&mut s, 2, t(4, 10));
    submit(&mut s, 3, t(8, 100));
    submit(&mut s, 4, t(1, 1000));
    assert_eq!(started(&s.schedule(0)), vec![2]);
    assert_eq!(s.reserved_start(), Some((3, 10)));
    assert_eq!(s.reason(1), Some(Reason::DevicesBusy));
    // Job 4 would hold a CPU past t=10: refused on every pass.
    assert!(s.schedule(5).is_empty());
    assert_eq!(s.reserved_start(), Some((3, 10)));
    s.finish(2);
    assert_eq!(started(&s.schedule(10)), vec![3]);
}

#[test]
fn cpus_of_a_node_without_memory_left_are_no_use_and_the_reason_says_cpus() {
    // node0: CPUs only (its memory all budgeted below); node1: 4 CPUs, 8 GiB.
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    submit(
        &mut s,
        1,
        Request {
            mem_bytes: Some(8 * GIB),
            ..req(1, 0)
        },
    );
    let a = s.schedule(0).remove(0).1;
    assert_eq!(a.mem_nodes.len(), 1);
    // 6 CPUs: 3 free on the full node are no use; 4 on the other.
    submit(&mut s, 2, req(6, 0));
    assert!(s.schedule(0).is_empty());
    assert_eq!(
        s.reason(2),
        Some(Reason::Resources(Shortage::Cpus { need: 6, free: 4 }))
    );
}

#[test]
fn default_budget_ignores_nodes_without_memory() {
    // node0: 4 CPUs, no memory of its own; node1: 2 CPUs, 4 GiB.
    let topo = Topology::from_nodes(vec![
        Node {
            id: 0,
            cpus: IdSet::range(0, 4),
            mem_bytes: 0,
        },
        Node {
            id: 1,
            cpus: IdSet::range(4, 6),
            mem_bytes: 4 * GIB,
        },
    ]);
    let budget = default_budget_on(topo);
    assert_eq!(budget(1), 2 * GIB, "node1's share, not node0's nothing");
    assert_eq!(budget(3), 2 * GIB, "wider than node1: the machine's share");
}

#[test]
fn numa_local_needs_one_node_with_both_cpus_and_memory() {
    // Node 0: 1 CPU, 4 GiB; node 1: 6 CPUs, 512 MiB; node 2: memory only.
    let topo = Topology::from_nodes(vec![
        Node {
            id: 0,
            cpus: IdSet::range(0, 1),
            mem_bytes: 4 * GIB,
        },
        Node {
            id: 1,
            cpus: IdSet::range(2, 8),
            mem_bytes: GIB / 2,
        },
        Node {
            id: 2,
            cpus: IdSet::new(),
            mem_bytes: 8 * GIB,
        },
    ]);
    let s = sched(Machine::new(topo, vec![]), Policy::FifoStrict);
    let local = |cpus, mem| Request {
        cpus,
        mem_bytes: mem,
        numa_local: true,
        ..Default::default()
    };
    // 2 CPUs fit node 1 only, which has 512M.
    let err = s.validate(&local(2, Some(GIB))).unwrap_err();
    assert_eq!(
        err,
        RequestError::TooMuchMemoryForNode {
            asked: "1G".into(),
            largest: "512M".into()
        }
    );
    // A default budget is the CPUs' share of such a node: 2 of node 1's 6.
    let d = s.validate(&local(2, None)).unwrap();
    assert_eq!(d.mem_bytes, GIB / 2 * 2 / 6);
    assert!(s.validate(&local(1, Some(4 * GIB))).is_ok());
    assert!(matches!(
        s.validate(&local(7, None)),
        Err(RequestError::TooManyCpusForNode { largest: 6, .. })
    ));
}

#[test]
fn easy_backfill_budget_survives_a_pass_that_stops_early() {
    // The example with max_running 3: jobs 1, 3, 4 fill the running limit.
    // A pass that stops at the limit must not forget that job 2 holds the
    // budget: when job 3 ends, its 2 GPUs are still held for job 2, not
    // given to job 5.
    let m = Machine::new(
        Topology::single(16, 64 * GIB),
        gpus(Vendor::Nv, 4, |_| Some(0)),
    );
    let mut s = Scheduler::new(
        m,
        Policy::EasyBackfill,
        Limits {
            max_running: 3,
            ..limits()
        },
    );
    for (i, g) in [1u32, 4, 2, 1, 2].into_iter().enumerate() {
        submit(&mut s, i as JobId + 1, req(1, g));
    }
    assert_eq!(started(&s.schedule(0)), vec![1, 3, 4]);
    assert!(s.schedule(1).is_empty());
    assert_eq!(s.reason(5), Some(Reason::MaxRunning));
    s.finish(3);
    assert!(s.schedule(2).is_empty(), "job 5 took GPUs held for job 2");
    assert_eq!(s.reason(5), Some(Reason::Priority));
    s.finish(1);
    s.finish(4);
    assert_eq!(started(&s.schedule(3)), vec![2]);
}

#[test]
fn adopting_a_running_job_again_replaces_its_allocation() {
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    let free = s.free().clone();
    submit(&mut s, 1, req(2, 1));
    submit(&mut s, 2, req(3, 2));
    let starts = s.schedule(0);
    let (a, b) = (starts[0].1.clone(), starts[1].1.clone());
    s.finish(2);
    let after_a = s.free().clone();
    s.adopt(1, b.clone(), 100);
    s.adopt(1, a.clone(), 100);
    assert_eq!(s.free(), &after_a);
    assert_eq!(s.running_count(), 1);
    assert_eq!(s.finish(1), Some(a));
    assert_eq!(s.free(), &free);
}

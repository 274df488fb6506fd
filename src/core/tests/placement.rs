//! Placement.

use super::*;

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

//! Regressions found by the property tests (tests/core_props.rs).

use super::*;

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

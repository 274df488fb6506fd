//! Memory budgets.

use super::*;

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

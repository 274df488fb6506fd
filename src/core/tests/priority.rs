//! Priority order: fair share, age, nice, and the policies acting on it.

use super::*;
use crate::core::priority::{check_nice, NiceError};

const DAY: u64 = 24 * 3600;
const ALICE: u32 = 1000;
const BOB: u32 = 2000;

fn order(s: &Scheduler) -> Vec<JobId> {
    s.queue_order().collect()
}

/// One node of `cpus` CPUs and `gpus` GPUs.
fn small(cpus: u32, gpus: u32) -> Machine {
    Machine::new(
        Topology::single(cpus, 64 * GIB),
        super::gpus(Vendor::Nv, gpus, |_| Some(0)),
    )
}

#[test]
fn fifo_mode_keeps_submission_order_whatever_the_owners() {
    let mut s = sched(small(1, 0), Policy::FifoStrict);
    s.restore_usage(ledger(0, &[(ALICE, 1e9)]));
    submit_nice(&mut s, 1, req(1, 0), ALICE, 50, 100);
    submit_as(&mut s, 2, req(1, 0), BOB, 0);
    submit_nice(&mut s, 3, req(1, 0), ALICE, 10, -100);
    s.reprioritize(DAY);
    assert_eq!(s.priority_config().mode, PriorityMode::Fifo);
    assert_eq!(order(&s), vec![1, 2, 3]);
    assert_eq!(started(&s.schedule(DAY)), vec![1]);
}

#[test]
fn a_light_users_job_passes_a_heavy_users_backlog() {
    // 2 CPUs; alice queues four 1-CPU jobs, then bob one: bob's job starts
    // before alice's third. In fifo mode it would not.
    let run = |mode: PriorityMode| {
        let prio = PriorityConfig {
            mode,
            ..PriorityConfig::default()
        };
        let mut s = Scheduler::with_priority(small(2, 0), Policy::EasyBackfill, limits(), prio);
        for id in 1..=4 {
            submit_as(&mut s, id, req(1, 0), ALICE, id);
        }
        assert_eq!(started(&s.schedule(10)), vec![1, 2]);
        submit_as(&mut s, 5, req(1, 0), BOB, 20);
        s.reprioritize(30);
        s.finish_at(1, 40);
        started(&s.schedule(40))
    };
    assert_eq!(run(PriorityMode::Fair), vec![5]);
    assert_eq!(run(PriorityMode::Fifo), vec![3]);
}

/// Alice used everything (factor 0.25 beside bob's 1); her job is submitted
/// at 0, bob's `d` seconds later, on a 1-CPU machine held by alice's job 1.
fn race(d: u64) -> JobId {
    let mut s = fair(small(1, 0), Policy::EasyBackfill);
    submit_as(&mut s, 1, req(1, 0), ALICE, 0);
    assert_eq!(started(&s.schedule(0)), vec![1]);
    submit_as(&mut s, 2, req(1, 0), ALICE, 0);
    submit_as(&mut s, 3, req(1, 0), BOB, d);
    s.reprioritize(d + 10);
    let f = s.priority(2, d + 10).unwrap().fairshare;
    assert_eq!(f, 0.25, "alice holds all usage, bob shares with her");
    assert_eq!(s.priority(3, d + 10).unwrap().fairshare, 1.0);
    s.finish_at(1, d + 10);
    s.schedule(d + 10).remove(0).0
}

#[test]
fn age_outweighs_fair_share_exactly_at_the_documented_weights() {
    // bob's edge is 10,000 * (1 - 0.25) = 7,500 points; age gives 20,000
    // points per 7 days, so 7,500 points of age are 0.375 * 7 days.
    let edge = 7 * DAY * 3 / 8;
    assert_eq!(race(100), 3);
    assert_eq!(race(edge - 100), 3);
    assert_eq!(race(edge + 100), 2);
    assert_eq!(race(3 * DAY), 2);
}

#[test]
fn once_both_reach_max_age_fair_share_decides_again() {
    let mut s = fair(small(1, 0), Policy::EasyBackfill);
    s.restore_usage(ledger(0, &[(ALICE, 1e6)]));
    submit_as(&mut s, 1, req(1, 0), ALICE, 0);
    submit_as(&mut s, 2, req(1, 0), BOB, 5 * DAY);
    s.reprioritize(5 * DAY + 1);
    // Alice waited 5 days more than bob: more than bob's edge.
    assert_eq!(order(&s), vec![1, 2]);
    s.reprioritize(14 * DAY);
    let (a, b) = (
        s.priority(1, 14 * DAY).unwrap(),
        s.priority(2, 14 * DAY).unwrap(),
    );
    assert_eq!((a.age, b.age), (1.0, 1.0));
    assert_eq!(order(&s), vec![2, 1]);
}

#[test]
fn nice_lowers_priority_point_for_point() {
    let mut s = fair(small(1, 0), Policy::FifoStrict);
    submit_nice(&mut s, 1, req(1, 0), ALICE, 0, 10);
    submit_as(&mut s, 2, req(1, 0), ALICE, 0);
    submit_nice(&mut s, 3, req(1, 0), ALICE, 0, -10);
    assert_eq!(order(&s), vec![3, 2, 1]);
    let p: Vec<i64> = (1..=3)
        .map(|id| s.priority(id, 0).unwrap().priority)
        .collect();
    assert_eq!(p, vec![9_990, 10_000, 10_010]);
    assert_eq!(check_nice(5, false), Ok(()));
    assert_eq!(check_nice(-5, false), Err(NiceError::NotAdmin(-5)));
    assert_eq!(check_nice(-5, true), Ok(()));
    assert!(matches!(
        check_nice(i32::MIN, true),
        Err(NiceError::OutOfRange(_))
    ));
}

#[test]
fn the_queue_is_in_priority_order_after_every_reprioritize() {
    let mut s = fair(small(1, 0), Policy::EasyBackfill);
    let usages: Vec<(u32, f64)> = (0..8).map(|u| (u, (u * u) as f64 * 1000.0)).collect();
    s.restore_usage(ledger(0, &usages));
    for id in 1..=60u64 {
        let nice = [0, 0, 50, -20][id as usize % 4];
        submit_nice(&mut s, id, req(1, 0), (id % 8) as u32, id * 3000, nice);
    }
    for now in [200_000, 3 * DAY, 9 * DAY] {
        s.reprioritize(now);
        let ids = order(&s);
        assert_eq!(ids.len(), 60);
        for w in ids.windows(2) {
            let (a, b) = (
                s.priority(w[0], now).unwrap(),
                s.priority(w[1], now).unwrap(),
            );
            assert!(
                a.priority >= b.priority,
                "{} before {}: {a:?} {b:?}",
                w[0],
                w[1]
            );
        }
    }
    // Equal owners, times and nice: submission order.
    let mut t = fair(small(1, 0), Policy::EasyBackfill);
    for id in [5, 3, 9, 1] {
        submit_as(&mut t, id, req(1, 0), ALICE, 7);
    }
    assert_eq!(order(&t), vec![1, 3, 5, 9]);
}

/// 4 GPUs; alice (heavy) holds 2 with job 1 until t = 100, and queued job 2
/// (2 GPUs, time limit `t2`) before bob queued job 3 (4 GPUs).
fn gpu_race(policy: Policy, t2: u64) -> Scheduler {
    let mut s = fair(small(8, 4), policy);
    let g = |n, t| Request {
        time_limit_secs: Some(t),
        ..req(1, n)
    };
    submit_as(&mut s, 1, g(2, 100), ALICE, 0);
    assert_eq!(started(&s.schedule(0)), vec![1]);
    submit_as(&mut s, 2, g(2, t2), ALICE, 1);
    submit_as(&mut s, 3, g(4, 100), BOB, 2);
    s.reprioritize(5);
    assert_eq!(order(&s), vec![3, 2]);
    s
}

#[test]
fn fifo_strict_lets_nothing_pass_the_highest_priority_blocked_job() {
    let mut s = gpu_race(Policy::FifoStrict, 50);
    assert!(s.schedule(5).is_empty(), "alice's job 2 passed bob's job 3");
    assert_eq!(s.head(), Some(3));
    assert_eq!(s.reason(2), Some(Reason::Priority));
    s.finish_at(1, 10);
    assert_eq!(started(&s.schedule(10)), vec![3]);
}

#[test]
fn easy_backfill_protects_the_highest_priority_blocked_job() {
    let mut s = gpu_race(Policy::EasyBackfill, 3000);
    // The 2 GPUs idle when job 3 blocked are the budget: job 2 may use them.
    assert_eq!(started(&s.schedule(5)), vec![2]);
    assert_eq!(s.head(), Some(3));
    // Job 1's GPUs, freed later, are held for job 3, not given to alice.
    s.finish_at(1, 10);
    submit_as(&mut s, 4, req(1, 1), ALICE, 10);
    assert!(s.schedule(10).is_empty());
    assert_eq!(s.reason(4), Some(Reason::Priority));
}

#[test]
fn strict_backfill_reserves_for_the_highest_priority_blocked_job() {
    // Job 3 is reserved for t = 100 (job 1's deadline): alice's job 2 may
    // pass only if it ends by then.
    let mut s = gpu_race(Policy::StrictBackfill, 3000);
    assert!(s.schedule(5).is_empty());
    assert_eq!(s.reserved_start(), Some((3, 100)));
    let mut s = gpu_race(Policy::StrictBackfill, 95);
    assert_eq!(started(&s.schedule(5)), vec![2]);
    assert_eq!(s.reserved_start(), Some((3, 100)));
}

#[test]
fn largest_first_orders_by_devices_then_priority() {
    let mut s = fair(small(8, 4), Policy::LargestFirst);
    s.restore_usage(ledger(0, &[(ALICE, 1e6)]));
    submit_as(&mut s, 1, req(1, 1), ALICE, 0);
    submit_as(&mut s, 2, req(1, 2), ALICE, 0);
    submit_as(&mut s, 3, req(1, 1), BOB, 0);
    submit_as(&mut s, 4, req(1, 2), BOB, 0);
    s.reprioritize(1);
    assert_eq!(order(&s), vec![4, 2, 3, 1]);
    // Switching policy keeps the priorities.
    s.set_policy(Policy::FifoStrict);
    assert_eq!(order(&s), vec![3, 4, 1, 2]);
}

#[test]
fn switching_priority_mode_reorders_at_once() {
    let mut s = sched(small(1, 0), Policy::EasyBackfill);
    s.restore_usage(ledger(0, &[(ALICE, 1e6)]));
    submit_as(&mut s, 1, req(1, 0), ALICE, 0);
    submit_as(&mut s, 2, req(1, 0), BOB, 0);
    assert_eq!(order(&s), vec![1, 2]);
    s.set_priority(PriorityConfig::fair());
    assert_eq!(order(&s), vec![2, 1]);
    s.set_priority(PriorityConfig::default());
    assert_eq!(order(&s), vec![1, 2]);
    assert_eq!("fair".parse::<PriorityMode>(), Ok(PriorityMode::Fair));
    assert!("sjf".parse::<PriorityMode>().is_err());
}

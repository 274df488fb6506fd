//! Policies: the running example, GPU demands [1, 4, 2, 1, 2] on 4 GPUs.

use super::*;

pub(super) fn example(policy: Policy, limit: impl Fn(JobId) -> u64) -> Scheduler {
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

//! Fair-share usage: weights, decay, exact charging, the factor, persistence.

use super::*;
use crate::core::fairshare::{factor, Meters};
use crate::core::{UserLimit, UserLimits};
use std::collections::BTreeMap;

const DAY: u64 = 24 * 3600;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn default_weights_count_each_resource_as_its_share_of_the_machine() {
    // 8 x 32 CPUs, 8 x 256 GiB, 8 GPUs: a GPU is 32 CPUs, a GiB 1/8 CPU.
    let w = UsageWeights::for_machine(&big());
    assert_eq!((w.cpu, w.gpu, w.mem_gib), (1.0, 32.0, 0.125));
    let held = Held {
        jobs: 1,
        cpus: 2,
        mem: 16 * GIB,
        devices: 1,
        ..Held::default()
    };
    assert_eq!(w.rate(&held), 2.0 + 32.0 + 2.0);
    // All GPUs cost as much as all CPUs (and as all memory).
    let gpus = Held {
        devices: 8,
        ..Held::default()
    };
    let cpus = Held {
        cpus: 256,
        ..Held::default()
    };
    assert_eq!(w.rate(&gpus), w.rate(&cpus));
    // No devices: they cost nothing rather than dividing by zero.
    let cpu_only = Machine::new(Topology::single(4, 8 * GIB), vec![]);
    assert_eq!(UsageWeights::for_machine(&cpu_only).gpu, 0.0);
}

#[test]
fn usage_halves_every_half_life_and_charging_in_steps_equals_one_charge() {
    let mut once = Meters::new(7 * DAY);
    let mut steps = Meters::new(7 * DAY);
    for m in [&mut once, &mut steps] {
        m.advance(1);
        m.start(1, 1000, 4.0, 1);
    }
    once.advance(1 + 3 * DAY);
    for k in 1..=72 {
        steps.advance(1 + k * 3600);
    }
    let (a, b) = (once.ledger.usage(1000), steps.ledger.usage(1000));
    assert!(close(a, b), "{a} vs {b}");
    // 3 days at rate 4 with a 7-day half-life: h/ln2 * (1 - 2^(-3/7)) * 4.
    let want = 4.0 * (7 * DAY) as f64 / std::f64::consts::LN_2 * (1.0 - (-3.0f64 / 7.0).exp2());
    assert!(close(a, want), "{a} vs {want}");
    assert!(
        a < 4.0 * (3 * DAY) as f64,
        "decay makes it less than rate x time"
    );
    // Stopped, the usage halves in a half-life.
    once.stop(1, 1 + 3 * DAY);
    once.advance(1 + 10 * DAY);
    assert!(close(once.ledger.usage(1000), a / 2.0));
    // Without decay usage is plain resource-seconds.
    let mut flat = Meters::new(0);
    flat.start(7, 5, 2.0, 100);
    flat.advance(1100);
    assert_eq!(flat.ledger.usage(5), 2000.0);
}

#[test]
fn fair_share_factor_follows_slurms_classic_formula() {
    // No usage at all: 1. Exactly at share: 0.5. Everything of two equal shares: 0.25.
    assert_eq!(factor(0.0, 0.0, 1, 2), 1.0);
    assert_eq!(factor(50.0, 100.0, 1, 2), 0.5);
    assert_eq!(factor(100.0, 100.0, 1, 2), 0.25);
    assert_eq!(factor(0.0, 100.0, 1, 2), 1.0);
    // A bigger share softens the same usage; share 0 is the bottom.
    assert!(factor(50.0, 100.0, 3, 4) > factor(50.0, 100.0, 1, 4));
    assert_eq!(factor(0.0, 100.0, 0, 4), 0.0);
}

#[test]
fn running_jobs_are_charged_as_they_run_and_shown_like_sshare() {
    let mut s = fair(two_nodes(), Policy::EasyBackfill);
    submit_as(&mut s, 1, req(2, 0), 1000, 0);
    submit_as(&mut s, 2, req(2, 0), 2000, 0);
    assert_eq!(started(&s.schedule(10)), vec![1, 2]);
    s.finish_at(2, 20);
    let rows = s.share_report(110);
    let (a, b) = (&rows[0], &rows[1]);
    assert_eq!((a.uid, b.uid), (1000, 2000));
    // Job 1 ran 100 s, job 2 10 s, with the same rate: 10:1 (decay over
    // 100 s of a week is negligible).
    assert!((a.raw_usage / b.raw_usage - 10.0).abs() < 0.01, "{rows:?}");
    assert!((a.effective_usage + b.effective_usage - 1.0).abs() < 1e-9);
    assert_eq!((a.norm_shares, b.norm_shares), (0.5, 0.5));
    assert!(a.fair_share < b.fair_share);
    // The report projects to its time without charging: the ledger holds
    // job 1's first 10 s only (charged when job 2 ended).
    assert!(s.usage().usage(1000) < a.raw_usage / 5.0);
    s.reprioritize(110);
    let charged = s.usage().usage(1000);
    assert!(close(charged, a.raw_usage), "{charged} vs {}", a.raw_usage);
}

#[test]
fn the_ledger_survives_a_restart_and_readopted_jobs_are_charged_from_it() {
    let mut s = fair(two_nodes(), Policy::EasyBackfill);
    submit_as(&mut s, 1, req(1, 0), 1000, 0);
    let (id, alloc) = s.schedule(0).remove(0);
    s.reprioritize(1000);
    let saved = serde_json::to_string(s.usage()).unwrap();
    let before = s.usage().usage(1000);
    assert!(before > 0.0);
    // The daemon stops at 1000 and restarts at 1500; job 1 ran throughout.
    let mut t = fair(two_nodes(), Policy::EasyBackfill);
    t.restore_usage(serde_json::from_str(&saved).unwrap());
    let sub = Submission {
        owner: owner(1000),
        nice: 0,
        submitted_at: 0,
        kind: 0,
    };
    t.adopt_for(id, alloc, 3600, sub, Some(0));
    t.reprioritize(1500);
    s.reprioritize(1500);
    // Charged from the ledger's time (1000), not from the start (0) again.
    assert!(close(t.usage().usage(1000), s.usage().usage(1000)));
    assert_eq!(t.usage().at, 1500);
    assert!(t.usage().usage(1000) > before);
}

#[test]
fn a_start_put_back_is_not_charged_and_keeps_its_submission() {
    let mut s = fair(two_nodes(), Policy::EasyBackfill);
    submit_nice(&mut s, 1, req(1, 0), 1000, 5, 7);
    let (id, _) = s.schedule(100).remove(0);
    let demand = s.validate(&req(1, 0)).unwrap();
    assert!(s.put_back(id, demand.clone()));
    assert!(!s.put_back(id, demand));
    s.reprioritize(1000);
    assert_eq!(s.usage().usage(1000), 0.0);
    let sub = s.submission(1).unwrap();
    assert_eq!((sub.owner.uid, sub.nice, sub.submitted_at), (1000, 7, 5));
    assert_eq!(s.pending_count(), 1);
}

#[test]
fn negligible_usage_of_users_without_jobs_is_dropped() {
    let mut s = fair(two_nodes(), Policy::EasyBackfill);
    s.restore_usage(ledger(0, &[(1, 0.5), (2, 5000.0), (3, 0.5)]));
    submit_as(&mut s, 1, req(1, 0), 3, 0);
    s.reprioritize(10);
    let users: Vec<u32> = s.usage().users.keys().copied().collect();
    assert_eq!(users, vec![2, 3], "user 1 dropped, 3 kept for its job");
}

#[test]
fn shares_resolve_user_then_group_then_default_and_weigh_the_factor() {
    let set = |shares| UserLimit {
        shares: Some(shares),
        ..UserLimit::default()
    };
    let limits = UserLimits {
        default: set(2),
        groups: BTreeMap::from([(500, set(3))]),
        users: BTreeMap::from([(1000, set(6))]),
    };
    assert_eq!(limits.shares(1000, Some(500)), Some(6));
    assert_eq!(limits.shares(2000, Some(500)), Some(3));
    assert_eq!(limits.shares(2000, Some(7)), Some(2));
    assert_eq!(limits.shares(2000, None), Some(2));
    assert_eq!(UserLimits::default().shares(1000, Some(500)), None);
    // A limit is not a share, nor a share a limit.
    assert!(!limits.resolve(1000, 500).is_limited());

    // Two users ran the same: the one with 3 shares of 4 keeps the higher
    // factor and the report shows the shares; raising bob's shares live
    // turns the order round.
    let mut s = fair(two_nodes(), Policy::EasyBackfill);
    s.set_user_limits(UserLimits {
        users: BTreeMap::from([(1000, set(3))]),
        ..UserLimits::default()
    });
    submit_as(&mut s, 1, req(2, 0), 1000, 0);
    submit_as(&mut s, 2, req(2, 0), 2000, 0);
    assert_eq!(started(&s.schedule(10)), vec![1, 2]);
    s.finish_at(1, 110);
    s.finish_at(2, 110);
    s.reprioritize(110);
    let rows = s.share_report(110);
    assert_eq!((rows[0].raw_shares, rows[1].raw_shares), (3, 1));
    assert_eq!((rows[0].norm_shares, rows[1].norm_shares), (0.75, 0.25));
    assert!(rows[0].fair_share > rows[1].fair_share, "{rows:?}");
    submit_as(&mut s, 3, req(2, 0), 1000, 120);
    submit_as(&mut s, 4, req(2, 0), 2000, 120);
    let (p3, p4) = (s.priority(3, 120).unwrap(), s.priority(4, 120).unwrap());
    assert!(p3.priority > p4.priority, "{p3:?} {p4:?}");
    s.set_user_limits(UserLimits {
        users: BTreeMap::from([(1000, set(3)), (2000, set(9))]),
        ..UserLimits::default()
    });
    let (p3, p4) = (s.priority(3, 120).unwrap(), s.priority(4, 120).unwrap());
    assert!(p4.priority > p3.priority, "{p3:?} {p4:?}");
}

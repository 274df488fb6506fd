//! Estimated starts.

use super::policies::example;
use super::*;
use crate::core::estimate::DEPTH;

fn at(time: u64) -> Option<Estimate> {
    Some(Estimate::At { time })
}

#[test]
fn strict_backfill_estimates_match_the_reservation_and_plan_behind_it() {
    let mut s = example(Policy::StrictBackfill, |id| {
        [0, 100, 100, 200, 50, 150][id as usize]
    });
    assert_eq!(started(&s.schedule(0)), vec![1, 4]);
    assert_eq!(s.reserved_start(), Some((2, 100)));
    assert_eq!(s.estimated_start(2, 0), at(100));
    // Job 3 (2 GPUs) and 5 (2 GPUs) follow job 2 (ends at 200), side by side.
    assert_eq!(s.estimated_start(3, 0), at(200));
    assert_eq!(s.estimated_start(5, 0), at(200));
    assert_eq!(s.estimated_start(1, 0), None, "running");
    let all = s.estimates(0, 10, false);
    assert_eq!(
        all.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![2, 3, 5]
    );
}

#[test]
fn a_job_that_fits_now_is_estimated_now_and_fifo_strict_keeps_order() {
    let mut s = example(Policy::FifoStrict, |id| {
        [0, 100, 100, 30, 50, 40][id as usize]
    });
    assert_eq!(s.estimated_start(1, 5), at(5));
    s.schedule(0);
    // Job 4 (1 GPU) would fit now, but fifo-strict holds it behind job 2
    // (starts at 100, ends at 200); it starts beside job 3 (2 GPUs, 30 s).
    assert_eq!(s.estimated_start(2, 0), at(100));
    assert_eq!(s.estimated_start(3, 0), at(200));
    assert_eq!(s.estimated_start(4, 0), at(200));
    // Job 5 (2 GPUs) fits once job 3 ends (job 4 holds one until 250).
    assert_eq!(s.estimated_start(5, 0), at(230));
}

#[test]
fn starts_that_cannot_be_bounded_say_why() {
    let m = Machine::new(
        Topology::single(4, 16 * GIB),
        gpus(Vendor::Nv, 2, |_| Some(0)),
    );
    let mut s = Scheduler::new(m, Policy::FifoStrict, limits());
    // A running job without a time limit holds all CPUs.
    submit(&mut s, 1, req(4, 0));
    let (id, alloc) = s.schedule(0).remove(0);
    s.adopt(id, alloc, u64::MAX);
    submit(&mut s, 2, req(1, 0));
    let e = s.estimated_start(2, 0).unwrap();
    assert_eq!(e, Estimate::Unknown(Unknown::NoTimeLimit { job: 1 }));
    assert_eq!(e.to_string(), "unknown: running job 1 has no time limit");
    // Behind it, under fifo-strict.
    submit(&mut s, 3, req(1, 0));
    assert_eq!(
        s.estimated_start(3, 0),
        Some(Estimate::Unknown(Unknown::Behind { job: 2 }))
    );
    // A device busy outside xlurm: no end frees it.
    s.set_health(0, Health::Busy { processes: 1 });
    s.set_disabled(Vendor::Nv, &[1], true).unwrap();
    s.finish(1);
    submit(&mut s, 4, req(1, 1));
    assert!(matches!(
        s.estimated_start(4, 0),
        Some(Estimate::Unknown(Unknown::Devices { .. }))
    ));
    assert_eq!(s.estimated_start(2, 0), at(0));
}

#[test]
fn an_owners_limit_delays_the_estimate_until_their_own_job_ends() {
    let m = Machine::new(Topology::single(8, 32 * GIB), vec![]);
    let mut s = Scheduler::new(m, Policy::EasyBackfill, limits());
    let mut l = UserLimits::default();
    l.default.running_jobs = Some(1);
    s.set_user_limits(l);
    let t = |secs| Request {
        time_limit_secs: Some(secs),
        ..req(1, 0)
    };
    submit_as(&mut s, 1, t(100), 1000, 0);
    s.schedule(0);
    submit_as(&mut s, 2, t(100), 1000, 0);
    submit_as(&mut s, 3, t(100), 2000, 0);
    assert_eq!(s.estimated_start(2, 0), at(100));
    assert_eq!(s.estimated_start(3, 0), at(0));
    // A limit the job alone exceeds: never.
    let mut l = UserLimits::default();
    l.default.cpus = Some(1);
    s.set_user_limits(l);
    submit_as(&mut s, 4, req(2, 0), 1000, 0);
    assert!(matches!(
        s.estimated_start(4, 0),
        Some(Estimate::Unknown(Unknown::UserLimit { .. }))
    ));
}

#[test]
fn the_plan_looks_only_so_deep() {
    let m = Machine::new(Topology::single(1, 8 * GIB), vec![]);
    let mut s = Scheduler::new(m, Policy::EasyBackfill, limits());
    for id in 1..=(DEPTH as u64 + 2) {
        submit(&mut s, id, req(1, 0));
    }
    assert_eq!(
        s.estimated_start(DEPTH as u64, 0),
        at(3600 * (DEPTH as u64 - 1))
    );
    assert_eq!(
        s.estimated_start(DEPTH as u64 + 1, 0),
        Some(Estimate::Unknown(Unknown::TooDeep { depth: DEPTH }))
    );
    let deep = Estimate::Unknown(Unknown::TooDeep { depth: DEPTH });
    assert_eq!(s.starts(DEPTH as u64 + 1, 0), Some((deep.clone(), deep)));
    let json = serde_json::to_value(s.estimated_start(1, 0).unwrap()).unwrap();
    assert_eq!(json, serde_json::json!({"start": "at", "time": 0}));
}

#[test]
fn expected_starts_use_what_jobs_of_the_same_kind_took() {
    // 4 CPUs; kind 7 jobs have limits of 1000 s but completed in 100 s.
    let machine = Machine::new(Topology::single(4, 8 * GIB), vec![]);
    let mut s = fair(machine, Policy::StrictBackfill);
    let job = |cpus: u32| Request {
        time_limit_secs: Some(1000),
        ..req(cpus, 0)
    };
    let sub = |kind: u64| Submission {
        owner: owner(1000),
        nice: 0,
        submitted_at: 0,
        kind,
    };
    let queue = |s: &mut Scheduler, id: JobId, kind: u64| {
        let d = s.validate(&job(4)).unwrap();
        s.enqueue_for(id, d, sub(kind));
    };
    // No history: the expected start is the bound.
    queue(&mut s, 1, 7);
    assert_eq!(started(&s.schedule(10)), vec![1]);
    queue(&mut s, 2, 7);
    queue(&mut s, 3, 8);
    assert_eq!(s.estimated_start(2, 10), at(1010));
    assert_eq!(s.expected_start(2, 10), at(1010));
    // Completed kind-7 runs took 100 s (median of 100, 90, 5000).
    for took in [100, 90, 5000] {
        s.record_runtime(7, 0, took);
    }
    // Running job 1 (kind 7, started at 10) is expected to end at 110; job 2
    // (kind 7) to run 100 s after it; job 3 (kind 8: no history) starts then.
    assert_eq!(s.expected_start(2, 10), at(110));
    assert_eq!(s.expected_start(3, 10), at(210));
    // The bounds stay what the time limits give.
    assert_eq!(s.estimated_start(2, 10), at(1010));
    assert_eq!(s.estimated_start(3, 10), at(2010));
    let all = s.estimates(10, 10, true);
    assert_eq!(all, vec![(2, at(110).unwrap()), (3, at(210).unwrap())]);
    // A job running past what its kind took is expected to end any moment.
    assert_eq!(s.expected_start(2, 500), at(501));
    // GetJob's one walk gives both, as the two walks do.
    for (id, now) in [(2, 10), (3, 10), (2, 500), (3, 500)] {
        let both = s.starts(id, now).unwrap();
        assert_eq!(
            Some(both.0),
            s.estimated_start(id, now),
            "job {id} at {now}"
        );
        assert_eq!(Some(both.1), s.expected_start(id, now), "job {id} at {now}");
    }
    assert_ne!(s.starts(3, 10).map(|b| b.0), s.starts(3, 10).map(|b| b.1));
    assert_eq!(s.starts(1, 10), None, "running: not queued");
}

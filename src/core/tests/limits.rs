//! Per-user limits: resolution, the pass, reasons, the submission check.

use super::*;

const ALICE: u32 = 1000;
const BOB: u32 = 2000;

fn gpu_box() -> Machine {
    Machine::new(
        Topology::single(16, 64 * GIB),
        gpus(Vendor::Nv, 8, |_| Some(0)),
    )
}

fn with(limits: UserLimits, policy: Policy, machine: Machine) -> Scheduler {
    let mut s = fair(machine, policy);
    s.set_user_limits(limits);
    s
}

fn gpus_for(uid: u32, n: u32) -> UserLimits {
    let mut l = UserLimits::default();
    l.users.insert(
        uid,
        UserLimit {
            gpus: Some(n),
            ..Default::default()
        },
    );
    l
}

#[test]
fn each_limit_resolves_user_then_group_then_default() {
    let mut l = UserLimits {
        default: UserLimit {
            cpus: Some(8),
            gpus: Some(2),
            running_jobs: Some(10),
            ..Default::default()
        },
        ..Default::default()
    };
    l.groups.insert(
        100,
        UserLimit {
            cpus: Some(16),
            gpus: Some(4),
            ..Default::default()
        },
    );
    l.users.insert(
        ALICE,
        UserLimit {
            gpus: Some(6),
            ..Default::default()
        },
    );
    let r = l.resolve(ALICE, 100);
    assert_eq!(r.gpus, Some((6, Scope::User(ALICE))));
    assert_eq!(r.cpus, Some((16, Scope::Group(100))));
    assert_eq!(r.running_jobs, Some((10, Scope::Default)));
    assert_eq!(r.mem_bytes, None);
    let r = l.resolve(BOB, 200);
    assert_eq!(r.gpus, Some((2, Scope::Default)));
    assert!(UserLimits::default()
        .resolve(ALICE, 1)
        .headroom(&Held::default(), &big())
        .admits(&crate::core::alloc::Need::of(
            &sched(big(), Policy::FifoStrict)
                .validate(&req(256, 8))
                .unwrap()
        )));
    // The settings read and write as JSON (the daemon's file), unknown keys refused.
    let json = serde_json::to_string(&l).unwrap();
    assert_eq!(serde_json::from_str::<UserLimits>(&json).unwrap(), l);
    assert!(serde_json::from_str::<UserLimits>(r#"{"default":{"gpu":1}}"#).is_err());
}

#[test]
fn a_job_over_its_owners_limit_waits_with_user_limit_and_blocks_nobody() {
    // alice may hold 4 GPUs. Under fifo-strict her second 4-GPU job waits on
    // her limit, and bob's later GPU job runs past it.
    let mut s = with(gpus_for(ALICE, 4), Policy::FifoStrict, gpu_box());
    submit_as(&mut s, 1, req(1, 4), ALICE, 0);
    submit_as(&mut s, 2, req(1, 4), ALICE, 0);
    submit_as(&mut s, 3, req(1, 2), BOB, 0);
    assert_eq!(started(&s.schedule(0)), vec![1, 3]);
    let r = s.reason(2).unwrap();
    assert_eq!(r.to_string(), "UserLimit (GPUs: 4 of 4 in use)");
    assert_eq!(r.name(), "UserLimit");
    assert_eq!(s.head(), None, "a job held by its limit is not the head");
    // The reason travels as JSON with what ran out.
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["reason"], "user_limit");
    assert_eq!(json["resource"], "gpus");
    assert_eq!(json["in_use"], 4);
    assert_eq!(serde_json::from_value::<Reason>(json).unwrap(), r);
    s.finish_at(1, 10);
    assert_eq!(started(&s.schedule(10)), vec![2]);
}

#[test]
fn every_resource_limit_holds_jobs_back_and_says_which() {
    let cases: Vec<(UserLimit, Request, &str)> = vec![
        (
            UserLimit {
                running_jobs: Some(1),
                ..Default::default()
            },
            req(1, 0),
            "UserLimit (running jobs: 1 of 1 in use)",
        ),
        (
            UserLimit {
                cpus: Some(6),
                ..Default::default()
            },
            req(4, 0),
            "UserLimit (CPUs: 4 of 6 in use, needs 4)",
        ),
        (
            UserLimit {
                mem_bytes: Some(3 * GIB),
                ..Default::default()
            },
            Request {
                mem_bytes: Some(2 * GIB),
                ..req(1, 0)
            },
            "UserLimit (memory: 2G of 3G in use, needs 2G)",
        ),
        (
            UserLimit {
                gpus_per_vendor: [(Vendor::Nv, 3)].into_iter().collect(),
                ..Default::default()
            },
            Request {
                devices: DeviceRequest {
                    count: 2,
                    vendor: Some(Vendor::Nv),
                    ..Default::default()
                },
                ..req(1, 0)
            },
            "UserLimit (nv GPUs: 2 of 3 in use, needs 2)",
        ),
    ];
    for (limit, r, want) in cases {
        let l = UserLimits {
            default: limit,
            ..Default::default()
        };
        let mut s = with(l, Policy::EasyBackfill, gpu_box());
        submit_as(&mut s, 1, r.clone(), ALICE, 0);
        submit_as(&mut s, 2, r.clone(), ALICE, 0);
        submit_as(&mut s, 3, r, BOB, 0);
        assert_eq!(started(&s.schedule(0)), vec![1, 3], "{want}");
        assert_eq!(s.reason(2).unwrap().to_string(), want);
    }
}

#[test]
fn an_auto_job_uses_a_vendor_still_within_its_owners_limit() {
    // nv 0-1, asc 0-1; alice may hold 1 nv device. Her second auto job gets asc.
    let mut devs = gpus(Vendor::Nv, 2, |_| Some(0));
    devs.extend(gpus(Vendor::Asc, 2, |_| Some(0)));
    let m = Machine::new(Topology::single(8, 32 * GIB), devs);
    let mut l = UserLimits::default();
    l.default.gpus_per_vendor.insert(Vendor::Nv, 1);
    l.default.gpus_per_vendor.insert(Vendor::Asc, 1);
    let mut s = with(l, Policy::EasyBackfill, m);
    for id in 1..=3 {
        submit_as(&mut s, id, req(1, 1), ALICE, 0);
    }
    let starts = s.schedule(0);
    let vendors: Vec<Vendor> = starts.iter().map(|(_, a)| a.devices[0].vendor).collect();
    assert_eq!(vendors, vec![Vendor::Nv, Vendor::Asc]);
    let r = s.reason(3).unwrap();
    assert_eq!(r.to_string(), "UserLimit (nv GPUs: 1 of 1 in use)");
    let held = s.user_use(ALICE).unwrap();
    assert_eq!((held.held.devices, held.pending), (2, 1));
}

#[test]
fn requests_that_never_fit_the_limit_are_refused_naming_it() {
    let mut l = gpus_for(ALICE, 4);
    l.groups.insert(
        7,
        UserLimit {
            cpus: Some(8),
            pending_jobs: Some(2),
            ..Default::default()
        },
    );
    let mut s = with(l, Policy::EasyBackfill, gpu_box());
    let alice = Owner { uid: ALICE, gid: 7 };
    let d = |r: Request| s.validate(&r).unwrap();
    let e = s.check_submit(alice, &d(req(1, 6))).unwrap_err();
    assert_eq!(e.resource(), Resource::Gpus);
    assert_eq!(
        e.to_string(),
        "asks for 6 GPUs, but the limit set for user 1000 is 4 at once"
    );
    let e = s.check_submit(alice, &d(req(9, 0))).unwrap_err();
    assert!(e.to_string().contains("group 7"), "{e}");
    let exclusive = Request {
        exclusive: true,
        ..req(1, 0)
    };
    assert_eq!(
        s.check_submit(alice, &d(exclusive)).unwrap_err().resource(),
        Resource::Cpus
    );
    assert_eq!(s.check_submit(alice, &d(req(8, 4))), Ok(()));
    // Bob is not in group 7: no limits.
    assert_eq!(s.check_submit(owner(BOB), &d(req(16, 8))), Ok(()));
    // Pending jobs: two may wait, the third is refused.
    let ok = d(req(1, 0));
    for id in 1..=2 {
        assert_eq!(s.check_submit(alice, &ok), Ok(()));
        s.enqueue_for(
            id,
            ok.clone(),
            Submission {
                owner: alice,
                nice: 0,
                submitted_at: 0,
                kind: 0,
            },
        );
    }
    let e = s.check_submit(alice, &ok).unwrap_err();
    assert_eq!(e.resource(), Resource::PendingJobs);
    assert!(e.to_string().starts_with("2 pending jobs already"), "{e}");
}

#[test]
fn lowering_a_limit_stops_nothing_and_holds_new_starts() {
    let mut s = with(UserLimits::default(), Policy::EasyBackfill, gpu_box());
    for id in 1..=3 {
        submit_as(&mut s, id, req(1, 2), ALICE, 0);
    }
    assert_eq!(started(&s.schedule(0)), vec![1, 2, 3]);
    s.set_user_limits(gpus_for(ALICE, 2));
    submit_as(&mut s, 4, req(1, 1), ALICE, 1);
    assert!(s.schedule(1).is_empty());
    assert_eq!(s.running_count(), 3);
    assert_eq!(
        s.reason(4).unwrap().to_string(),
        "UserLimit (GPUs: 6 of 2 in use)"
    );
    for id in 1..=3 {
        s.finish_at(id, 2);
    }
    assert_eq!(started(&s.schedule(2)), vec![4]);
    assert_eq!(s.user_limits(), &gpus_for(ALICE, 2));
}

#[test]
fn the_heads_owner_cannot_spend_the_limit_the_head_needs() {
    // 8 GPUs; bob holds 6. alice may hold 4: her 4-GPU job 2 is the head,
    // so her later 1-GPU job 3 must not backfill (at the head's start she
    // would be over her limit); bob's job 4 may.
    for policy in [Policy::EasyBackfill, Policy::StrictBackfill] {
        let mut s = sched(gpu_box(), policy);
        s.set_user_limits(gpus_for(ALICE, 4));
        let g = |n, t| Request {
            time_limit_secs: Some(t),
            ..req(1, n)
        };
        submit_as(&mut s, 1, g(6, 100), BOB, 0);
        assert_eq!(started(&s.schedule(0)), vec![1]);
        submit_as(&mut s, 2, g(4, 100), ALICE, 1);
        submit_as(&mut s, 3, g(1, 3000), ALICE, 2);
        submit_as(&mut s, 4, g(1, 3000), BOB, 3);
        assert_eq!(started(&s.schedule(5)), vec![4], "{policy}");
        assert_eq!(s.head(), Some(2));
        assert_eq!(s.reason(3), Some(Reason::Priority));
        s.finish_at(1, 100);
        assert_eq!(started(&s.schedule(100)), vec![2], "{policy}");
    }
}

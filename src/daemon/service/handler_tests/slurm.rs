//! Slurm's workflows through the daemon's handlers: holds (and, as they
//! come, dependencies and arrays).

use super::*;
use crate::core::Reason;
use crate::daemon::job::Hold;

const ALICE: u32 = 1000;
const BOB: u32 = 1001;

fn sleep_held() -> Spec {
    spec(vec![
        entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
        entry("cwd", "/"),
        entry("hold", true),
    ])
}

async fn reason(d: &Daemon<MemoryUnits>, id: JobId) -> Option<Reason> {
    d.state.lock().await.reason(id)
}

#[tokio::test]
async fn a_held_job_waits_out_of_the_queue_until_released_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| s.budget.jobs = 10).await;
    let held = d.submit(ALICE, vec![sleep_held()]).await.unwrap()[0].id;
    let other = d.submit(ALICE, vec![sleep_spec()]).await.unwrap()[0].id;
    d.schedule().await;
    wait_state(&d, other, JobState::Running).await;
    assert_eq!(job(&d, held).await.state(), JobState::Pending);
    assert_eq!(
        reason(&d, held).await,
        Some(Reason::Held { by_admin: false })
    );
    assert!(
        !d.state.lock().await.sched.is_pending(held),
        "a held job is not in the scheduler's queue"
    );
    assert_eq!(
        d.state.lock().await.counts(),
        (1, 1),
        "a held job counts as pending (xinfo, systemctl status)"
    );
    // The hold is on disk: a restart keeps it held.
    drop(d);
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| s.budget.jobs = 10).await;
    assert_eq!(job(&d, held).await.hold(), Some(Hold::User));
    d.schedule().await;
    assert_eq!(job(&d, held).await.state(), JobState::Pending);
    assert_eq!(
        reason(&d, held).await.map(|r| r.name()),
        Some("JobHeldUser")
    );
    // Someone else may not release it; its owner may.
    assert!(matches!(
        d.release(BOB, held, false).await,
        Err(ApiError::PermissionDenied(_))
    ));
    assert!(d.release(ALICE, held, false).await.unwrap());
    assert!(
        !d.release(ALICE, held, false).await.unwrap(),
        "not held now"
    );
    d.schedule().await;
    wait_state(&d, held, JobState::Running).await;
    // A running job cannot be held.
    assert!(matches!(
        d.hold(ALICE, held, false).await,
        Err(ApiError::WrongState(_))
    ));
}

#[tokio::test]
async fn an_admin_hold_is_released_by_an_admin_only_and_a_user_hold_does_not_weaken_it() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| s.budget.jobs = 10).await;
    // Two 2-CPU jobs fill the 4 CPUs, so the third waits.
    let fill = spec(vec![
        entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
        entry("cwd", "/"),
        entry("cpus", 2u32),
    ]);
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(d.submit(ALICE, vec![fill.clone()]).await.unwrap()[0].id);
    }
    let last = ids[2];
    // Bob may not hold alice's job; an admin (polkit) or root may.
    assert!(matches!(
        d.hold(BOB, last, false).await,
        Err(ApiError::PermissionDenied(_))
    ));
    assert!(d.hold(BOB, last, true).await.unwrap());
    assert_eq!(job(&d, last).await.hold(), Some(Hold::Admin));
    assert!(
        !d.hold(ALICE, last, false).await.unwrap(),
        "stays an admin's hold"
    );
    assert_eq!(job(&d, last).await.hold(), Some(Hold::Admin));
    assert_eq!(
        reason(&d, last).await.map(|r| r.name()),
        Some("JobHeldAdmin")
    );
    // Its owner cannot release an admin's hold (nothing changes).
    assert!(matches!(
        d.release(ALICE, last, false).await,
        Err(ApiError::PermissionDenied(_))
    ));
    assert_eq!(on_disk(dir.path())[&last], JobState::Pending);
    assert_eq!(job(&d, last).await.hold(), Some(Hold::Admin));
    // Held, it is not the head: nothing behind it is blocked by it.
    d.schedule().await;
    wait_state(&d, ids[0], JobState::Running).await;
    wait_state(&d, ids[1], JobState::Running).await;
    assert_eq!(d.state.lock().await.sched.head(), None);
    assert!(d.release(0, last, false).await.unwrap(), "root releases it");
    assert_eq!(job(&d, last).await.hold(), None);
    d.schedule().await;
    assert_eq!(reason(&d, last).await.map(|r| r.name()), Some("Resources"));
    // Holding and releasing an unknown or ended job says so.
    assert!(matches!(
        d.hold(ALICE, 999, false).await,
        Err(ApiError::NoSuchJob(_))
    ));
}

#[test]
fn who_holds_decides_the_kind_of_hold() {
    assert_eq!(hold_by(ALICE, ALICE), Hold::User);
    assert_eq!(hold_by(BOB, ALICE), Hold::Admin);
    assert_eq!(hold_by(0, 0), Hold::Admin, "root's own hold is an admin's");
    assert_eq!(hold_by(0, ALICE), Hold::Admin);
}

fn sleep_after(dependency: &str, kill: bool) -> Spec {
    let mut pairs = vec![
        entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
        entry("cwd", "/"),
        entry("dependency", dependency),
    ];
    if kill {
        pairs.push(entry("kill_on_invalid_dep", true));
    }
    spec(pairs)
}

async fn submit(d: &Arc<Daemon<MemoryUnits>>, uid: u32, spec: Spec) -> JobId {
    d.submit(uid, vec![spec]).await.unwrap()[0].id
}

/// Ends running job `id` with exit `status` (0: COMPLETED, else FAILED) and
/// waits for the end to be recorded.
async fn end(d: &Arc<Daemon<MemoryUnits>>, id: JobId, status: i32) {
    let unit = crate::unit_name::of_job(id);
    until_runs(d, id).await;
    let result = if status == 0 { "success" } else { "exit-code" };
    d.systemd.end(&unit, result, 1, status);
    d.reconcile(id).await;
    let want = if status == 0 {
        JobState::Completed
    } else {
        JobState::Failed
    };
    wait_state(d, id, want).await;
}

async fn deps_daemon(dir: &std::path::Path) -> (Arc<Daemon<MemoryUnits>>, Changes) {
    daemon_with(dir, MemoryUnits::default(), |s| s.budget.jobs = 100).await
}

/// The daemon started again over the same state and the same units (a
/// restart of xlurmd, not of the machine).
async fn restart(
    d: Arc<Daemon<MemoryUnits>>,
    dir: &std::path::Path,
) -> (Arc<Daemon<MemoryUnits>>, Changes) {
    let manager = std::mem::take(&mut *d.systemd.m.lock().unwrap());
    drop(d);
    let units = MemoryUnits::default();
    *units.m.lock().unwrap() = manager;
    daemon_with(dir, units, |s| s.budget.jobs = 100).await
}

#[tokio::test]
async fn an_afterok_chain_runs_in_order_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = deps_daemon(dir.path()).await;
    let a = submit(&d, ALICE, sleep_spec()).await;
    let b = submit(&d, ALICE, sleep_after(&format!("afterok:{a}"), false)).await;
    let c = submit(&d, ALICE, sleep_after(&format!("afterok:{b}"), false)).await;
    d.schedule().await;
    wait_state(&d, a, JobState::Running).await;
    for id in [b, c] {
        assert_eq!(job(&d, id).await.state(), JobState::Pending);
        assert_eq!(reason(&d, id).await, Some(Reason::Dependency));
    }
    until_runs(&d, a).await;
    // A restart reads the dependencies back and still waits.
    let (d, _c) = restart(d, dir.path()).await;
    d.schedule().await;
    assert_eq!(reason(&d, b).await, Some(Reason::Dependency));
    assert_eq!(
        job(&d, c).await.after().unwrap().dependency.to_string(),
        format!("afterok:{b}")
    );
    end(&d, a, 0).await;
    d.schedule().await;
    wait_state(&d, b, JobState::Running).await;
    assert_eq!(job(&d, c).await.state(), JobState::Pending, "c waits for b");
    end(&d, b, 0).await;
    d.schedule().await;
    let (jb, jc) = (job(&d, b).await, wait_state(&d, c, JobState::Running).await);
    assert!(jc.start_usec() >= jb.end_usec());
}

#[tokio::test]
async fn afternotok_runs_after_a_failure_only_and_an_unmeetable_one_waits_or_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = deps_daemon(dir.path()).await;
    let ok = submit(&d, ALICE, sleep_spec()).await;
    let bad = submit(&d, ALICE, sleep_spec()).await;
    let on_fail_of_ok = submit(&d, ALICE, sleep_after(&format!("afternotok:{ok}"), false)).await;
    let on_fail_of_bad = submit(&d, ALICE, sleep_after(&format!("afternotok:{bad}"), false)).await;
    let on_ok_of_bad = submit(&d, ALICE, sleep_after(&format!("afterok:{bad}"), false)).await;
    let killed = submit(&d, ALICE, sleep_after(&format!("afterok:{bad}"), true)).await;
    let after_kill = submit(&d, ALICE, sleep_after(&format!("afterany:{killed}"), false)).await;
    d.schedule().await;
    wait_state(&d, ok, JobState::Running).await;
    wait_state(&d, bad, JobState::Running).await;
    end(&d, ok, 0).await;
    end(&d, bad, 3).await;
    d.schedule().await;
    wait_state(&d, on_fail_of_bad, JobState::Running).await;
    assert_eq!(
        reason(&d, on_fail_of_ok).await,
        Some(Reason::DependencyNeverSatisfied),
        "its dependee completed: it waits until cancelled, as in Slurm"
    );
    assert_eq!(job(&d, on_fail_of_ok).await.state(), JobState::Pending);
    assert_eq!(
        reason(&d, on_ok_of_bad).await,
        Some(Reason::DependencyNeverSatisfied)
    );
    // --kill-on-invalid-dep=yes: cancelled, saying why, and on disk.
    let k = wait_state(&d, killed, JobState::Cancelled).await;
    assert!(
        k.outcome()
            .unwrap()
            .detail
            .contains("DependencyNeverSatisfied"),
        "{:?}",
        k.outcome()
    );
    assert_eq!(on_disk(dir.path())[&killed], JobState::Cancelled);
    // Whoever waited on the cancelled job sees its end.
    wait_state(&d, after_kill, JobState::Running).await;
    // Submitted now, on a job that already failed: never met at once.
    let late = submit(&d, ALICE, sleep_after(&format!("afterok:{bad}"), true)).await;
    assert_eq!(job(&d, late).await.state(), JobState::Cancelled);
}

#[tokio::test]
async fn after_waits_for_a_start_any_for_one_of_several_and_singleton_for_its_namesake() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = deps_daemon(dir.path()).await;
    let held = submit(&d, ALICE, sleep_held()).await;
    let a = submit(&d, ALICE, sleep_spec()).await;
    let after_held = submit(&d, ALICE, sleep_after(&format!("after:{held}"), false)).await;
    let either = submit(
        &d,
        ALICE,
        sleep_after(&format!("afterok:{held}?afterany:{a}"), false),
    )
    .await;
    d.schedule().await;
    wait_state(&d, a, JobState::Running).await;
    assert_eq!(reason(&d, after_held).await, Some(Reason::Dependency));
    assert_eq!(reason(&d, either).await, Some(Reason::Dependency));
    end(&d, a, 0).await;
    d.schedule().await;
    wait_state(&d, either, JobState::Running).await;
    d.release(ALICE, held, false).await.unwrap();
    d.schedule().await;
    wait_state(&d, held, JobState::Running).await;
    d.schedule().await;
    wait_state(&d, after_held, JobState::Running).await;
    for id in [held, after_held, either] {
        end(&d, id, 0).await;
    }

    // Singleton: one of a name at a time, oldest first; other names and
    // other users unaffected.
    let named = |name: &str| {
        spec(vec![
            entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
            entry("cwd", "/"),
            entry("name", name),
            entry("dependency", "singleton"),
        ])
    };
    // (Jobs run as their owner: uid 1000 and root exist on a test machine.)
    let s1 = submit(&d, ALICE, named("sweep")).await;
    let s2 = submit(&d, ALICE, named("sweep")).await;
    let other = submit(&d, ALICE, named("other")).await;
    let roots = submit(&d, 0, named("sweep")).await;
    d.schedule().await;
    wait_state(&d, s1, JobState::Running).await;
    wait_state(&d, other, JobState::Running).await;
    wait_state(&d, roots, JobState::Running).await;
    assert_eq!(reason(&d, s2).await, Some(Reason::Dependency));
    end(&d, s1, 0).await;
    d.schedule().await;
    wait_state(&d, s2, JobState::Running).await;
}

#[tokio::test]
async fn a_dependency_on_a_job_one_may_not_see_or_that_does_not_exist_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_with(dir.path(), MemoryUnits::default(), |s| {
        s.budget.jobs = 100;
        s.list_is_public = false;
    })
    .await;
    let alices = submit(&d, ALICE, sleep_spec()).await;
    for (uid, dep) in [
        (BOB, format!("afterok:{alices}")),
        (ALICE, "afterok:999".to_string()),
        (ALICE, format!("afterok:{alices}_1")),
    ] {
        let before = on_disk(dir.path());
        match d.submit(uid, vec![sleep_after(&dep, false)]).await {
            Err(ApiError::InvalidArgs(m)) => assert!(m.contains("dependency on"), "{m}"),
            other => panic!("{dep} by {uid}: {other:?}"),
        }
        assert_eq!(on_disk(dir.path()), before, "nothing was queued");
    }
    // Malformed: refused by the spec check, naming the key.
    let bad = crate::daemon::spec::parse(
        &[
            entry("argv", vec!["/bin/true".to_string()]),
            entry("cwd", "/"),
            entry("dependency", "afterok:"),
        ]
        .into_iter()
        .collect(),
    );
    assert!(bad.unwrap_err().0.contains("dependency"));
    // A huge text is refused by its size, not quoted back (the fuzzer's find).
    for key in ["dependency", "array"] {
        let huge = crate::daemon::spec::parse(
            &[
                entry("argv", vec!["/bin/true".to_string()]),
                entry("cwd", "/"),
                entry(key, "1 ".repeat(100_000)),
            ]
            .into_iter()
            .collect(),
        );
        let e = huge.unwrap_err().0;
        assert!(e.len() < 200 && e.contains("bytes long"), "{key}: {e}");
    }
    // Root and the owner may.
    submit(&d, 0, sleep_after(&format!("afterok:{alices}"), false)).await;
    submit(&d, ALICE, sleep_after(&format!("afterok:{alices}"), false)).await;
}

/// A tiny deterministic generator for the property below.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test]
async fn no_job_ever_starts_before_its_dependency_allows() {
    let mut started_with_deps = 0;
    for seed in 1..=12u64 {
        let dir = tempfile::tempdir().unwrap();
        let (d, _c) = deps_daemon(dir.path()).await;
        let mut rng = Lcg(seed);
        let kinds = ["after", "afterany", "afterok", "afternotok"];
        let mut ids: Vec<JobId> = Vec::new();
        let mut deps: HashMap<JobId, Vec<(&str, JobId)>> = HashMap::new();
        for _ in 0..10 {
            let n = if ids.is_empty() { 0 } else { rng.next(3) };
            let mut conds = Vec::new();
            for _ in 0..n {
                let on = ids[rng.next(ids.len() as u64) as usize];
                conds.push((kinds[rng.next(4) as usize], on));
            }
            let id = if conds.is_empty() {
                submit(&d, ALICE, sleep_spec()).await
            } else {
                let text: Vec<String> = conds.iter().map(|(k, on)| format!("{k}:{on}")).collect();
                submit(&d, ALICE, sleep_after(&text.join(","), false)).await
            };
            deps.insert(id, conds);
            ids.push(id);
        }
        // Run: each round starts what may start and ends one running job.
        for _ in 0..40 {
            d.schedule().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
            let mut running = Vec::new();
            for &id in &ids {
                let j = job(&d, id).await;
                if j.state() == JobState::Running && !j.invocation_id().is_empty() {
                    running.push(id);
                } else if j.state() == JobState::Running {
                    d.reconcile(id).await;
                }
            }
            if let Some(&id) = running.first() {
                end(&d, id, rng.next(2) as i32).await;
            }
        }
        // Every job that started did so only once each condition allowed it.
        let mut checked = 0;
        for &id in &ids {
            let j = job(&d, id).await;
            if j.start_usec() == 0 {
                continue;
            }
            checked += deps[&id].len();
            for &(kind, on) in &deps[&id] {
                let o = job(&d, on).await;
                let why = format!(
                    "seed {seed}: job {id} ({kind}:{on}) started at {}, {on}: {:?} {}..{}",
                    j.start_usec(),
                    o.state(),
                    o.start_usec(),
                    o.end_usec()
                );
                match kind {
                    "after" => assert!(
                        o.start_usec() != 0 && o.start_usec() <= j.start_usec(),
                        "{why}"
                    ),
                    "afterany" => assert!(o.is_final() && o.end_usec() <= j.start_usec(), "{why}"),
                    "afterok" => assert!(
                        o.state() == JobState::Completed && o.end_usec() <= j.start_usec(),
                        "{why}"
                    ),
                    _ => assert!(
                        o.is_final()
                            && o.state() != JobState::Completed
                            && o.end_usec() <= j.start_usec(),
                        "{why}"
                    ),
                }
            }
        }
        started_with_deps += checked;
    }
    assert!(
        started_with_deps >= 12,
        "too few jobs with dependencies started ({started_with_deps}) for the check to mean much"
    );
}

//! Fair share, nice and per-user limits through the daemon's handlers.

use super::*;
use crate::core::{PriorityConfig, UserLimit, UserLimits};

const ALICE: u32 = 1000;
const BOB: u32 = 1001;

fn two_cpu_sleep(nice: Option<i32>) -> Spec {
    let mut pairs = vec![
        entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
        entry("cwd", "/"),
        entry("cpus", 2u32),
    ];
    if let Some(n) = nice {
        pairs.push(entry("nice", n));
    }
    spec(pairs)
}

async fn fair_daemon(dir: &std::path::Path) -> (Arc<Daemon<MemoryUnits>>, Changes) {
    daemon_built(
        dir,
        MemoryUnits::default(),
        |s| s.budget.jobs = 10,
        |sched| sched.set_priority(PriorityConfig::fair()),
    )
    .await
}

async fn submit(d: &Arc<Daemon<MemoryUnits>>, uid: u32, spec: Spec) -> JobId {
    d.submit(uid, vec![spec]).await.unwrap()[0].id
}

/// Ends running job `id` (exit 0) and waits for it to be recorded.
async fn end(d: &Arc<Daemon<MemoryUnits>>, id: JobId) {
    d.systemd
        .end(&crate::unit_name::of_job(id), "success", 1, 0);
    d.reconcile(id).await;
    wait_state(d, id, JobState::Completed).await;
}

#[tokio::test]
async fn a_user_who_ran_nothing_passes_one_who_did_and_limits_hold_only_their_owner() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = fair_daemon(dir.path()).await;
    // 4 CPUs: alice's first two 2-CPU jobs run, her other two wait.
    let alice: Vec<JobId> = [
        submit(&d, ALICE, two_cpu_sleep(None)).await,
        submit(&d, ALICE, two_cpu_sleep(None)).await,
        submit(&d, ALICE, two_cpu_sleep(None)).await,
        submit(&d, ALICE, two_cpu_sleep(None)).await,
    ]
    .to_vec();
    d.schedule().await;
    wait_state(&d, alice[0], JobState::Running).await;
    wait_state(&d, alice[1], JobState::Running).await;
    // A second of use (usage is counted in seconds), then bob asks.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let bob = submit(&d, BOB, two_cpu_sleep(None)).await;
    end(&d, alice[0]).await;
    // The pass brings priorities up to date every few seconds; now, here.
    d.state
        .lock()
        .await
        .reprioritize(now_usec() / 1_000_000, true);
    d.schedule().await;
    wait_state(&d, bob, JobState::Running).await;
    assert_eq!(
        job(&d, alice[2]).await.state(),
        JobState::Pending,
        "bob went first"
    );
    {
        let st = d.state.lock().await;
        let (a, b) = (
            st.sched.priority(alice[2], now_usec() / 1_000_000).unwrap(),
            st.sched.priority(bob, 0),
        );
        assert!(a.fairshare < 1.0, "alice used CPUs: {a:?}");
        assert!(b.is_none(), "bob's job is no longer pending");
    }
    // With fifo order, alice's third would have gone first: the pass order
    // is what changed, not the resources.
    // bob may run one job at a time: his second waits, naming the limit, and
    // does not hold alice back.
    let limits = UserLimits {
        users: [(
            BOB,
            UserLimit {
                running_jobs: Some(1),
                ..Default::default()
            },
        )]
        .into(),
        ..Default::default()
    };
    d.state.lock().await.sched.set_user_limits(limits);
    let bob2 = submit(&d, BOB, two_cpu_sleep(None)).await;
    end(&d, alice[1]).await;
    d.state
        .lock()
        .await
        .reprioritize(now_usec() / 1_000_000, true);
    d.schedule().await;
    wait_state(&d, alice[2], JobState::Running).await;
    let st = d.state.lock().await;
    let reason = st
        .sched
        .reason(bob2)
        .map(|r| r.to_string())
        .unwrap_or_default();
    assert!(
        reason.starts_with("UserLimit (running jobs: 1 of 1"),
        "{reason}"
    );
    assert_eq!(st.jobs[&bob2].state(), JobState::Pending);
    // The queue shows it too, whatever the line before it with the same
    // demand says (alice's fourth, pending, waits for CPUs; her third runs).
    let filter = [entry("all_users", true)].into_iter().collect();
    let all = crate::daemon::bus::listing::Filter::parse(&filter).unwrap();
    let (lines, _) = crate::daemon::bus::listing::collect(&st, 0, &all, 1 << 20);
    let shown = |id: JobId| {
        lines
            .iter()
            .find(|l| l.id == id)
            .map(|l| l.reason.to_string())
    };
    assert_eq!(shown(bob2), Some(reason));
    let fourth = shown(alice[3]).unwrap_or_default();
    assert!(
        !fourth.is_empty() && !fourth.starts_with("UserLimit"),
        "{fourth}"
    );
    assert_eq!(
        shown(alice[2]),
        Some(String::new()),
        "a running job has no reason"
    );
}

#[tokio::test]
async fn nice_and_limits_are_checked_at_submission_and_refusals_queue_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = fair_daemon(dir.path()).await;
    let err = d
        .submit(ALICE, vec![two_cpu_sleep(Some(-5))])
        .await
        .unwrap_err();
    let ApiError::InvalidArgs(text) = &err else {
        panic!("{err:?}")
    };
    assert!(text.contains("only an admin"), "{text}");
    // Out of range, even for root: refused, naming the range.
    for (uid, n) in [(0, -2_000_000), (ALICE, 2_000_000)] {
        match d.submit(uid, vec![two_cpu_sleep(Some(n))]).await {
            Err(ApiError::InvalidArgs(t)) => assert!(t.contains("out of range"), "{t}"),
            other => panic!("nice {n}: {other:?}"),
        }
    }
    // Root, or an admin through polkit, may raise a job's priority; anyone
    // may lower their own.
    d.submit(0, vec![two_cpu_sleep(Some(-5))]).await.unwrap();
    let raised = d
        .submit_as(BOB, true, vec![two_cpu_sleep(Some(-3))], None, None)
        .await
        .unwrap()[0]
        .id;
    assert_eq!(job(&d, raised).await.nice, -3);
    let nice = submit(&d, ALICE, two_cpu_sleep(Some(7))).await;
    assert_eq!(job(&d, nice).await.nice, 7);
    // Changing it later: the owner may not raise it, an admin may.
    let raise = |n| crate::daemon::spec::Changes {
        nice: Some(n),
        ..Default::default()
    };
    let err = d.update(ALICE, nice, false, raise(-1)).await.unwrap_err();
    assert!(err.to_string().contains("only an admin"), "{err}");
    assert_eq!(job(&d, nice).await.nice, 7, "refused: unchanged");
    d.update(ALICE, nice, true, raise(-1)).await.unwrap();
    assert_eq!(job(&d, nice).await.nice, -1);
    d.update(ALICE, nice, false, raise(7)).await.unwrap();
    let limits = UserLimits {
        default: UserLimit {
            cpus: Some(1),
            ..Default::default()
        },
        ..Default::default()
    };
    d.state.lock().await.sched.set_user_limits(limits);
    let before = d.state.lock().await.next_id;
    let err = d.submit(BOB, vec![two_cpu_sleep(None)]).await.unwrap_err();
    let ApiError::LimitExceeded(text) = &err else {
        panic!("{err:?}")
    };
    assert!(
        text.contains("CPUs") && text.contains("default limit"),
        "{text}"
    );
    assert_eq!(d.state.lock().await.next_id, before, "nothing queued");
    // Its nice survives a restart, in its record.
    drop(d);
    let (d, _c) = fair_daemon(dir.path()).await;
    assert_eq!(job(&d, nice).await.nice, 7);
}

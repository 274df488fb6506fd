//! What a pending job costs xlurmd's heap (issue 21: at most 1 KiB a pending
//! job beyond what is on disk; its D-Bus object holds nothing of its own, see
//! `job_object_memory`; `cargo bench --bench cli` measures the whole
//! process's RSS). Alone in its own test
//! binary, so no other test's allocations count: 10,000 batch jobs of one
//! user, each with a 2 KiB environment and a script (kept on disk, not in
//! memory, while they wait), through the submit handler over the in-memory
//! systemd double; glibc's counters (`mallinfo2`) before and after.

use std::collections::HashMap;
use xlurm::core::Policy;
use xlurm::daemon::spec::{parse, Spec};
use xlurm::wire::spec::entry;

/// The bytes glibc's allocator has handed out and not had back.
fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let m = unsafe { libc::mallinfo2() };
    m.uordblks + m.hblkhd
}

fn batch_job(env: &[String]) -> Spec {
    let map: HashMap<_, _> = [
        entry("argv", Vec::<String>::new()),
        entry("script", "#!/bin/sh\ntrue\n"),
        entry("cwd", "/"),
        entry("name", "sweep"),
        entry("env", env.to_vec()),
    ]
    .into_iter()
    .collect();
    parse(&map).expect("a valid spec")
}

/// The heap a pending job holds in the daemon's tables (the job in full,
/// the scheduler's queue entries, where its record is on disk): 1,103 bytes
/// with jobs stored inline in their table, 839 boxed, 807 with the
/// `--output` copy boxed too (the same every run: one thread allocates).
const BUDGET: usize = 850;

#[tokio::test(flavor = "current_thread")]
async fn a_pending_job_costs_the_daemon_less_than_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let d = xlurm::testing::memory_daemon::in_memory(dir.path(), Policy::FifoStrict, 20_000).await;
    let env: Vec<String> = (0..40)
        .map(|i| format!("VARIABLE_{i:02}={}", "x".repeat(40)))
        .collect();
    // Warm up: the tables' first growth, the store's buffers.
    for _ in 0..5 {
        d.submit(1000, (0..200).map(|_| batch_job(&env)).collect())
            .await
            .unwrap();
    }
    let before = heap_in_use();
    for _ in 0..50 {
        d.submit(1000, (0..200).map(|_| batch_job(&env)).collect())
            .await
            .unwrap();
    }
    let per_job = heap_in_use().saturating_sub(before) / 10_000;
    println!("heap per pending job: {per_job} bytes (budget {BUDGET})");
    assert!(
        per_job <= BUDGET,
        "a pending job holds {per_job} bytes of the daemon's heap (budget {BUDGET})"
    );
    assert_eq!(d.state.lock().await.counts().0, 11_000, "all queued");
}

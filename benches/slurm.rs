//! Slurm workflows' cost in the daemon (issue 18), through its handlers over
//! the in-memory systemd double (no bus): `cargo bench --bench slurm`.
//!
//! - A 100,000-task array: the time of its submission, and the heap it holds
//!   beyond one plain job (glibc's `mallinfo2`, bytes in use, over 100 of
//!   each; goal < 1 KiB beyond one job, submission < 10 ms).
//! - A scheduling pass over 100,000 pending jobs, 10,000 of them with a
//!   dependency (10,000 edges) on jobs that have not ended, where free CPUs
//!   exist but no queued job fits them, so the pass walks the whole queue
//!   (goal < 5 ms); then the cancel of a job that 10 of them wait on (its
//!   record written and its dependents looked at again).
//!
//! Each figure is the median of 7 runs, min and max beside it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use xlurm::core::Policy;
use xlurm::daemon::service::Daemon;
use xlurm::daemon::spec::{parse, Spec};
use xlurm::testing::memory_units::MemoryUnits;
use xlurm::wire::spec::entry;

const UID: u32 = 0;

fn spec(extra: Vec<(String, zbus::OwnedVariant)>) -> Spec {
    let mut pairs = vec![
        entry("argv", vec!["/bin/true".to_string()]),
        entry("cwd", "/"),
    ];
    pairs.extend(extra);
    let map: HashMap<_, _> = pairs.into_iter().collect();
    parse(&map).expect("a valid spec")
}

async fn daemon(dir: &std::path::Path, pending: usize) -> Arc<Daemon<MemoryUnits>> {
    xlurm::testing::memory_daemon::in_memory(dir, Policy::EasyBackfill, pending).await
}

fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let m = unsafe { libc::mallinfo2() };
    m.uordblks as u64 + m.hblkhd as u64
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        println!("xlurm Slurm workflows (daemon handlers, in-memory systemd), median (min..max) of 7");
        // 100 arrays of 100,000 tasks against 100 plain jobs.
        let (mut times, mut bytes) = (Vec::new(), Vec::new());
        for _ in 0..7 {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let d = daemon(dir.path(), 1000).await;
            let plain = spec(vec![]);
            let array = spec(vec![entry("array", "0-99999")]);
            d.submit(UID, vec![plain.clone()]).await.expect("queued");
            let before = heap_in_use();
            for _ in 0..100 {
                d.submit(UID, vec![plain.clone()]).await.expect("queued");
            }
            let plain_jobs = heap_in_use().saturating_sub(before);
            let before = heap_in_use();
            let t = Instant::now();
            for _ in 0..100 {
                d.submit(UID, vec![array.clone()]).await.expect("queued");
            }
            times.push(t.elapsed().as_secs_f64() * 1e3 / 100.0);
            let arrays = heap_in_use().saturating_sub(before);
            bytes.push((arrays as f64 - plain_jobs as f64) / 100.0);
        }
        let (lo, med, hi) = stats(times);
        println!(
            "submit a 100,000-task array:                 {med:>8.3} ms ({lo:.3}..{hi:.3})   goal < 10 ms"
        );
        let (lo, med, hi) = stats(bytes);
        println!(
            "its heap beyond one plain job:               {med:>8.0} B  ({lo:.0}..{hi:.0})   goal < 1024 B"
        );
        // 100,000 pending, 10,000 of them with a dependency.
        let dir = tempfile::tempdir().expect("a temporary directory");
        let d = daemon(dir.path(), 200_000).await;
        // 12 of 16 CPUs held: every queued job (5 to 8 CPUs) is checked and
        // none fits, so the pass walks the whole queue (easy-backfill).
        let fill = spec(vec![entry("cpus", 12u32)]);
        let fill_id = d.submit(UID, vec![fill]).await.expect("queued")[0].id;
        d.schedule().await;
        let mut specs = Vec::with_capacity(100_000);
        for i in 0..90_000u32 {
            specs.push(spec(vec![entry("cpus", 5 + i % 4)]));
        }
        let first = d.submit(UID, specs).await.expect("queued")[0].id;
        // Each waits for one of the first 1,000 pending jobs: 10,000 edges.
        let mut deps = Vec::with_capacity(10_000);
        for i in 0..10_000u64 {
            deps.push(spec(vec![entry(
                "dependency",
                format!("afterok:{}", first + i % 1000),
            )]));
        }
        d.submit(UID, deps).await.expect("queued");
        let mut passes = Vec::new();
        for _ in 0..7 {
            let mut st = d.state.lock().await;
            let now = xlurm::wire::time::now_usec() / 1_000_000;
            let mut sched = st.sched.clone();
            let t = Instant::now();
            let started = sched.schedule(now);
            passes.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(started.is_empty(), "nothing fits");
            st.reprioritize(now, false);
        }
        let (lo, med, hi) = stats(passes);
        println!(
            "pass over 100,000 pending, 10,000 dep edges: {med:>8.3} ms ({lo:.3}..{hi:.3})   goal < 5 ms"
        );
        // The end of a job 10 of them wait on, measured as the whole cancel
        // (record written, dependents looked at again).
        let mut wakes = Vec::new();
        for k in 0..7u64 {
            let t = Instant::now();
            d.cancel(UID, first + k, false).await.expect("cancelled");
            wakes.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let (lo, med, hi) = stats(wakes);
        println!(
            "cancel a job 10 jobs depend on (with waking): {med:>7.3} ms ({lo:.3}..{hi:.3})"
        );
        let _ = fill_id;
    });
}

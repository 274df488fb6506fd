//! Scheduling-pass benchmark (no harness): `cargo bench --bench schedule`.
//!
//! Machines: 8 NUMA nodes with one GPU each, and
//! - `256cpu`: 8 x 32 CPUs x 256 GiB, the machine of the issue. Every job
//!   holds at least one CPU, so at most 256 jobs can run on it; the honest
//!   fullest state is 232 running jobs (8 GPU jobs and 224 one-CPU jobs)
//!   leaving 3 CPUs and 16 GiB free on every node;
//! - `1024cpu`: 8 x 128 CPUs x 512 GiB, to have 1,000 jobs running for real
//!   (8 GPU jobs and 992 one-CPU jobs), again 3 CPUs free per node.
//!
//! Running jobs are adopted ([`Scheduler::adopt`]) with explicit allocations;
//! `max_running` is 2,000 so the running limit never ends a pass.
//!
//! Queues (jobs in submission order, a 4-GPU job at the head):
//! - `hard`: free CPUs and memory exist but no queued job fits them (GPU jobs
//!   while every GPU is held, CPU jobs wider than what is free, small CPU jobs
//!   with more memory than is free, numa-local jobs wider than a node's free
//!   CPUs, exclusive jobs). Every policy but fifo-strict must walk the whole
//!   queue.
//! - `fill`: `hard` plus 1 % small jobs that fit: the pass starts jobs until
//!   the free CPUs are gone and then stops early.
//! - `distinct`: `hard` with a different memory size for every job, so no two
//!   jobs share a request shape (the worst case for the per-pass failure cache).
//!
//! The `fair-*` rows run the same queues in `fair` priority mode, the jobs
//! spread over 1,000 users (each with decayed usage, submissions over the
//! last 3 days, one in ten with a nice value), under per-user limits (64
//! running jobs, 128 CPUs, 2 GPUs, 1 TiB each; one user in ten limited to 1
//! running job), and the running jobs spread over the users too. The
//! `upkeep` lines time what fair share costs besides a pass: re-keying the
//! whole queue after usages changed (`reprioritize`), queueing one job
//! (`enqueue_for`), and estimating the first 500 jobs' starts.
//!
//! Each figure is one `schedule()` call on a fresh clone of the same state
//! (cloning is not timed); "release" times `finish()` of one running job plus
//! the pass that follows. A table then shows how a pass grows with the queue
//! (1k to 1M jobs).
//!
//! Flags (after `--`): `--quick` (10k jobs, 5 passes), `--only TEXT` (rows
//! whose "machine queue policy" contains TEXT; `upkeep` for the upkeep
//! lines, `table` for the table), `--repeat N` (N passes on one scheduler,
//! for profilers). See docs/core.md.

use std::hint::black_box;
use std::time::{Duration, Instant};
use xlurm::core::estimate;
use xlurm::core::*;

#[path = "schedule/build.rs"]
mod build;

use build::*;

const PASSES: usize = 50;

const NODES: u32 = 8;

/// Users of the `fair` rows, and the first one's UID.
const USERS: u32 = 1000;
const UID0: u32 = 10_000;

struct Stats {
    min: Duration,
    median: Duration,
    p90: Duration,
    max: Duration,
    started: usize,
}

fn stats(mut times: Vec<Duration>, started: usize) -> Stats {
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    Stats {
        min: times[0],
        median: at(0.5),
        p90: at(0.9),
        max: *times.last().unwrap(),
        started,
    }
}

fn ms(d: Duration) -> String {
    format!("{:8.3}", d.as_secs_f64() * 1e3)
}

/// Times `n` passes, each on a fresh clone of `base`.
fn time_passes(base: &Scheduler, n: usize) -> Stats {
    let mut times = Vec::with_capacity(n);
    let mut started = 0;
    for _ in 0..n {
        let mut s = base.clone();
        let t = Instant::now();
        let starts = s.schedule(black_box(NOW));
        times.push(t.elapsed());
        started = starts.len();
        black_box(starts);
    }
    stats(times, started)
}

/// Times releasing one running job and the pass after it.
fn time_release(base: &Scheduler, running: &[JobId], n: usize) -> Stats {
    let mut times = Vec::with_capacity(n);
    let mut started = 0;
    for i in 0..n {
        let mut s = base.clone();
        // Alternate GPU jobs (the first on each node) and one-CPU jobs.
        let per_node = running.len() / NODES as usize;
        let node = i % NODES as usize;
        let victim = if i % 2 == 0 {
            running[node * per_node]
        } else {
            running[node * per_node + 1 + i % (per_node - 1)]
        };
        let t = Instant::now();
        s.finish(black_box(victim)).expect("victim runs");
        let starts = s.schedule(black_box(NOW + 1));
        times.push(t.elapsed());
        started = started.max(starts.len());
        black_box(starts);
    }
    stats(times, started)
}

/// What fair share costs besides the pass, on the `fair-hard` state:
/// re-keying the whole queue after usage changed, queueing one job, and
/// estimating the first [`estimate::DEPTH`] jobs' starts.
fn upkeep(shape: Shape, n: usize, reps: usize) {
    let (base, _) = build_with(shape, Queue::Hard, n, Policy::StrictBackfill, true);
    let (mut rekey, mut submit, mut plan) = (Vec::new(), Vec::new(), Vec::new());
    let d = base.validate(&Request::default()).expect("valid");
    for k in 0..reps {
        let mut s = base.clone();
        // Five minutes later every user's usage (hence factor) has moved.
        let t = Instant::now();
        s.reprioritize(black_box(NOW + 300));
        rekey.push(t.elapsed());
        let mut rng = Rng(k as u64);
        let subs: Vec<Submission> = (0..1000).map(|i| submission(i, 0, &mut rng)).collect();
        let t = Instant::now();
        for (i, sub) in subs.into_iter().enumerate() {
            s.enqueue_for(1_000_000 + i as JobId, d.clone(), sub);
        }
        submit.push(t.elapsed() / 1000);
        let t = Instant::now();
        black_box(s.estimates(NOW + 300, estimate::DEPTH, false));
        plan.push(t.elapsed());
    }
    let (r, q, e) = (stats(rekey, 0), stats(submit, 0), stats(plan, 0));
    println!(
        "{} upkeep, {n} jobs of {USERS} users (median / max): reprioritize {} / {} ms, \
         enqueue_for {:.2} / {:.2} us per job, estimates of the first {} jobs {} / {} ms",
        shape.name,
        ms(r.median).trim(),
        ms(r.max).trim(),
        q.median.as_secs_f64() * 1e6,
        q.max.as_secs_f64() * 1e6,
        estimate::DEPTH,
        ms(e.median).trim(),
        ms(e.max).trim(),
    );
}

fn header() {
    println!(
        "{:<8} {:<13} {:<16} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "machine", "queue", "policy", "min", "median", "p90", "max", "started"
    );
}

fn row(machine: &str, queue: &str, policy: Policy, st: &Stats) {
    println!(
        "{:<8} {:<13} {:<16} {} {} {} {} {:>8}",
        machine,
        queue,
        policy.name(),
        ms(st.min),
        ms(st.median),
        ms(st.p90),
        ms(st.max),
        st.started
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a quick smoke run with `-- --quick`.
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `--only TEXT`: only the rows whose "machine queue policy" contains TEXT
    // ("table" for the queue-length table).
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let wanted = |label: &str| only.as_ref().is_none_or(|o| label.contains(o.as_str()));
    let passes = if quick { 5 } else { PASSES };
    // `--repeat N`: N passes on one scheduler (1024cpu, hard queue,
    // easy-backfill), no clones: for `perf stat`.
    if let Some(reps) = args
        .iter()
        .position(|a| a == "--repeat")
        .and_then(|i| args.get(i + 1)?.parse::<usize>().ok())
    {
        let (mut s, _) = build(MACHINES[1], Queue::Hard, 100_000, Policy::EasyBackfill);
        let t = Instant::now();
        for _ in 0..reps {
            black_box(s.schedule(black_box(NOW)));
        }
        println!(
            "{reps} passes: {:.3} ms each",
            t.elapsed().as_secs_f64() * 1e3 / reps as f64
        );
        return;
    }
    let n = if quick { 10_000 } else { 100_000 };
    println!(
        "xlurm scheduling pass: {n} pending jobs, times in ms over {passes} passes \
         (each on a fresh clone of the same state)"
    );
    for shape in MACHINES {
        let (s, running) = build(shape, Queue::Hard, 1, Policy::FifoStrict);
        println!(
            "machine {}: {} CPUs, 8 GPUs, {} running jobs, {} CPUs and {} GiB free",
            shape.name,
            NODES * shape.cpus_per_node,
            running.len(),
            s.free().free_cpus(),
            s.free().mem.iter().sum::<u64>() / GIB
        );
    }
    println!();
    header();
    for shape in MACHINES {
        for q in [Queue::Hard, Queue::Fill, Queue::Distinct] {
            for policy in Policy::ALL {
                if !wanted(&format!("{} {} {}", shape.name, q.name(), policy.name())) {
                    continue;
                }
                let (s, _) = build(shape, q, n, policy);
                row(shape.name, q.name(), policy, &time_passes(&s, passes));
            }
        }
        for policy in Policy::ALL {
            if !wanted(&format!("{} release {}", shape.name, policy.name())) {
                continue;
            }
            let (s, running) = build(shape, Queue::Hard, n, policy);
            row(
                shape.name,
                "release",
                policy,
                &time_release(&s, &running, passes),
            );
        }
        // The same queues with fair-share priority and per-user limits.
        for q in [Queue::Hard, Queue::Fill, Queue::Distinct] {
            let name = format!("fair-{}", q.name());
            for policy in Policy::ALL {
                if !wanted(&format!("{} {name} {}", shape.name, policy.name())) {
                    continue;
                }
                let (s, _) = build_with(shape, q, n, policy, true);
                row(shape.name, &name, policy, &time_passes(&s, passes));
            }
        }
        for policy in Policy::ALL {
            if !wanted(&format!("{} fair-release {}", shape.name, policy.name())) {
                continue;
            }
            let (s, running) = build_with(shape, Queue::Hard, n, policy, true);
            let st = time_release(&s, &running, passes);
            row(shape.name, "fair-release", policy, &st);
        }
    }
    if wanted("upkeep") {
        println!();
        for shape in MACHINES {
            upkeep(shape, n, if quick { 3 } else { 10 });
        }
    }
    if !wanted("table") {
        return;
    }
    println!();
    println!(
        "pass cost vs queue length (machine 1024cpu, hard queue): median ms and ns per \
         queued job, over {passes} passes (10 for 1M jobs)"
    );
    // 1M jobs too, with fewer passes, to show the growth past the caches.
    let lens: &[(usize, usize)] = if quick {
        &[(1_000, 5), (10_000, 5)]
    } else {
        &[
            (1_000, PASSES),
            (10_000, PASSES),
            (100_000, PASSES),
            (1_000_000, 10),
        ]
    };
    print!("{:<16}", "policy");
    for (len, _) in lens {
        print!(" {:>18}", format!("{len} jobs"));
    }
    println!();
    for policy in Policy::ALL {
        print!("{:<16}", policy.name());
        for &(len, passes) in lens {
            let (s, _) = build(MACHINES[1], Queue::Hard, len, policy);
            let st = time_passes(&s, passes);
            let per_job = st.median.as_secs_f64() * 1e9 / len as f64;
            print!(" {} {:>7.1}ns", ms(st.median), per_job);
        }
        println!();
    }
}

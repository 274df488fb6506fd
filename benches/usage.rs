//! Usage-report benchmark (no harness): `cargo bench --bench usage`.
//!
//! Writes a year of 1,000,000 ended jobs of 1,000 users into an accounting
//! log through the daemon's own path (`daemon::accounting::Ledger::append`,
//! one write per job, as xlurmd does at each end), then times what
//! `GetUsage` does for a report over all of it: read the month files and
//! aggregate (`core::accounting::report`) per user by month, week and day,
//! every user's and one user's. Prints each figure beside its goal (issue
//! 20: under 1 s for the year; under 100 bytes a job on disk).
//!
//! `--jobs N` changes the count (CI's smoke run uses 20,000).

use std::time::Instant;
use xlurm::core::accounting::{report, Period, Query, Record};
use xlurm::daemon::accounting::Ledger;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let jobs: u64 = args
        .iter()
        .position(|a| a == "--jobs")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ledger = Ledger::open(dir.path()).expect("the ledger");
    let year = 365 * 86_400u64;
    let start = 1_764_547_200u64; // 2025-12-01
                                  // A fixed pseudo-random stream: the same log every run.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let t0 = Instant::now();
    for id in 0..jobs {
        let r = next();
        let rec = Record {
            id,
            end: (start + id * year / jobs) as u32,
            wait: (r % 3600) as u32,
            run: (r >> 12) as u32 % 86_400,
            uid: 1000 + (r >> 32) as u32 % 1000,
            cpus: 1 + (r >> 20) as u16 % 64,
            gpus: (r >> 40) as u8 % 9,
            state: (r >> 48) as u8 % 8,
            gpu_util: (r >> 52) as u8 % 101,
            mem_peak: (r >> 8) % (512 << 30),
            cpu_secs: (r >> 16) as u32 % 86_400,
            gpu_mem_peak_mib: (r >> 24) as u32 % 81_920,
        };
        ledger.append(&rec).expect("append");
    }
    let write = t0.elapsed().as_secs_f64();
    let bytes: u64 = std::fs::read_dir(ledger.dir())
        .expect("the log")
        .flatten()
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum();
    println!(
        "accounting log: {jobs} jobs, {bytes} bytes: {:.1} bytes a job (goal < 100); \
         written one append each in {write:.2} s ({:.1} us a job)",
        bytes as f64 / jobs as f64,
        write * 1e6 / jobs as f64
    );
    let all = |period, uid| Query {
        period,
        since: 0,
        until: u64::MAX,
        uid,
        utc_offset: 3600,
    };
    for (name, q) in [
        ("every user, by month", all(Period::Month, None)),
        ("every user, by week", all(Period::Week, None)),
        ("every user, by day", all(Period::Day, None)),
        ("one user, by day", all(Period::Day, Some(1042))),
    ] {
        let mut times = Vec::new();
        let mut rows = 0;
        for _ in 0..5 {
            let t = Instant::now();
            let records = ledger.read(q.since, q.until).expect("read");
            rows = report(records, &q).len();
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        println!(
            "report over a year, {name}: median {:.0} ms of 5 (max {:.0} ms), {rows} rows (goal < 1000 ms)",
            median(times.clone()),
            times.iter().cloned().fold(0.0, f64::max)
        );
    }
}

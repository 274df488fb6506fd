//! `xlurm top` redraw benchmark (no harness): `cargo bench --bench top`.
//!
//! Draws the view of a machine with 8 GPUs and 10,000 jobs (100 running,
//! 9,900 pending, 1,000 users) on ratatui's test backend at 80x24 (ssh) and
//! 240x70, sorted by id and by user, and prints the median of 50 redraws
//! beside the goal (issue 20: under 50 ms).

use std::collections::BTreeMap;
use std::time::Instant;
use xlurm::cli::top::{draw, Job, Model, Sort, Ui};

fn put(m: &mut xlurm::cli::client::Dict, k: &str, v: zbus::Variant<'_>) {
    m.insert(k.into(), zbus::OwnedVariant::try_from(v).expect("a value"));
}

fn model(n: u64) -> Model {
    let mut machine = xlurm::cli::client::Dict::new();
    let mut nodes = Vec::new();
    for id in 0..8u32 {
        let mut d = xlurm::cli::client::Dict::new();
        put(&mut d, "id", id.into());
        put(
            &mut d,
            "cpus",
            format!("{}-{}", id * 32, id * 32 + 31).as_str().into(),
        );
        put(&mut d, "cpus_free", "".into());
        put(&mut d, "mem", (256u64 << 30).into());
        put(&mut d, "mem_free", (16u64 << 30).into());
        nodes.push(d);
    }
    put(&mut machine, "nodes", nodes.into());
    let mut devs = Vec::new();
    for i in 0..8u32 {
        let mut d = xlurm::cli::client::Dict::new();
        put(&mut d, "vendor", "nv".into());
        put(&mut d, "index", i.into());
        put(&mut d, "health", "ok".into());
        put(&mut d, "job", u64::from(i + 1).into());
        put(&mut d, "util_pct", (i * 12).into());
        put(&mut d, "mem_used", (20u64 << 30).into());
        put(&mut d, "mem_total", (80u64 << 30).into());
        devs.push(d);
    }
    put(&mut machine, "devices", devs.into());
    put(&mut machine, "policy", "backfill".into());
    let now = 1_800_000_000_000_000;
    let mut jobs = BTreeMap::new();
    for id in 1..=n {
        let running = id <= 100;
        jobs.insert(
            id,
            Job {
                id,
                uid: 1000 + (id * 7919 % 1000) as u32,
                user: format!("user{}", id * 7919 % 1000),
                name: format!("job-{id}"),
                state: if running { "RUNNING" } else { "PENDING" }.into(),
                reason: if running {
                    String::new()
                } else {
                    "Priority (held for an earlier job)".into()
                },
                submit: now - id * 1_000_000,
                start: if running { now - 60_000_000 } else { 0 },
                limit: 3600,
                cpus: 2,
                mem: 8 << 30,
                devices: "nv:1".into(),
                gpu_util: running.then_some(50.0),
                expected: None,
            },
        );
    }
    Model {
        machine,
        jobs,
        now,
        me: 1000,
    }
}

fn main() {
    let m = model(10_000);
    for (w, h) in [(80u16, 24u16), (240, 70)] {
        for sort in [Sort::Id, Sort::User] {
            let ui = Ui {
                sort,
                selected: 5_000,
                ..Ui::default()
            };
            let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h))
                .expect("a terminal");
            let mut times: Vec<f64> = (0..50)
                .map(|_| {
                    let t0 = Instant::now();
                    t.draw(|f| draw(f, &m, &ui)).expect("a draw");
                    t0.elapsed().as_secs_f64() * 1000.0
                })
                .collect();
            times.sort_by(|a, b| a.total_cmp(b));
            println!(
                "xlurm top, 10,000 jobs, {w}x{h}, sorted by {sort:?}: redraw median {:.2} ms, max {:.2} ms (goal < 50 ms)",
                times[25],
                times[49]
            );
        }
    }
}

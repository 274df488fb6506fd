//! `xlurm log -f` following a chatty job, measured natively: the real CLI and
//! daemon on a private bus, with a journal double (a `journalctl` script over a
//! file that a writer appends to at a fixed rate, one JSON entry per line with
//! its line number as the cursor). It prints whether the follower keeps up with
//! 10,000 lines/s (issue 5) and how fast a whole log is read. journald's own
//! speed is measured in the VM (`tests/vm/scenarios/12-xrun-signals.sh`).
//!
//! `cargo bench --bench log_follow` (XLURM_LOG_RATE, XLURM_LOG_SECS to vary).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};
use xlurm::cli::client::SchedulerProxy;
use xlurm::core::{Limits, Machine, Policy, Topology};
use xlurm::daemon::serve::{serve, ServeConfig};
use xlurm::testing::bus::PrivateBus;
use xlurm::testing::fake_systemd::{FakeSystemd, Mode};
use xlurm::wire::spec::entry;

/// The journal double: prints the entries after `--after-cursor=N` (all
/// without one), whatever else it is asked.
const JOURNALCTL: &str = r#"#!/bin/sh
after=0
for a in "$@"; do
    case $a in --after-cursor=*) after=${a#--after-cursor=} ;; esac
done
exec awk -v after="$after" 'NR > after' JOURNAL
"#;

fn entry_line(n: u64) -> String {
    format!(
        "{{\"__CURSOR\":\"{n}\",\"MESSAGE\":\"line {n:>8} of a chatty job: step=0.001 loss=1.2345 acc=0.9876\"}}\n"
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rate: u64 = std::env::var("XLURM_LOG_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let secs: u64 = std::env::var("XLURM_LOG_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let tmp = tempfile::tempdir().unwrap();
    let journal = tmp.path().join("journal");
    std::fs::write(&journal, "").unwrap();
    let jctl = tmp.path().join("journalctl");
    std::fs::write(
        &jctl,
        JOURNALCTL.replace("JOURNAL", &journal.to_string_lossy()),
    )
    .unwrap();
    std::fs::set_permissions(&jctl, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    let bus = PrivateBus::start().unwrap();
    let fake = FakeSystemd::serve(&bus.connect().await.unwrap(), Mode::Instant)
        .await
        .unwrap();
    let conn = bus.connect().await.unwrap();
    let cfg = ServeConfig {
        machine: Machine::new(Topology::single(2, 1 << 30), vec![]),
        accel: vec![],
        tee_path: "/usr/bin/xlurm".into(),
        object_linger: Duration::from_secs(60),
        policy: Policy::FifoStrict,
        limits: Limits {
            max_running: 4,
            max_lifetime_secs: 3600,
            min_job_mem: 1 << 20,
        },
        priority: xlurm::core::PriorityConfig::default(),
        user_limits: xlurm::core::UserLimits::default(),
        gate: false,
        gate_exempt: Vec::new(),
        idle_gpu: Default::default(),
        state_dir: tmp.path().join("state"),
        settings_user_mode: false,
        memory_nodes: xlurm::daemon::systemd::unit::MemoryNodesChoice::Auto,
        slice: "xlurm.slice".into(),
        budget: xlurm::core::Budget {
            jobs: 100,
            ..Default::default()
        },
        retention_secs: 3600,
        accounting_retention_secs: 365 * 86_400,
        cancel_grace: std::time::Duration::from_secs(10),
        list_is_public: true,
        journalctl: jctl.to_string_lossy().into_owned(),
        recheck: std::time::Duration::from_secs(5),
        job_cgroups: None,
    };
    let served = serve(&conn, cfg).await.map_err(|r| r.0).unwrap();
    served.daemon.kick.notify_one();
    let c = SchedulerProxy::new(&bus.connect().await.unwrap())
        .await
        .unwrap();
    let (id, _) = c
        .submit(HashMap::from([
            entry("argv", vec!["/bin/chatty".to_string()]),
            entry("cwd", "/"),
        ]))
        .await
        .unwrap();
    while !fake
        .shared
        .lock()
        .unwrap()
        .started
        .iter()
        .any(|r| r.name == format!("xlurm-job-{id}.service"))
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The follower: the real CLI, its lines counted as they arrive.
    let mut follower = std::process::Command::new(env!("CARGO_BIN_EXE_xlurm"))
        .args(["--user", "log", "-f", &id.to_string()])
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follower.stdout.take().unwrap();
    let t0 = Instant::now();
    let reader = std::thread::spawn(move || {
        // (lines read, when the last one came, lag samples: line n seen at t)
        let mut n = 0u64;
        let mut seen = Vec::new();
        let mut out_of_order = 0u64;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            n += 1;
            let got: u64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if got != n {
                out_of_order += 1;
            }
            if n.is_multiple_of(1000) {
                seen.push((n, t0.elapsed()));
            }
        }
        (n, t0.elapsed(), seen, out_of_order)
    });

    // The writer: `rate` lines per second for `secs` seconds, in 10 ms steps.
    let total = rate * secs;
    let mut written = 0u64;
    let mut wrote_at = Vec::new();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    while written < total {
        let due = (t0.elapsed().as_secs_f64() * rate as f64) as u64;
        let upto = due.min(total);
        let mut buf = String::new();
        while written < upto {
            written += 1;
            buf.push_str(&entry_line(written));
            if written.is_multiple_of(1000) {
                wrote_at.push((written, t0.elapsed()));
            }
        }
        f.write_all(buf.as_bytes()).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let wrote_for = t0.elapsed();
    fake.finish(&format!("xlurm-job-{id}.service"), 0).await;
    let (n, last, seen, out_of_order) = reader.join().unwrap();
    let _ = follower.wait();
    let mut lags: Vec<Duration> = seen
        .iter()
        .filter_map(|(n, t)| {
            let w = wrote_at.iter().find(|(m, _)| m == n)?.1;
            Some(t.saturating_sub(w))
        })
        .collect();
    lags.sort();
    let pct = |p: f64| lags.get(((lags.len() as f64 - 1.0) * p) as usize).copied();
    println!("xlurm log -f following a job writing {rate} lines/s for {secs} s (journal double, private bus)");
    println!(
        "lines: written {total}, received {n} ({} out of order or missing)",
        out_of_order
    );
    println!(
        "follower rate over the writing time: {:>8.0} lines/s (goal: keeps up with 10,000)",
        seen.iter()
            .filter(|(_, t)| *t <= wrote_for)
            .map(|(n, _)| *n)
            .max()
            .unwrap_or(0) as f64
            / wrote_for.as_secs_f64()
    );
    if let (Some(p50), Some(p99), Some(max)) = (pct(0.5), pct(0.99), lags.last().copied()) {
        println!(
            "lag from written to printed: median {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
    println!(
        "all lines printed {:.2} s after the writing stopped",
        last.saturating_sub(wrote_for).as_secs_f64()
    );

    // Reading the whole finished log at once: the pipeline's capacity.
    let t = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xlurm"))
        .args(["--user", "log", &id.to_string()])
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .output()
        .unwrap();
    let lines = out.stdout.iter().filter(|b| **b == b'\n').count();
    println!(
        "xlurm log of the finished job: {lines} lines in {:.2} s: {:>8.0} lines/s",
        t.elapsed().as_secs_f64(),
        lines as f64 / t.elapsed().as_secs_f64()
    );
    assert_eq!(n, total, "the follower lost or duplicated lines");
    assert_eq!(out_of_order, 0, "lines out of order");
}

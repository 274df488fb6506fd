//! What users meet of xlurm's cost (issue 21): the real `xlurm` binary, run as
//! processes under its command names (`xbatch`, `xqueue`), against xlurmd in a
//! child process on a private dbus-daemon with the systemd double, in the
//! workloads Slurm 22.05 and pueue 4 were measured in: process start,
//! submissions of `xbatch --wrap true` serially (5 samples of 100) and from 8
//! concurrent loops (5 samples of 8 x 25), each figure the median of its
//! samples with their range, the same with 10,000 and 100,000 jobs queued,
//! the daemon's memory per queued job, and `xqueue --limit 0` of the whole
//! queue.
//!
//! `cargo bench --bench cli` prints each figure beside its goal.
//! `XLURM_CLI_BENCH_SMALL=1` runs small counts (the CI smoke run: it checks
//! that every workload runs, not the figures); `XLURM_BENCH_PRIVATE=1` runs
//! xlurmd with `--list-is-public false`, where jobs have no D-Bus objects;
//! `XLURM_CLI_BENCH_HOLD=N` starts the daemon, queues N jobs, prints the bus
//! address and the daemon's PID, and waits 10 minutes (to trace a real
//! `xbatch` or `xqueue` with `strace` or `perf` against it).

mod common;

use common::rss_kib;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use xlurm::cli::client::{Dict, SchedulerProxy};
use xlurm::testing::bus::PrivateBus;
use xlurm::testing::fake_systemd::{FakeSystemd, Mode};
use xlurm::wire::spec::entry;

/// The counts of one run. Each submission figure is the median of
/// `samples` samples (of `serial` submissions, or of `clients` loops of
/// `per_client`), printed with their range: the host's noise comes in
/// bursts that a single mean takes in whole.
struct Counts {
    starts: usize,
    serial: usize,
    per_client: usize,
    clients: usize,
    samples: usize,
    queued: [usize; 2],
}

const FULL: Counts = Counts {
    starts: 300,
    serial: 100,
    per_client: 25,
    clients: 8,
    samples: 5,
    queued: [10_000, 100_000],
};

const SMALL: Counts = Counts {
    starts: 20,
    serial: 10,
    per_client: 2,
    clients: 8,
    samples: 2,
    queued: [200, 1_000],
};

/// A figure measured `samples` times: the median, and the range.
struct Sampled {
    median: f64,
    min: f64,
    max: f64,
}

impl Sampled {
    fn of(samples: usize, mut one: impl FnMut() -> f64) -> Sampled {
        let mut v: Vec<f64> = (0..samples.max(1)).map(|_| one()).collect();
        v.sort_by(f64::total_cmp);
        Sampled {
            median: v[v.len() / 2],
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    /// "median (min-max)" with `prec` decimals.
    fn show(&self, prec: usize) -> String {
        format!(
            "{:.prec$} ({:.prec$}-{:.prec$})",
            self.median, self.min, self.max
        )
    }
}

impl Counts {
    /// Submissions one round of `serial` and `concurrent` makes.
    fn per_round(&self) -> usize {
        self.samples * (self.serial + self.clients * self.per_client)
    }

    /// Serial submissions: ms each.
    fn serial(&self, bin: &Path, bus: &str) -> Sampled {
        Sampled::of(self.samples, || mean_ms(self.serial, || xbatch(bin, bus)))
    }

    /// Submissions from concurrent clients: per second.
    fn concurrent(&self, bin: &Path, bus: &str) -> Sampled {
        Sampled::of(self.samples, || {
            concurrent_rate(bin, bus, self.clients, self.per_client)
        })
    }
}

/// `xlurm` under each command name, as the package installs them.
fn command_links(dir: &Path) -> PathBuf {
    let xlurm = PathBuf::from(env!("CARGO_BIN_EXE_xlurm"));
    for name in ["xbatch", "xqueue"] {
        std::os::unix::fs::symlink(&xlurm, dir.join(name)).unwrap();
    }
    xlurm
}

/// Mean wall time of `n` runs of `cmd` (output thrown away), in ms; panics
/// on a failed run, which would make the figure meaningless.
fn mean_ms(n: usize, mut cmd: impl FnMut() -> Command) -> f64 {
    let t0 = Instant::now();
    for _ in 0..n {
        let status = cmd()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "a run failed: {status}");
    }
    t0.elapsed().as_secs_f64() * 1e3 / n as f64
}

/// `xbatch --wrap true` on the private bus.
fn xbatch(bin: &Path, bus: &str) -> Command {
    let mut c = Command::new(bin.join("xbatch"));
    c.args(["--wrap", "true"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus);
    c
}

/// Submissions per second from `clients` concurrent loops of `per_client`
/// `xbatch` each.
fn concurrent_rate(bin: &Path, bus: &str, clients: usize, per_client: usize) -> f64 {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..clients {
            s.spawn(|| mean_ms(per_client, || xbatch(bin, bus)));
        }
    });
    (clients * per_client) as f64 / t0.elapsed().as_secs_f64()
}

/// What `xbatch --wrap true` sends, for queueing many at once: the caller's
/// environment and a one-line script.
fn batch_spec() -> Dict {
    let env: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
    HashMap::from([
        entry("argv", Vec::<String>::new()),
        entry("script", "#!/bin/sh\ntrue\n"),
        entry("cwd", "/"),
        entry("env", env),
    ])
}

/// Queues `n` jobs in batches small enough that the calls' own buffers do
/// not show in the daemon's RSS as if the jobs held them.
async fn queue(c: &SchedulerProxy<'_>, n: usize) {
    let mut left = n;
    while left > 0 {
        let k = left.min(200);
        c.submit_many((0..k).map(|_| batch_spec()).collect())
            .await
            .unwrap();
        left -= k;
    }
}

fn pct(x: f64, base: f64) -> String {
    format!("{:+.0}%", (x / base - 1.0) * 100.0)
}

fn main() {
    if common::serve_if_child() {
        return;
    }
    common::runtime().block_on(bench());
}

async fn bench() {
    let n = if std::env::var_os("XLURM_CLI_BENCH_SMALL").is_some() {
        SMALL
    } else {
        FULL
    };
    let bus = PrivateBus::start().unwrap();
    let fake_conn = bus.connect().await.unwrap();
    let _fake = FakeSystemd::serve(&fake_conn, Mode::Instant).await.unwrap();
    let state = tempfile::tempdir().unwrap();
    let bins = tempfile::tempdir().unwrap();
    let xlurm = command_links(bins.path());
    let mut child = common::start_daemon(&bus, state.path()).await;
    let conn = bus.connect().await.unwrap();
    let c = SchedulerProxy::new(&conn).await.unwrap();
    let (bin, addr) = (bins.path(), bus.address.as_str());
    let pid = child.id();
    if let Ok(n) = std::env::var("XLURM_CLI_BENCH_HOLD") {
        queue(&c, n.parse().unwrap_or(0)).await;
        println!("DBUS_SYSTEM_BUS_ADDRESS={addr} (xlurmd: PID {pid}); waiting 10 minutes");
        std::thread::sleep(Duration::from_secs(600));
    }
    println!(
        "xlurm as users meet it (real binaries as processes, private dbus-daemon, systemd double)"
    );

    let t = mean_ms(n.starts, || Command::new("/bin/true"));
    println!("process start, /bin/true (the floor):              {t:>8.2} ms");
    let v = mean_ms(n.starts, || {
        let mut c = Command::new(&xlurm);
        c.arg("--version");
        c
    });
    println!("process start, xlurm --version:                    {v:>8.2} ms (goal <= 1.2 ms)");

    let rss_empty = rss_kib(pid);
    let serial = n.serial(bin, addr);
    println!(
        "submit, serial, empty queue (median of {} x {} xbatch): {} ms = {:.0}/s (goal <= 2.2 ms, 460/s)",
        n.samples,
        n.serial,
        serial.show(2),
        1e3 / serial.median
    );
    let par = n.concurrent(bin, addr);
    println!(
        "submit, {} clients, empty queue (median of {}):    {}/s (goal >= 1000/s)",
        n.clients,
        n.samples,
        par.show(0)
    );
    let mut queued = n.per_round();
    for q in n.queued {
        let add = q.saturating_sub(queued);
        let rss0 = rss_kib(pid);
        queue(&c, add).await;
        queued += add;
        let rss1 = rss_kib(pid);
        println!(
            "daemon RSS with {queued} queued: {:>7.1} MiB; {:.2} KiB a job over the last {add} (goal <= 1 KiB; 10,000 in 25 MiB, 100,000 in 128 MiB)",
            rss1 as f64 / 1024.0,
            rss1.saturating_sub(rss0) as f64 / add.max(1) as f64,
        );
        let s = n.serial(bin, addr);
        let p = n.concurrent(bin, addr);
        queued += n.per_round();
        println!(
            "submit with {q} queued: serial {} ms ({} of empty), {} clients {}/s ({}) (goal: within 10%)",
            s.show(2),
            pct(s.median, serial.median),
            n.clients,
            p.show(0),
            pct(p.median, par.median)
        );
        let mut times: Vec<f64> = (0..3)
            .map(|_| {
                mean_ms(1, || {
                    let mut c = Command::new(bin.join("xqueue"));
                    c.args(["--all", "--limit", "0"])
                        .env("DBUS_SYSTEM_BUS_ADDRESS", addr);
                    c
                })
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "xqueue --all --limit 0 of {queued} jobs, end to end (median of 3): {:>8.1} ms (goal: 100,000 in <= 150 ms)",
            times[1]
        );
    }
    println!(
        "(daemon RSS at the start: {:.1} MiB)",
        rss_empty as f64 / 1024.0
    );
    top_cost(&xlurm, addr, pid, queued);
    let _ = child.kill();
    let _ = child.wait();
}

/// Process `pid`'s CPU time so far (user + system), seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // SAFETY: sysconf only reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0)) as f64 / hz
}

/// What an open `xlurm top` costs the daemon (`pid`) with `queued` jobs:
/// its CPU over 10 s with a live top on an 80x24 terminal (`script`), less
/// its CPU over 10 s without (issue 20: under 1% of a CPU).
fn top_cost(xlurm: &std::path::Path, addr: &str, pid: u32, queued: usize) {
    let window = Duration::from_secs(10);
    let c0 = cpu_secs(pid);
    std::thread::sleep(window);
    let idle = cpu_secs(pid) - c0;
    let cmd = format!("stty rows 24 cols 80; {} top", xlurm.display());
    let c0 = cpu_secs(pid);
    let mut top = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", addr)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs xlurm top on a terminal");
    std::thread::sleep(window);
    let open = cpu_secs(pid) - c0;
    if let Some(mut stdin) = top.stdin.take() {
        use std::io::Write;
        let _ = stdin.write_all(b"q");
    }
    let out = top.wait_with_output().expect("xlurm top's output");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        screen.contains("pending") && out.status.success(),
        "xlurm top did not run: {:?} {screen} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "xlurm top open with {queued} jobs: daemon CPU {:.3} s over 10 s ({:.3} s without): {:.2}% of a CPU (goal < 1%)",
        open,
        idle,
        (open - idle).max(0.0) * 100.0 / window.as_secs_f64()
    );
}

//! xlurmd's own cost, measured natively: the daemon (in a child process, so
//! its memory is its own) on a private dbus-daemon with a systemd double that
//! accepts StartTransientUnit at once. `cargo bench --bench daemon` prints
//! the figures with the goals from issue 4 beside them.

mod common;

use common::rss_mib;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use xlurm::cli::client::{Dict, SchedulerProxy};
use xlurm::testing::bus::PrivateBus;
use xlurm::testing::fake_systemd::{FakeSystemd, Mode};
use xlurm::wire::spec::entry;

fn spec() -> Dict {
    HashMap::from([
        entry("argv", vec!["/bin/true".to_string()]),
        entry("cwd", "/"),
        entry(
            "env",
            vec!["HOME=/root".to_string(), "PATH=/usr/bin:/bin".to_string()],
        ),
    ])
}

/// CPU time (user + system) process `pid` has used, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let at = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    at(14) + at(15)
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The IDs of every job `filter` matches, read (and decoded whole) the way
/// `xqueue` reads them.
async fn list_all(c: &SchedulerProxy<'_>, filter: Dict) -> Vec<u64> {
    let fd = c.list_jobs_by_file_descriptor(filter).await.unwrap();
    let listing = xlurm::wire::queue::read_fd(fd.into()).unwrap();
    let lines = listing.lines().unwrap();
    lines.iter().map(|l| l.id).collect()
}

async fn submit_rate(bus: &PrivateBus, clients: usize, per_client: usize) -> f64 {
    let mut proxies = Vec::new();
    for _ in 0..clients {
        let conn = bus.connect().await.unwrap();
        proxies.push(SchedulerProxy::new(&conn).await.unwrap());
    }
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for p in proxies {
        tasks.push(tokio::spawn(async move {
            for _ in 0..per_client {
                p.submit(spec()).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (clients * per_client) as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    if common::serve_if_child() {
        return;
    }
    common::runtime().block_on(bench());
}

async fn bench() {
    let bus = PrivateBus::start().unwrap();
    let fake_conn = bus.connect().await.unwrap();
    let fake = FakeSystemd::serve(&fake_conn, Mode::Instant).await.unwrap();
    let state = tempfile::tempdir().unwrap();
    let state = match std::env::var("XLURM_BENCH_KEEP_STATE") {
        // Where to leave the state for a look afterwards.
        Ok(dir) => tempfile::Builder::new().tempdir_in(dir).unwrap().keep(),
        Err(_) => state.path().to_path_buf(),
    };
    let mut child = common::start_daemon(&bus, &state).await;
    let conn = bus.connect().await.unwrap();
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
    let name = zbus::names::BusName::try_from("org.xlurm.Scheduler1").unwrap();
    let c = SchedulerProxy::new(&conn).await.unwrap();

    println!("xlurmd benchmarks (daemon in its own process, private dbus-daemon, systemd double)");
    let empty = submit_rate(&bus, 8, 250).await;
    println!("single submits, 8 clients, empty history:      {empty:>8.0}/s    (goal >= 2000/s)");

    let t0 = Instant::now();
    let mut total = 0;
    while total < 100_000 {
        let ids = c
            .submit_many((0..10_000).map(|_| spec()).collect())
            .await
            .unwrap();
        total += ids.len();
    }
    let batch = total as f64 / t0.elapsed().as_secs_f64();
    println!(
        "batch submit (SubmitMany of 10,000):           {batch:>8.0} jobs/s (goal >= 20000/s)"
    );

    let full = submit_rate(&bus, 8, 250).await;
    println!(
        "single submits, 8 clients, 100,000 in history: {full:>8.0}/s    (goal: within 20% of empty; {:+.0}%)",
        (full / empty - 1.0) * 100.0
    );

    let filter = HashMap::from([entry("all_users", true), entry("finished", true)]);
    let mut times = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        let jobs = list_all(&c, filter.clone()).await;
        times.push(t0.elapsed());
        assert!(jobs.len() >= 100_000);
    }
    times.sort();
    println!(
        "listing 100,000+ jobs (xqueue's way, by descriptor, median of 5): {:>6.1} ms (goal < 100 ms)",
        times[2].as_secs_f64() * 1e3
    );
    // The same through ListJobs' D-Bus arrays, page by page (8 MiB each).
    let mut times = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        let mut f = filter.clone();
        let mut n = 0;
        loop {
            let (jobs, more) = c.list_jobs(f.clone()).await.unwrap();
            n += jobs.len();
            if !more {
                break;
            }
            let (k, v) = entry("before", jobs[0].id);
            f.insert(k, v);
        }
        times.push(t0.elapsed());
        assert!(n >= 100_000);
    }
    times.sort();
    println!(
        "  (the same as ListJobs pages of D-Bus arrays through dbus-daemon: {:>6.1} ms)",
        times[2].as_secs_f64() * 1e3
    );

    // Slot free -> StartTransientUnit: the running job ends, the next one starts.
    let mut lat = Vec::new();
    for _ in 0..20 {
        let (unit, before) = {
            let shared = fake.shared.lock().unwrap();
            (
                shared.started.last().map(|r| r.name.clone()),
                shared.start_times.len(),
            )
        };
        let Some(unit) = unit else { break };
        let t0 = Instant::now();
        fake.finish(&unit, 0).await;
        loop {
            let started = fake.shared.lock().unwrap().start_times.get(before).copied();
            if let Some(t) = started {
                lat.push(t.duration_since(t0));
                break;
            }
            if t0.elapsed() > Duration::from_secs(5) {
                break;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }
    lat.sort();
    if !lat.is_empty() {
        println!(
            "slot free -> StartTransientUnit (median of {}): {:>8.2} ms (goal < 5 ms)",
            lat.len(),
            lat[lat.len() / 2].as_secs_f64() * 1e3
        );
    }
    println!(
        "daemon RSS holding {total}+ pending jobs (objects, environments):     {:>8.1} MiB (goal < 64 MiB with 100,000 finished; pending jobs hold more)",
        rss_mib(child.id())
    );
    // Finish them all (cancel: the quickest way through), then measure again.
    let ids: Vec<u64> = list_all(&c, HashMap::from([entry("all_users", true)])).await;
    let (cancel_t0, cancel_cpu0) = (Instant::now(), cpu_ticks(child.id()));
    let mut tasks = Vec::new();
    for chunk in ids.chunks(ids.len().div_ceil(8).max(1)) {
        let chunk = chunk.to_vec();
        let p = SchedulerProxy::new(&bus.connect().await.unwrap())
            .await
            .unwrap();
        tasks.push(tokio::spawn(async move {
            for id in chunk {
                let _ = p.cancel(id).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Objects linger 1 s here, then jobs are kept in brief; the 5 s tick
    // hands freed memory back (State::trim). Measure once no job object is
    // left on the bus and a tick has passed since.
    let t0 = Instant::now();
    let mut left = String::from("?");
    while t0.elapsed() < Duration::from_secs(30) {
        let objects = zbus::fdo::IntrospectableProxy::builder(&conn)
            .destination("org.xlurm.Scheduler1")
            .path("/org/xlurm/Scheduler1/job")
            .build()
            .await
            .unwrap()
            .introspect()
            .await
            .map(|xml| xml.matches("<node name=").count());
        match objects {
            Ok(0) | Err(zbus::fdo::Error::UnknownObject(_)) => {
                left = "0".into();
                break;
            }
            Ok(n) => left = n.to_string(),
            Err(e) => left = format!("? ({e})"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "cancel of {} pending jobs by 8 clients, until no object is left: {:.1} s, xlurmd CPU {:.1} s",
        ids.len(),
        cancel_t0.elapsed().as_secs_f64(),
        (cpu_ticks(child.id()) - cancel_cpu0) as f64 / clk_tck()
    );
    // Then one trim tick (5 s); the figures after show whether more comes back.
    let mut trail = Vec::new();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(6)).await;
        trail.push(format!("{:.1}", rss_mib(child.id())));
    }
    let rss = rss_mib(child.id());
    common::print_heap(&child).await;
    println!(
        "  (job objects left: {left} after {:.1} s; RSS every 6 s after: {} MiB)",
        t0.elapsed().as_secs_f64(),
        trail.join(", ")
    );
    println!(
        "daemon RSS with {} finished jobs retained:     {:>8.1} MiB (goal < 64 MiB)",
        ids.len(),
        rss
    );

    // Sustained: each unit exits as soon as it started; one slot. The end
    // is heard as a client of `xrun` hears it (JobStateChanged), not by
    // polling GetJob: each GetJob of a job deep in the queue plans the queue
    // up to it (its estimated start), a cost of the poll, not of the starts.
    let n = 2_000;
    fake.shared.lock().unwrap().exit_at_once = true;
    // Read in a task of its own from now on: an unread stream stops the
    // connection's reader (SubmitMany's reply too) after 64 signals.
    let mut changes = c.receive_job_state_changed().await.unwrap();
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        use futures_util::StreamExt;
        while let Some(signal) = changes.next().await {
            if let Ok(a) = signal.args() {
                if a.state == "COMPLETED" && done_tx.send(a.id).is_err() {
                    return;
                }
            }
        }
    });
    let cpu0 = cpu_ticks(child.id());
    let t0 = Instant::now();
    let ids = c
        .submit_many((0..n).map(|_| spec()).collect())
        .await
        .unwrap();
    let last = ids.last().copied().unwrap_or(0);
    let ended = async {
        while let Some(id) = done.recv().await {
            if id == last {
                return;
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(120), ended)
        .await
        .is_err()
    {
        println!("  (job {last} did not complete within 120 s: the figure below is a bound)");
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu_ms = (cpu_ticks(child.id()) - cpu0) as f64 * 1000.0 / clk_tck();
    println!(
        "sustained, one slot, units that exit at once: {n} jobs in {secs:.2} s = {:>6.0} jobs/s; xlurmd CPU {:.2} ms per job",
        n as f64 / secs,
        cpu_ms / n as f64
    );
    let _ = child.kill();
    let _ = child.wait();
    while dbus.name_has_owner(name.clone()).await.unwrap() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The same state read by a fresh daemon: what the jobs themselves cost,
    // without the allocator's high-water mark from the 100,000 pending ones.
    let t0 = Instant::now();
    let mut child = common::start_daemon(&bus, &state).await;
    let started = t0.elapsed();
    let c = SchedulerProxy::new(&conn).await.unwrap();
    let n = list_all(
        &c,
        HashMap::from([entry("all_users", true), entry("finished", true)]),
    )
    .await
    .len();
    common::print_heap(&child).await;
    println!(
        "restart with {n} finished jobs: ready in {:>6.2} s, RSS {:>8.1} MiB (goal < 64 MiB)",
        started.as_secs_f64(),
        rss_mib(child.id())
    );
    let _ = child.kill();
    let _ = child.wait();
}

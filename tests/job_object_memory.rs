//! What a job's D-Bus object costs xlurmd (issue 21): nothing kept per job.
//! Job objects are answered from the job table (`daemon::bus::objects`), not
//! registered one by one with zbus's object server (a tree node and its
//! standard interfaces: about 1 KiB a job, as much as the rest of a pending
//! job). So a pending job on a public queue, which has an object, holds no
//! more of the daemon's heap than one on a private queue, which has none.
//! xlurmd runs in this process (glibc's counters, `mallinfo2`, see what it
//! holds), once each way, each on its own bus with the systemd double; its
//! own test binary without the harness, so no other test's allocations count.

#[path = "../benches/common/mod.rs"]
mod common;

use std::collections::HashMap;
use xlurm::cli::client::SchedulerProxy;
use xlurm::daemon::bus::api::Dict;
use xlurm::daemon::serve::serve;
use xlurm::testing::bus::PrivateBus;
use xlurm::testing::fake_systemd::{FakeSystemd, Mode};
use xlurm::wire::spec::entry;

const JOBS: usize = 10_000;

/// The bytes glibc's allocator has handed out and not had back.
fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let m = unsafe { libc::mallinfo2() };
    m.uordblks + m.hblkhd
}

fn batch_spec() -> Dict {
    HashMap::from([
        entry("argv", Vec::<String>::new()),
        entry("script", "#!/bin/sh\ntrue\n"),
        entry("cwd", "/"),
        entry("env", vec!["PATH=/usr/bin:/bin".to_string()]),
    ])
}

async fn queue(c: &SchedulerProxy<'_>, n: usize) -> u64 {
    let mut last = 0;
    for _ in 0..n / 200 {
        let ids = c
            .submit_many((0..200).map(|_| batch_spec()).collect())
            .await
            .expect("queued");
        last = ids.last().copied().unwrap_or(last);
    }
    last
}

/// The heap a pending job holds in a daemon with a public (`true`) or
/// private queue, and whether the last one's object answers.
async fn per_job(public: bool) -> (usize, Option<String>) {
    let bus = PrivateBus::start().expect("dbus-daemon");
    let fake_conn = bus.connect().await.unwrap();
    let _fake = FakeSystemd::serve(&fake_conn, Mode::Instant).await.unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut cfg = common::config(state.path().to_path_buf());
    cfg.list_is_public = public;
    let conn = bus.connect().await.unwrap();
    let served = serve(&conn, cfg).await.map_err(|r| r.0).unwrap();
    served.daemon.kick.notify_one();
    let client = bus.connect().await.unwrap();
    let c = SchedulerProxy::new(&client).await.unwrap();
    // Warm up: the tables' first growth, the store's and the bus's buffers.
    queue(&c, 1_000).await;
    let before = heap_in_use();
    let last = queue(&c, JOBS).await;
    let per_job = heap_in_use().saturating_sub(before) / JOBS;
    let state = zbus::fdo::PropertiesProxy::builder(&client)
        .destination("org.xlurm.Scheduler1")
        .path(format!("/org/xlurm/Scheduler1/job/{last}"))
        .build()
        .await
        .unwrap()
        .get(
            zbus::names::InterfaceName::try_from("org.xlurm.Job1").unwrap(),
            "State",
        )
        .await
        .ok()
        .and_then(|v| String::try_from(v).ok());
    (per_job, state)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (private, no_object) = per_job(false).await;
    let (public, object) = per_job(true).await;
    println!(
        "heap per pending job: {public} bytes on a public queue (with its object), {private} on a private one (none)"
    );
    assert_eq!(no_object, None, "a private queue's job has no object");
    assert_eq!(
        object.as_deref(),
        Some("PENDING"),
        "a public queue's job has its object"
    );
    assert!(
        public <= private + 128,
        "a job's object holds {} bytes of the daemon's heap (at most 128)",
        public.saturating_sub(private)
    );
    println!("test a_job_object_holds_no_heap_of_its_own ... ok");
}

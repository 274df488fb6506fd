//! The machine as users see it: `xlurm top`, limits in `xinfo`, the idle-GPU rule.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xlurm_top_draws_a_daemon_with_fake_devices_in_80x24() {
    let mut e = env(Mode::Run).await;
    e.devices = one_gpu();
    let (_d, _conn) = daemon(&e).await;
    let c = client(&e).await;
    let mut s = spec(&["/bin/sleep", "60"]);
    s.extend([entry("gpus", 1u32), entry("name", "train")]);
    let (gpu, _) = c.submit(s).await.unwrap();
    wait_state(&c, gpu, "RUNNING").await;
    let mut s = spec(&["/bin/sleep", "60"]);
    s.extend([entry("gpus", 1u32), entry("name", "next")]);
    let (waiting, _) = c.submit(s).await.unwrap();
    // The fake backend's polls give the GPU its load (0 %, 1G of 80G).
    let ui = xlurm::cli::top::Ui::default();
    let t0 = Instant::now();
    let m = loop {
        let m = xlurm::cli::top::load(&c, &ui, 10, true).await.unwrap();
        let (run, _) = m.listed(&ui);
        if run.first().is_some_and(|j| j.gpu_util.is_some()) {
            break m;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no load on screen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).unwrap();
    t.draw(|f| xlurm::cli::top::draw(f, &m, &ui)).unwrap();
    let buf = t.backend().buffer().clone();
    let lines: Vec<String> = (0..24)
        .map(|y| {
            (0..80)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
        })
        .collect();
    let all = lines.join("\n");
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .map_or_else(|| nix::unistd::getuid().to_string(), |u| u.name);
    assert!(
        lines[0].starts_with("xlurm top  fifo-strict  1 running, 1 pending"),
        "{all}"
    );
    assert!(
        all.contains("│0    1/2"),
        "node 0 with the GPU job's CPU: {all}"
    );
    assert!(
        all.contains(&format!("│nv:0   0%    1G/80G      job {gpu} {me}")),
        "{all}"
    );
    assert!(
        all.contains(&format!("│{gpu:<6} {:<8} train ", &me[..me.len().min(8)])),
        "{all}"
    );
    assert!(all.contains("nv:[0] 0%"), "{all}");
    assert!(all.contains(&format!("│{waiting:<6}")), "{all}");
    c.cancel(waiting).await.unwrap();
    c.cancel(gpu).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_gpu_cancels_its_job_only_when_the_admin_opted_in() {
    let mut e = env(Mode::Run).await;
    e.devices = one_gpu();
    e.idle_action = xlurm::core::IdleAction::Cancel;
    let (_d, _conn) = daemon(&e).await;
    let c = client(&e).await;
    let mut s = spec(&["/bin/sleep", "60"]);
    s.extend([entry("gpus", 1u32)]);
    let (id, _) = c.submit(s).await.unwrap();
    // The fake backend polls the GPU idle: flagged after a second, then cancelled.
    let job = wait_state(&c, id, "CANCELLED").await;
    assert!(
        get::<u64>(&job, "start_time").unwrap_or(0) > 0,
        "it ran: {job:?}"
    );
    // A CPU job beside it is never judged.
    let (cpu, _) = c.submit(spec(&["/bin/sleep", "60"])).await.unwrap();
    wait_state(&c, cpu, "RUNNING").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(get_str(&c.get_job(cpu).await.unwrap(), "state"), "RUNNING");
    c.cancel(cpu).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_name_users_and_xinfo_shows_the_callers_own() {
    let e = env(Mode::Instant).await;
    let (_d, _c) = daemon(&e).await;
    let c = client(&e).await;
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .expect("the test's user has a name")
        .name;
    let text = cli(&e, ["info"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("your limits: none"),
        "{text:?}"
    );
    c.set_user_limits(&format!(
        r#"{{"users": {{"{me}": {{"running_jobs": 3, "gpus": 2, "shares": 4}}}}}}"#
    ))
    .await
    .unwrap();
    // Shown by name; an unknown name is refused and changes nothing.
    let shown = c.get_user_limits().await.unwrap();
    assert!(shown.contains(&format!("\"{me}\"")), "{shown}");
    let err = c
        .set_user_limits(r#"{"users": {"no-such-user-xlurm": {"gpus": 1}}}"#)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("no user named \"no-such-user-xlurm\""),
        "{err}"
    );
    assert_eq!(c.get_user_limits().await.unwrap(), shown);
    // xinfo: each of the caller's limits, in use of limit, and where set.
    let out = cli(&e, ["info"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let uid = nix::unistd::getuid().as_raw();
    assert!(
        text.contains(&format!(
            "your limits:\n    running jobs: 0 of 3 (the limit set for user {uid})\n    GPUs: 0 of 2 (the limit set for user {uid})\n"
        )),
        "{text}"
    );
    let info = cli_json(&e, &["info", "--json"]);
    assert_eq!(info["limits"][1]["scope"], "user", "{info}");
    assert_eq!(info["limits"][1]["limit"], 2, "{info}");
}

//! Starts systemd lost: started again while the journal says the unit never
//! ran, at most three times.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_systemd_lost_before_the_unit_ran_is_started_again() {
    // The journal has no trace of the unit: it never started.
    let t = lost_starts(Some(""), 1).await;
    let mut s = spec(&["/bin/sh", "-c", "echo \"$SECRET\" >/dev/null; exit 4"]);
    s.extend([entry("env", vec!["SECRET=1".to_string()])]);
    let (id, _) = t.c.submit(s).await.unwrap();
    let job = wait_state(&t.c, id, "FAILED").await;
    assert_eq!(get::<i32>(&job, "exit_code"), Some(4), "{job:?}");
    assert_eq!(t.starts_of(id), 2, "started once more, not more");
    let shared = t.e.fake.shared.lock().unwrap();
    let second = shared
        .started
        .iter()
        .rfind(|r| r.name == format!("xlurm-job-{id}.service"))
        .unwrap();
    let env: Vec<String> = second
        .properties
        .get("Environment")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Vec::<String>::try_from(v).ok())
        .unwrap_or_default();
    assert!(
        env.contains(&"SECRET=1".to_string()),
        "the second start keeps the submitted environment: {env:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_that_started_and_vanished_is_not_started_again() {
    // The journal shows systemd's "Starting" message for it.
    let t = lost_starts(Some(r#"{"MESSAGE":"Starting"}"#), 1).await;
    let (id, _) = t.c.submit(spec(&["/bin/true"])).await.unwrap();
    let job = wait_state(&t.c, id, "CANCELLED").await;
    assert!(
        get_str(&job, "detail").contains("stopped outside xlurm"),
        "{job:?}"
    );
    assert_eq!(t.starts_of(id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_lost_again_and_again_end_in_launch_failed() {
    let t = lost_starts(Some(""), 100).await;
    let (id, _) = t.c.submit(spec(&["/bin/true"])).await.unwrap();
    let job = wait_state(&t.c, id, "LAUNCH_FAILED").await;
    assert!(
        get_str(&job, "detail").contains("lost the start"),
        "{job:?}"
    );
    assert_eq!(
        t.starts_of(id),
        1 + xlurm::daemon::service::MAX_RELAUNCHES as usize
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_journal_a_vanished_unit_is_cancelled_saying_so() {
    let t = lost_starts(None, 1).await;
    let (id, _) = t.c.submit(spec(&["/bin/true"])).await.unwrap();
    let job = wait_state(&t.c, id, "CANCELLED").await;
    assert!(
        get_str(&job, "detail").contains("whether it ever ran is unknown"),
        "{job:?}"
    );
    assert_eq!(t.starts_of(id), 1);
}

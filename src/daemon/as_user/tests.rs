use super::*;
use crate::wire::spec::entry;
use std::os::unix::fs::{chown, PermissionsExt};
use std::time::Instant;

/// A uid with no account here: the check gives it no group but the overflow one.
const STRANGER: u32 = 4242;
/// The owner of the closed directory (`nobody`).
const OWNER: u32 = 65_534;

fn accounts() -> Accounts {
    Accounts::new(Duration::from_secs(1))
}

fn checker() -> Checker {
    Checker::new(accounts())
}

fn spec_in(cwd: &str) -> Spec {
    crate::daemon::spec::parse(&HashMap::from([
        entry("argv", vec!["/bin/true".to_string()]),
        entry("cwd", cwd),
    ]))
    .expect("parse takes any absolute cwd: the check is the submitter's")
}

async fn answer(c: &Checker, uid: u32, cwd: &str) -> Result<(), String> {
    c.check_specs(uid, &[spec_in(cwd)])
        .await
        .map_err(|e| match e {
            ApiError::InvalidArgs(m) => format!("InvalidArgs: {m}"),
            other => format!("{other:?}"),
        })
}

/// Says on the terminal that `test` did not run, and why: written to stderr
/// directly, which `cargo test` does not capture (it captures `eprintln!`).
pub(crate) fn skipped(test: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Whether this process is root, as `test` needs; says so if not.
fn root(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        skipped(
            test,
            "needs root to take other users' identities (CI runs it as root)",
        );
    }
    root
}

/// Whether this test may switch identities (root) and sees its own files
/// where PID 1 does; says why not on stderr, where `cargo test` shows it.
fn can_switch(test: &str, dir: &std::path::Path) -> bool {
    if !root(test) {
        return false;
    }
    if dir_problem_here(dir.to_str().unwrap()).is_some() {
        let why = format!(
            "PID 1 does not see {} (another mount namespace)",
            dir.display()
        );
        skipped(test, &why);
        return false;
    }
    true
}

/// `base` (0755) holding `closed` (0700, of `nobody`), which holds `secret`.
fn closed_dir() -> (tempfile::TempDir, String) {
    let base = tempfile::Builder::new()
        .prefix("xlurm-as-user-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let closed = base.path().join("closed");
    std::fs::create_dir_all(closed.join("secret")).unwrap();
    if nix::unistd::geteuid().is_root() {
        chown(closed.join("secret"), Some(OWNER), Some(OWNER)).unwrap();
        chown(&closed, Some(OWNER), Some(OWNER)).unwrap();
    }
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let closed = closed.to_str().unwrap().to_string();
    (base, closed)
}

#[tokio::test]
async fn a_closed_directory_tells_a_stranger_nothing_of_what_it_holds() {
    let (base, closed) = closed_dir();
    if !can_switch(
        "a_closed_directory_tells_a_stranger_nothing_of_what_it_holds",
        base.path(),
    ) {
        return;
    }
    let (secret, nothere) = (format!("{closed}/secret"), format!("{closed}/nothere"));
    // Control: with root's rights (what xlurmd did before), the two differ.
    assert_eq!(dir_problem_here(&secret), None);
    assert!(dir_problem_here(&nothere)
        .unwrap()
        .contains("does not exist"));

    let c = checker();
    let a = answer(&c, STRANGER, &secret).await.unwrap_err();
    let b = answer(&c, STRANGER, &nothere).await.unwrap_err();
    assert!(
        a.contains("is not accessible to you (permission denied)"),
        "{a}"
    );
    assert_eq!(a.replace(&secret, "X"), b.replace(&nothere, "X"));
    assert!(a.starts_with("InvalidArgs: "), "{a}");
    // The closed directory itself: it can be reached (stat), not entered.
    let d = answer(&c, STRANGER, &closed).await.unwrap_err();
    assert_eq!(d.replace(&closed, "X"), a.replace(&secret, "X"));

    // Its owner sees into it, with the usual answers.
    assert_eq!(answer(&c, OWNER, &secret).await, Ok(()));
    let e = answer(&c, OWNER, &nothere).await.unwrap_err();
    assert!(e.ends_with("does not exist"), "{e}");
    let file = format!("{closed}/file");
    std::fs::write(&file, "").unwrap();
    let f = answer(&c, OWNER, &file).await.unwrap_err();
    assert!(f.ends_with("is not a directory"), "{f}");
    // And root, on the same thread after them, still sees everything.
    assert_eq!(answer(&c, 0, &secret).await, Ok(()));
    assert_eq!(answer(&c, STRANGER, "/").await, Ok(()));
}

#[test]
fn a_switch_changes_only_its_own_thread_and_is_undone() {
    if !root("a_switch_changes_only_its_own_thread_and_is_undone") {
        return;
    }
    let mine = thread_id::current().unwrap();
    let want = FsIdentity {
        uid: STRANGER,
        gid: 4243,
        groups: vec![4243, 4244],
    };
    let (inside_tx, inside_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let w = want.clone();
    let t = std::thread::spawn(move || {
        let before = thread_id::current().unwrap();
        let (seen, fit) = with_identity(&w, || {
            inside_tx.send(thread_id::current().unwrap()).unwrap();
            go_rx.recv().unwrap();
        });
        seen.unwrap();
        assert!(fit);
        assert_eq!(thread_id::current().unwrap(), before, "taken back");
    });
    let inside = inside_rx.recv().unwrap();
    assert_eq!(inside, want, "the thread took the identity");
    assert_eq!(
        thread_id::current().unwrap(),
        mine,
        "other threads keep theirs"
    );
    go_tx.send(()).unwrap();
    t.join().unwrap();
}

#[tokio::test]
async fn a_checking_thread_is_root_again_after_each_check() {
    if !root("a_checking_thread_is_root_again_after_each_check") {
        return;
    }
    let mine = thread_id::current().unwrap();
    let c = checker();
    assert_eq!(answer(&c, STRANGER, "/").await, Ok(()));
    let (stranger, first) = c
        .run(STRANGER, || {
            let (seen, fit) = with_identity(&FsIdentity::of(STRANGER, &accounts()), || {
                thread_id::current().unwrap()
            });
            ((seen.unwrap(), std::thread::current().id()), fit)
        })
        .await
        .unwrap();
    assert_eq!(stranger.uid, STRANGER);
    let (root, next) = c
        .run(0, || {
            (
                (thread_id::current().unwrap(), std::thread::current().id()),
                true,
            )
        })
        .await
        .unwrap();
    assert_eq!(first, next, "one thread serves one check after the other");
    assert_eq!(root, mine, "with root's identity back");
}

/// A check that blocks until its sender is dropped or sends.
fn blocking() -> (
    mpsc::Sender<()>,
    impl FnOnce() -> ((), bool) + Send + 'static,
) {
    let (tx, rx) = mpsc::channel::<()>();
    (tx, move || {
        let _ = rx.recv();
        ((), true)
    })
}

// One event-loop thread: a check that blocked it could not time out.
#[tokio::test(flavor = "current_thread")]
async fn a_hanging_check_times_out_and_is_no_one_elses_problem() {
    let c = Checker::with_limits(accounts(), Duration::from_millis(200), 3, 2);
    let t = Instant::now();
    let (release1, hang) = blocking();
    assert_eq!(c.run(1, hang).await, Err(Unanswered::TimedOut));
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // The next check gets a thread of its own and is answered.
    assert_eq!(c.run(1, || (7, true)).await, Ok(7));

    let (release2, hang) = blocking();
    assert_eq!(c.run(1, hang).await, Err(Unanswered::TimedOut));
    // Two of user 1's checks hang: user 1 is refused at once, others are not.
    let t = Instant::now();
    assert_eq!(
        c.run(1, || (7, true)).await,
        Err(Unanswered::Stuck {
            count: 2,
            yours: true
        })
    );
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(c.run(2, || (8, true)).await, Ok(8));
    let (release3, hang) = blocking();
    assert_eq!(c.run(2, hang).await, Err(Unanswered::TimedOut));
    // Three hang in all: everyone is refused at once.
    assert_eq!(
        c.run(3, || (9, true)).await,
        Err(Unanswered::Stuck {
            count: 3,
            yours: false
        })
    );
    let msg = unanswered("/nfs/x", &Unanswered::TimedOut, Duration::from_secs(2));
    assert_eq!(
        msg,
        "checking working directory \"/nfs/x\" timed out after 2 s: is its file system responding?"
    );

    // Once the file system answers, the stuck threads end and checks run again.
    drop((release1, release2, release3));
    let mut answered = c.run(3, || (9, true)).await;
    // Up to 10 s: the released threads must be scheduled to end, which a
    // loaded machine (the whole test suite at once) can take seconds to do.
    for _ in 0..1000 {
        if answered.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        answered = c.run(3, || (9, true)).await;
    }
    assert_eq!(answered, Ok(9));
    assert_eq!(c.run(1, || (7, true)).await, Ok(7));
    // Every released thread ends and is no longer counted, each in its own
    // time (the loop above ends as soon as one has).
    for _ in 0..1000 {
        if lock(&c.pool).stuck.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(lock(&c.pool).stuck.is_empty());
}

#[tokio::test]
async fn a_thread_that_cannot_take_back_its_identity_is_not_reused() {
    let c = checker();
    let first = c
        .run(0, || (std::thread::current().id(), false))
        .await
        .unwrap();
    let next = c
        .run(0, || (std::thread::current().id(), true))
        .await
        .unwrap();
    assert_ne!(first, next);
    assert_eq!(
        c.run(0, || (std::thread::current().id(), true))
            .await
            .unwrap(),
        next
    );
}

#[tokio::test]
async fn the_usual_answers_for_ones_own_paths() {
    let c = checker();
    let me = nix::unistd::geteuid().as_raw();
    for (cwd, want) in [
        ("/", None),
        ("/nonexistent/xlurm-as-user-test", Some("does not exist")),
        ("/proc/self/status", Some("is not a directory")),
        ("/proc/self/status/x", Some("is not a directory")),
    ] {
        assert_eq!(dir_problem_here(cwd).is_none(), want.is_none(), "{cwd}");
        match (answer(&c, me, cwd).await, want) {
            (Ok(()), None) => {}
            (Err(e), Some(w)) => assert!(e.ends_with(w) && e.starts_with("InvalidArgs"), "{e}"),
            (got, _) => panic!("{cwd}: {got:?}, want {want:?}"),
        }
    }
}

#[tokio::test]
async fn each_directory_is_checked_once_and_the_refusal_names_its_first_job() {
    let c = checker();
    let me = nix::unistd::geteuid().as_raw();
    let specs: Vec<Spec> = ["/", "/nonexistent/xlurm-a", "/", "/nonexistent/xlurm-a"]
        .iter()
        .map(|c| spec_in(c))
        .collect();
    match c.check_specs(me, &specs).await {
        Err(ApiError::InvalidArgs(m)) => assert_eq!(
            m,
            "job 2: working directory \"/nonexistent/xlurm-a\" does not exist"
        ),
        other => panic!("{other:?}"),
    }
    // 10,000 jobs in one directory: one look (well within the time limit).
    let many = vec![spec_in("/"); 10_000];
    let t = Instant::now();
    c.check_specs(me, &many).await.unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn a_usable_directory_is_remembered_for_its_user_for_a_second() {
    let mut a = Accepted::default();
    let t0 = std::time::Instant::now();
    a.put(1000, vec!["/home/alice".into()], t0);
    assert!(a.has(1000, "/home/alice", t0 + Duration::from_millis(900)));
    assert!(
        !a.has(1001, "/home/alice", t0),
        "another user looks for himself"
    );
    assert!(!a.has(1000, "/home/alice", t0 + ACCEPTED_FOR));
    // Bounded: old entries go first, then all.
    let many: Vec<String> = (0..ACCEPTED_MAX).map(|i| format!("/d{i}")).collect();
    a.put(1000, many.clone(), t0 + ACCEPTED_FOR * 2);
    assert!(!a.has(1000, "/home/alice", t0 + ACCEPTED_FOR * 2));
    assert_eq!(a.0.len(), ACCEPTED_MAX);
    a.put(1002, vec!["/x".into()], t0 + ACCEPTED_FOR * 2);
    assert!(a.0.len() <= ACCEPTED_MAX);
    assert!(a.has(1002, "/x", t0 + ACCEPTED_FOR * 2));
}

#[tokio::test]
async fn a_check_looks_its_submitter_up_for_the_daemon_too() {
    if !root("a_check_looks_its_submitter_up_for_the_daemon_too") {
        return;
    }
    // The daemon's accounts: its submission and its start read the check's lookup.
    let shared = Accounts::new(Duration::from_secs(60));
    let c = Checker::new(shared.clone());
    for uid in [OWNER, STRANGER] {
        assert_eq!(shared.kept(uid), None);
        assert_eq!(answer(&c, uid, "/").await, Ok(()));
        assert_eq!(
            shared.kept(uid),
            Some(
                crate::daemon::service::resolve_account(uid).expect("the account databases answer")
            ),
            "uid {uid}: the check's lookup, kept where the daemon finds it"
        );
    }
}

//! A submission's working directories checked as its submitter sees them.
//!
//! xlurmd runs as root. Had it looked at a path with its own rights, any user
//! could learn what exists inside directories closed to them ("does not
//! exist", "is not a directory" or accepted). So each check runs with the
//! caller's file-system identity: their uid, primary group and supplementary
//! groups, as their job's `chdir` will. The kernel checks file access against
//! a thread's fsuid, fsgid and groups, and on Linux each thread has its own;
//! the raw `setfsuid`, `setfsgid` and `setgroups` system calls change only the
//! calling thread (glibc's `setgroups()` changes every thread of the process,
//! so it is never used here). The checks run on a few dedicated threads, never
//! on the event loop (a `stat` on a dead network mount never returns), each
//! within [`CHECK_TIMEOUT`]: a submission whose check takes longer is refused,
//! its thread is left to finish on its own and never reused, and a user whose
//! checks keep hanging is refused at once (see [`Checker`]).
//!
//! Where xlurmd is not root (`--user` mode, tests as a user) it cannot take
//! another identity and needs none: its callers are its own user.

use super::service::Accounts;
use super::spec::Spec;
use crate::wire::error::{ApiError, ApiResult};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long one check may take before the submission is refused.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// Checks still hanging (their threads blocked in the kernel) past which
/// every further check is refused at once.
pub const MAX_STUCK: usize = 32;
/// The same, per user: one user's dead mount does not refuse everyone else.
pub const MAX_STUCK_PER_USER: usize = 4;
/// Checks running at once (a flood of submissions waits for a thread).
pub const MAX_BUSY: usize = 64;
/// Threads kept waiting for the next check.
const MAX_IDLE: usize = 4;
/// Working directories checked in one go, under one time limit.
const PATHS_PER_CHECK: usize = 1_000;
/// Groups given to a uid that has no account (the kernel's overflow group).
const NO_GROUP: u32 = 65_534;

/// Whose rights a check uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsIdentity {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary one may be among them).
    pub groups: Vec<u32>,
}

impl FsIdentity {
    /// `uid`'s identity as its jobs get it (`User=` with the groups of the
    /// account databases, see `service::Accounts`); a uid without an
    /// account gets no group but the overflow one, the least any user has.
    pub fn of(uid: u32, accounts: &Accounts) -> FsIdentity {
        match accounts.resolve(uid) {
            Ok(r) => FsIdentity {
                uid,
                gid: r.gid,
                groups: std::iter::once(r.gid).chain(r.groups).collect(),
            },
            Err(_) => FsIdentity {
                uid,
                gid: NO_GROUP,
                groups: Vec::new(),
            },
        }
    }
}

/// The calling thread's own file-system identity, read and set with raw
/// system calls: each changes this thread only.
mod thread_id {
    use super::FsIdentity;

    /// `setfsuid(-1)` changes nothing (-1 is no uid) and returns the current fsuid.
    pub fn fsuid() -> u32 {
        set_fsuid(u32::MAX)
    }

    pub fn fsgid() -> u32 {
        set_fsgid(u32::MAX)
    }

    /// Sets the fsuid; returns the previous one (whether or not it changed).
    fn set_fsuid(uid: u32) -> u32 {
        // SAFETY: setfsuid takes one integer and touches no memory of ours.
        unsafe { libc::syscall(libc::SYS_setfsuid, libc::c_long::from(uid)) as u32 }
    }

    fn set_fsgid(gid: u32) -> u32 {
        // SAFETY: as above.
        unsafe { libc::syscall(libc::SYS_setfsgid, libc::c_long::from(gid)) as u32 }
    }

    pub fn groups() -> std::io::Result<Vec<u32>> {
        // SAFETY: a size of 0 only asks for the count.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getgroups,
                0 as libc::c_long,
                std::ptr::null_mut::<u32>(),
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut g = vec![0u32; n as usize];
        // SAFETY: the buffer holds n gid_t.
        let m = unsafe { libc::syscall(libc::SYS_getgroups, n, g.as_mut_ptr()) };
        if m < 0 {
            return Err(std::io::Error::last_os_error());
        }
        g.truncate(m as usize);
        Ok(g)
    }

    fn set_groups(groups: &[u32]) -> std::io::Result<()> {
        // SAFETY: the pointer and length describe `groups`, which the kernel only reads.
        let r = unsafe {
            libc::syscall(
                libc::SYS_setgroups,
                groups.len() as libc::c_long,
                groups.as_ptr(),
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn current() -> std::io::Result<FsIdentity> {
        Ok(FsIdentity {
            uid: fsuid(),
            gid: fsgid(),
            groups: groups()?,
        })
    }

    /// Takes `id`: groups first (while the thread is still root), the fsuid
    /// last (it drops root's file capabilities). Checked after.
    pub fn take(id: &FsIdentity) -> Result<(), String> {
        set_groups(&id.groups).map_err(|e| format!("setgroups: {e}"))?;
        set_fsgid(id.gid);
        set_fsuid(id.uid);
        if fsgid() != id.gid || fsuid() != id.uid {
            return Err(format!(
                "setfsuid/setfsgid did not take {}:{}",
                id.uid, id.gid
            ));
        }
        Ok(())
    }

    /// Gives the thread back `own` (the fsuid first: back to 0, it restores
    /// the file capabilities) and checks that every part of it is back.
    pub fn restore(own: &FsIdentity) -> Result<(), String> {
        set_fsuid(own.uid);
        set_fsgid(own.gid);
        let set = set_groups(&own.groups);
        let now = current().map_err(|e| format!("getgroups: {e}"))?;
        if &now != own {
            return Err(format!("this thread is {now:?}, not {own:?} ({set:?})"));
        }
        Ok(())
    }
}

/// Runs `f` on this thread with `id`'s file-system identity, then takes back
/// the thread's own. Returns what `f` gave (or why the identity could not be
/// taken) and whether this thread may serve again: `false` when its own
/// identity could not be verified back, and then the thread must end.
fn with_identity<T>(id: &FsIdentity, f: impl FnOnce() -> T) -> (Result<T, String>, bool) {
    let own = match thread_id::current() {
        Ok(own) => own,
        Err(e) => return (Err(format!("reading this thread's groups: {e}")), true),
    };
    let taken = thread_id::take(id);
    let value = match taken {
        Ok(()) => Ok(f()),
        Err(e) => Err(format!("taking uid {}'s identity: {e}", id.uid)),
    };
    match thread_id::restore(&own) {
        Ok(()) => (value, true),
        Err(e) => {
            tracing::error!("a checking thread could not take back its own identity, it ends: {e}");
            (value, false)
        }
    }
}

/// PID 1's root directory, as root opens it: systemd starts jobs in PID 1's
/// mount namespace, and xlurmd's own has `PrivateTmp=yes`. `None` where this
/// process may not look (not root): then paths are looked at as they are.
fn pid1_root() -> Option<OwnedFd> {
    // SAFETY: a NUL-terminated path; the descriptor returned is ours alone.
    let fd = unsafe {
        libc::open(
            c"/proc/1/root".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    // SAFETY: a fresh descriptor, owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What is wrong with `cwd` (absolute) as a working directory for this
/// thread's identity, looked up from `root` (PID 1's root) if given; `None`
/// if it is a directory this identity may enter. What the identity cannot
/// reach is "not accessible": the kernel stops at the first directory it may
/// not search, so whether anything exists beyond it makes no difference.
pub fn dir_problem(root: Option<&OwnedFd>, cwd: &str) -> Option<String> {
    let short: String = cwd.chars().take(200).collect();
    let (dirfd, path) = match root {
        Some(fd) => (fd.as_raw_fd(), cwd.trim_start_matches('/')),
        None => (libc::AT_FDCWD, cwd),
    };
    // "/." makes the kernel check that the identity may search (enter) the
    // directory itself, as chdir does, not only reach it.
    let mut p = if path.is_empty() {
        ".".to_string()
    } else {
        path.to_string()
    };
    if p.len() + 2 <= super::spec::MAX_PATH_BYTES {
        p.push_str("/.");
    }
    let Ok(c) = std::ffi::CString::new(p) else {
        return Some(format!("working directory {short:?} contains a NUL byte"));
    };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a NUL-terminated path and a buffer for one stat.
    let r = unsafe { libc::fstatat(dirfd, c.as_ptr(), st.as_mut_ptr(), 0) };
    if r == 0 {
        // SAFETY: fstatat filled it.
        let mode = unsafe { st.assume_init() }.st_mode;
        return (mode & libc::S_IFMT != libc::S_IFDIR)
            .then(|| format!("working directory {short:?} is not a directory"));
    }
    let e = std::io::Error::last_os_error();
    Some(match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => {
            format!("working directory {short:?} is not accessible to you (permission denied)")
        }
        Some(libc::ENOENT) => format!("working directory {short:?} does not exist"),
        Some(libc::ENOTDIR) => format!("working directory {short:?} is not a directory"),
        _ => format!("working directory {short:?} cannot be used: {e}"),
    })
}

/// [`dir_problem`] with this process's own rights, through PID 1's root where
/// it may look: what xlurmd answers a caller who is its own user.
pub fn dir_problem_here(cwd: &str) -> Option<String> {
    dir_problem(pid1_root().as_ref(), cwd)
}

/// The first of `cwds` with a problem, and the problem.
fn first_problem(root: Option<&OwnedFd>, cwds: &[String]) -> Option<(usize, String)> {
    cwds.iter()
        .enumerate()
        .find_map(|(i, c)| dir_problem(root, c).map(|p| (i, p)))
}

/// Work for a checking thread: returns whether the thread may serve again.
type Task = Box<dyn FnOnce() -> bool + Send>;

/// Why a check gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unanswered {
    /// It did not finish within the time limit (its thread is stuck).
    TimedOut,
    /// Too many earlier checks are stuck: `yours` says whether the caller's own.
    Stuck { count: usize, yours: bool },
    /// All [`MAX_BUSY`] threads stayed busy for the whole time limit.
    Busy,
    /// The thread failed (it could not start, or it panicked).
    Failed(String),
}

/// Threads waiting for work, and checks that are stuck, by uid.
#[derive(Default)]
struct Pool {
    idle: Vec<mpsc::Sender<Task>>,
    stuck: HashMap<u32, usize>,
}

impl Pool {
    fn unstick(&mut self, uid: u32) {
        if let Some(n) = self.stuck.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.stuck.remove(&uid);
            }
        }
    }
}

/// Runs checks as their callers on dedicated threads, each within a time
/// limit. A thread is reused for the next check unless its check timed out
/// (it is left to finish on its own, counted as stuck until it does, then
/// ends) or it could not verify that it took back its own identity (it ends).
pub struct Checker {
    pool: Arc<Mutex<Pool>>,
    busy: tokio::sync::Semaphore,
    timeout: Duration,
    max_stuck: usize,
    max_stuck_per_user: usize,
    /// Whether this process may take other users' identities (it is root).
    switch: bool,
    /// Accounts lately looked up (the account databases may be slow),
    /// shared with the daemon: a submission's start reuses its check's.
    accounts: Accounts,
    /// Directories lately found usable, by user (see [`Accepted`]).
    accepted: Mutex<Accepted>,
}

/// How long a directory found usable by a user is taken as usable for that
/// user's next submissions without a new look: a burst of `xbatch` from one
/// directory costs one check, not a thread hand-off each. A directory
/// removed meanwhile fails at the job's start, saying so (LAUNCH_FAILED).
pub const ACCEPTED_FOR: Duration = Duration::from_secs(1);
/// Directories remembered at most, all users together.
const ACCEPTED_MAX: usize = 4096;

/// Directories lately found usable, by user, with when.
#[derive(Default)]
struct Accepted(HashMap<(u32, String), std::time::Instant>);

impl Accepted {
    fn has(&self, uid: u32, cwd: &str, now: std::time::Instant) -> bool {
        self.0
            .get(&(uid, cwd.to_string()))
            .is_some_and(|at| now.saturating_duration_since(*at) < ACCEPTED_FOR)
    }

    fn put(&mut self, uid: u32, cwds: Vec<String>, now: std::time::Instant) {
        if self.0.len() + cwds.len() > ACCEPTED_MAX {
            self.0
                .retain(|_, at| now.saturating_duration_since(*at) < ACCEPTED_FOR);
        }
        if self.0.len() + cwds.len() > ACCEPTED_MAX {
            self.0.clear();
        }
        for cwd in cwds.into_iter().take(ACCEPTED_MAX) {
            self.0.insert((uid, cwd), now);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Checker {
    /// A checker with the default limits that shares `accounts`.
    pub fn new(accounts: Accounts) -> Checker {
        Checker::with_limits(accounts, CHECK_TIMEOUT, MAX_STUCK, MAX_STUCK_PER_USER)
    }

    pub fn with_limits(
        accounts: Accounts,
        timeout: Duration,
        max_stuck: usize,
        max_stuck_per_user: usize,
    ) -> Checker {
        Checker {
            pool: Arc::new(Mutex::new(Pool::default())),
            busy: tokio::sync::Semaphore::new(MAX_BUSY),
            timeout,
            max_stuck,
            max_stuck_per_user,
            switch: nix::unistd::geteuid().is_root(),
            accounts,
            accepted: Mutex::default(),
        }
    }

    /// Runs `work` on a checking thread for `uid` (it returns its value and
    /// whether the thread may serve again), waiting at most the time limit.
    pub async fn run<T: Send + 'static>(
        &self,
        uid: u32,
        work: impl FnOnce() -> (T, bool) + Send + 'static,
    ) -> Result<T, Unanswered> {
        {
            let p = lock(&self.pool);
            let yours = p.stuck.get(&uid).copied().unwrap_or(0);
            let all: usize = p.stuck.values().sum();
            if yours >= self.max_stuck_per_user {
                return Err(Unanswered::Stuck {
                    count: yours,
                    yours: true,
                });
            }
            if all >= self.max_stuck {
                return Err(Unanswered::Stuck {
                    count: all,
                    yours: false,
                });
            }
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        let Ok(Ok(_permit)) = tokio::time::timeout_at(deadline, self.busy.acquire()).await else {
            return Err(Unanswered::Busy);
        };
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let pool = self.pool.clone();
        let mut task: Task = Box::new(move || {
            let (value, fit) = work();
            // Under the pool's lock, so that the caller either takes the
            // answer or has counted the check stuck (and dropped `rx`).
            let mut p = lock(&pool);
            if tx.send((value, fit)).is_err() {
                p.unstick(uid);
                return false;
            }
            fit
        });
        let worker = loop {
            let idle = lock(&self.pool).idle.pop();
            let w = match idle {
                Some(w) => w,
                None => spawn_thread()
                    .map_err(|e| Unanswered::Failed(format!("cannot start a thread: {e}")))?,
            };
            match w.send(task) {
                Ok(()) => break w,
                // A thread that ended: take another.
                Err(mpsc::SendError(t)) => task = t,
            }
        };
        let answer = match tokio::time::timeout_at(deadline, &mut rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => return Err(Unanswered::Failed("the checking thread failed".into())),
            Err(_) => {
                let mut p = lock(&self.pool);
                match rx.try_recv() {
                    Ok(answer) => answer,
                    Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                        return Err(Unanswered::Failed("the checking thread failed".into()))
                    }
                    Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {
                        drop(rx);
                        *p.stuck.entry(uid).or_insert(0) += 1;
                        return Err(Unanswered::TimedOut);
                    }
                }
            }
        };
        let (value, fit) = answer;
        let mut p = lock(&self.pool);
        if fit && p.idle.len() < MAX_IDLE {
            p.idle.push(worker);
        }
        Ok(value)
    }

    /// Checks each of `cwds` as `uid` (see [`dir_problem`]): the index and
    /// problem of the first that has one.
    async fn check_dirs(&self, uid: u32, cwds: Vec<String>) -> Result<(), (usize, CheckError)> {
        let switch = self.switch && uid != 0;
        for (n, chunk) in cwds.chunks(PATHS_PER_CHECK).enumerate() {
            let chunk = chunk.to_vec();
            let first = chunk[0].clone();
            let accounts = self.accounts.clone();
            let found = self
                .run(uid, move || {
                    // Opened as root, before the switch.
                    let root = pid1_root();
                    if !switch {
                        return (Ok(first_problem(root.as_ref(), &chunk)), true);
                    }
                    let id = FsIdentity::of(uid, &accounts);
                    with_identity(&id, || first_problem(root.as_ref(), &chunk))
                })
                .await;
            let at = n * PATHS_PER_CHECK;
            match found {
                Ok(Ok(None)) => {}
                Ok(Ok(Some((i, problem)))) => return Err((at + i, CheckError::Invalid(problem))),
                Ok(Err(e)) => {
                    return Err((
                        at,
                        CheckError::Failed(format!("checking the working directory: {e}")),
                    ))
                }
                Err(why) => return Err((at, CheckError::Unanswered(first, why))),
            }
        }
        Ok(())
    }

    /// Checks the working directory of each spec as `uid` sees it, once per
    /// distinct directory, before anything is queued. The error names the
    /// first job with that directory when there are several jobs.
    pub async fn check_specs(&self, uid: u32, specs: &[Spec]) -> ApiResult<()> {
        let mut first_job: HashMap<&str, usize> = HashMap::new();
        let mut cwds = Vec::new();
        let now = std::time::Instant::now();
        {
            let accepted = lock(&self.accepted);
            for (i, s) in specs.iter().enumerate() {
                if accepted.has(uid, &s.cwd, now) {
                    continue;
                }
                first_job.entry(s.cwd.as_str()).or_insert_with(|| {
                    cwds.push(s.cwd.clone());
                    i
                });
            }
        }
        if cwds.is_empty() {
            return Ok(());
        }
        let Err((at, e)) = self.check_dirs(uid, cwds.clone()).await else {
            lock(&self.accepted).put(uid, cwds, now);
            return Ok(());
        };
        let job = first_job[cwds[at].as_str()];
        let msg = |m: String| {
            if specs.len() > 1 {
                format!("job {}: {m}", job + 1)
            } else {
                m
            }
        };
        Err(match e {
            CheckError::Invalid(m) => ApiError::InvalidArgs(msg(m)),
            CheckError::Failed(m) => ApiError::Failed(msg(m)),
            CheckError::Unanswered(cwd, why) => {
                ApiError::Failed(msg(unanswered(&cwd, &why, self.timeout)))
            }
        })
    }
}

/// Why checking the directories gave no answer, or what it found.
#[derive(Debug)]
enum CheckError {
    Invalid(String),
    Failed(String),
    Unanswered(String, Unanswered),
}

fn unanswered(cwd: &str, why: &Unanswered, timeout: Duration) -> String {
    let short: String = cwd.chars().take(200).collect();
    match why {
        Unanswered::TimedOut => format!(
            "checking working directory {short:?} timed out after {} s: is its file system responding?",
            timeout.as_secs_f64()
        ),
        Unanswered::Stuck { count, yours: true } => format!(
            "{count} earlier checks of your working directories still hang (a file system that does not respond?); try again once it does"
        ),
        Unanswered::Stuck { count, yours: false } => format!(
            "{count} checks of working directories still hang (file systems that do not respond); try again later"
        ),
        Unanswered::Busy => format!(
            "checking working directory {short:?}: xlurmd is busy with other checks; try again"
        ),
        Unanswered::Failed(e) => format!("checking working directory {short:?}: {e}"),
    }
}

/// A checking thread: it runs tasks until one says it may not serve again,
/// or until its sender is dropped (it was idle too many, or its check timed out).
fn spawn_thread() -> std::io::Result<mpsc::Sender<Task>> {
    let (tx, rx) = mpsc::channel::<Task>();
    std::thread::Builder::new()
        .name("xlurmd-as-user".into())
        .stack_size(256 << 10)
        .spawn(move || {
            while let Ok(task) = rx.recv() {
                if !task() {
                    return;
                }
            }
        })?;
    Ok(tx)
}

#[cfg(test)]
pub(crate) mod tests;

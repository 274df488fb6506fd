//! Submitters' accounts (name, primary group, supplementary groups), looked
//! up once for everything a submission needs: the check of its working
//! directory with its submitter's rights (`as_user`), its record's user
//! name, and its unit's `User=`, `Group=` and groups at start. A lookup runs
//! off the event loop and serves for a moment ([`ACCOUNT_REUSE`]).

use super::*;

/// How long a submitter's resolved account serves the next submissions and
/// starts: a burst asks the account databases once per user, while a changed
/// account or group membership still reaches every job started a second later.
pub(super) const ACCOUNT_REUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// Values by uid, each kept for a while after it was looked up.
pub struct Recent<V> {
    kept: HashMap<u32, (std::time::Instant, V)>,
    keep: std::time::Duration,
}

impl<V: Clone> Recent<V> {
    pub fn new(keep: std::time::Duration) -> Recent<V> {
        Recent {
            kept: HashMap::new(),
            keep,
        }
    }

    /// The value for `uid` if it was put less than `keep` before `now`.
    pub fn get(&self, uid: u32, now: std::time::Instant) -> Option<V> {
        self.kept
            .get(&uid)
            .filter(|(at, _)| now.saturating_duration_since(*at) < self.keep)
            .map(|(_, v)| v.clone())
    }

    /// Keeps `v` for `uid` from `now`, and forgets what is too old.
    pub fn put(&mut self, uid: u32, v: V, now: std::time::Instant) {
        let keep = self.keep;
        self.kept
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < keep);
        self.kept.insert(uid, (now, v));
    }
}

/// A user's account as the account databases (NSS) give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    pub name: String,
    pub gid: u32,
    /// Supplementary groups (the primary one left out).
    pub groups: Vec<u32>,
}

impl Account {
    /// The account's identity for a unit (`User=`, `Group=`, groups).
    pub fn run_as(&self) -> RunAs {
        RunAs {
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
        }
    }
}

/// `uid`'s account, resolved now (blocking: NSS may ask LDAP, or
/// nss-systemd's varlink services, some answered by systemd itself, which
/// then starts the next unit later).
pub fn resolve_account(uid: u32) -> Result<Account, String> {
    use nix::unistd::{getgrouplist, Uid, User};
    let user = User::from_uid(Uid::from_raw(uid))
        .map_err(|e| format!("looking up uid {uid}: {e}"))?
        .ok_or_else(|| format!("uid {uid} no longer exists"))?;
    let cname = std::ffi::CString::new(user.name.clone()).map_err(|e| e.to_string())?;
    let groups = getgrouplist(&cname, user.gid).unwrap_or_else(|_| vec![user.gid]);
    Ok(Account {
        uid,
        gid: user.gid.as_raw(),
        groups: groups
            .into_iter()
            .filter(|g| *g != user.gid)
            .map(|g| g.as_raw())
            .collect(),
        name: user.name,
    })
}

/// The name and primary group of `uid` (its number and an unknown group,
/// `u32::MAX`, when the account cannot be read).
pub(crate) fn user_name(uid: u32) -> (String, u32) {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| (u.name, u.gid.as_raw()))
        .unwrap_or_else(|| (uid.to_string(), u32::MAX))
}

/// Accounts lately looked up, shared by everything that needs one (the
/// daemon and its directory checker), so that a submission and its start
/// look their submitter up once, not once per use, and a flood of
/// submissions asks the account databases at most once a second per uid.
/// A failed lookup is kept as well, for as long.
#[derive(Clone)]
pub struct Accounts(Arc<std::sync::Mutex<Recent<Result<Account, String>>>>);

impl Accounts {
    pub fn new(keep: std::time::Duration) -> Accounts {
        Accounts(Arc::new(std::sync::Mutex::new(Recent::new(keep))))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recent<Result<Account, String>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `uid`'s account if it was looked up lately.
    pub fn kept(&self, uid: u32) -> Option<Result<Account, String>> {
        self.lock().get(uid, std::time::Instant::now())
    }

    /// `uid`'s account, kept or looked up now and kept (blocking: for a
    /// thread that may block, such as a directory check's).
    pub fn resolve(&self, uid: u32) -> Result<Account, String> {
        self.resolve_with(uid, resolve_account)
    }

    fn resolve_with(
        &self,
        uid: u32,
        look: impl FnOnce(u32) -> Result<Account, String>,
    ) -> Result<Account, String> {
        if let Some(a) = self.kept(uid) {
            return a;
        }
        let a = look(uid);
        self.lock().put(uid, a.clone(), std::time::Instant::now());
        a
    }

    /// `uid`'s account, kept or looked up off the event loop.
    pub async fn get(&self, uid: u32) -> Result<Account, String> {
        self.get_with(uid, resolve_account).await
    }

    async fn get_with(
        &self,
        uid: u32,
        look: impl FnOnce(u32) -> Result<Account, String> + Send + 'static,
    ) -> Result<Account, String> {
        if let Some(a) = self.kept(uid) {
            return a;
        }
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.resolve_with(uid, look))
            .await
            .map_err(|e| format!("looking up uid {uid}: {e}"))?
    }
}

impl<U: Units> Daemon<U> {
    /// The submitter `uid`'s identity for a unit, resolved at start (see
    /// [`Accounts`]; usually the one its submission resolved).
    pub(super) async fn run_as(&self, uid: u32) -> Result<RunAs, String> {
        self.accounts.get(uid).await.map(|a| a.run_as())
    }

    /// The name and primary group of a submitter, as [`Daemon::run_as`]
    /// resolves accounts (its number and an unknown group, `u32::MAX`,
    /// when the account cannot be read).
    pub(crate) async fn submitter(&self, uid: u32) -> (String, u32) {
        match self.accounts.get(uid).await {
            Ok(a) => (a.name, a.gid),
            Err(_) => (uid.to_string(), u32::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn account(uid: u32, gid: u32) -> Account {
        Account {
            uid,
            name: format!("u{uid}"),
            gid,
            groups: vec![],
        }
    }

    #[tokio::test]
    async fn a_lookup_serves_every_use_for_a_while_failures_included() {
        let calls = Arc::new(AtomicUsize::new(0));
        let look = |answer: Result<Account, String>| {
            let calls = calls.clone();
            move |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                answer
            }
        };
        let a = Accounts::new(std::time::Duration::from_secs(60));
        assert_eq!(
            a.get_with(7, look(Err("no".into()))).await,
            Err("no".into())
        );
        assert_eq!(
            a.get_with(7, look(Ok(account(7, 1)))).await,
            Err("no".into()),
            "a failure is kept"
        );
        assert_eq!(
            a.get_with(8, look(Ok(account(8, 1)))).await,
            Ok(account(8, 1))
        );
        // The blocking side (a directory check's thread) shares the same accounts.
        let shared = a.clone();
        assert_eq!(
            shared.resolve_with(8, look(Ok(account(8, 2)))),
            Ok(account(8, 1)),
            "reused by a clone"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        let stale = Accounts::new(std::time::Duration::ZERO);
        assert_eq!(
            stale.resolve_with(7, look(Ok(account(7, 4)))),
            Ok(account(7, 4))
        );
        assert_eq!(
            stale.get_with(7, look(Ok(account(7, 5)))).await,
            Ok(account(7, 5)),
            "expired"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn an_account_runs_its_units_with_its_groups() {
        let a = Account {
            uid: 5,
            name: "e".into(),
            gid: 6,
            groups: vec![7, 8],
        };
        assert_eq!(
            a.run_as(),
            RunAs {
                uid: 5,
                gid: 6,
                groups: vec![7, 8]
            }
        );
        // This process's own account, as the account databases give it.
        let me = nix::unistd::getuid().as_raw();
        let mine = resolve_account(me).expect("the test's own account");
        assert_eq!(mine.uid, me);
        assert_eq!(mine.gid, nix::unistd::getgid().as_raw());
        assert!(
            !mine.groups.contains(&mine.gid),
            "the primary group is left out"
        );
        assert_eq!(user_name(me), (mine.name, mine.gid));
    }
}

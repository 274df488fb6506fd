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
/// then starts the next unit later): `None` when the account databases
/// have no such uid, an error when they could not be asked.
pub fn resolve_account(uid: u32) -> Result<Option<Account>, AccountError> {
    use nix::unistd::{getgrouplist, Uid, User};
    let failed = |why: String| AccountError::Lookup { uid, why };
    let Some(user) = User::from_uid(Uid::from_raw(uid)).map_err(|e| failed(e.to_string()))? else {
        return Ok(None);
    };
    let cname = std::ffi::CString::new(user.name.clone()).map_err(|e| failed(e.to_string()))?;
    let groups = getgrouplist(&cname, user.gid).unwrap_or_else(|_| vec![user.gid]);
    Ok(Some(Account {
        uid,
        gid: user.gid.as_raw(),
        groups: groups
            .into_iter()
            .filter(|g| *g != user.gid)
            .map(|g| g.as_raw())
            .collect(),
        name: user.name,
    }))
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
/// look their submitter up once, not once per use. An answer is kept, "no
/// such uid" too, so a flood of submissions asks the account databases
/// about once a second per uid; a failed lookup (LDAP away...) is not: the
/// next use asks again, and a start is not refused for a moment's error.
#[derive(Clone)]
pub struct Accounts(Arc<std::sync::Mutex<Recent<Option<Account>>>>);

impl Accounts {
    pub fn new(keep: std::time::Duration) -> Accounts {
        Accounts(Arc::new(std::sync::Mutex::new(Recent::new(keep))))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recent<Option<Account>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `uid`'s account (`None`: no such uid) if it was looked up lately.
    pub fn kept(&self, uid: u32) -> Option<Option<Account>> {
        self.lock().get(uid, std::time::Instant::now())
    }

    /// `uid`'s account, kept or looked up now and kept (blocking: for a
    /// thread that may block, such as a directory check's).
    pub fn resolve(&self, uid: u32) -> Result<Account, AccountError> {
        self.resolve_with(uid, resolve_account)
    }

    fn resolve_with(
        &self,
        uid: u32,
        look: impl FnOnce(u32) -> Result<Option<Account>, AccountError>,
    ) -> Result<Account, AccountError> {
        let found = match self.kept(uid) {
            Some(kept) => kept,
            None => {
                let found = look(uid)?;
                self.lock()
                    .put(uid, found.clone(), std::time::Instant::now());
                found
            }
        };
        found.ok_or(AccountError::NoSuchUid(uid))
    }

    /// `uid`'s account, kept or looked up off the event loop.
    pub async fn get(&self, uid: u32) -> Result<Account, AccountError> {
        self.get_with(uid, resolve_account).await
    }

    async fn get_with(
        &self,
        uid: u32,
        look: impl FnOnce(u32) -> Result<Option<Account>, AccountError> + Send + 'static,
    ) -> Result<Account, AccountError> {
        if let Some(kept) = self.kept(uid) {
            return kept.ok_or(AccountError::NoSuchUid(uid));
        }
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.resolve_with(uid, look))
            .await
            .map_err(|e| AccountError::Lookup {
                uid,
                why: e.to_string(),
            })?
    }
}

impl<U: Units> Daemon<U> {
    /// The submitter `uid`'s identity for a unit, resolved at start (see
    /// [`Accounts`]; usually the one its submission resolved).
    pub(super) async fn run_as(&self, uid: u32) -> Result<RunAs, AccountError> {
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
    async fn an_answer_serves_every_use_for_a_while_a_failure_does_not() {
        let calls = Arc::new(AtomicUsize::new(0));
        let look = |answer: Result<Option<Account>, AccountError>| {
            let calls = calls.clone();
            move |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                answer
            }
        };
        let a = Accounts::new(std::time::Duration::from_secs(60));
        // A failed lookup (the databases away) is not kept: a start a moment
        // later asks again rather than failing for it.
        let away = AccountError::Lookup {
            uid: 7,
            why: "no".into(),
        };
        assert_eq!(a.get_with(7, look(Err(away.clone()))).await, Err(away));
        assert_eq!(a.kept(7), None);
        assert_eq!(
            a.get_with(7, look(Ok(Some(account(7, 1))))).await,
            Ok(account(7, 1))
        );
        assert_eq!(
            a.get_with(7, look(Ok(Some(account(7, 2))))).await,
            Ok(account(7, 1)),
            "reused"
        );
        // No such uid is an answer, kept like an account.
        let gone = Err(AccountError::NoSuchUid(9));
        assert_eq!(a.get_with(9, look(Ok(None))).await, gone);
        assert_eq!(a.get_with(9, look(Ok(Some(account(9, 1))))).await, gone);
        assert_eq!(
            a.get_with(8, look(Ok(Some(account(8, 1))))).await,
            Ok(account(8, 1))
        );
        // The blocking side (a directory check's thread) shares the same accounts.
        let shared = a.clone();
        assert_eq!(
            shared.resolve_with(8, look(Ok(Some(account(8, 2))))),
            Ok(account(8, 1)),
            "reused by a clone"
        );
        assert_eq!(
            shared.resolve_with(
                9,
                look(Err(AccountError::Lookup {
                    uid: 9,
                    why: "no".into()
                }))
            ),
            gone
        );
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        let stale = Accounts::new(std::time::Duration::ZERO);
        assert_eq!(
            stale.resolve_with(7, look(Ok(Some(account(7, 4))))),
            Ok(account(7, 4))
        );
        assert_eq!(
            stale.get_with(7, look(Ok(Some(account(7, 5))))).await,
            Ok(account(7, 5)),
            "expired"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 6);
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
        let mine = resolve_account(me)
            .expect("the account databases answer")
            .expect("the test's own account");
        assert_eq!(mine.uid, me);
        assert!(
            !mine.groups.contains(&mine.gid),
            "the primary group is left out"
        );
        assert_eq!(user_name(me), (mine.name, mine.gid));
    }
}

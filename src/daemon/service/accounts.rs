//! Submitters' accounts (user, group, supplementary groups) as their units
//! run them, looked up off the event loop and reused for a moment.

use super::*;

/// How long a submitter's resolved account serves the next starts.
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

/// The name and primary group of `uid` (its number and an unknown group,
/// `u32::MAX`, when the account cannot be read).
pub(crate) fn user_name(uid: u32) -> (String, u32) {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| (u.name, u.gid.as_raw()))
        .unwrap_or_else(|| (uid.to_string(), u32::MAX))
}

/// The submitter's user, primary group and supplementary groups, resolved now.
pub fn resolve_run_as(uid: u32) -> Result<RunAs, String> {
    use nix::unistd::{getgrouplist, Uid, User};
    let user = User::from_uid(Uid::from_raw(uid))
        .map_err(|e| format!("looking up uid {uid}: {e}"))?
        .ok_or_else(|| format!("uid {uid} no longer exists"))?;
    let cname = std::ffi::CString::new(user.name.clone()).map_err(|e| e.to_string())?;
    let groups = getgrouplist(&cname, user.gid).unwrap_or_else(|_| vec![user.gid]);
    Ok(RunAs {
        uid,
        gid: user.gid.as_raw(),
        groups: groups
            .into_iter()
            .filter(|g| *g != user.gid)
            .map(|g| g.as_raw())
            .collect(),
    })
}

impl<U: Units> Daemon<U> {
    /// The submitter `uid`'s account for a unit, resolved at start: looked
    /// up off the event loop (NSS may block: LDAP, or nss-systemd's varlink
    /// calls, some answered by systemd itself, which then starts the next
    /// unit later), and reused for `ACCOUNT_REUSE` so that a burst of starts
    /// asks once per user, while a changed account or group membership still
    /// reaches every job started a second later. Failures are not kept.
    pub(super) async fn run_as(&self, uid: u32) -> Result<RunAs, String> {
        recently(&self.accounts, uid, move || resolve_run_as(uid)).await
    }

    /// [`user_name`] of a submitter, as `run_as` resolves accounts: off the
    /// event loop, and reused for `ACCOUNT_REUSE`, so a loop of `xbatch`
    /// reads the account database (NSS: files, LDAP...) once a second, not
    /// at every submission.
    pub(super) async fn submitter(&self, uid: u32) -> (String, u32) {
        recently(&self.names, uid, move || Ok(user_name(uid)))
            .await
            .unwrap_or_else(|_| (uid.to_string(), u32::MAX))
    }
}

/// `uid`'s value in `cache` if it is recent, else `look`'s, run off the
/// event loop and kept when it succeeds.
async fn recently<V: Clone + Send + 'static>(
    cache: &std::sync::Mutex<Recent<V>>,
    uid: u32,
    look: impl FnOnce() -> Result<V, String> + Send + 'static,
) -> Result<V, String> {
    let kept = cache
        .lock()
        .ok()
        .and_then(|c| c.get(uid, std::time::Instant::now()));
    if let Some(v) = kept {
        return Ok(v);
    }
    let v = tokio::task::spawn_blocking(look)
        .await
        .map_err(|e| format!("looking up uid {uid}: {e}"))??;
    if let Ok(mut c) = cache.lock() {
        c.put(uid, v.clone(), std::time::Instant::now());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_lookup_is_reused_for_a_while_and_a_failure_is_not_kept() {
        let cache = std::sync::Mutex::new(Recent::new(std::time::Duration::from_secs(60)));
        let calls = Arc::new(AtomicUsize::new(0));
        let look = |answer: Result<u32, String>| {
            let calls = calls.clone();
            move || {
                calls.fetch_add(1, Ordering::SeqCst);
                answer
            }
        };
        assert_eq!(
            recently(&cache, 7, look(Err("no".into()))).await,
            Err("no".into())
        );
        assert_eq!(recently(&cache, 7, look(Ok(1))).await, Ok(1), "not kept");
        assert_eq!(recently(&cache, 7, look(Ok(2))).await, Ok(1), "reused");
        assert_eq!(recently(&cache, 8, look(Ok(3))).await, Ok(3), "per uid");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        let stale = std::sync::Mutex::new(Recent::new(std::time::Duration::ZERO));
        assert_eq!(recently(&stale, 7, look(Ok(4))).await, Ok(4));
        assert_eq!(recently(&stale, 7, look(Ok(5))).await, Ok(5), "expired");
    }
}

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
        let recent = self
            .accounts
            .lock()
            .ok()
            .and_then(|a| a.get(uid, std::time::Instant::now()));
        if let Some(r) = recent {
            return Ok(r);
        }
        let r = tokio::task::spawn_blocking(move || resolve_run_as(uid))
            .await
            .map_err(|e| format!("looking up uid {uid}: {e}"))??;
        if let Ok(mut a) = self.accounts.lock() {
            a.put(uid, r.clone(), std::time::Instant::now());
        }
        Ok(r)
    }

    /// [`user_name`] of a submitter, as `run_as` resolves accounts: off the
    /// event loop, and reused for `ACCOUNT_REUSE`, so a loop of `xbatch`
    /// reads the account database (NSS: files, LDAP...) once a second, not
    /// at every submission.
    pub(super) async fn submitter(&self, uid: u32) -> (String, u32) {
        let recent = self
            .names
            .lock()
            .ok()
            .and_then(|n| n.get(uid, std::time::Instant::now()));
        if let Some(v) = recent {
            return v;
        }
        let v = tokio::task::spawn_blocking(move || user_name(uid))
            .await
            .unwrap_or_else(|_| (uid.to_string(), u32::MAX));
        if let Ok(mut n) = self.names.lock() {
            n.put(uid, v.clone(), std::time::Instant::now());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;
    use std::time::{Duration, Instant};

    #[test]
    fn a_resolved_account_serves_only_within_its_time() {
        let t0 = Instant::now();
        let mut r = Recent::new(Duration::from_secs(1));
        assert_eq!(r.get(1001, t0), None);
        r.put(1001, "alice", t0);
        assert_eq!(r.get(1001, t0 + Duration::from_millis(999)), Some("alice"));
        assert_eq!(r.get(1002, t0), None, "another user's is never given");
        assert_eq!(r.get(1001, t0 + Duration::from_secs(1)), None, "too old");
        // Old ones are forgotten as new ones come.
        r.put(1002, "bob", t0 + Duration::from_secs(2));
        assert_eq!(r.kept.len(), 1);
        assert_eq!(r.get(1002, t0 + Duration::from_secs(2)), Some("bob"));
    }
}

//! Who may learn what about a job: the one place for the rule.
//!
//! A job's owner and root see all of it (command, environment, output) and
//! may cancel it. Anyone else sees its queue summary while the queue is
//! public (`--list-is-public`, the default), and nothing while it is
//! private: there, every refusal about someone else's job is the very error
//! a job that does not exist gives, so no answer tells that it exists.
//! Admins (polkit) may cancel and list any job; the edges ask polkit and
//! pass the answer in as `admin`.

use super::*;

/// How much of a job a caller may know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sight {
    /// Its owner or root: everything.
    Own,
    /// Someone else on a public queue, or an admin: the summary.
    Summary,
    /// Someone else on a private queue: not even that it exists.
    Hidden,
}

/// Whether caller `uid` may see details of, and act on, a job of `owner`'s
/// without polkit.
pub fn owns(uid: u32, owner: u32) -> bool {
    uid == 0 || uid == owner
}

/// The answer about a job that does not exist, or that the caller may not
/// know exists: one wording for both.
pub fn no_such_job(id: JobId) -> ApiError {
    ApiError::NoSuchJob(format!(
        "no job {id} (finished jobs are kept for a while, then cleaned)"
    ))
}

/// What caller `uid` (an admin through polkit when `admin`) may know of a
/// job of `owner`'s, on a public queue or not.
pub fn sight(public: bool, uid: u32, owner: u32, admin: bool) -> Sight {
    if owns(uid, owner) {
        Sight::Own
    } else if public || admin {
        Sight::Summary
    } else {
        Sight::Hidden
    }
}

impl<U: Units> Daemon<U> {
    /// What caller `uid` may know of job `id`: an error for a job that does
    /// not exist or that it may not know of (the same error).
    pub fn sight_of(&self, st: &State, uid: u32, id: JobId, admin: bool) -> ApiResult<Sight> {
        let found = st.find(id).ok_or_else(|| no_such_job(id))?;
        match sight(self.settings.list_is_public, uid, found.uid(), admin) {
            Sight::Hidden => Err(no_such_job(id)),
            s => Ok(s),
        }
    }

    /// The refusal of an action only a job's owner (or an admin) may take:
    /// it names the owner only where the queue shows it anyway.
    pub fn not_yours(&self, st: &State, id: JobId, what: &str) -> ApiError {
        match st.find(id) {
            Some(found) if self.settings.list_is_public => ApiError::PermissionDenied(format!(
                "job {id} belongs to {}; only its owner{what}",
                found.user()
            )),
            _ => no_such_job(id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_and_root_see_everything_others_what_the_queue_shows() {
        for public in [true, false] {
            assert_eq!(sight(public, 1000, 1000, false), Sight::Own);
            assert_eq!(sight(public, 0, 1000, false), Sight::Own);
            assert_eq!(sight(public, 1001, 1000, true), Sight::Summary);
        }
        assert_eq!(sight(true, 1001, 1000, false), Sight::Summary);
        assert_eq!(sight(false, 1001, 1000, false), Sight::Hidden);
    }
}

//! Who hears about a job's changes on the bus.
//!
//! On a public queue (the default) everyone may: `JobStateChanged` is
//! broadcast and every job has its `org.xlurm.Job1` object. On a private
//! queue (`--list-is-public=false`) neither may exist for all to see: an
//! object path, an introspection of `/org/xlurm/Scheduler1/job` or a
//! broadcast signal would tell every user which jobs exist. There, jobs get
//! no objects, and `JobStateChanged` goes as a unicast signal to the
//! connections of the job's owner that asked about it (submitted it, read it
//! with `GetJob` or `ReadLog`): what `xrun` and `xlurm log -f` wait on.

use crate::core::JobId;
use std::collections::HashMap;
use std::sync::Mutex;
use zbus::names::{OwnedUniqueName, UniqueName};

/// Connections remembered per job; a newer one replaces the oldest.
pub const MAX_PER_JOB: usize = 8;

#[derive(Debug, Default)]
pub struct Audience {
    public: bool,
    listeners: Mutex<HashMap<JobId, Vec<OwnedUniqueName>>>,
}

impl Audience {
    pub fn new(public: bool) -> Audience {
        Audience {
            public,
            listeners: Mutex::default(),
        }
    }

    /// Whether changes are broadcast and jobs have objects.
    pub fn public(&self) -> bool {
        self.public
    }

    /// Connection `name`, which may see job `id` in full (its owner's or
    /// root's), asked about it: on a private queue it hears of its changes
    /// until the job ends.
    pub fn listen(&self, id: JobId, name: &UniqueName<'_>) {
        if self.public {
            return;
        }
        let mut all = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        let names = all.entry(id).or_default();
        if names.iter().any(|n| n.as_str() == name.as_str()) {
            return;
        }
        if names.len() == MAX_PER_JOB {
            names.remove(0);
        }
        names.push(name.to_owned().into());
    }

    /// Who is told of a change of job `id` on a private queue; once it
    /// ended (`last`), it is forgotten.
    pub fn listeners(&self, id: JobId, last: bool) -> Vec<OwnedUniqueName> {
        let mut all = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        if last {
            all.remove(&id).unwrap_or_default()
        } else {
            all.get(&id).cloned().unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: u32) -> UniqueName<'static> {
        UniqueName::try_from(format!(":1.{n}")).unwrap()
    }

    #[test]
    fn a_public_queue_remembers_nobody() {
        let a = Audience::new(true);
        a.listen(1, &name(1));
        assert!(a.listeners(1, false).is_empty());
    }

    #[test]
    fn listeners_are_bounded_unique_and_forgotten_at_the_end() {
        let a = Audience::new(false);
        for n in 0..20 {
            a.listen(7, &name(n));
            a.listen(7, &name(n));
        }
        let l = a.listeners(7, false);
        assert_eq!(l.len(), MAX_PER_JOB);
        // The newest are kept.
        assert_eq!(l.last().unwrap().as_str(), ":1.19");
        assert_eq!(l.first().unwrap().as_str(), ":1.12");
        assert!(a.listeners(8, false).is_empty());
        assert_eq!(a.listeners(7, true).len(), MAX_PER_JOB);
        assert!(a.listeners(7, false).is_empty());
    }
}

//! The daemon's table of jobs in full, by ID.
//!
//! Each job is boxed: a [`Job`] is a few hundred bytes, and a B-tree whose
//! keys mostly arrive in order (IDs grow) keeps its nodes a little over half
//! full, so jobs stored inline would leave about as many bytes unused again
//! (issue 21: what a pending job costs xlurmd). A box leaves 16 bytes per
//! slot there.

use super::Job;
use crate::core::JobId;
use std::collections::BTreeMap;
use std::ops::RangeBounds;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Jobs(BTreeMap<JobId, Box<Job>>);

impl Jobs {
    pub fn new() -> Jobs {
        Jobs::default()
    }

    pub fn get(&self, id: &JobId) -> Option<&Job> {
        self.0.get(id).map(|j| &**j)
    }

    pub fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        self.0.get_mut(id).map(|j| &mut **j)
    }

    pub fn contains_key(&self, id: &JobId) -> bool {
        self.0.contains_key(id)
    }

    /// Puts `job` under `id`; returns the job it replaces.
    pub fn insert(&mut self, id: JobId, job: Job) -> Option<Job> {
        self.0.insert(id, Box::new(job)).map(|j| *j)
    }

    pub fn remove(&mut self, id: &JobId) -> Option<Job> {
        self.0.remove(id).map(|j| *j)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// In ID order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&JobId, &Job)> {
        self.0.iter().map(|(id, j)| (id, &**j))
    }

    /// Those with IDs in `range`, in ID order.
    pub fn range(
        &self,
        range: impl RangeBounds<JobId>,
    ) -> impl DoubleEndedIterator<Item = (&JobId, &Job)> {
        self.0.range(range).map(|(id, j)| (id, &**j))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &JobId> {
        self.0.keys()
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Job> {
        self.0.values().map(|j| &**j)
    }

    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut Job> {
        self.0.values_mut().map(|j| &mut **j)
    }

    /// Keeps only the jobs `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&JobId, &mut Job) -> bool) {
        self.0.retain(|id, j| keep(id, j));
    }
}

impl std::ops::Index<&JobId> for Jobs {
    type Output = Job;

    /// The job with ID `id`; panics if there is none (tests).
    fn index(&self, id: &JobId) -> &Job {
        &self.0[id]
    }
}

impl FromIterator<(JobId, Job)> for Jobs {
    fn from_iter<I: IntoIterator<Item = (JobId, Job)>>(iter: I) -> Jobs {
        Jobs(iter.into_iter().map(|(id, j)| (id, Box::new(j))).collect())
    }
}

impl IntoIterator for Jobs {
    type Item = (JobId, Job);
    type IntoIter = std::iter::Map<
        std::collections::btree_map::IntoIter<JobId, Box<Job>>,
        fn((JobId, Box<Job>)) -> (JobId, Job),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter().map(|(id, j)| (id, *j))
    }
}

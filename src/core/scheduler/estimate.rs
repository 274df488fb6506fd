//! Estimated starts of pending jobs (see [`crate::core::estimate`]).

use super::Scheduler;
use crate::core::estimate::{Estimate, Planner, RunningJob};
use crate::core::limits::Held;
use crate::core::JobId;

impl Scheduler {
    fn planner(&self, now: u64) -> Planner<'_> {
        let running: Vec<RunningJob<'_>> = self
            .running
            .iter()
            .map(|(id, r)| {
                let info = self.run_info.get(id);
                RunningJob {
                    id: *id,
                    alloc: &r.alloc,
                    deadline: r.deadline,
                    user: info.map_or(u32::MAX, |i| i.user),
                    held: info.map_or_else(Held::default, |i| i.held),
                }
            })
            .collect();
        let users = &self.users.states;
        Planner::new(
            &self.machine,
            &self.books.free,
            now,
            self.policy,
            self.limits.max_running as usize,
            running,
            |u| users.get(u as usize).is_some_and(|s| s.room.limited),
        )
    }

    /// The estimated start of pending job `id` at `now`, from running jobs'
    /// deadlines and the jobs ahead of it; `None` when it is not pending.
    pub fn estimated_start(&self, id: JobId, now: u64) -> Option<Estimate> {
        if !self.pending.contains_key(&id) {
            return None;
        }
        let mut plan = self.planner(now);
        for key in self.queue.keys() {
            let q = &self.pending[&key.1];
            let limits = &self.users.states[q.user as usize].limits;
            let e = plan.plan(key.1, &q.demand, q.user, limits);
            if key.1 == id {
                return Some(e);
            }
        }
        None
    }

    /// The estimated starts of the first `max` pending jobs, in queue order
    /// (`xqueue --start`): one plan for all of them.
    pub fn estimates(&self, now: u64, max: usize) -> Vec<(JobId, Estimate)> {
        let mut plan = self.planner(now);
        self.queue
            .keys()
            .take(max)
            .map(|key| {
                let q = &self.pending[&key.1];
                let limits = &self.users.states[q.user as usize].limits;
                (key.1, plan.plan(key.1, &q.demand, q.user, limits))
            })
            .collect()
    }
}

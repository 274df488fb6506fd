//! Estimated starts of pending jobs (see [`crate::core::estimate`]).

use super::{Queued, Scheduler};
use crate::core::estimate::{Estimate, Planner, RunningJob};
use crate::core::limits::Held;
use crate::core::{Demand, JobId};

impl Scheduler {
    /// A plan at `now`. `expected`: running jobs end and pending ones run as
    /// long as completed jobs of their kind recently took (within their time
    /// limits; those of unknown kind or start, by their limits).
    fn planner(&self, now: u64, expected: bool) -> Planner<'_> {
        let running: Vec<RunningJob<'_>> = self
            .running
            .iter()
            .map(|(id, r)| {
                let info = self.run_info.get(id);
                let mut deadline = r.deadline;
                if expected {
                    let likely = info.and_then(|i| {
                        let took = self.runtimes.expected(i.sub.kind)?;
                        Some(i.started?.saturating_add(took))
                    });
                    if let Some(end) = likely {
                        deadline = deadline.min(end.max(now + 1));
                    }
                }
                RunningJob {
                    id: *id,
                    alloc: &r.alloc,
                    deadline,
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

    /// Plans queued job `id` (whose entry is `q`) on `plan`; `expected` as
    /// for [`Scheduler::planner`]: a job of a kind that recently took less
    /// than its time limit is planned for what it took.
    fn plan_one(&self, plan: &mut Planner<'_>, id: JobId, q: &Queued, expected: bool) -> Estimate {
        let limits = &self.users.states[q.user as usize].limits;
        match self.runtimes.expected(q.sub.kind).filter(|_| expected) {
            Some(took) if took < q.demand.time_limit_secs => {
                let likely = Demand {
                    time_limit_secs: took.max(1),
                    ..q.demand.clone()
                };
                plan.plan(id, &likely, q.user, limits)
            }
            _ => plan.plan(id, &q.demand, q.user, limits),
        }
    }

    /// Plans pending jobs in queue order until `stop` says so; `expected`
    /// as for [`Scheduler::planner`].
    fn plan_queue(&self, now: u64, expected: bool, mut each: impl FnMut(JobId, Estimate) -> bool) {
        let mut plan = self.planner(now, expected);
        for key in self.queue.keys() {
            let e = self.plan_one(&mut plan, key.1, &self.pending[&key.1], expected);
            if !each(key.1, e) {
                return;
            }
        }
    }

    /// Both starts of pending job `id` at `now` in one walk of the queue:
    /// the estimated one (a bound, [`Scheduler::estimated_start`]) and the
    /// expected one ([`Scheduler::expected_start`]); `None` when it is not
    /// pending.
    pub fn starts(&self, id: JobId, now: u64) -> Option<(Estimate, Estimate)> {
        if !self.pending.contains_key(&id) {
            return None;
        }
        let (mut bound, mut likely) = (self.planner(now, false), self.planner(now, true));
        for key in self.queue.keys() {
            let q = &self.pending[&key.1];
            let b = self.plan_one(&mut bound, key.1, q, false);
            let e = self.plan_one(&mut likely, key.1, q, true);
            if key.1 == id {
                return Some((b, e));
            }
        }
        None
    }

    /// The estimated start of pending job `id` at `now`, from running jobs'
    /// deadlines and the jobs ahead of it; `None` when it is not pending.
    pub fn estimated_start(&self, id: JobId, now: u64) -> Option<Estimate> {
        self.start_of(id, now, false)
    }

    /// The *expected* start of pending job `id` at `now`: as
    /// [`Scheduler::estimated_start`], with each job taking what completed
    /// jobs of its kind recently took ([`crate::core::runtimes`]) instead of
    /// its whole time limit. Not a bound: jobs may take longer.
    pub fn expected_start(&self, id: JobId, now: u64) -> Option<Estimate> {
        self.start_of(id, now, true)
    }

    fn start_of(&self, id: JobId, now: u64, expected: bool) -> Option<Estimate> {
        if !self.pending.contains_key(&id) {
            return None;
        }
        let mut found = None;
        self.plan_queue(now, expected, |j, e| {
            if j == id {
                found = Some(e);
                return false;
            }
            true
        });
        found
    }

    /// The estimated starts of the first `max` pending jobs, in queue order
    /// (`xqueue --start`): one plan for all of them; `expected` as for
    /// [`Scheduler::expected_start`].
    pub fn estimates(&self, now: u64, max: usize, expected: bool) -> Vec<(JobId, Estimate)> {
        let mut out = Vec::new();
        self.plan_queue(now, expected, |j, e| {
            out.push((j, e));
            out.len() < max
        });
        out
    }

    /// Records that job `id`, which ran from `started` (seconds), completed
    /// at `ended`: jobs of its kind are expected to take as long. Called by
    /// the daemon for completed jobs (not failed or cancelled ones), also
    /// for those it loads at start, oldest first.
    pub fn record_runtime(&mut self, kind: u64, started: u64, ended: u64) {
        self.runtimes.record(kind, ended.saturating_sub(started));
    }
}

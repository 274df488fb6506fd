//! Submit: checking specs and queueing jobs.

use super::*;
use crate::core::dependency::{Cond, Target};
use crate::core::Dependency;
use crate::daemon::job::{After, Hold};

/// What a submission got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub id: JobId,
    pub mem_bytes: u64,
    pub mem_default: bool,
    /// It got its device by `gpus_default` (the machine has accelerators).
    pub gpus_defaulted: bool,
}

/// What a refusal of a job that got its device by default adds: how to ask for none.
pub const GPU_DEFAULT_HINT: &str =
    "-g defaults to 1 on this machine, which has accelerators; -g 0 asks for none";

impl<U: Units> Daemon<U> {
    /// Queues jobs for `uid`. All specs are checked before any is queued.
    pub async fn submit(&self, uid: u32, specs: Vec<Spec>) -> ApiResult<Vec<Submitted>> {
        self.submit_with_output(uid, specs, None).await
    }

    /// Like [`Daemon::submit`]; `output` is `(descriptor, path)` for a single job's `--output`.
    pub async fn submit_with_output(
        &self,
        uid: u32,
        specs: Vec<Spec>,
        output: Option<(std::os::fd::OwnedFd, String)>,
    ) -> ApiResult<Vec<Submitted>> {
        self.submit_as(uid, uid == 0, specs, output, None).await
    }

    /// Like [`Daemon::submit_with_output`]; `admin`: the caller passed polkit
    /// (or is root), so a negative nice (a raised priority) is allowed;
    /// `pty`: the terminal of an interactive job (`xrun --pty`), already
    /// checked to be the caller's (`crate::daemon::pty::check`).
    pub async fn submit_as(
        &self,
        uid: u32,
        admin: bool,
        mut specs: Vec<Spec>,
        output: Option<(std::os::fd::OwnedFd, String)>,
        pty: Option<std::os::fd::OwnedFd>,
    ) -> ApiResult<Vec<Submitted>> {
        if pty.is_some() {
            let batch = specs.iter().any(|s| s.script.is_some());
            if specs.len() != 1 || batch || output.is_some() || specs[0].array.is_some() {
                return Err(ApiError::InvalidArgs(
                    "a terminal (pty_fd) goes with one interactive command (xrun --pty): not with a batch script, an array or an output file"
                        .into(),
                ));
            }
        }
        if output.is_some() && specs.iter().any(|s| s.array.is_some()) {
            return Err(ApiError::InvalidArgs(
                "an output file goes with one job, not an array's tasks (not supported yet): \
                 each task's output is in the journal, xlurm log ID_INDEX"
                    .into(),
            ));
        }
        if output.is_some() && specs.len() != 1 {
            return Err(ApiError::InvalidArgs(
                "an output file goes with exactly one job".into(),
            ));
        }
        if let Some((fd, _)) = &output {
            crate::daemon::output::check_fd(fd).map_err(ApiError::InvalidArgs)?;
        }
        // With the submitter's rights, once per directory, before the state lock.
        self.workdirs.check_specs(uid, &specs).await?;
        let (user, gid) = self.submitter(uid).await;
        let owner = crate::core::Owner { uid, gid };
        let mut st = self.state.lock().await;
        // Over budget by count, or by the bytes of argv and script alone:
        // refused before any spec is looked at (a refused batch of 10,000
        // specs with 256 targets each cost the dependency checks of all).
        let floor = crate::core::Usage {
            jobs: specs.len(),
            bytes: specs.iter().map(Spec::command_bytes).sum(),
            outputs: usize::from(output.is_some() || pty.is_some()),
        };
        self.settings
            .budget
            .admit(st.usage_of(uid), floor)
            .map_err(|e| ApiError::LimitExceeded(format!("{user} has {e}")))?;
        // `gpus_default` stays set only where it gave the job its device.
        let accelerators = !st.sched.machine().devices.is_empty();
        for spec in &mut specs {
            spec.gpus_default &= accelerators;
            if spec.gpus_default {
                spec.request.devices.count = 1;
            }
        }
        let mut demands = Vec::with_capacity(specs.len());
        let many = specs.len() > 1;
        for (i, spec) in specs.iter().enumerate() {
            let which = |e: String| {
                let e = if specs[i].gpus_default && e.contains("device") {
                    format!("{e} ({GPU_DEFAULT_HINT})")
                } else {
                    e
                };
                if many {
                    format!("job {}: {e}", i + 1)
                } else {
                    e
                }
            };
            // Users may only lower their own priority; an admin may raise it.
            crate::core::priority::check_nice(spec.nice, admin)
                .map_err(|e| ApiError::InvalidArgs(which(e.to_string())))?;
            let d = st
                .sched
                .validate(&spec.request)
                .map_err(|e| ApiError::InvalidRequest(which(e.to_string())))?;
            if let Some(dep) = &spec.dependency {
                self.check_dependency(&st, uid, dep)
                    .map_err(|e| ApiError::InvalidArgs(which(e.to_string())))?;
            }
            // A request its owner's limits can never let run is refused now.
            st.sched
                .check_submit(owner, &d)
                .map_err(|e| ApiError::LimitExceeded(which(format!("{user} {e}"))))?;
            demands.push(d);
        }
        let now = now_usec();
        let mut out = Vec::with_capacity(specs.len());
        let mut new_jobs = Vec::with_capacity(specs.len());
        for (i, (spec, demand)) in specs.into_iter().zip(demands).enumerate() {
            // The IDs are taken once the jobs are recorded (`Commit::Submitted`).
            let id = st.next_id + i as u64;
            out.push(Submitted {
                id,
                mem_bytes: demand.mem_bytes,
                mem_default: demand.mem_default,
                gpus_defaulted: spec.gpus_default,
            });
            let command = Command {
                argv: spec.argv,
                script: spec.script,
                cwd: spec.cwd,
                env: spec.env,
                umask: spec.umask,
            };
            let copy = match (&output, &spec.output_template) {
                (Some((_, path)), _) | (None, Some(path)) => Some(crate::daemon::job::OutputCopy {
                    path: path.clone(),
                    ..Default::default()
                }),
                (None, None) => None,
            };
            let mut job = Job::pending(
                id,
                spec.name,
                (uid, user.clone()),
                command,
                demand,
                now,
                copy,
            );
            job.nice = spec.nice;
            job.gid = gid;
            job.requeue = spec.requeue;
            job.pty = pty.is_some();
            job.array = spec
                .array
                .as_ref()
                .map(|a| Box::new(crate::daemon::job::Task::whole(id, a)));
            if spec.hold {
                job = job.with_hold(Some(Hold::User));
            }
            if let Some(dependency) = spec.dependency {
                job = job.with_after(Some(After {
                    dependency,
                    kill_on_invalid: spec.kill_on_invalid_dep,
                }));
            }
            new_jobs.push(job);
        }
        let mut adding = crate::core::Usage::default();
        for j in &new_jobs {
            adding.add(j.usage());
        }
        self.settings
            .budget
            .admit(st.usage_of(uid), adding)
            .map_err(|e| ApiError::LimitExceeded(format!("{user} has {e}")))?;
        let count = new_jobs.len() as u64;
        // A terminal is held as an output descriptor is; the job's `pty`
        // tells them apart at the start.
        let held = output.map(|(fd, _)| fd).or(pty);
        let fx = st
            .apply(Commit::Submitted {
                jobs: new_jobs,
                held,
            })
            .map_err(|e| {
                tracing::error!("could not record a submission of {user}, nothing was queued: {e}");
                ApiError::Failed(format!("could not record the job, nothing was queued: {e}"))
            })?;
        drop(st);
        self.counters.submitted(count);
        self.carry_out(fx);
        Ok(out)
    }
}

impl<U: Units> Daemon<U> {
    /// A dependency may name only jobs that exist and that `uid` may see.
    pub(super) fn check_dependency(
        &self,
        st: &State,
        uid: u32,
        dep: &Dependency,
    ) -> Result<(), DependencyError> {
        let targets = dep.conds.iter().filter_map(|c| match c {
            Cond::On { target, .. } => Some(target),
            Cond::Singleton => None,
        });
        for t in targets {
            let id = t.job();
            let visible = st.find(id).is_some_and(|f| {
                sight(self.settings.list_is_public, uid, f.uid(), false) != Sight::Hidden
            });
            if !visible {
                return Err(DependencyError::NoJob(id));
            }
            if let Target::Task(array, index) = t {
                if st.task_progress(*array, *index).is_none() {
                    return Err(DependencyError::NoTask(*array, *index));
                }
            }
        }
        Ok(())
    }
}

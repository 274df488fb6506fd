//! A job's place in a job array (`--array`): one record stands for the
//! array's tasks until they start; each task that starts becomes a job of
//! its own (own ID, unit, resources and final state), split off the pending
//! rest (see `service::launch`), and the last one is the array's own record.

use super::{Job, Stage, Waiting};
use crate::core::array::{
    pending_label, pending_label_within, task_label, ArraySpec, Indices, LISTED_INDICES_BYTES,
};
use crate::core::JobId;
use serde::{Deserialize, Serialize};

/// Where a job stands in its array.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// The array's ID: its first job's (`SLURM_ARRAY_JOB_ID`).
    pub array: JobId,
    /// This task's index (`SLURM_ARRAY_TASK_ID`); for the pending rest,
    /// the next one to start.
    pub index: u32,
    /// The indices not started yet (all of them while the array waits
    /// whole); empty for a task that started.
    #[serde(default, skip_serializing_if = "Indices::is_empty")]
    pub rest: Indices,
    /// `%N`: at most this many of its tasks run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The array as submitted, for `SLURM_ARRAY_TASK_COUNT`, `_MIN`, `_MAX`
    /// and `_STEP`.
    pub count: u64,
    pub min: u32,
    pub max: u32,
    pub step: u32,
}

impl Task {
    /// A whole array `spec` waiting as job `id`.
    pub fn whole(id: JobId, spec: &ArraySpec) -> Task {
        Task {
            array: id,
            index: spec.indices.first().unwrap_or(0),
            rest: spec.indices.clone(),
            limit: spec.max_running,
            count: spec.task_count(),
            min: spec.min(),
            max: spec.max(),
            step: spec.step(),
        }
    }

    /// Its `SLURM_ARRAY_*` and `XLURM_ARRAY_*` values, in the order of
    /// `job_env::ARRAY_VARIABLES`.
    pub fn variables(&self) -> [String; 6] {
        [
            self.array.to_string(),
            self.index.to_string(),
            self.count.to_string(),
            self.min.to_string(),
            self.max.to_string(),
            self.step.to_string(),
        ]
    }
}

impl Job {
    /// Whether it stands for tasks of its array that have not started
    /// (more than the one it becomes itself when it starts).
    pub fn holds_tasks(&self) -> bool {
        self.array.as_ref().is_some_and(|t| t.rest.len() > 1)
    }

    /// How the queue names it: `123_[5-99%8]` for an array's pending rest,
    /// `123_4` for a task, empty for a plain job.
    pub fn label(&self) -> String {
        match &self.array {
            None => String::new(),
            Some(t) if t.rest.len() > 1 => pending_label(t.array, &t.rest, t.limit),
            Some(t) => task_label(t.array, t.rest.first().unwrap_or(t.index)),
        }
    }

    /// [`Job::label`] as a listing line shows it: at most
    /// [`LISTED_INDICES_BYTES`] of an array's pending indices.
    pub fn listed_label(&self) -> String {
        match &self.array {
            Some(t) if t.rest.len() > 1 => {
                pending_label_within(t.array, &t.rest, t.limit, LISTED_INDICES_BYTES)
            }
            _ => self.label(),
        }
    }

    /// Splits the next task off an array's pending rest: the task as job
    /// `id` (pending, to be started at once), and the rest without it. Its
    /// hold and dependency stayed with the rest, which was let through.
    pub fn split_task(&self, id: JobId) -> Option<(Job, Job)> {
        let first = self.array.as_ref()?.rest.first()?;
        self.take_task(first, id)
    }

    /// Like [`Job::split_task`], for task `index` (its cancel).
    pub fn take_task(&self, index: u32, id: JobId) -> Option<(Job, Job)> {
        if !self.holds_tasks() {
            return None;
        }
        let mut rest = self.clone();
        let t = rest.array.as_mut()?;
        if !t.rest.remove(index) {
            return None;
        }
        t.index = t.rest.first().unwrap_or(index);
        let mut task = self.clone();
        task.id = id;
        task.stage = Stage::Pending(Waiting::default());
        if let Some(t) = task.array.as_mut() {
            t.index = index;
            t.rest = Indices::new();
        }
        Some((task, rest))
    }

    /// An array task's `--output` file, its pattern filled in: `%A` the
    /// array's ID, `%a` the task's index, `%j` (`%J`) its own job ID, `%u`
    /// its user, `%x` its name, `%%` a `%` (Slurm's names). `None` for a
    /// plain job, whose file its client opened.
    pub fn output_path_of_task(&self) -> Option<String> {
        let t = self.array.as_ref()?;
        let pattern = &self.output.as_ref()?.path;
        let mut out = String::with_capacity(pattern.len() + 16);
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('A') => out.push_str(&t.array.to_string()),
                Some('a') => out.push_str(&t.index.to_string()),
                Some('j' | 'J') => out.push_str(&self.id.to_string()),
                Some('u') => out.push_str(&self.user),
                Some('x') => out.push_str(&self.name),
                Some('%') => out.push('%'),
                Some(other) => {
                    out.push('%');
                    out.push(other);
                }
                None => out.push('%'),
            }
        }
        Some(out)
    }

    /// The array's last pending index starts as the record itself.
    pub fn last_task(&mut self) {
        if let Some(t) = self.array.as_mut() {
            if let Some(i) = t.rest.first() {
                t.index = i;
            }
            t.rest = Indices::new();
        }
    }
}

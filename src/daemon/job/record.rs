//! A job's record in `jobs.log`: one flat JSON object per job, the format
//! `tests/store_log_v1.rs` loads (version 1). The stage's data is spread
//! over fields that exist in every state (0, empty or null where they do
//! not apply); what is never stored (see `stage`) is not written.

use super::stage::{After, End, Hold, Run, Stage, Waiting};
use super::{Command, Job, JobState, Outcome, OutputCopy, Task};
use crate::core::{Allocation, Demand, JobId};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// A record as written.
#[derive(Serialize)]
struct Out<'a> {
    id: JobId,
    name: &'a str,
    uid: u32,
    user: &'a str,
    command: Cow<'a, Command>,
    demand: &'a Demand,
    state: JobState,
    submit_usec: u64,
    start_usec: u64,
    end_usec: u64,
    alloc: Option<&'a Allocation>,
    invocation_id: &'a str,
    outcome: Option<&'a Outcome>,
    cancel_requested_by: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a OutputCopy>,
    #[serde(skip_serializing_if = "is_zero")]
    relaunches: u8,
    #[serde(skip_serializing_if = "is_zero_u64")]
    unit_time_limit: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stopped_at_limit: bool,
    #[serde(skip_serializing_if = "is_zero_i32")]
    nice: i32,
    #[serde(skip_serializing_if = "is_unknown_gid")]
    gid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    hold: Option<Hold>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dependency: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    kill_on_invalid_dep: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    requeue: bool,
    #[serde(skip_serializing_if = "is_zero")]
    restarts: u8,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pty: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    array: Option<&'a Task>,
}

/// A record as read.
#[derive(Deserialize)]
pub(super) struct In {
    id: JobId,
    name: String,
    uid: u32,
    user: String,
    command: Command,
    demand: Demand,
    state: JobState,
    submit_usec: u64,
    start_usec: u64,
    end_usec: u64,
    alloc: Option<Allocation>,
    invocation_id: String,
    outcome: Option<Outcome>,
    cancel_requested_by: Option<u32>,
    #[serde(default)]
    output: Option<OutputCopy>,
    #[serde(default)]
    relaunches: u8,
    #[serde(default)]
    unit_time_limit: u64,
    #[serde(default)]
    stopped_at_limit: bool,
    #[serde(default)]
    nice: i32,
    #[serde(default = "unknown_gid")]
    gid: u32,
    #[serde(default)]
    hold: Option<Hold>,
    #[serde(default)]
    dependency: Option<String>,
    #[serde(default)]
    kill_on_invalid_dep: bool,
    #[serde(default)]
    requeue: bool,
    #[serde(default)]
    restarts: u8,
    #[serde(default)]
    pty: bool,
    #[serde(default)]
    array: Option<Box<Task>>,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

fn unknown_gid() -> u32 {
    u32::MAX
}

fn is_unknown_gid(g: &u32) -> bool {
    *g == u32::MAX
}

impl Serialize for Job {
    /// The forwarded environment is written only while the job may still
    /// need it (see [`Job::keeps_env`]).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let command = if !self.keeps_env() && self.command.env.is_some() {
            Cow::Owned(Command {
                env: None,
                ..self.command.clone()
            })
        } else {
            Cow::Borrowed(&self.command)
        };
        Out {
            id: self.id,
            name: &self.name,
            uid: self.uid,
            user: &self.user,
            command,
            demand: &self.demand,
            state: self.state(),
            submit_usec: self.submit_usec,
            start_usec: self.start_usec(),
            end_usec: self.end_usec(),
            alloc: self.alloc(),
            invocation_id: self.invocation_id(),
            outcome: self.outcome(),
            cancel_requested_by: self.cancel_requested_by(),
            output: self.output.as_deref(),
            relaunches: self.relaunches(),
            unit_time_limit: self.run().map_or(0, |r| r.unit_limit_secs),
            stopped_at_limit: self.run().is_some_and(|r| r.stopped_at_limit),
            nice: self.nice,
            gid: self.gid,
            hold: self.hold(),
            dependency: self.after().map(|a| a.dependency.to_string()),
            kill_on_invalid_dep: self.after().is_some_and(|a| a.kill_on_invalid),
            requeue: self.requeue,
            restarts: self.restarts,
            pty: self.pty,
            array: self.array.as_deref(),
        }
        .serialize(s)
    }
}

impl TryFrom<In> for Job {
    type Error = String;

    fn try_from(r: In) -> Result<Job, String> {
        let stage = match r.state {
            JobState::Pending => {
                let after = match &r.dependency {
                    Some(d) => Some(Box::new(After {
                        dependency: d
                            .parse()
                            .map_err(|e| format!("job {}: its dependency {d:?}: {e}", r.id))?,
                        kill_on_invalid: r.kill_on_invalid_dep,
                    })),
                    None => None,
                };
                Stage::Pending(Waiting {
                    hold: r.hold,
                    after,
                    ..Waiting::default()
                })
            }
            JobState::Running => {
                let alloc = r.alloc.ok_or_else(|| {
                    format!("job {}: a RUNNING record without its allocation", r.id)
                })?;
                let mut run = Run::loaded(
                    alloc,
                    r.start_usec,
                    r.invocation_id,
                    r.cancel_requested_by,
                    r.relaunches,
                );
                run.unit_limit_secs = r.unit_time_limit;
                run.stopped_at_limit = r.stopped_at_limit;
                Stage::Running(Box::new(run))
            }
            state => Stage::Ended(Box::new(End {
                state,
                start_usec: r.start_usec,
                end_usec: r.end_usec,
                alloc: r.alloc,
                invocation_id: r.invocation_id,
                outcome: r.outcome.unwrap_or_default(),
                cancel_requested_by: r.cancel_requested_by,
                relaunches: r.relaunches,
            })),
        };
        Ok(Job {
            id: r.id,
            name: r.name,
            uid: r.uid,
            user: r.user,
            command: r.command,
            demand: r.demand,
            submit_usec: r.submit_usec,
            output: r.output.map(Box::new),
            nice: r.nice,
            gid: r.gid,
            requeue: r.requeue,
            restarts: r.restarts,
            pty: r.pty,
            array: r.array,
            stage,
        })
    }
}

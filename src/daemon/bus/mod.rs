//! The D-Bus surface: `org.xlurm.Scheduler1` and one `org.xlurm.Job1` object
//! per job, who is calling (and polkit), what each reply says, and the
//! budgets of calls and listeners. Each method is a short call into
//! `service`.

pub mod announce;
pub mod api;
pub mod audience;
pub(crate) mod caller;
pub mod callers;
pub mod in_flight;
pub mod job_object;
pub mod listing;
pub mod machine;
pub(crate) mod objects;
pub mod polkit;
pub mod wire_job;

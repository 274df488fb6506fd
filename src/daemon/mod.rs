//! xlurmd: the D-Bus service that runs every job as a transient systemd unit.

pub mod accounting;
pub mod api;
mod api_caller;
pub mod as_user;
pub mod audience;
pub mod device_gate;
pub mod fairness;
pub mod heap;
pub mod job;
pub mod job_env;
pub mod job_object;
pub mod journal;
pub mod listing;
pub mod monitor;
pub mod options;
pub mod outcome;
pub mod output;
pub mod pty;
pub mod run;
pub mod sd_journal;
pub mod service;
pub mod spec;
pub mod store;
pub mod systemd;
pub mod unit;
pub mod watch;
pub mod wire_job;

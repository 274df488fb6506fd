//! xlurmd: the D-Bus service that runs every job as a transient systemd unit.

pub mod accounting;
pub mod as_user;
pub mod bus;
pub mod device_gate;
pub mod fairness;
pub mod heap;
pub mod job;
pub mod job_env;
pub mod journal;
pub mod monitor;
pub mod options;
pub mod output;
pub mod pty;
pub mod serve;
pub mod service;
pub mod settings;
pub mod spec;
pub mod startup;
pub mod store;
pub mod systemd;

//! xlurmd: the D-Bus service that runs every job as a transient systemd unit.

pub mod job;
pub mod outcome;
pub mod spec;
pub mod unit;

//! xlurm: a systemd-native batch scheduler for one shared machine.
//!
//! The crate is split into a pure core (`core`: resources, requests, placement and
//! policies; no I/O) and the edges that talk to the world (D-Bus server, systemd
//! client, vendor libraries, CLI). See `docs/ARCHITECTURE.md`.

pub mod accel;
pub mod cli;
pub mod core;
pub mod daemon;
pub mod host;
#[doc(hidden)]
pub mod testing;
pub mod unit_name;
pub mod wire;

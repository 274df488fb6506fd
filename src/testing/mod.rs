//! Test doubles for fast tests and benchmarks without a real systemd.
//! They are *not* evidence that xlurm works with systemd: the VM scenarios are.

pub mod bus;
pub mod fake_systemd;
pub mod memory_daemon;
pub mod memory_units;

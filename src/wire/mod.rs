//! What both sides of the bus share: the CLI (`cli`) and the daemon
//! (`daemon`) import this module, and it imports neither.
//!
//! - `spec`: the keys of a submission's `a{sv}` spec and how a client builds one.
//! - `queue`: one line of the queue (`JobSummary`, `Line`), its hand codec and
//!   the descriptor `ListJobsByFileDescriptor` returns.
//! - `error`: the D-Bus errors of org.xlurm.Scheduler1, by name.
//! - `bus`: which bus errors mean the other side was briefly away.
//! - `time`: the clock, in the bus's unit (microseconds since the epoch).
//! - `dict`: the `a{sv}` both sides build and read (`Dict`, `put`).
//! - `keys`: every reply key with the type of its value (`Key`), one module
//!   per reply.

pub mod bus;
pub mod dict;
pub mod error;
pub mod keys;
pub mod pty;
pub mod queue;
pub mod spec;
pub mod time;

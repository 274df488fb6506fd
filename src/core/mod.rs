//! The pure scheduler core: resources, requests, placement and policies.
//!
//! Nothing in here does I/O or reads a clock: time is passed in, so every
//! decision is deterministic and can be tested exhaustively and benchmarked.

pub mod accounting;
pub mod alloc;
pub mod array;
pub mod books;
pub mod budget;
pub mod dependency;
pub mod device;
pub mod efficiency;
pub mod estimate;
pub mod fairshare;
pub mod idset;
pub mod limits;
pub mod machine;
pub mod policy;
pub mod priority;
pub mod reason;
pub mod request;
pub mod runtimes;
pub mod scheduler;
pub mod topology;
mod users;

/// Job IDs are assigned by the daemon, increase, and are never reused.
pub type JobId = u64;

pub use alloc::Allocation;
pub use array::{ArrayError, ArraySpec, Indices, JobRef, JobRefError};
pub use budget::{Budget, OverBudget, Usage};
pub use dependency::{Dependency, DependencyError, Progress, Verdict};
pub use device::{Device, DeviceRef, Health, Load, Vendor};
pub use efficiency::{cpu_efficiency, GpuUse, IdleAction, IdleChange, IdleRule};
pub use estimate::{Estimate, Unknown};
pub use fairshare::{ShareRow, UsageLedger, UsageWeights};
pub use idset::{CpuSet, IdSet, NodeSet};
pub use limits::{Held, LimitError, LimitHit, Resource, Scope, Standing, UserLimit, UserLimits};
pub use machine::Machine;
pub use policy::Policy;
pub use priority::{Owner, Priority, PriorityConfig, PriorityMode, Submission};
pub use reason::{Reason, Shortage};
pub use request::{Demand, DeviceRequest, Limits, Request, RequestError};
pub use scheduler::{Scheduler, UserUse};
pub use topology::{Node, Reserve, Topology};

#[cfg(test)]
mod tests;

//! Every key of the `a{sv}` replies, with the type of its value: the daemon
//! writes a reply with these keys and the CLI reads it with the same ones, so
//! the two cannot disagree on a name or a type. `docs/json.md` documents them
//! (`tests/daemon_fake/` checks it against the running daemon, key by key),
//! and `dbus/org.xlurm.Scheduler1.xml` says which method returns which.
//!
//! A key's value type is the D-Bus type on the wire: [`Key::put`] takes
//! exactly that type (no widening), [`Key::get`] gives it back.

use super::dict::Dict;
use std::marker::PhantomData;
use zbus::{OwnedVariant, Variant};

/// A key of an `a{sv}` whose value is a `T`.
pub struct Key<T> {
    name: &'static str,
    of: PhantomData<fn() -> T>,
}

impl<T> Clone for Key<T> {
    fn clone(&self) -> Key<T> {
        *self
    }
}

impl<T> Copy for Key<T> {}

impl<T> Key<T> {
    pub const fn new(name: &'static str) -> Key<T> {
        Key {
            name,
            of: PhantomData,
        }
    }

    /// The key as it is on the wire.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Puts `v` under this key (a value that cannot be owned, a descriptor
    /// that cannot be duplicated, is left out).
    pub fn put<'a>(&self, d: &mut Dict, v: T)
    where
        T: Into<Variant<'a>>,
    {
        super::dict::put(d, self.name, v);
    }

    /// The value under this key, if there is one of this type.
    pub fn get(&self, d: &Dict) -> Option<T>
    where
        T: TryFrom<OwnedVariant>,
    {
        super::dict::get(d, self.name)
    }
}

impl Key<String> {
    /// The string under this key, empty if there is none.
    pub fn text(&self, d: &Dict) -> String {
        self.get(d).unwrap_or_default()
    }
}

/// Declares one reply's keys as constants.
macro_rules! keys {
    ($($(#[$doc:meta])* $name:ident: $t:ty = $key:literal;)*) => {
        $($(#[$doc])* pub const $name: super::Key<$t> = super::Key::new($key);)*
        /// Every key of this reply, as on the wire.
        pub const ALL: &[&str] = &[$($key),*];
    };
}

/// A job: `GetJob`'s reply (and `xqueue ID`, `xlurm show`).
pub mod job {
    keys! {
        ID: u64 = "id";
        NAME: String = "name";
        UID: u32 = "uid";
        USER: String = "user";
        STATE: String = "state";
        REASON: String = "reason";
        SUBMIT_TIME: u64 = "submit_time";
        START_TIME: u64 = "start_time";
        END_TIME: u64 = "end_time";
        CPUS: u32 = "cpus";
        MEM: u64 = "mem";
        MEM_DEFAULT: bool = "mem_default";
        TIME_LIMIT: u64 = "time_limit";
        EXCLUSIVE: bool = "exclusive";
        NUMA_LOCAL: bool = "numa_local";
        DEVICES_REQUESTED: String = "devices_requested";
        ARRAY: String = "array";
        ARRAY_JOB_ID: u64 = "array_job_id";
        ARRAY_TASK_ID: u32 = "array_task_id";
        REQUEUE: bool = "requeue";
        RESTART_COUNT: u32 = "restart_count";
        HOLD: String = "hold";
        DEPENDENCY: String = "dependency";
        KILL_ON_INVALID_DEP: bool = "kill_on_invalid_dep";
        DEVICES: String = "devices";
        ALLOC_CPUS: String = "alloc_cpus";
        ALLOC_MEM_NODES: String = "alloc_mem_nodes";
        SPREAD: bool = "spread";
        DEVICE_UUIDS: Vec<String> = "device_uuids";
        GPU_UTIL_MEAN: f64 = "gpu_util_mean";
        GPU_UTIL_PEAK: u32 = "gpu_util_peak";
        GPU_MEM_PEAK: u64 = "gpu_mem_peak";
        FLAG: String = "flag";
        CPU_EFFICIENCY: f64 = "cpu_efficiency";
        UNIT: String = "unit";
        INVOCATION_ID: String = "invocation_id";
        RESULT: String = "result";
        DETAIL: String = "detail";
        EXIT_CODE: i32 = "exit_code";
        EXIT_STATUS: i32 = "exit_status";
        SIGNAL: i32 = "signal";
        CPU_NSEC: u64 = "cpu_nsec";
        MEMORY_PEAK: u64 = "memory_peak";
        OUTPUT: String = "output";
        OUTPUT_ERROR: String = "output_error";
        ARGV: Vec<String> = "argv";
        CWD: String = "cwd";
        BATCH: bool = "batch";
        ENV: Vec<String> = "env";
        NICE: i32 = "nice";
        PRIORITY: i64 = "priority";
        FAIRSHARE: f64 = "fairshare";
        AGE: f64 = "age";
        ESTIMATED_START: u64 = "estimated_start";
        ESTIMATE: String = "estimate";
        EXPECTED_START: u64 = "expected_start";
    }
}

/// `Submit`'s second reply: what the daemon chose for what was left out.
pub mod submitted {
    keys! {
        MEM: u64 = "mem";
        MEM_DEFAULT: bool = "mem_default";
        GPUS_DEFAULT: bool = "gpus_default";
    }
}

/// `GetMachine`'s reply (its lists: [`node`], [`device`], [`standing`]).
pub mod machine {
    use crate::wire::dict::Dict;
    keys! {
        NODES: Vec<Dict> = "nodes";
        DEVICES: Vec<Dict> = "devices";
        POLICY: String = "policy";
        MAX_RUNNING: u32 = "max_running";
        MAX_LIFETIME: u64 = "max_lifetime";
        MIN_JOB_MEM: u64 = "min_job_mem";
        PENDING: u32 = "pending";
        RUNNING: u32 = "running";
        /// [`super::weights`].
        USAGE_WEIGHTS: Dict = "usage_weights";
        GATE: bool = "gate";
        LIMITS: Vec<Dict> = "limits";
        /// xlurmd's counters since it started (`xlurm metrics`).
        SUBMITTED_TOTAL: u64 = "submitted_total";
        STARTED_TOTAL: u64 = "started_total";
        SCHED_PASSES_TOTAL: u64 = "sched_passes_total";
        SCHED_PASS_NSEC_TOTAL: u64 = "sched_pass_nsec_total";
        SCHED_LAST_PASS_NSEC: u64 = "sched_last_pass_nsec";
    }
}

/// One NUMA node of `GetMachine`'s `nodes`.
pub mod node {
    keys! {
        ID: u32 = "id";
        CPUS: String = "cpus";
        CPUS_FREE: String = "cpus_free";
        MEM: u64 = "mem";
        MEM_FREE: u64 = "mem_free";
    }
}

/// One device of `GetMachine`'s `devices`.
pub mod device {
    keys! {
        VENDOR: String = "vendor";
        INDEX: u32 = "index";
        UUID: String = "uuid";
        NUMA_NODE: i32 = "numa_node";
        DISABLED: bool = "disabled";
        HEALTH: String = "health";
        MONITORING_ERROR: String = "monitoring_error";
        UTIL_PCT: u32 = "util_pct";
        MEM_USED: u64 = "mem_used";
        MEM_TOTAL: u64 = "mem_total";
        /// The job holding it (0: none, or one the caller may not see).
        JOB: u64 = "job";
    }
}

/// `GetMachine`'s `usage_weights`: what one unit of each resource costs in
/// fair share.
pub mod weights {
    keys! {
        CPU: f64 = "cpu";
        GPU: f64 = "gpu";
        MEM_GIB: f64 = "mem_gib";
    }
}

/// One limit of `GetMachine`'s `limits`: the caller's standing against it.
pub mod standing {
    keys! {
        RESOURCE: String = "resource";
        USED: u64 = "used";
        LIMIT: u64 = "limit";
        SCOPE: String = "scope";
        TEXT: String = "text";
    }
}

/// One row of `GetShares`.
pub mod share {
    keys! {
        UID: u32 = "uid";
        USER: String = "user";
        SHARES: u32 = "shares";
        NORM_SHARES: f64 = "norm_shares";
        USAGE: f64 = "usage";
        EFFECTIVE_USAGE: f64 = "effective_usage";
        FAIR_SHARE: f64 = "fair_share";
    }
}

/// One row of `GetUsage`.
pub mod usage {
    use std::collections::HashMap;
    keys! {
        PERIOD: String = "period";
        UID: u32 = "uid";
        USER: String = "user";
        JOBS: u64 = "jobs";
        STATES: HashMap<String, u64> = "states";
        CPU_HOURS: f64 = "cpu_hours";
        CPU_USED_HOURS: f64 = "cpu_used_hours";
        GPU_HOURS: f64 = "gpu_hours";
        WAIT_MEDIAN: u32 = "wait_median";
        MEM_PEAK_P50: u64 = "mem_peak_p50";
        MEM_PEAK_P90: u64 = "mem_peak_p90";
        MEM_PEAK_MAX: u64 = "mem_peak_max";
        GPU_UTIL: f64 = "gpu_util";
    }
}

#[cfg(test)]
mod tests {
    /// Every reply's keys, by the method that returns them.
    const REPLIES: &[(&str, &[&str])] = &[
        ("GetJob", super::job::ALL),
        ("Submit", super::submitted::ALL),
        ("GetMachine", super::machine::ALL),
        ("GetMachine nodes", super::node::ALL),
        ("GetMachine devices", super::device::ALL),
        ("GetMachine usage_weights", super::weights::ALL),
        ("GetMachine limits", super::standing::ALL),
        ("GetShares", super::share::ALL),
        ("GetUsage", super::usage::ALL),
    ];

    #[test]
    fn no_reply_names_a_key_twice() {
        for (reply, keys) in REPLIES {
            let mut seen = std::collections::BTreeSet::new();
            for k in *keys {
                assert!(seen.insert(k), "{reply} declares {k:?} twice");
            }
        }
    }

    /// A key declared here and documented nowhere is a key no script can
    /// rely on: each is in `docs/json.md` (the `--json` schemas) or in the
    /// interface description in `dbus/`.
    #[test]
    fn every_key_is_documented() {
        let root = env!("CARGO_MANIFEST_DIR");
        let json = std::fs::read_to_string(format!("{root}/docs/json.md")).unwrap();
        let xml = std::fs::read_to_string(format!("{root}/dbus/org.xlurm.Scheduler1.xml")).unwrap();
        let mut missing = Vec::new();
        for (reply, keys) in REPLIES {
            for k in *keys {
                let quoted = format!("`{k}`");
                if !json.contains(&quoted) && !xml.contains(&quoted) {
                    missing.push(format!("{reply}: {k}"));
                }
            }
        }
        assert!(missing.is_empty(), "undocumented keys: {missing:#?}");
    }
}

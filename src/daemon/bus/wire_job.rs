//! A job as it crosses the bus: the `a{sv}` of `GetJob` and the keys the
//! CLI's `xqueue ID` and `--json` read (documented in `dbus/`).

use crate::daemon::job::Job;
pub use crate::wire::dict::Dict;
use crate::wire::keys::job;

/// A job as a{sv}. `detail` adds what only the owner and root may see.
pub fn job_dict(job: &Job, reason: Option<String>, detail: bool) -> Dict {
    let mut m = Dict::new();
    job::ID.put(&mut m, job.id);
    job::NAME.put(&mut m, job.name.clone());
    job::UID.put(&mut m, job.uid);
    job::USER.put(&mut m, job.user.clone());
    job::STATE.put(&mut m, job.state().name().into());
    job::REASON.put(&mut m, reason.unwrap_or_default());
    job::SUBMIT_TIME.put(&mut m, job.submit_usec);
    job::START_TIME.put(&mut m, job.start_usec());
    job::END_TIME.put(&mut m, job.end_usec());
    job::CPUS.put(&mut m, job.demand.cpus);
    job::MEM.put(&mut m, job.demand.mem_bytes);
    job::MEM_DEFAULT.put(&mut m, job.demand.mem_default);
    job::TIME_LIMIT.put(&mut m, job.demand.time_limit_secs);
    job::EXCLUSIVE.put(&mut m, job.demand.exclusive);
    job::NUMA_LOCAL.put(&mut m, job.demand.numa_local);
    job::DEVICES_REQUESTED.put(&mut m, job.devices_requested());
    if job.array.is_some() {
        job::ARRAY.put(&mut m, job.label());
    }
    if let Some(t) = &job.array {
        job::ARRAY_JOB_ID.put(&mut m, t.array);
        job::ARRAY_TASK_ID.put(&mut m, t.index);
    }
    job::REQUEUE.put(&mut m, job.requeue);
    job::RESTART_COUNT.put(&mut m, u32::from(job.restarts));
    if let Some(h) = job.hold() {
        job::HOLD.put(&mut m, h.name().into());
    }
    if let Some(a) = job.after() {
        job::DEPENDENCY.put(&mut m, a.dependency.to_string());
        job::KILL_ON_INVALID_DEP.put(&mut m, a.kill_on_invalid);
    }
    if let Some(a) = job.alloc() {
        job::DEVICES.put(&mut m, job.devices_allocated().unwrap_or_default());
        job::ALLOC_CPUS.put(&mut m, a.cpus.to_list());
        job::ALLOC_MEM_NODES.put(&mut m, a.mem_nodes.to_list());
        job::SPREAD.put(&mut m, a.spread);
        let uuids: Vec<String> = a.devices.iter().map(|d| d.uuid.clone()).collect();
        job::DEVICE_UUIDS.put(&mut m, uuids);
    }
    if let Some(g) = job.gpu_use() {
        if let Some(mean) = g.util_mean() {
            job::GPU_UTIL_MEAN.put(&mut m, mean);
            job::GPU_UTIL_PEAK.put(&mut m, u32::from(g.util_peak));
        }
        if let Some(peak) = g.mem_peak {
            job::GPU_MEM_PEAK.put(&mut m, peak);
        }
    }
    if let Some(flag) = job.flag() {
        job::FLAG.put(&mut m, flag.into());
    }
    if let Some(e) = job.cpu_efficiency() {
        job::CPU_EFFICIENCY.put(&mut m, e);
    }
    job::UNIT.put(&mut m, job.unit());
    job::INVOCATION_ID.put(&mut m, job.invocation_id().to_string());
    if let Some(o) = job.outcome() {
        job::RESULT.put(&mut m, o.result.clone());
        job::DETAIL.put(&mut m, o.detail.clone());
        if let Some(c) = job.exit_code() {
            job::EXIT_CODE.put(&mut m, c);
        }
        if let Some(s) = o.exit_status {
            job::EXIT_STATUS.put(&mut m, s);
        }
        if let Some(s) = o.signal {
            job::SIGNAL.put(&mut m, s);
        }
        if let Some(n) = o.cpu_nsec {
            job::CPU_NSEC.put(&mut m, n);
        }
        if let Some(n) = o.memory_peak {
            job::MEMORY_PEAK.put(&mut m, n);
        }
    }
    if detail {
        if let Some(o) = &job.output {
            job::OUTPUT.put(&mut m, o.path.clone());
            if !o.error.is_empty() {
                job::OUTPUT_ERROR.put(&mut m, o.error.clone());
            }
        }
        job::ARGV.put(&mut m, job.command.argv.clone());
        job::CWD.put(&mut m, job.command.cwd.clone());
        job::BATCH.put(&mut m, job.command.script.is_some());
        if let Some(env) = &job.command.env {
            job::ENV.put(&mut m, env.clone());
        }
    }
    m
}

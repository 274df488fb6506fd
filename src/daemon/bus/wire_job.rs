//! A job as it crosses the bus: the `a{sv}` of `GetJob` and the keys the
//! CLI's `xqueue ID` and `--json` read (documented in `dbus/`).

use crate::daemon::job::Job;
pub use crate::wire::dict::{put, Dict};

/// A job as a{sv}. `detail` adds what only the owner and root may see.
pub fn job_dict(job: &Job, reason: Option<String>, detail: bool) -> Dict {
    let mut m = Dict::new();
    put(&mut m, "id", job.id);
    put(&mut m, "name", job.name.clone());
    put(&mut m, "uid", job.uid);
    put(&mut m, "user", job.user.clone());
    put(&mut m, "state", job.state().name());
    put(&mut m, "reason", reason.unwrap_or_default());
    put(&mut m, "submit_time", job.submit_usec);
    put(&mut m, "start_time", job.start_usec());
    put(&mut m, "end_time", job.end_usec());
    put(&mut m, "cpus", job.demand.cpus);
    put(&mut m, "mem", job.demand.mem_bytes);
    put(&mut m, "mem_default", job.demand.mem_default);
    put(&mut m, "time_limit", job.demand.time_limit_secs);
    put(&mut m, "exclusive", job.demand.exclusive);
    put(&mut m, "numa_local", job.demand.numa_local);
    put(&mut m, "devices_requested", job.devices_requested());
    if job.array.is_some() {
        put(&mut m, "array", job.label());
    }
    if let Some(t) = &job.array {
        put(&mut m, "array_job_id", t.array);
        put(&mut m, "array_task_id", t.index);
    }
    put(&mut m, "requeue", job.requeue);
    put(&mut m, "restart_count", u32::from(job.restarts));
    if let Some(h) = job.hold() {
        put(&mut m, "hold", h.name());
    }
    if let Some(a) = job.after() {
        put(&mut m, "dependency", a.dependency.to_string());
        put(&mut m, "kill_on_invalid_dep", a.kill_on_invalid);
    }
    if let Some(a) = job.alloc() {
        put(
            &mut m,
            "devices",
            job.devices_allocated().unwrap_or_default(),
        );
        put(&mut m, "alloc_cpus", a.cpus.to_list());
        put(&mut m, "alloc_mem_nodes", a.mem_nodes.to_list());
        put(&mut m, "spread", a.spread);
        let uuids: Vec<String> = a.devices.iter().map(|d| d.uuid.clone()).collect();
        put(&mut m, "device_uuids", uuids);
    }
    if let Some(g) = job.gpu_use() {
        if let Some(mean) = g.util_mean() {
            put(&mut m, "gpu_util_mean", mean);
            put(&mut m, "gpu_util_peak", u32::from(g.util_peak));
        }
        if let Some(peak) = g.mem_peak {
            put(&mut m, "gpu_mem_peak", peak);
        }
    }
    if let Some(flag) = job.flag() {
        put(&mut m, "flag", flag);
    }
    if let Some(e) = job.cpu_efficiency() {
        put(&mut m, "cpu_efficiency", e);
    }
    put(&mut m, "unit", job.unit());
    put(&mut m, "invocation_id", job.invocation_id().to_string());
    if let Some(o) = job.outcome() {
        put(&mut m, "result", o.result.clone());
        put(&mut m, "detail", o.detail.clone());
        if let Some(c) = job.exit_code() {
            put(&mut m, "exit_code", c);
        }
        if let Some(s) = o.exit_status {
            put(&mut m, "exit_status", s);
        }
        if let Some(s) = o.signal {
            put(&mut m, "signal", s);
        }
        if let Some(n) = o.cpu_nsec {
            put(&mut m, "cpu_nsec", n);
        }
        if let Some(n) = o.memory_peak {
            put(&mut m, "memory_peak", n);
        }
    }
    if detail {
        if let Some(o) = &job.output {
            put(&mut m, "output", o.path.clone());
            if !o.error.is_empty() {
                put(&mut m, "output_error", o.error.clone());
            }
        }
        put(&mut m, "argv", job.command.argv.clone());
        put(&mut m, "cwd", job.command.cwd.clone());
        put(&mut m, "batch", job.command.script.is_some());
        if let Some(env) = &job.command.env {
            put(&mut m, "env", env.clone());
        }
    }
    m
}

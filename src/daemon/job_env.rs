//! A job's environment: what it forwarded less the names the daemon
//! reserves, then `XLURM_JOB_ID`, Slurm's job variables (compared with real
//! Slurm's by VM 17), an array task's variables and the accelerators'
//! visibility variables. `unit.rs` puts it in the unit's `Environment`.

use super::job::Job;

/// Environment names the daemon sets and a job can never override.
pub fn reserved_env(name: &str) -> bool {
    use crate::accel::{CUDA_DEVICE_ORDER, VISIBILITY_VARIABLES};
    /// What systemd itself sets for a service; a forwarded value would shadow it.
    const SYSTEMD: [&str; 10] = [
        "CREDENTIALS_DIRECTORY",
        "INVOCATION_ID",
        "JOURNAL_STREAM",
        "NOTIFY_SOCKET",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
        "SYSTEMD_EXEC_PID",
        "WATCHDOG_PID",
        "WATCHDOG_USEC",
    ];
    name == "XLURM_JOB_ID"
        || name == CUDA_DEVICE_ORDER.0
        || VISIBILITY_VARIABLES.contains(&name)
        || SYSTEMD.contains(&name)
        || SLURM_VARIABLES.contains(&name)
        || SLURM_CONFLICTING.contains(&name)
        || ARRAY_VARIABLES.contains(&name)
}

/// Slurm's job variables (sbatch(1), "OUTPUT ENVIRONMENT VARIABLES"), as a
/// batch job on a one-node Slurm cluster sees them, so that Slurm scripts
/// run unchanged. Every job gets them ([`slurm_variables`]) but the two GPU
/// ones, which only a job holding devices gets, and `SLURM_RESTART_COUNT`,
/// which only a job queued again gets (as in Slurm: its presence says the
/// job was restarted). All are reserved: a forwarded value (from a shell
/// inside another job, say) is replaced, or dropped where this job has none
/// (a CPU job gets no `SLURM_JOB_GPUS`). VM 17 compares them with real
/// Slurm's for the same script; `SLURM_NTASKS` and `SLURM_NPROCS` are set
/// always (1), where Slurm sets them only when `-n` is given.
pub const SLURM_VARIABLES: [&str; 22] = [
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_USER",
    "SLURM_JOB_UID",
    "SLURM_SUBMIT_DIR",
    "SLURM_SUBMIT_HOST",
    "SLURM_CPUS_PER_TASK",
    "SLURM_CPUS_ON_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_MEM_PER_NODE",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_RESTART_COUNT",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
];

/// Set only for a job holding devices (Slurm leaves them unset otherwise).
const SLURM_GPU_VARIABLES: [&str; 2] = ["SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS"];

/// Slurm variables xlurm never sets but drops from a forwarded environment:
/// they contradict the ones it sets (`srun` refuses `SLURM_MEM_PER_CPU`
/// beside `SLURM_MEM_PER_NODE`), and the GPU ones would tell a CPU job it
/// has devices.
const SLURM_CONFLICTING: [&str; 4] = [
    "SLURM_MEM_PER_CPU",
    "SLURM_MEM_PER_GPU",
    SLURM_GPU_VARIABLES[0],
    SLURM_GPU_VARIABLES[1],
];

/// Job array variables: Slurm's and their `XLURM_` twins. Reserved now, so
/// a forwarded value never makes a plain job look like an array task; set
/// by [`array_variables`] once jobs can be array tasks.
pub const ARRAY_VARIABLES: [&str; 12] = [
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
    "XLURM_ARRAY_JOB_ID",
    "XLURM_ARRAY_TASK_ID",
    "XLURM_ARRAY_TASK_COUNT",
    "XLURM_ARRAY_TASK_MIN",
    "XLURM_ARRAY_TASK_MAX",
    "XLURM_ARRAY_TASK_STEP",
];

/// The array variables of `job` (names from [`ARRAY_VARIABLES`]): an
/// array task's `SLURM_ARRAY_*` and their `XLURM_ARRAY_*` twins; none for
/// a plain job.
fn array_variables(job: &Job) -> Vec<(String, String)> {
    let Some(task) = &job.array else {
        return Vec::new();
    };
    let values = task.variables();
    ARRAY_VARIABLES
        .iter()
        .zip(values.iter().chain(values.iter()))
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect()
}

/// This machine's name as Slurm's node list would give it: the host name
/// up to its first dot (`hostname -s`).
pub fn node_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if rc == 0 {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    short_host(&name)
}

pub(crate) fn short_host(name: &str) -> String {
    match name.split('.').next() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "localhost".to_string(),
    }
}

/// Slurm's job variables for `job` on node `node` ([`SLURM_VARIABLES`],
/// and [`SLURM_GPU_VARIABLES`] where it holds devices), values as Slurm
/// writes them: `SLURM_MEM_PER_NODE` in MiB, `SLURM_JOB_GPUS` the
/// devices' IDs as `xinfo` shows them.
pub fn slurm_variables(job: &Job, node: &str) -> Vec<(String, String)> {
    let alloc = job.alloc();
    // What the job holds: all of the machine under --exclusive.
    let cpus = alloc.map_or(job.demand.cpus, |a| a.cpus.len());
    let mem = alloc.map_or(job.demand.mem_bytes, |a| a.mem_bytes);
    let values = [
        job.id.to_string(),
        job.id.to_string(),
        job.name.clone(),
        job.user.clone(),
        job.uid.to_string(),
        job.command.cwd.clone(),
        node.to_string(),
        job.demand.cpus.to_string(),
        cpus.to_string(),
        cpus.to_string(),
        (mem >> 20).to_string(),
        "1".into(),
        "1".into(),
        "1".into(),
        "1".into(),
        "1".into(),
        node.to_string(),
        node.to_string(),
        job.restarts.to_string(),
        // The batch step is task 0 of node 0 (what PyTorch Lightning and
        // other launchers read to find their rank).
        "0".into(),
        "0".into(),
        "0".into(),
    ];
    let mut vars: Vec<(String, String)> = SLURM_VARIABLES
        .iter()
        .map(|n| n.to_string())
        .zip(values)
        .filter(|(n, _)| n != "SLURM_RESTART_COUNT" || job.restarts > 0)
        .collect();
    let devices = alloc.map(|a| a.devices.as_slice()).unwrap_or_default();
    if !devices.is_empty() {
        let ids: Vec<String> = devices.iter().map(|d| d.index.to_string()).collect();
        vars.push((SLURM_GPU_VARIABLES[0].into(), devices.len().to_string()));
        vars.push((SLURM_GPU_VARIABLES[1].into(), ids.join(",")));
    }
    vars
}

/// The job's environment: what was forwarded (minus reserved names), then
/// the daemon's own variables: `XLURM_JOB_ID`, Slurm's ([`slurm_variables`],
/// [`array_variables`]) and `extra` (the accelerators' visibility variables).
pub fn environment(job: &Job, extra: &[(String, String)]) -> Vec<String> {
    environment_on(job, extra, &node_name())
}

pub(crate) fn environment_on(job: &Job, extra: &[(String, String)], node: &str) -> Vec<String> {
    let mut own = vec![("XLURM_JOB_ID".to_string(), job.id.to_string())];
    own.extend(slurm_variables(job, node));
    own.extend(array_variables(job));
    own.extend(extra.iter().cloned());
    let mut env: Vec<String> = job
        .command
        .env
        .iter()
        .flatten()
        .filter(|kv| {
            let name = kv.split('=').next().unwrap_or("");
            !reserved_env(name) && !own.iter().any(|(k, _)| k == name)
        })
        .cloned()
        .collect();
    env.extend(own.iter().map(|(k, v)| format!("{k}={v}")));
    env
}

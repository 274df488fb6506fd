//! Turning a finished unit's properties into a job's final state.
//!
//! systemd's `ActiveState`/`SubState`/`Result`/`ExecMain*` are kept raw in
//! [`UnitStatus`] and interpreted only here and in [`super::tracker`],
//! which follows a unit through its signals.

pub use super::tracker::{Tracker, UnitSignal, Verdict};
use crate::daemon::job::{JobState, Outcome};

/// The unit properties xlurm reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitStatus {
    pub active_state: String,
    pub sub_state: String,
    pub result: String,
    /// 0 not yet, 1 exited, 2 killed, 3 dumped core.
    pub exec_main_code: i32,
    pub exec_main_status: i32,
    pub memory_peak: Option<u64>,
    pub memory_max: Option<u64>,
    pub cpu_nsec: Option<u64>,
    pub invocation_id: String,
    /// Whether systemd has a job (start or stop) queued or running for the unit.
    pub pending_job: bool,
}

impl UnitStatus {
    /// Whether the job's process is gone and a result can be read. Units run with
    /// `RemainAfterExit=yes`, so a clean exit shows as `active/exited`. A unit
    /// whose start job is still queued is `inactive` with no invocation yet: that
    /// is not finished.
    pub fn finished(&self) -> bool {
        // No Result yet: systemd is (re)loading the unit, e.g. during daemon-reexec.
        if self.result.is_empty() {
            return false;
        }
        if self.pending_job && self.active_state != "failed" {
            return false;
        }
        match self.active_state.as_str() {
            "failed" => true,
            "inactive" => !self.invocation_id.is_empty(),
            _ => {
                self.sub_state == "exited"
                    || self.exec_main_code > 0 && self.active_state != "activating"
            }
        }
    }

    pub fn running(&self) -> bool {
        !self.finished()
    }

    /// Whether the unit failed (stopped by systemd, nothing left to stop).
    pub fn failed(&self) -> bool {
        self.active_state == "failed"
    }

    /// Whether the unit is loaded but never ran and nothing is queued for it:
    /// its start job was lost (systemd re-executed) and it can be started.
    pub fn never_started(&self) -> bool {
        self.invocation_id.is_empty() && !self.pending_job && self.active_state == "inactive"
    }
}

/// The result a job whose unit could not be started is recorded with (in
/// the place of systemd's `Result`, which such a unit never had).
pub const LAUNCH_FAILED_RESULT: &str = "launch-failed";

/// What letting systemd forget a finished unit takes, by its `ActiveState`
/// when known (`None`: not known): one that exited (`RemainAfterExit=yes`
/// keeps it active, with anything the job left behind running) is stopped,
/// which kills what is left and unloads it; a failed one (stopped already) is
/// reset; one in any other state gets both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Collect {
    pub stop: bool,
    pub reset_failed: bool,
}

impl Collect {
    pub fn for_state(active_state: Option<&str>) -> Collect {
        Collect {
            stop: active_state != Some("failed"),
            reset_failed: active_state != Some("active"),
        }
    }
}

/// The name systemd gives its own launch failure statuses (200-243).
#[allow(clippy::match_overlapping_arm)]
pub fn launch_failure_name(status: i32) -> Option<&'static str> {
    Some(match status {
        200 => "CHDIR: cannot change to the working directory",
        201 => "NICE",
        202 => "FDS",
        203 => {
            "EXEC: the command could not be executed (missing, not executable, or bad interpreter)"
        }
        204 => "MEMORY",
        205 => "LIMITS",
        206 => "OOM_ADJUST",
        207 => "SIGNAL_MASK",
        208 => "STDIN",
        209 => "STDOUT",
        210 => "CHROOT",
        211 => "IOPRIO",
        212 => "TIMERSLACK",
        213 => "SECUREBITS",
        214 => "SETSCHEDULER",
        215 => "CPUAFFINITY",
        216 => "GROUP: the submitter's group could not be set",
        217 => "USER: the submitter's user could not be set",
        218 => "CAPABILITIES",
        219 => "CGROUP",
        220 => "SETSID",
        222 => "STDERR",
        224 => "PAM",
        226 => "NAMESPACE",
        227 => "NO_NEW_PRIVILEGES",
        228 => "SECCOMP",
        233 => "RUNTIME_DIRECTORY",
        238 => "STATE_DIRECTORY",
        242 => "NUMA_POLICY",
        243 => "CREDENTIALS: the batch script snapshot could not be passed",
        201..=243 => "systemd could not set up the job",
        _ => return None,
    })
}

const SIGKILL: i32 = 9;
const SIGHUP: i32 = 1;

/// Why a job xlurmd stopped at its own deadline ended (see `service::deadline`).
pub const OWN_DEADLINE: &str = "killed at its time limit (lowered while it ran)";

/// The final state of a finished unit that xlurmd stopped at its time limit
/// (a lowered one, kept by xlurmd: see `service::deadline`), from what
/// [`classify`] made of it: TIMEOUT however it took the stop (SIGTERM, an
/// exit of its own, SIGKILL after the grace), but an OOM kill stays one.
pub fn at_own_deadline(state: JobState, mut outcome: Outcome) -> (JobState, Outcome) {
    if state == JobState::OutOfMemory {
        return (state, outcome);
    }
    outcome.detail = OWN_DEADLINE.into();
    (JobState::Timeout, outcome)
}

/// The final state of a finished unit. `cancelled` says whether xlurm (or an
/// admin through xlurm) asked it to stop.
pub fn classify(u: &UnitStatus, cancelled: bool, pty: bool) -> (JobState, Outcome) {
    let mut o = Outcome {
        result: u.result.clone(),
        exit_status: (u.exec_main_code == 1).then_some(u.exec_main_status),
        signal: matches!(u.exec_main_code, 2 | 3).then_some(u.exec_main_status),
        detail: String::new(),
        cpu_nsec: u.cpu_nsec,
        memory_peak: u.memory_peak,
        gpu: None,
    };
    // The kernel OOM kill can be reported as a plain SIGKILL (systemd PR #39342):
    // count it as OOM when the peak reached the limit.
    let oom_race = o.signal == Some(SIGKILL)
        && matches!((u.memory_peak, u.memory_max), (Some(p), Some(m)) if m > 0 && p >= m - m / 64);
    let state = if u.result == "oom-kill" || oom_race && !cancelled {
        o.detail = "killed for exceeding its memory budget (MemoryMax)".into();
        JobState::OutOfMemory
    } else if u.result == "timeout" && cancelled {
        // systemd's Result is "timeout" too when a stop outlasts
        // TimeoutStopUSec: a cancelled job that ignored SIGTERM.
        o.detail =
            "cancelled; killed with SIGKILL after the cancel grace (it outlasted SIGTERM)".into();
        JobState::Cancelled
    } else if u.result == "timeout" {
        o.detail = "killed at its time limit".into();
        JobState::Timeout
    } else if cancelled {
        o.detail = "cancelled".into();
        JobState::Cancelled
    } else if let Some(name) = o.exit_status.and_then(launch_failure_name) {
        o.detail = format!("systemd could not start it: {name}");
        JobState::LaunchFailed
    } else if matches!(
        u.result.as_str(),
        "resources" | "start-limit-hit" | "protocol"
    ) {
        o.detail = format!("systemd could not start it: {}", u.result);
        JobState::LaunchFailed
    } else if o.exit_status == Some(0) {
        JobState::Completed
    } else if u.result == "success" && o.signal == Some(15) {
        // systemd counts SIGTERM as a clean end: the unit was stopped from
        // outside xlurm (systemctl stop) or the job ended itself so.
        o.detail = "stopped by SIGTERM outside xlurm (systemctl stop?)".into();
        JobState::Cancelled
    } else if pty && o.signal == Some(SIGHUP) {
        // Its terminal hung up: xrun --pty, its terminal or the ssh
        // connection went away (the kernel sends SIGHUP to the session).
        o.detail = "its terminal hung up (xrun, the terminal or the connection went away)".into();
        JobState::Cancelled
    } else if let Some(sig) = o.signal {
        o.detail = format!("killed by signal {sig}");
        JobState::Failed
    } else if o.exit_status.is_some() {
        JobState::Failed
    } else {
        // Stopped from outside (systemctl stop) before an exit was recorded.
        o.detail = format!(
            "its unit stopped without an exit status (result: {})",
            u.result
        );
        JobState::Cancelled
    };
    (state, o)
}

/// Whether a unit in this state is queued, starting or running: its job has
/// not ended and reading it would tell nothing new. `pending_job`: a job
/// (start, stop) is queued for it.
pub fn busy(active_state: &str, sub_state: &str, pending_job: bool) -> bool {
    match active_state {
        "active" | "activating" | "reloading" => sub_state != "exited",
        // Created, its start job queued.
        "inactive" => pending_job,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_unit_is_stopped_reset_or_both_by_its_state() {
        let c = |s| Collect::for_state(s);
        assert_eq!(
            c(Some("active")),
            Collect {
                stop: true,
                reset_failed: false
            }
        );
        assert_eq!(
            c(Some("failed")),
            Collect {
                stop: false,
                reset_failed: true
            }
        );
        for other in [None, Some("inactive"), Some("deactivating")] {
            assert_eq!(
                c(other),
                Collect {
                    stop: true,
                    reset_failed: true
                },
                "{other:?}"
            );
        }
    }

    #[test]
    fn a_loaded_unit_whose_start_was_lost_never_started() {
        let lost = UnitStatus {
            active_state: "inactive".into(),
            sub_state: "dead".into(),
            ..Default::default()
        };
        assert!(lost.never_started());
        let queued = UnitStatus {
            pending_job: true,
            ..lost.clone()
        };
        assert!(!queued.never_started());
        let ran = UnitStatus {
            invocation_id: "ab".into(),
            ..lost.clone()
        };
        assert!(!ran.never_started());
        let active = UnitStatus {
            active_state: "active".into(),
            ..lost
        };
        assert!(!active.never_started());
    }

    fn unit(result: &str, code: i32, status: i32) -> UnitStatus {
        UnitStatus {
            active_state: if result == "success" {
                "active"
            } else {
                "failed"
            }
            .into(),
            sub_state: if result == "success" {
                "exited"
            } else {
                "failed"
            }
            .into(),
            result: result.into(),
            exec_main_code: code,
            exec_main_status: status,
            memory_peak: Some(10 << 20),
            memory_max: Some(64 << 20),
            ..Default::default()
        }
    }

    #[test]
    fn every_result_maps_to_a_state() {
        let cases = [
            (unit("success", 1, 0), false, JobState::Completed, Some(0)),
            (unit("exit-code", 1, 7), false, JobState::Failed, Some(7)),
            (unit("signal", 2, 11), false, JobState::Failed, Some(139)),
            (unit("timeout", 2, 15), false, JobState::Timeout, Some(124)),
            (
                unit("oom-kill", 2, 9),
                false,
                JobState::OutOfMemory,
                Some(137),
            ),
            (
                unit("exit-code", 1, 203),
                false,
                JobState::LaunchFailed,
                Some(125),
            ),
            (
                unit("exit-code", 1, 217),
                false,
                JobState::LaunchFailed,
                Some(125),
            ),
            (unit("success", 2, 15), true, JobState::Cancelled, Some(130)),
            // Cancelled, it ignored SIGTERM: SIGKILL after --cancel-grace (VM 15).
            (unit("timeout", 2, 9), true, JobState::Cancelled, Some(130)),
            (
                unit("resources", 0, 0),
                false,
                JobState::LaunchFailed,
                Some(125),
            ),
        ];
        for (u, cancelled, want, code) in cases {
            let (state, outcome) = classify(&u, cancelled, false);
            assert_eq!(state, want, "{u:?}");
            let job = crate::daemon::job::tests_support::job_with(state, outcome);
            assert_eq!(job.exit_code(), code, "{u:?}");
        }
    }

    #[test]
    fn a_hangup_cancels_an_interactive_job_and_fails_any_other() {
        let hup = unit("signal", 2, 1);
        let (state, o) = classify(&hup, false, true);
        assert_eq!(state, JobState::Cancelled);
        assert!(o.detail.contains("terminal hung up"), "{o:?}");
        assert_eq!(classify(&hup, false, false).0, JobState::Failed);
        // Another signal is a failure either way.
        assert_eq!(
            classify(&unit("signal", 2, 11), false, true).0,
            JobState::Failed
        );
    }

    #[test]
    fn sigkill_at_the_memory_limit_is_oom() {
        let mut u = unit("signal", 2, 9);
        u.memory_peak = Some(64 << 20);
        assert_eq!(classify(&u, false, false).0, JobState::OutOfMemory);
        u.memory_peak = Some(1 << 20);
        assert_eq!(classify(&u, false, false).0, JobState::Failed);
    }

    #[test]
    fn launch_failures_explain_themselves() {
        let (_, o) = classify(&unit("exit-code", 1, 203), false, false);
        assert!(o.detail.contains("EXEC"), "{}", o.detail);
        assert!(launch_failure_name(199).is_none());
    }

    #[test]
    fn a_unit_whose_start_is_queued_is_not_finished() {
        let queued = UnitStatus {
            active_state: "inactive".into(),
            sub_state: "dead".into(),
            pending_job: true,
            ..Default::default()
        };
        assert!(!queued.finished());
        let never_started = UnitStatus {
            pending_job: false,
            ..queued.clone()
        };
        assert!(!never_started.finished(), "no invocation yet");
        let stopped = UnitStatus {
            invocation_id: "ab".into(),
            pending_job: false,
            result: "success".into(),
            ..queued
        };
        assert!(stopped.finished());
        let reloading = UnitStatus {
            result: String::new(),
            ..stopped
        };
        assert!(!reloading.finished(), "no Result yet (systemd reloading)");
    }

    #[test]
    fn finished_follows_remain_after_exit() {
        let mut u = unit("success", 1, 0);
        assert!(u.finished());
        u.sub_state = "running".into();
        u.exec_main_code = 0;
        assert!(u.running());
        u.active_state = "failed".into();
        assert!(u.finished());
    }
}

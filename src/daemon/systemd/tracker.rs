//! Following a job's unit through its `PropertiesChanged` signals, so that a
//! start costs systemd no call and an end at most two property reads.

use super::outcome::{busy, UnitStatus};

/// What one `PropertiesChanged` signal of a job's unit said. systemd sends one
/// for the type's interface (`org.freedesktop.systemd1.Service`), then one for
/// `org.freedesktop.systemd1.Unit`, at every change, each with every property
/// of that interface marked "emits change" (org.freedesktop.systemd1(5)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitSignal {
    /// The service's end as far as known: `Result`, `ExecMainCode`, `ExecMainStatus`.
    Service {
        result: String,
        exec_main_code: i32,
        exec_main_status: i32,
    },
    /// The unit's state: `ActiveState`, `SubState`, `InvocationID`, and
    /// whether `Job` names a queued job.
    Unit {
        active_state: String,
        sub_state: String,
        invocation_id: String,
        pending_job: bool,
    },
    /// A signal without the properties above (a partial one, another interface).
    Unclear,
}

/// What to do about a job after a signal of its unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing new: the unit is queued, starting or running.
    Nothing,
    /// The unit runs under this invocation (seen for the first time).
    Started(String),
    /// The unit finished and the signals said how; only its accounting
    /// (CPU time, memory peak) is left to read.
    Finished(UnitStatus),
    /// The signals do not say enough: read the unit.
    Read,
}

/// Follows job units through their signals, so that a unit starting or
/// running costs systemd no call at all and a finished one costs two small
/// property reads instead of `GetUnit` and two `GetAll`s (systemd builds about
/// 200 properties for the Service one, and answers D-Bus calls before it runs
/// its queued jobs: every call made to it delays the next job's start).
/// Anything unexpected falls back to [`Verdict::Read`]; the daemon also reads
/// running jobs' units every 5 s, so a lost signal delays a result, never loses it.
#[derive(Debug, Default)]
pub struct Tracker {
    units: std::collections::HashMap<u64, Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// The last Service signal: result, exec main code and status.
    service: Option<(String, i32, i32)>,
    /// The invocation last reported as [`Verdict::Started`].
    invocation: String,
}

/// How many units the tracker follows at most; past that it starts afresh
/// (units it forgot are then read once when they end).
const TRACKED: usize = 4096;

impl Tracker {
    /// Takes in one signal of job `id`'s unit.
    pub fn on(&mut self, id: u64, signal: UnitSignal) -> Verdict {
        if self.units.len() >= TRACKED && !self.units.contains_key(&id) {
            self.units.clear();
        }
        match signal {
            UnitSignal::Service {
                result,
                exec_main_code,
                exec_main_status,
            } => {
                self.units.entry(id).or_default().service =
                    Some((result, exec_main_code, exec_main_status));
                Verdict::Nothing
            }
            UnitSignal::Unclear => {
                self.units.remove(&id);
                Verdict::Read
            }
            UnitSignal::Unit {
                active_state,
                sub_state,
                invocation_id,
                pending_job,
            } => {
                let seen = self.units.entry(id).or_default();
                // systemd sends a change's Service signal right before its
                // Unit signal: a Service part belongs to this Unit signal
                // only. One kept from an earlier change (its own end's lost
                // in a full queue) would pair a start's "no exit yet" with
                // an end: a wrong CANCELLED.
                let service = seen.service.take();
                if busy(&active_state, &sub_state, pending_job) {
                    if invocation_id.is_empty() || seen.invocation == invocation_id {
                        return Verdict::Nothing;
                    }
                    seen.invocation = invocation_id.clone();
                    return Verdict::Started(invocation_id);
                }
                let Some((result, code, status)) = service else {
                    self.units.remove(&id);
                    return Verdict::Read;
                };
                let u = UnitStatus {
                    active_state,
                    sub_state,
                    result,
                    exec_main_code: code,
                    exec_main_status: status,
                    invocation_id,
                    pending_job,
                    ..Default::default()
                };
                if !u.finished() {
                    if u.active_state == "inactive" {
                        // Never ran and nothing queued: its start was lost.
                        self.units.remove(&id);
                        return Verdict::Read;
                    }
                    // Stopping: the next signal tells how it ended.
                    return Verdict::Nothing;
                }
                self.units.remove(&id);
                // The two ends whose unit is still loaded and says everything;
                // any other (inactive, deactivating) is read whole.
                if u.active_state == "failed" || u.sub_state == "exited" {
                    Verdict::Finished(u)
                } else {
                    Verdict::Read
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::job::JobState;
    use crate::daemon::systemd::outcome::classify;

    fn service(result: &str, code: i32, status: i32) -> UnitSignal {
        UnitSignal::Service {
            result: result.into(),
            exec_main_code: code,
            exec_main_status: status,
        }
    }

    fn unit_signal(active: &str, sub: &str, invocation: &str, job: bool) -> UnitSignal {
        UnitSignal::Unit {
            active_state: active.into(),
            sub_state: sub.into(),
            invocation_id: invocation.into(),
            pending_job: job,
        }
    }

    #[test]
    fn a_unit_followed_through_its_signals_is_read_only_for_its_accounting() {
        let mut t = Tracker::default();
        // Created with its start job queued, then starting and running.
        assert_eq!(t.on(7, service("success", 0, 0)), Verdict::Nothing);
        assert_eq!(
            t.on(7, unit_signal("inactive", "dead", "", true)),
            Verdict::Nothing
        );
        assert_eq!(t.on(7, service("success", 0, 0)), Verdict::Nothing);
        assert_eq!(
            t.on(7, unit_signal("activating", "start", "ab", true)),
            Verdict::Started("ab".into())
        );
        assert_eq!(
            t.on(7, unit_signal("active", "running", "ab", false)),
            Verdict::Nothing
        );
        // Exit 0 with RemainAfterExit=yes: active/exited, known from the signals.
        assert_eq!(t.on(7, service("success", 1, 0)), Verdict::Nothing);
        let Verdict::Finished(u) = t.on(7, unit_signal("active", "exited", "ab", false)) else {
            panic!("a clean exit is finished");
        };
        assert_eq!((u.exec_main_code, u.exec_main_status), (1, 0));
        assert_eq!(classify(&u, false, false).0, JobState::Completed);
        assert_eq!(u.invocation_id, "ab");
        // Forgotten once finished: what comes after (the collect) is read.
        assert!(t.units.is_empty());
    }

    #[test]
    fn an_end_whose_service_signal_was_lost_is_read_not_paired_with_an_old_one() {
        let mut t = Tracker::default();
        t.on(3, service("success", 0, 0));
        assert_eq!(
            t.on(3, unit_signal("active", "running", "ab", false)),
            Verdict::Started("ab".into())
        );
        // The end's Service signal (exit status) never came (a full queue):
        // the start's "no exit yet" must not stand for it.
        assert_eq!(
            t.on(3, unit_signal("active", "exited", "ab", false)),
            Verdict::Read
        );
    }

    #[test]
    fn a_failure_is_finished_from_the_signals_and_a_stop_waits_for_its_end() {
        let mut t = Tracker::default();
        t.on(1, service("exit-code", 1, 3));
        let Verdict::Finished(u) = t.on(1, unit_signal("failed", "failed", "cd", false)) else {
            panic!("failed is finished");
        };
        assert_eq!(classify(&u, false, false).0, JobState::Failed);
        // Cancelled: stopping says nothing until the stop job is done; the
        // end (inactive, the unit about to be unloaded) is read whole.
        t.on(2, service("success", 0, 0));
        assert_eq!(
            t.on(2, unit_signal("deactivating", "stop-sigterm", "ef", true)),
            Verdict::Nothing
        );
        t.on(2, service("success", 2, 15));
        assert_eq!(
            t.on(2, unit_signal("deactivating", "stop-sigterm", "ef", true)),
            Verdict::Nothing
        );
        t.on(2, service("success", 2, 15));
        assert_eq!(
            t.on(2, unit_signal("inactive", "dead", "ef", false)),
            Verdict::Read
        );
    }

    #[test]
    fn what_the_signals_cannot_tell_is_read() {
        let mut t = Tracker::default();
        // No Service signal seen before the unit ended (one lost, or the
        // tracker was started afresh).
        assert_eq!(
            t.on(4, unit_signal("active", "exited", "ab", false)),
            Verdict::Read
        );
        assert_eq!(t.on(5, UnitSignal::Unclear), Verdict::Read);
        // Inactive without a queued start job and never started: the start
        // may have been lost (daemon-reexec).
        t.on(6, service("success", 0, 0));
        assert_eq!(
            t.on(6, unit_signal("inactive", "dead", "", false)),
            Verdict::Read
        );
        // A Started is reported once per invocation.
        t.on(8, service("success", 0, 0));
        assert_eq!(
            t.on(8, unit_signal("active", "running", "01", false)),
            Verdict::Started("01".into())
        );
        assert_eq!(
            t.on(8, unit_signal("active", "running", "01", false)),
            Verdict::Nothing
        );
    }

    #[test]
    fn the_tracker_stays_bounded() {
        let mut t = Tracker::default();
        for id in 0..(TRACKED as u64 * 3) {
            t.on(id, service("success", 0, 0));
        }
        assert!(t.units.len() <= TRACKED);
    }
}

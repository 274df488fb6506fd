//! Tests of a job's stages and their transitions (`stage.rs`, `record.rs`).

use super::tests_support::{job_with, some_alloc};
use super::*;
use crate::daemon::systemd::outcome::UnitStatus;

fn pending() -> Job {
    job_with(JobState::Pending, Outcome::default())
}

fn ended_unit() -> UnitStatus {
    UnitStatus {
        active_state: "active".into(),
        sub_state: "exited".into(),
        result: "success".into(),
        exec_main_code: 1,
        ..Default::default()
    }
}

/// A job through its record and back.
fn reloaded(j: &Job) -> Job {
    serde_json::from_slice(&serde_json::to_vec(j).expect("a record")).expect("it loads")
}

#[test]
fn a_started_job_is_in_flight_until_launched_and_keeps_what_its_unit_told() {
    let mut j = pending().started(some_alloc(), 5);
    assert_eq!((j.state(), j.start_usec()), (JobState::Running, 5));
    assert!(j.run().is_some_and(Run::in_flight));
    // A change, then an end, then a change that tells less: the end is kept.
    assert!(j.heard_while_launching(&None));
    assert!(j.heard_while_launching(&Some(ended_unit())));
    assert!(j.heard_while_launching(&None));
    assert_eq!(j.launched(true), Heard::Ended(Box::new(ended_unit())));
    assert!(!j.run().is_some_and(Run::in_flight));
    // Launched: signals are a reconcile's now, and nothing is left to hand over.
    assert!(!j.heard_while_launching(&None));
    assert_eq!(j.launched(true), Heard::Nothing);
}

#[test]
fn reads_of_one_unit_fold_into_one_more() {
    let mut j = pending().started(some_alloc(), 0);
    assert!(j.begin_read());
    assert!(!j.begin_read(), "a second read waits for the first");
    assert!(!j.begin_read());
    assert!(j.end_read(), "asked again meanwhile: one more read");
    assert!(j.begin_read());
    assert!(!j.end_read(), "not asked again: done");
    assert!(!pending().begin_read(), "a pending job has no unit to read");
}

#[test]
fn a_lost_start_is_claimed_once_and_never_once_the_unit_ran() {
    let mut j = pending().started(some_alloc(), 0);
    assert!(!j.claim_relaunch(), "its first start is still in flight");
    j.launched(false);
    assert!(j.claim_relaunch());
    assert!(!j.claim_relaunch(), "one decision per job");
    let mut again = j.relaunched();
    assert_eq!(again.relaunches(), 1);
    again.launched(false);
    assert!(again.invocation_known("ab".into()));
    assert!(!again.invocation_known("cd".into()), "the first one stays");
    assert_eq!(again.invocation_id(), "ab");
    assert!(!again.claim_relaunch(), "it ran: not lost, stopped");
}

#[test]
fn running_is_announced_once_per_daemon_whatever_the_starts() {
    let announced = |j: &Job| j.run().is_some_and(|r| r.running_announced);
    let mut j = pending().started(some_alloc(), 0);
    assert!(!announced(&j));
    j.launched(true);
    assert!(announced(&j));
    assert!(j.claim_relaunch());
    // A start made again keeps it: its RUNNING is not announced twice.
    let mut again = j.relaunched();
    again.launched(false);
    assert!(announced(&again));
    // After a restart the new daemon has announced nothing.
    let r = Run::loaded(some_alloc(), 0, String::new(), None, 1);
    assert!(!r.running_announced);
}

#[test]
fn an_end_keeps_what_the_run_had_and_drops_the_environment() {
    let mut j = pending();
    j.command.env = Some(vec!["A=1".into()]);
    let mut r = j.started(some_alloc(), 7).cancel_requested(1001);
    r.launched(false);
    r.invocation_known("ab".into());
    r.saw_memory_peak(42);
    let outcome = Outcome {
        detail: "cancelled".into(),
        ..Default::default()
    };
    let e = r.ended(JobState::Cancelled, outcome.clone(), 9);
    assert_eq!(e.state(), JobState::Cancelled);
    assert_eq!((e.start_usec(), e.end_usec()), (7, 9));
    assert_eq!(e.alloc(), Some(&some_alloc()));
    assert_eq!(e.invocation_id(), "ab");
    assert_eq!(e.cancel_requested_by(), Some(1001));
    assert_eq!(e.outcome(), Some(&outcome));
    assert_eq!(e.command.env, None);
    assert!(e.is_final() && e.run().is_none());
    // Before it started: no allocation, who cancelled it, why.
    let c = pending().cancelled_pending(0, 3);
    assert_eq!(
        (c.state(), c.alloc(), c.start_usec()),
        (JobState::Cancelled, None, 0)
    );
    assert_eq!(c.cancel_requested_by(), Some(0));
    assert_eq!(c.exit_code(), Some(130));
}

#[test]
fn each_stage_round_trips_through_its_record_without_what_is_never_stored() {
    let mut p = pending();
    p.command.env = Some(vec!["A=1".into()]);
    assert_eq!(reloaded(&p), p);
    let mut r = p.started(some_alloc(), 7);
    r.heard_while_launching(&None);
    let back = reloaded(&r);
    assert_eq!(back.state(), JobState::Running);
    assert!(
        !back.run().is_some_and(Run::in_flight),
        "loaded: nothing in flight"
    );
    assert!(back.command.env.is_some(), "kept until its unit ran");
    r.launched(false);
    r.saw_memory_peak(5);
    r.invocation_known("ab".into());
    let back = reloaded(&r);
    assert_eq!(back.run().and_then(|r| r.memory_peak), None);
    assert_eq!(back.invocation_id(), "ab");
    assert_eq!(back.command.env, None);
    let e = r.ended(JobState::Completed, Outcome::default(), 9);
    assert_eq!(reloaded(&e), e);
}

#[test]
fn a_running_record_without_its_allocation_is_refused() {
    let r = pending().started(some_alloc(), 7);
    let mut v: serde_json::Value = serde_json::to_value(&r).expect("a record");
    v["alloc"] = serde_json::Value::Null;
    let err = serde_json::from_value::<Job>(v).expect_err("refused");
    assert!(err.to_string().contains("without its allocation"), "{err}");
}

#[test]
fn a_pending_job_holds_its_output_descriptor_until_taken() {
    let mut p = pending();
    let fd = std::fs::File::open("/dev/null").expect("/dev/null");
    p.hold_output_fd(fd.into());
    let copy = p.clone();
    assert!(p.has_output_fd() && copy.has_output_fd());
    assert!(
        p.take_output_fd().is_some(),
        "a duplicate while a clone shares it"
    );
    assert!(!p.has_output_fd());
    assert!(p.take_output_fd().is_none());
    assert!(
        !copy.started(some_alloc(), 0).has_output_fd(),
        "left with the pending job"
    );
}

#[test]
fn a_stage_costs_a_pending_job_no_more_than_a_pointer_and_its_few_fields() {
    // Running and Ended are boxed: most jobs in memory wait, and each would
    // otherwise carry room for an allocation and an outcome (560 bytes a
    // job before, 320 after; 344 with a hold, a boxed dependency and a
    // boxed place in an array).
    assert!(
        std::mem::size_of::<Stage>() <= 32,
        "{}",
        std::mem::size_of::<Stage>()
    );
    assert!(
        std::mem::size_of::<Job>() <= 344,
        "{}",
        std::mem::size_of::<Job>()
    );
}

//! The dependency graph's indexes: the waiters are exactly the graph
//! reversed (a job that leaves the pending state leaves them), a cycle is
//! found in one walk over them, and an array's book finds each task by
//! its index.

use super::*;

/// A held pending job of `UID` that waits for `dependency` (if any): its ID.
fn held(st: &mut State, dependency: Option<&str>) -> JobId {
    submit(st, |s| {
        let j = pending(s, 1).with_hold(Some(Hold::User));
        match dependency {
            Some(d) => after(j, d, false),
            None => j,
        }
    })
}

fn waiters_of(st: &State, id: JobId) -> Vec<JobId> {
    st.waiters
        .get(&id)
        .map_or_else(Vec::new, |w| w.iter().copied().collect())
}

#[test]
fn a_waiter_that_starts_or_is_cancelled_leaves_the_waiters() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let target = submit(&mut st, |s| pending(s, 1));
    let starter = submit(&mut st, |s| {
        after(pending(s, 1), &format!("after:{target}"), false)
    });
    let quitter = submit(&mut st, |s| {
        after(pending(s, 1), &format!("after:{target}"), false).with_hold(Some(Hold::User))
    });
    assert_eq!(waiters_of(&st, target), [starter, quitter]);
    // The target starts; `after:` is met and the first waiter starts too.
    start_placed(&mut st);
    start_placed(&mut st);
    assert_eq!(st.jobs[&starter].state(), JobState::Running);
    assert_eq!(
        waiters_of(&st, target),
        [quitter],
        "a started job waits on nothing"
    );
    let cancelled = st
        .full(quitter)
        .unwrap()
        .unwrap()
        .cancelled_pending(UID, 3_000_000);
    st.apply(Commit::Withdrawn(cancelled)).unwrap();
    assert!(
        waiters_of(&st, target).is_empty(),
        "nor does a cancelled one"
    );
    assert!(st.waiters.is_empty(), "{:?}", st.waiters);
}

#[test]
fn a_cycle_is_found_through_any_number_of_jobs_and_only_a_real_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    // Three layers of four, each job waiting for the whole layer below.
    let mut layers: Vec<Vec<JobId>> = vec![(0..4).map(|_| held(&mut st, None)).collect()];
    for _ in 0..2 {
        let below = layers.last().unwrap();
        let deps = format!(
            "afterany:{}",
            below
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(":")
        );
        let layer = (0..4).map(|_| held(&mut st, Some(&deps))).collect();
        layers.push(layer);
    }
    let set = |ids: &[JobId]| {
        ids.iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>()
    };
    let (bottom, top) = (&layers[0], &layers[2]);
    // A bottom job waiting for a top one would close a loop; the other way
    // round is what already holds.
    assert!(top.contains(&st.cycle_through(bottom[0], &set(top)).unwrap()));
    assert_eq!(st.cycle_through(top[0], &set(bottom)), None);
    assert_eq!(st.cycle_through(top[0], &set(&top[1..])), None, "siblings");
    assert_eq!(
        st.cycle_through(bottom[1], &set(&[bottom[1]])),
        Some(bottom[1])
    );
    // A job that started no longer waits: it closes no loop.
    let free = submit(&mut st, |s| pending(s, 1));
    let started = submit(&mut st, |s| {
        after(pending(s, 1), &format!("after:{free}"), false)
    });
    let later = held(&mut st, Some(&format!("afterany:{started}")));
    start_placed(&mut st);
    start_placed(&mut st);
    assert_eq!(st.jobs[&started].state(), JobState::Running);
    assert_eq!(st.cycle_through(free, &set(&[later])), None);
}

#[test]
fn an_arrays_book_finds_each_task_by_its_index_among_thousands() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = state_in(dir.path());
    let mut array = pending(&st, 1).with_hold(Some(Hold::User));
    let spec = crate::core::array::ArraySpec::parse("0-9999").unwrap();
    array.array = Some(Box::new(crate::daemon::job::Task::whole(array.id, &spec)));
    let id = submit(&mut st, |_| array);
    let mut tasks = Vec::new();
    for index in (0..3000).rev() {
        let whole = st.full(id).unwrap().unwrap().into_owned();
        let (task, rest) = whole.take_task(index, st.next_id).unwrap();
        let task = task.cancelled_pending(UID, 3_000_000);
        tasks.push((index, task.id));
        st.apply(Commit::TaskWithdrawn { task, rest }).unwrap();
    }
    for (index, task) in &tasks {
        assert_eq!(st.started_task(id, *index), Some(*task));
    }
    assert_eq!(st.started_task(id, 3000), None, "still pending in the rest");
    let p = st.array_progress(id).unwrap();
    assert_eq!((p.pending, p.not_ok), (7000, 3000));
}
